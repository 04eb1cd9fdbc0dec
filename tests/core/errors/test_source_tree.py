"""A script saved inside rdmaq's checkout imports the source tree's rdmaq/ (its directory comes
first on sys.path). Built in place (pip install -e .) that tree is used; without its C
extension the installed rdmaq takes its place whole, and with none installed the ImportError
says what to run (not "No module named 'rdmaq._rdmaq'")."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import rdmaq

PKG = Path(rdmaq.__file__).resolve().parent
SCRIPT = """
import rdmaq
with rdmaq.Writer(1, transport="shm") as w:
    print(rdmaq.__file__)
"""


def _tree(dest: Path, with_extension: bool) -> Path:
    """A copy of the package at dest/rdmaq, its extension modules only if asked."""
    keep = () if with_extension else ("_rdmaq*.so", "_rdmaq*.pyd")
    shutil.copytree(PKG, dest / "rdmaq", ignore=shutil.ignore_patterns("__pycache__", *keep))
    return dest / "rdmaq"


@pytest.fixture
def trees(tmp_path):
    if not any(PKG.glob("_rdmaq*.so")):
        pytest.skip("needs the extension built beside the package (an editable or --target install)")
    checkout = tmp_path / "checkout"
    site = tmp_path / "site"
    _tree(checkout, with_extension=False)
    installed = _tree(site, with_extension=True)
    return checkout, site, installed


def _cffi_only(dest: Path) -> Path:
    """A folder holding this interpreter's cffi and nothing else: its site-packages may hold an
    rdmaq of its own (installed from a wheel), which must not answer for the copies."""
    import _cffi_backend
    import cffi

    dest.mkdir(exist_ok=True)
    for src in (Path(cffi.__file__).parent, Path(_cffi_backend.__file__)):
        link = dest / src.name
        if not link.exists():
            link.symlink_to(src)
    return dest


def _run(cwd: Path, installed: Path | None) -> subprocess.CompletedProcess:
    """``python example.py`` in ``cwd`` as on a machine where rdmaq was installed (``pip install
    .``) at ``installed`` (None: nowhere).  -S: no .pth files, so that an editable install of
    this checkout does not answer for the copies; cffi from a folder of its own."""
    path = [str(installed)] if installed else []
    env = {"PATH": "/usr/bin:/bin",
           "PYTHONPATH": os.pathsep.join([*path, str(_cffi_only(cwd.parent / "cffi-only"))])}
    (cwd / "example.py").write_text(SCRIPT)
    return subprocess.run([sys.executable, "-S", "example.py"], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=60)


def test_a_script_in_a_checkout_without_the_extension_runs_on_the_installed_rdmaq(trees):
    checkout, site, installed = trees
    r = _run(checkout, site)
    assert r.returncode == 0, r.stderr
    assert Path(r.stdout.strip()).parent == installed  # the installed package, whole


def test_without_an_installed_rdmaq_the_error_says_what_to_run(trees):
    checkout, _, _ = trees
    r = _run(checkout, None)
    assert r.returncode == 1
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: rdmaq's C extension is not built in the source tree "), last
    assert "`pip install .`" in last and "`pip install -e .`" in last
    assert "No module named" not in r.stderr


def test_a_tree_built_in_place_is_used_as_it_is(trees):
    _, site, installed = trees
    r = _run(site, None)
    assert r.returncode == 0, r.stderr
    assert Path(r.stdout.strip()).parent == installed
