"""A Python extension module that loads only once patchelf removed a NEEDED entry, as vLLM's
spinloop module does outside a process that has torch's libraries."""

from __future__ import annotations

import os
import subprocess
import sysconfig
from pathlib import Path


def module_needing_a_missing_lib(d: Path) -> Path:
    """A tiny 'spinloop' extension module linked against libgone.so, which is then removed."""
    (d / "gone.c").write_text("int gone(void) { return 1; }\n")
    (d / "spinloop.c").write_text(
        "#include <Python.h>\n"
        "static PyObject *spin(PyObject *s, PyObject *a) { Py_RETURN_NONE; }\n"
        "static PyMethodDef m[] = {{\"spinloop\", spin, METH_NOARGS, 0}, {0}};\n"
        "static struct PyModuleDef d = {PyModuleDef_HEAD_INIT, \"spinloop\", 0, -1, m};\n"
        "PyMODINIT_FUNC PyInit_spinloop(void) { return PyModule_Create(&d); }\n")
    cc = os.environ.get("CC", "gcc")
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(d / "libgone.so"), str(d / "gone.c")], check=True)
    subprocess.run([cc, "-shared", "-fPIC", f"-I{sysconfig.get_paths()['include']}", "-o",
                    str(d / "spinloop.abi3.so"), str(d / "spinloop.c"), f"-L{d}", "-Wl,--no-as-needed",
                    "-lgone"], check=True)
    (d / "libgone.so").unlink()
    return d / "spinloop.abi3.so"
