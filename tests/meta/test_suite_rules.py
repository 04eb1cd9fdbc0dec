"""The suite's own rules: every test has a time limit, and in CI a skip for a
missing dependency is a failure (tests/conftest.py)."""
import os
import subprocess
import sys
import textwrap

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A conftest that is tests/conftest.py, loaded under another module name.
CONFTEST = textwrap.dedent(f"""
    import importlib.util, sys
    sys.path.insert(0, {TESTS!r})
    _spec = importlib.util.spec_from_file_location("rdmaq_suite_conftest",
                                                   {os.path.join(TESTS, "conftest.py")!r})
    _mod = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_mod)
    globals().update({{k: v for k, v in vars(_mod).items() if k.startswith("pytest_")}})
""")

SKIPS = textwrap.dedent("""
    import pytest

    @pytest.mark.skip(reason="missing dependency: a tool CI installs")
    def test_needs_a_tool():
        pass

    @pytest.mark.skip(reason="runs only on a machine with a device")
    def test_needs_a_device():
        pass

    def test_imports_a_module():
        pytest.importorskip("rdmaq_no_such_module")
""")

MODULE_SKIP = 'import pytest\npytest.importorskip("rdmaq_no_such_module")\n\ndef test_x():\n    pass\n'

HANG = 'import threading\n\ndef test_hangs():\n    threading.Event().wait()\n'


def _pytest(tmp_path, require, *args):
    """pytest in a subprocess over tmp_path (or the files given last)."""
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_skips.py").write_text(SKIPS)
    (tmp_path / "test_module_skip.py").write_text(MODULE_SKIP)
    env = {k: v for k, v in os.environ.items() if k not in ("RDMAQ_REQUIRE_ALL", "RDMAQ_VM")}
    if require:
        env["RDMAQ_REQUIRE_ALL"] = "1"
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                           "--rootdir", str(tmp_path), "-c", os.devnull,
                           *(args or [str(tmp_path)])],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_a_developer_gets_skips_with_reasons(tmp_path):
    p = _pytest(tmp_path, False, str(tmp_path / "test_skips.py"),
                str(tmp_path / "test_module_skip.py"))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "4 skipped" in p.stdout
    assert "missing dependency: a tool CI installs" in p.stdout
    assert "could not import 'rdmaq_no_such_module'" in p.stdout


def test_ci_turns_missing_dependency_skips_into_failures(tmp_path):
    p = _pytest(tmp_path, True, str(tmp_path / "test_skips.py"))
    out = p.stdout + p.stderr
    assert p.returncode == 1, out
    # the tool (a skip mark: an error in setup) and the import fail; the
    # device skip stays a skip
    assert "1 failed, 1 skipped, 1 error" in out, out
    assert "RDMAQ_REQUIRE_ALL=1 (CI) forbids this skip" in out
    # a module-level importorskip is a collection error: the run stops there
    p = _pytest(tmp_path, True, str(tmp_path / "test_module_skip.py"))
    out = p.stdout + p.stderr
    assert p.returncode == 2 and "1 error" in out, out
    assert "forbids this skip: could not import 'rdmaq_no_such_module'" in out


def test_every_test_has_a_time_limit(request):
    assert request.config.pluginmanager.hasplugin("timeout"), "pytest-timeout is not installed"
    assert float(request.config.getini("timeout")) > 0
    assert request.config.getini("timeout_method") == "thread"


def test_a_hanging_test_fails_at_its_limit(tmp_path):
    (tmp_path / "test_hang.py").write_text(HANG)
    p = _pytest(tmp_path, False, "-o", "timeout=2", "-o", "timeout_method=thread",
                str(tmp_path / "test_hang.py"))
    assert p.returncode != 0
    assert "Timeout" in p.stdout + p.stderr
