"""`rdmaq doctor` lists vLLM's vllm_dist_* files (its file store, its CPU all-reduce buffers)
and ZMQ socket files that a server stopped hard left in /dev/shm and the temporary directory;
`--clean` removes those whose owner is gone and keeps a file a live process holds, or any while
vLLM runs, and a socket file a live socket is bound to.
The places are a test directory here, never the host's /dev/shm or /tmp."""
import io
import os
import stat
import tempfile
import uuid

import pytest

from rdmaq import doctor
from rdmaq.transport import shm
from rdmaq.vllm import leftovers


@pytest.fixture
def place(tmp_path, monkeypatch):
    """vLLM's places replaced by tmp_path; no rdmaq queue swept, no vLLM running."""
    monkeypatch.setattr(leftovers, "places", lambda: [str(tmp_path)])
    monkeypatch.setattr(leftovers, "vllm_pids", lambda: [])
    monkeypatch.setattr(shm, "sweep_stale", lambda: [])
    monkeypatch.setattr(doctor, "transports", lambda devices: {
        "shm": {"usable": True, "why": None}, "verbs": {"usable": False, "why": "not this test's", "active_ports": []}})
    return tmp_path


def test_doctor_lists_what_vllm_left_and_clean_removes_only_the_orphans(place, capsys):
    orphan = place / "vllm_dist_0123abcd"
    orphan.write_bytes(b"x" * 10)
    held = place / "vllm_dist_4567ef01_0"
    held.write_bytes(b"")
    (place / "other_file").write_bytes(b"")
    with open(held, "rb"):  # a live owner: this process
        assert doctor.main([]) == 0
        out = capsys.readouterr().out
        assert f"vLLM leftovers (vllm_dist_* and ZMQ socket files in {place}): 2" in out
        assert f"{orphan} (10 B): its owner is gone" in out
        assert f"{held} (0 B): kept, in use by pid {os.getpid()}" in out
        assert "other_file" not in out
        assert "1 vLLM file(s) left by a server stopped before its cleanup" in out
        assert doctor.main(["--clean"]) == 0
        err = capsys.readouterr().err
    assert f"removed 1 vLLM leftover(s) whose owner is gone: {orphan}" in err
    assert not orphan.exists() and held.exists()


def test_nothing_is_removed_while_vllm_runs(place, monkeypatch, capsys):
    # a running server's file store is opened per operation: no open file shows it is in use
    monkeypatch.setattr(leftovers, "vllm_pids", lambda: [4242])
    store = place / "vllm_dist_89abcdef"
    store.write_bytes(b"")
    assert doctor.main(["--clean"]) == 0
    assert "vLLM leftover" not in capsys.readouterr().err
    assert store.exists()
    (lo,) = leftovers.survey()
    assert lo.why_kept == "vLLM is running (pid 4242): it may be that server's"


def test_another_users_leftover_is_kept(place, monkeypatch, capsys):
    # this process seen as another user: the file (this user's) is not its to remove
    store = place / "vllm_dist_0badcafe"
    store.write_bytes(b"")
    owner = os.stat(store).st_uid
    monkeypatch.setattr(leftovers.os, "geteuid", lambda: owner + 1)
    (lo,) = leftovers.survey()
    assert lo.why_kept == f"owned by uid {owner}"
    assert doctor.main(["--clean"]) == 0
    assert "vLLM leftover" not in capsys.readouterr().err
    assert store.exists()


def test_no_leftovers_is_one_line(place, capsys):
    assert doctor.main([]) == 0
    out = capsys.readouterr().out
    assert f"vLLM leftovers (vllm_dist_* and ZMQ socket files in {place}): none" in out
    assert "left by a server" not in out


def fake_processes(monkeypatch, cmdlines):
    """/proc as holding these processes: pid -> the raw bytes of /proc/<pid>/cmdline."""
    monkeypatch.setattr(leftovers, "_pids", lambda: list(cmdlines))
    real_open = open

    def fake_open(path, *a, **k):
        if str(path).startswith("/proc/") and str(path).endswith("/cmdline"):
            return io.BytesIO(cmdlines[int(str(path).split("/")[2])])
        return real_open(path, *a, **k)
    monkeypatch.setattr("builtins.open", fake_open)


def test_a_vllm_process_is_recognised_by_its_command_line(monkeypatch):
    fake_processes(monkeypatch, {1: b"/venv/bin/python3\0/venv/bin/vllm\0serve\0m\0",
                                 2: b"VLLM::EngineCore\0", 3: b"vllm\0serve\0",
                                 4: b"python3\0train.py\0", 5: b"VLLM::Worker_TP0  \0"})
    assert leftovers.vllm_pids() == [1, 2, 3, 5]


def test_a_process_with_an_empty_command_line_is_not_vllm(monkeypatch):
    """A kernel thread or a zombie has an empty /proc/<pid>/cmdline (one field, no NUL): it is
    passed over, and the processes after it are still looked at."""
    fake_processes(monkeypatch, {1: b"", 2: b"vllm\0serve\0"})
    assert leftovers.vllm_pids() == [2]


def _socket_file(place, name):
    path = place / name
    os.mknod(path, 0o600 | stat.S_IFSOCK)  # what libzmq leaves of a closed ipc:// socket
    return path


def test_vllms_zmq_socket_files_are_listed_and_clean_removes_the_unbound(place, monkeypatch, capsys):
    """vLLM's ZMQ ipc sockets are files named by a UUID (get_open_zmq_ipc_path): one no live
    socket is bound to (/proc/net/unix) is removed, a bound one kept, also while vLLM runs
    (whether a socket is bound is known, unlike whether a file store is in use).  Files of
    other names or kinds are none of vLLM's."""
    monkeypatch.setattr(leftovers, "vllm_pids", lambda: [4242])
    orphan = _socket_file(place, str(uuid.uuid4()))
    bound = _socket_file(place, str(uuid.uuid4()))
    monkeypatch.setattr(leftovers, "bound_sockets", lambda: {str(bound)})
    not_vllms = [_socket_file(place, "my-socket"), place / str(uuid.uuid4())]
    not_vllms[1].write_bytes(b"")  # a regular file named by a UUID
    assert doctor.main([]) == 0
    out = capsys.readouterr().out
    assert f"vLLM leftovers (vllm_dist_* and ZMQ socket files in {place}): 2" in out
    assert f"{orphan} (0 B): its owner is gone" in out
    assert f"{bound} (0 B): kept, a live socket is bound to it" in out
    assert doctor.main(["--clean"]) == 0
    assert f"removed 1 vLLM leftover(s) whose owner is gone: {orphan}" in capsys.readouterr().err
    assert not orphan.exists() and bound.exists() and all(p.exists() for p in not_vllms)


def test_a_socket_file_is_kept_when_the_kernel_does_not_say_what_is_bound(place, monkeypatch):
    monkeypatch.setattr(leftovers, "UNIX_SOCKETS", str(place / "no-such-file"))
    path = _socket_file(place, str(uuid.uuid4()))
    (lo,) = leftovers.survey()
    assert lo.path == str(path) and lo.why_kept.startswith("cannot tell whether a socket is bound")


def test_bound_sockets_reads_the_kernels_table(tmp_path, monkeypatch):
    """/proc/net/unix's last field is the path a socket is bound to (none: unbound or abstract)."""
    table = tmp_path / "unix"
    table.write_text("Num       RefCount Protocol Flags    Type St Inode Path\n"
                     "0000000000000000: 00000002 00000000 00010000 0001 01 20301 /tmp/0f2b-x\n"
                     "0000000000000000: 00000003 00000000 00000000 0001 03 20302\n"
                     "0000000000000000: 00000002 00000000 00010000 0001 01 20303 @abstract\n")
    monkeypatch.setattr(leftovers, "UNIX_SOCKETS", str(table))
    assert leftovers.bound_sockets() == {"/tmp/0f2b-x", "@abstract"}


def test_a_socket_a_live_process_binds_is_in_the_kernels_table(tmp_path):
    import socket

    path = os.path.join(tempfile.mkdtemp(prefix="rq"), "s")  # short: a socket path has 108 bytes
    s = socket.socket(socket.AF_UNIX)
    try:
        s.bind(path)
        s.listen()
        assert path in leftovers.bound_sockets()
    finally:
        s.close()
        os.unlink(path)
        os.rmdir(os.path.dirname(path))
    assert path not in leftovers.bound_sockets()


def test_the_rpc_base_path_is_searched(monkeypatch, tmp_path):
    monkeypatch.setenv("VLLM_RPC_BASE_PATH", str(tmp_path))
    assert str(tmp_path) in leftovers.places()
