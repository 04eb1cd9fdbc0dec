"""Running the `rdmaq` command as a user does, for tests/cli.

``run`` runs it to the end; ``Started`` starts it in a session of its own (so that a signal
to its process group reaches it and its children, as a terminal's Ctrl-C does, and nothing
else), lets the test wait for a line it printed, and tells what it left behind.
A package that is "not installed" is simulated by a None entry in sys.modules, which makes
its import fail exactly as a missing package does.
"""
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from observe import wait_until

RDMAQ = Path(sys.executable).parent / "rdmaq"
HANG_GUARD_S = 300  # a hang fails the test; it is no time assertion
SHM = "/dev/shm"
SEGMENT = re.compile(r"^rdmaq-(\d+)-")  # csrc/shm.c names a queue's segment by its writer's pid


def argv(*args, block=()):
    """The command line of `rdmaq ARGS`; ``block`` names modules made unimportable in it."""
    if not block:
        assert RDMAQ.exists(), f"no rdmaq console script beside {sys.executable}"
        return [str(RDMAQ), *args]
    code = ("import sys\n"
            + "".join(f"sys.modules[{m!r}] = None\n" for m in block)
            + "from rdmaq.cli import main\nsys.exit(main(sys.argv[1:]))\n")
    return [sys.executable, "-c", code, *args]


def run(*args, block=(), env=None, wrap=None):
    """`rdmaq ARGS` to its end; ``wrap`` turns its command line into the one run."""
    cmd = argv(*args, block=block)
    return subprocess.run(wrap(cmd) if wrap else cmd, capture_output=True, text=True,
                          timeout=HANG_GUARD_S, env={**os.environ, **(env or {})})


def one_line_error(p, status, prog, *words):
    """The command failed with ``status`` and one line on stderr: `PROG[ SUBCOMMAND]: ...`
    naming ``words``."""
    err = p.stderr.strip()
    assert p.returncode == status, (p.returncode, p.stdout, p.stderr)
    assert "Traceback" not in p.stderr and len(err.splitlines()) == 1, p.stderr
    assert re.match(rf"{re.escape(prog)}( [a-z-]+)?: ", err), err
    for w in words:
        assert w in err, err
    return err


def can_mount_shm():
    """Root with unshare -m: a command can get a small /dev/shm of its own."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return False
    return subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode == 0


def with_small_shm(size, cmd):
    """``cmd`` run in a mount namespace of its own whose /dev/shm is a tmpfs of ``size``."""
    return ["unshare", "-m", "sh", "-c",
            f'mount -t tmpfs -o size={size} tmpfs {SHM} && exec "$@"', "sh", *cmd]


def group_members(pgid):
    """(pid, state, command line) of every process in process group ``pgid``."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
            cmdline = Path(f"/proc/{d}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[2]) == pgid:
            out.append((int(d), fields[0], cmdline))
    return out


def _lingering(member):
    """A process that may outlive the command by a moment: multiprocessing's resource
    tracker, which exits once it reads the end of its pipe, or one already exiting (its
    memory, command line included, released)."""
    _, state, cmdline = member
    return state in ("Z", "X") or not cmdline or "multiprocessing.resource_tracker" in cmdline


def _as_from_a_terminal():
    """SIGINT as a shell gives a foreground command: the suite itself may run with it
    ignored (started in the background), and an ignored signal stays ignored across exec."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


_STARTED = []  # every command a test started: what a failed test leaves is killed after it


def kill_what_was_started():
    """SIGKILL the process group of every command started since the last call: a test that
    failed before its command ended (or a mutant that keeps it from ending: the endless demo
    runs for hours) must not leave it running."""
    while _STARTED:
        cmd = _STARTED.pop()
        try:
            os.killpg(cmd.p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass  # the group is gone: the command ended with the test
        if cmd.p.poll() is None:
            cmd.p.wait()


class Started:
    """`rdmaq ARGS` running in its own session, stdout and stderr piped, a private TMPDIR."""

    def __init__(self, tmp_path, *args, stdout=subprocess.PIPE):
        self.tmpdir = tmp_path / "cmd-tmp"
        self.tmpdir.mkdir()
        self.shm_before = set(os.listdir(SHM))
        # stdout buffered as in a user's shell, even where PYTHONUNBUFFERED is set for the tests:
        # the command's own line buffering, and its quiet end in a closed pipe, are what is tested
        env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
        self.p = subprocess.Popen(argv(*args), stdout=stdout, stderr=subprocess.PIPE, text=True,
                                  start_new_session=True, env={**env, "TMPDIR": str(self.tmpdir)},
                                  preexec_fn=_as_from_a_terminal)
        _STARTED.append(self)
        self.pids = {self.p.pid}
        self.err_lines = []

    def read_stderr_until(self, prefix):
        """stderr's lines up to the first that starts with ``prefix`` (kept in err_lines)."""
        for line in self.p.stderr:
            self.err_lines.append(line)
            self.note_pids()
            if line.startswith(prefix):
                return
        raise AssertionError(f"the command ended before printing {prefix!r}: {''.join(self.err_lines)}")

    def note_pids(self):
        """Remember the command's processes now (the writer of a queue may be a child)."""
        self.pids |= {pid for pid, _, _ in group_members(self.p.pid)}

    def signal_group(self, sig):
        self.note_pids()
        os.killpg(self.p.pid, sig)

    def finish(self):
        """Wait for the command; returns (exit status, stdout, the rest of stderr)."""
        out, err = self.p.communicate(timeout=HANG_GUARD_S)
        return self.p.returncode, out, err

    def left_behind(self):
        """What the ended command left: live processes of its group (beyond one that is
        leaving by itself), its queue segments in /dev/shm, files in its TMPDIR."""
        left = [m for m in group_members(self.p.pid) if not _lingering(m)]
        wait_until(lambda: not group_members(self.p.pid), "the command's process group to empty")
        segments = [n for n in set(os.listdir(SHM)) - self.shm_before
                    if (m := SEGMENT.match(n)) and int(m.group(1)) in self.pids]
        return {"processes": left, "segments": segments, "tmp": sorted(os.listdir(self.tmpdir))}

