"""The `rdmaq` command under a terminal's signals and a closed pipe, and its output while it
runs: one line and exit 130 for Ctrl-C (SIGINT to the whole process group, children
included), 143 for SIGTERM, a quiet 141 when its reader goes away (`| head -1`), and
nothing left behind: no process, no /dev/shm segment, no temporary file.

Each test waits for something the command printed before it acts, never for a time.
"""
import signal

from command import Started
from observe import wait_until

NOTHING_LEFT = {"processes": [], "segments": [], "tmp": []}
# runs until interrupted: every message is checked, so 10**9 of them take hours
ENDLESS_DEMO = ("demo", "--readers", "4", "--messages", str(10**9), "--transport", "shm")


def test_ctrl_c_ends_demo_with_one_line_and_nothing_left(tmp_path):
    cmd = Started(tmp_path, *ENDLESS_DEMO)
    assert cmd.p.stdout.readline().startswith("transport=shm readers=4")  # readers attached
    cmd.signal_group(signal.SIGINT)
    status, _, err = cmd.finish()
    assert (status, err) == (130, "rdmaq demo: interrupted\n")
    assert cmd.left_behind() == NOTHING_LEFT


def test_ctrl_c_ends_bench_with_one_line_and_nothing_left(tmp_path):
    cmd = Started(tmp_path, "bench", "--quick", "--queues", "rdmaq-shm", "--attackers", "1")
    cmd.read_stderr_until("  [1/")  # a sub-run measured: writer, readers and a hog running
    cmd.signal_group(signal.SIGINT)
    status, _, err = cmd.finish()
    lines = err.splitlines()
    # a sub-run that ended just before the signal may still report; nothing else may
    assert status == 130 and lines[-1:] == ["rdmaq bench: interrupted"], err
    assert all(line.startswith("  [") for line in lines[:-1]), err
    assert cmd.left_behind() == NOTHING_LEFT


def test_sigterm_ends_demo_like_ctrl_c(tmp_path):
    cmd = Started(tmp_path, *ENDLESS_DEMO)
    cmd.p.stdout.readline()
    cmd.signal_group(signal.SIGTERM)  # what `timeout` sends
    status, _, err = cmd.finish()
    assert (status, err) == (143, "rdmaq demo: terminated\n")
    assert cmd.left_behind() == NOTHING_LEFT


def test_demo_output_reaches_a_file_while_it_runs(tmp_path):
    out = tmp_path / "out.txt"
    with open(out, "w") as f:
        cmd = Started(tmp_path, *ENDLESS_DEMO, stdout=f)
        # the header, then a progress line: each one in the file as soon as it is printed
        wait_until(lambda: "sent " in out.read_text(), "a progress line in the file")
        cmd.signal_group(signal.SIGTERM)
        status, _, err = cmd.finish()
    assert status == 143, err
    lines = out.read_text().splitlines()
    assert lines[0].startswith("transport=shm readers=4 messages=1000000000 size=2048 B"), lines
    assert lines[1].startswith("sent ") and lines[1].endswith(" of 1,000,000,000 messages"), lines


def test_demo_into_a_closed_pipe_stops_quietly(tmp_path):
    """`rdmaq demo | head -1`: once the reader of stdout is gone, the demo stops at its next
    line, cleans up and exits 141, as a tool killed by SIGPIPE does, without a word."""
    cmd = Started(tmp_path, *ENDLESS_DEMO)
    cmd.p.stdout.readline()
    cmd.p.stdout.close()  # head -1 has its line and exits
    status = cmd.p.wait(timeout=300)
    assert (status, cmd.p.stderr.read()) == (141, "")
    assert cmd.left_behind() == NOTHING_LEFT



def test_a_command_run_in_process_gives_sigterm_back_after_it():
    """rdmaq.cli.main() called from a program (not the `rdmaq` script): SIGTERM ends the
    command as Ctrl-C does while it runs, and the program's own handler is back after."""
    from rdmaq import cli

    def own(signum, frame):
        pass

    old = signal.signal(signal.SIGTERM, own)
    try:
        with cli._command_signals():
            assert signal.getsignal(signal.SIGTERM) is cli._raise_terminated
        assert signal.getsignal(signal.SIGTERM) is own
    finally:
        signal.signal(signal.SIGTERM, old)


QUIET_FIRST_CHILD = """
import signal
from rdmaq import command

# The command's first child, before any multiprocessing object has started the resource
# tracker: SIGINT raised in the child stays pending (blocked), it raises nothing there.
p = command.quiet_spawn_context().Process(target=signal.raise_signal, args=(signal.SIGINT,))
p.start()
p.join()
print(p.exitcode)
"""


def test_the_first_child_started_leaves_ctrl_c_to_the_command_too():
    """Starting the resource tracker unblocks SIGINT; the first child would otherwise be
    spawned after that, take the terminal's Ctrl-C and print a KeyboardInterrupt traceback.
    A fresh process: no tracker runs there yet."""
    import subprocess
    import sys
    p = subprocess.run([sys.executable, "-c", QUIET_FIRST_CHILD], capture_output=True, text=True, timeout=60)
    assert (p.returncode, p.stdout, p.stderr) == (0, "0\n", "")
