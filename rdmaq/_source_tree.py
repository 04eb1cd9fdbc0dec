"""``import rdmaq`` from a script inside rdmaq's checkout: Python puts the script's directory
first on sys.path, so it finds the source tree's ``rdmaq/`` before the installed package. A
source tree without its C extension built in place (``pip install .`` builds it into
site-packages only) would fail with ``No module named 'rdmaq._rdmaq'``. Instead the installed
rdmaq is loaded in its place, whole (its Python and its extension from the same build); with
none installed, the error says what to run.  A tree built in place (``pip install -e .``) is
used as it is."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent


def built_here(pkg: Path = HERE) -> bool:
    return any(pkg.glob("_rdmaq.*so")) or any(pkg.glob("_rdmaq.*pyd"))


def extension_found() -> bool:
    """Whether ``rdmaq._rdmaq`` can be imported as things stand: built in this tree, or found
    by another finder (an editable install's)."""
    try:
        return importlib.util.find_spec("rdmaq._rdmaq") is not None
    except (ImportError, ValueError):
        return False


def installed_elsewhere(path: list[str], pkg: Path = HERE) -> Path | None:
    """The first rdmaq package on ``path`` that is not this tree and has its extension built."""
    for entry in path:
        cand = Path(entry or ".").resolve() / "rdmaq"
        if cand != pkg and (cand / "__init__.py").is_file() and built_here(cand):
            return cand
    return None


def not_built_message(pkg: Path = HERE) -> str:
    return (f"rdmaq's C extension is not built in the source tree {pkg}, which Python imported because "
            "the script runs from rdmaq's checkout, and no installed rdmaq was found: `pip install .` "
            "installs it (then this tree is set aside), or `pip install -e .` builds it here")


def load_installed(pkg: Path) -> ModuleType:
    """The installed rdmaq at ``pkg``, in sys.modules as ``rdmaq`` (the import that found this
    tree returns what sys.modules holds once this package's __init__ ends)."""
    spec = importlib.util.spec_from_file_location("rdmaq", pkg / "__init__.py", submodule_search_locations=[str(pkg)])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    for name in [m for m in sys.modules if m.startswith("rdmaq.")]:
        del sys.modules[name]  # this tree's (this module among them): the installed ones load theirs
    sys.modules["rdmaq"] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules["rdmaq"]
        raise
    return module
