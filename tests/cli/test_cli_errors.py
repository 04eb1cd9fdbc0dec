"""The rdmaq command's error paths, in process: a subcommand whose package is not
installed, an unexpected exception (one line, or the traceback with
RDMAQ_TRACEBACK=1), help texts, and doctor --clean's count."""
import sys

import pytest

from rdmaq import cli, doctor
from rdmaq.transport import shm


def test_a_subcommand_needing_a_missing_package_names_it_and_the_extra(tmp_path, monkeypatch, capsys):
    (tmp_path / "needs_pkg.py").write_text("import rdmaq_no_such_pkg.sub\n\ndef main(argv):\n    return 0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert cli._run("rdmaq x", "needs_pkg:main", "bench", []) == 1
    assert capsys.readouterr().err == ("rdmaq x: needs the Python package 'rdmaq_no_such_pkg', which is not "
                                       'installed: pip install ".[bench]" in rdmaq\'s checkout\n')
    monkeypatch.setenv("RDMAQ_TRACEBACK", "1")
    sys.modules.pop("needs_pkg", None)
    with pytest.raises(ModuleNotFoundError):
        cli._run("rdmaq x", "needs_pkg:main", "bench", [])


def test_a_missing_module_of_rdmaq_itself_is_a_bug_and_raises():
    with pytest.raises(ModuleNotFoundError):
        cli._run("rdmaq x", "rdmaq.no_such_module:main", None, [])


def test_an_unexpected_error_is_one_line_unless_asked_for_the_traceback(monkeypatch, capsys):
    def boom():
        raise RuntimeError("boom")

    monkeypatch.setattr(doctor, "collect", boom)
    monkeypatch.delenv("RDMAQ_TRACEBACK", raising=False)
    assert cli.main(["doctor"]) == 1
    assert capsys.readouterr().err == "rdmaq doctor: RuntimeError: boom (RDMAQ_TRACEBACK=1 shows where)\n"
    monkeypatch.setenv("RDMAQ_TRACEBACK", "1")
    with pytest.raises(RuntimeError, match="boom"):
        cli.main(["doctor"])


def test_help_shows_defaults_but_not_for_flags(capsys):
    with pytest.raises(SystemExit) as e:
        doctor.main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "--json" in out and "(default: False)" not in out


def test_doctor_clean_says_how_many_it_removed(monkeypatch, capsys):
    monkeypatch.setattr(doctor, "collect", lambda: {"transports": {"shm": {"usable": True}}})
    monkeypatch.setattr(doctor, "render", lambda rep: "")
    monkeypatch.setattr(doctor.vllm_leftovers, "survey", lambda: [])  # the host's are not the test's
    for removed, line in (([], "removed 0 stale queue segment(s)"),
                          (["rdmaq-1-a", "rdmaq-2-b"], "removed 2 stale queue segment(s): rdmaq-1-a, rdmaq-2-b")):
        monkeypatch.setattr(shm, "sweep_stale", lambda removed=removed: removed)
        assert doctor.main(["--clean"]) == 0
        assert capsys.readouterr().err == line + "\n"


def test_stdout_sent_to_dev_null_leaves_no_extra_descriptor_open():
    """Once its reader has gone, stdout is /dev/null: one descriptor, not a second one left open.
    In a child process, whose stdout may be replaced."""
    import subprocess
    code = ("import os\nfrom rdmaq import cli\n"
            "before = sorted(os.listdir('/proc/self/fd'))\ncli._drop_stdout()\n"
            "after = sorted(os.listdir('/proc/self/fd'))\n"
            "os.write(2, f'{before == after} {os.readlink(\"/proc/self/fd/1\")}'.encode())\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert (p.returncode, p.stderr) == (0, "True /dev/null")


def test_a_broken_pipe_on_a_stdout_that_cannot_be_polled_is_an_error(monkeypatch, capsys):
    """Only a stdout seen to be closed makes a BrokenPipeError the quiet exit 141; when poll
    cannot tell (it raises), the error is reported like any other and stdout is left alone."""
    def broken_pipe():
        raise BrokenPipeError(32, "Broken pipe")

    def no_poll():
        raise OSError(22, "poll unavailable")

    dropped = []
    monkeypatch.setattr(doctor, "collect", broken_pipe)
    monkeypatch.setattr(cli.select, "poll", no_poll)
    monkeypatch.setattr(cli, "_drop_stdout", lambda: dropped.append(True))
    monkeypatch.delenv("RDMAQ_TRACEBACK", raising=False)
    assert cli._stdout_closed() is False
    assert cli.main(["doctor"]) == 1
    assert capsys.readouterr().err == ("rdmaq doctor: BrokenPipeError: [Errno 32] Broken pipe "
                                       "(RDMAQ_TRACEBACK=1 shows where)\n")
    assert dropped == []
