"""Build glue: cffi compiles csrc/ into rdmaq's extensions (see rdmaq/_build.py)."""
import os
import sys

from setuptools import setup

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "rdmaq"))
import _build  # noqa: E402

modules = ["rdmaq/_build.py:ffibuilder"]
if _build.verbs_ffibuilder is not None:
    modules.append("rdmaq/_build.py:verbs_ffibuilder")
else:
    # pip shows a build's output only with -v; `rdmaq doctor` repeats the fix.
    print(f"WARNING: rdmaq: building without the verbs transport (rdmaq._rdmaq_verbs): "
          f"{_build.verbs_skip_reason()}; only the shm transport will work",
          file=sys.stderr)

setup(cffi_modules=modules)
