"""A Python extension module that loads only once patchelf removed a NEEDED entry, as vLLM's
spinloop module does outside a process that has torch's libraries."""

from __future__ import annotations

import os
import subprocess
import sysconfig
from pathlib import Path


def module_needing_a_missing_lib(d: Path, cxx_runtime_through_it: bool = False) -> Path:
    """A tiny 'spinloop' extension module linked against libgone.so, which is then removed.

    ``cxx_runtime_through_it``: libgone.so names the C++ runtime and the module uses it (operator
    new) without naming it, as vLLM 0.26's spinloop module gets libstdc++ only through torch's."""
    (d / "gone.c").write_text("int gone(void) { return 1; }\n")
    uses_cxx = ("extern void *_Znwm(unsigned long);  /* operator new */\n"
                "void *one_byte(void) { return _Znwm(1); }\n") if cxx_runtime_through_it else ""
    (d / "spinloop.c").write_text(
        "#include <Python.h>\n" + uses_cxx +
        "static PyObject *spin(PyObject *s, PyObject *a) { Py_RETURN_NONE; }\n"
        "static PyMethodDef m[] = {{\"spinloop\", spin, METH_NOARGS, 0}, {0}};\n"
        "static struct PyModuleDef d = {PyModuleDef_HEAD_INIT, \"spinloop\", 0, -1, m};\n"
        "PyMODINIT_FUNC PyInit_spinloop(void) { return PyModule_Create(&d); }\n")
    cc = os.environ.get("CC", "gcc")
    cxx_runtime = ["-Wl,--no-as-needed", "-lstdc++"] if cxx_runtime_through_it else []
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(d / "libgone.so"), str(d / "gone.c"), *cxx_runtime],
                   check=True)
    subprocess.run([cc, "-shared", "-fPIC", f"-I{sysconfig.get_paths()['include']}", "-o",
                    str(d / "spinloop.abi3.so"), str(d / "spinloop.c"), f"-L{d}", "-Wl,--no-as-needed",
                    "-lgone"], check=True)
    (d / "libgone.so").unlink()
    return d / "spinloop.abi3.so"
