"""Build glue: cffi compiles csrc/ into rdmaq's extensions (see rdmaq/_build.py)."""
import os
import sys

from setuptools import setup

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "rdmaq"))
import _build  # noqa: E402

modules = ["rdmaq/_build.py:ffibuilder"]
if _build.verbs_ffibuilder is not None:
    modules.append("rdmaq/_build.py:verbs_ffibuilder")

setup(cffi_modules=modules)
