"""shm transport at the edges of the descriptor table: a segment or a pidfd that
lands on fd 0 (stdin closed), and a process with no descriptor left for a pidfd.

Each case runs in a child process: it closes stdin or lowers RLIMIT_NOFILE."""
import subprocess
import sys
import textwrap

from children import TIMEOUT

PRELUDE = textwrap.dedent("""
    import errno, os, resource
    import rdmaq
    from rdmaq._rdmaq import ffi

    rdmaq.Writer(1, transport="shm").close()  # imports done: nothing else takes fd 0 below


    def fd0_open():
        return os.path.exists("/proc/self/fd/0")


    def no_descriptor_left():
        # fds above the limit cannot be made; the holes below it are filled
        top = max(int(n) for n in os.listdir("/proc/self/fd"))
        resource.setrlimit(resource.RLIMIT_NOFILE, (top + 1, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        held = []
        while True:
            try:
                held.append(os.dup(1))
            except OSError as e:
                assert e.errno == errno.EMFILE, e
                return held
""")


def _child(body):
    p = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(body)],
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr[-2000:])
    return p.stdout


def test_a_segment_opened_as_fd_0_is_a_queue():
    out = _child("""
        os.close(0)
        w = rdmaq.Writer(1, transport="shm")  # shm_open returns 0: a descriptor, not a failure
        with rdmaq.Reader(w.handle, 0) as r:
            w.put(b"x")
            print(bytes(r.get(timeout=10)))
        w.close()
    """)
    assert out == "b'x'\n"


def test_a_pidfd_that_is_fd_0_watches_a_live_writer_whatever_errno_held():
    out = _child("""
        w = rdmaq.Writer(1, transport="shm")
        os.close(0)
        ffi.errno = errno.ESRCH  # cffi passes it into the next C call: a stale errno, no verdict
        r = rdmaq.Reader(w.handle, 0)
        print(os.readlink("/proc/self/fd/0"))
        r.close()
        w.close()
    """)
    assert out == "anon_inode:[pidfd]\n"


def test_closing_a_reader_closes_its_pidfd_on_fd_0():
    out = _child("""
        w = rdmaq.Writer(1, transport="shm")
        os.close(0)
        r = rdmaq.Reader(w.handle, 0)
        print(os.readlink("/proc/self/fd/0"))
        r.close()
        print(fd0_open())
        w.close()
    """)
    assert out == "anon_inode:[pidfd]\nFalse\n"


def test_a_writer_with_no_descriptor_for_a_pidfd_still_connects():
    out = _child("""
        w = rdmaq.Writer(1, transport="shm")
        r = rdmaq.Reader(w.handle, 0)
        held = no_descriptor_left()
        w.wait_ready(timeout=10)  # pidfd_open fails with EMFILE: watched by kill(pid, 0) instead
        for fd in held:
            os.close(fd)
        w.put(b"x")
        print(bytes(r.get(timeout=10)))
        r.close()
        w.close()
    """)
    assert out == "b'x'\n"


def test_without_a_pidfd_a_live_reader_is_alive_whatever_errno_held():
    out = _child("""
        w = rdmaq.Writer(1, transport="shm")
        r = rdmaq.Reader(w.handle, 0)
        held = no_descriptor_left()
        w.wait_ready(timeout=10)
        for fd in held:
            os.close(fd)
        ffi.errno = errno.ESRCH  # kill(pid, 0) succeeds and leaves errno as it was
        print(w.dead_readers())
        r.close()
        w.close()
    """)
    assert out == "[]\n"


def test_without_a_pidfd_a_reader_killed_is_dead():
    out = _child("""
        import signal
        w = rdmaq.Writer(1, transport="shm")
        attached, stay = os.pipe(), os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.close(stay[1])  # a parent that dies early ends this read too
                r = rdmaq.Reader(w.handle, 0)  # kept: a reader collected would close
                os.write(attached[1], b"1")
                os.read(stay[0], 1)  # until killed
            finally:
                os._exit(0)
        os.read(attached[0], 1)
        held = no_descriptor_left()
        w.wait_ready(timeout=10)
        for fd in held:
            os.close(fd)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)  # reaped: kill(pid, 0) says ESRCH
        print(w.dead_readers())
        w.drop_reader(0)
        w.close()
    """)
    assert out == "[0]\n"
