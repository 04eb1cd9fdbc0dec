"""README promises that had no test: transport "auto", the ``rdmaq`` command
and the quick start's main job, liveness before ready, a clean /dev/shm,
close() in a forked child, two threads in get()."""
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import rdmaq
from children import TIMEOUT, attached_reader, doomed_writer, idle_writer, sleepy_reader, start, stream_reader
from observe import blocked_call, in_thread, kill_stopped
from transports import shm_leftovers, why_no_verbs

BIN = Path(sys.executable).parent


def _rdmaq_cmd(*args, timeout=60):
    """The installed console script, as a user runs it."""
    exe = BIN / "rdmaq"
    assert exe.exists(), f"no {exe}: the rdmaq console script is not installed (pip install -e .)"
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=timeout)


# ---------------------------------------------------------------- transport="auto"
def test_auto_transport_is_verbs_only_with_an_active_port():
    want = "shm" if why_no_verbs() else "verbs"
    assert rdmaq.resolve_transport("auto") == want
    with rdmaq.Writer(1) as w:  # "auto" is the default
        assert w.transport == want and w.handle.transport == want
        with rdmaq.Reader(w.handle, 0) as r:
            assert r.transport == want
            w.put(b"auto")
            assert r.get(timeout=30) == b"auto"
    assert rdmaq.resolve_transport("shm") == "shm"
    with pytest.raises(ValueError, match="unknown transport 'tcp'"):
        rdmaq.resolve_transport("tcp")


# ---------------------------------------------------------------- the rdmaq command
def test_cli_version_and_usage():
    p = _rdmaq_cmd("--version")
    assert p.returncode == 0 and p.stdout.strip() == rdmaq.__version__
    p = _rdmaq_cmd()  # no command: the usage, as an argument error
    assert p.returncode == 2
    for sub in ("bench", "doctor", "softroce", "demo"):
        assert sub in p.stderr
    p = _rdmaq_cmd("no-such-command")
    assert p.returncode == 2 and "invalid choice" in p.stderr


def test_cli_doctor_answers_on_this_machine():
    """`rdmaq doctor` works with or without RDMA (this host has none; the VM has rxe)."""
    import json

    p = _rdmaq_cmd("doctor", "--json")
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    assert rep["transports"]["shm"]["usable"] is True
    assert rep["transports"]["verbs"]["usable"] is (why_no_verbs() is None)


@pytest.mark.timeout(240)
def test_quick_start_demo_with_4_readers():
    """README quick start: `rdmaq demo --readers 4` checks every message."""
    p = _rdmaq_cmd("demo", "--readers", "4", timeout=200)  # as the README says
    assert p.returncode == 0, p.stdout + p.stderr
    for i in range(4):
        assert f"reader {i}: all messages intact and in order" in p.stdout, p.stdout
    assert "MISMATCH" not in p.stdout
    assert "readers=4 messages=10000" in p.stdout


# ---------------------------------------------------------------- liveness before ready
def test_reader_waiting_for_ready_sees_a_killed_writer(transport, procs, results, shm_names):
    procs.append(start(idle_writer, transport, results))
    handle = results.get(timeout=TIMEOUT)
    if transport == "shm":
        shm_names.append(handle.info.name)  # its segment outlives it (issue 11 item 7)
    r = rdmaq.Reader(handle, 0)
    try:
        if transport == "shm":
            # no timeout: only liveness can end it (else the test's limit)
            t, box = blocked_call(r, lambda: r.wait_ready(timeout=None), "wait_ready")
            kill_stopped(procs[0])
        else:
            # The rendezvous waits in a poll of the writer's socket and the liveness
            # connection (no C sleep to observe): a death before or during that poll
            # is the same event on the liveness socket.
            kill_stopped(procs[0])
            t, box = in_thread(lambda: r.wait_ready(timeout=None))
        t.join(TIMEOUT)
        assert not t.is_alive()
        assert isinstance(box.get("error"), rdmaq.PeerDeadError), box
        assert "writer" in str(box["error"]) and "died" in str(box["error"])
    finally:
        r.close()


# ---------------------------------------------------------------- /dev/shm left clean
def _leftovers(name):
    return shm_leftovers(name)


def test_dev_shm_clean_after_close(shm_names):
    w = rdmaq.Writer(2, transport="shm", slot_bytes=1024, slots=8)
    name = w.handle.info.name
    shm_names.append(name)
    rs = [rdmaq.Reader(w.handle, i) for i in range(2)]
    w.wait_ready(timeout=30)
    for i in range(50):
        w.put(bytes([i]) * 300, timeout=30)
        assert [r.get(timeout=30)[0] for r in rs] == [i, i]
    for r in rs:
        r.close()
    w.close()
    assert _leftovers(name) == []


def test_dev_shm_clean_after_writer_crash_mid_stream(procs, results, shm_names):
    procs.append(start(doomed_writer, "shm", 2, results))
    handle = results.get(timeout=TIMEOUT)
    name = handle.info.name
    shm_names.append(name)
    procs += [start(stream_reader, handle, i, results) for i in range(2)]
    assert sorted(results.get(timeout=TIMEOUT)[1] for _ in range(2)) == ["started"] * 2
    os.kill(procs[0].pid, signal.SIGKILL)
    ends = [results.get(timeout=TIMEOUT) for _ in range(2)]
    assert all(e[1] == "dead" for e in ends), ends
    for p in procs[1:]:
        p.join(TIMEOUT)
    assert _leftovers(name) == []


def test_dev_shm_clean_after_reader_crash_mid_stream(procs, results, shm_names):
    with rdmaq.Writer(2, transport="shm", slot_bytes=1024, slots=8) as w:
        name = w.handle.info.name
        shm_names.append(name)
        procs.append(start(stream_reader, w.handle, 0, results))
        procs.append(start(sleepy_reader, w.handle, 1, results))
        w.wait_ready(timeout=TIMEOUT)
        w.put(b"first", timeout=TIMEOUT)
        assert sorted(results.get(timeout=TIMEOUT)[1] for _ in range(2)) == ["attached", "started"]
        kill_stopped(procs[1])
        with pytest.raises(rdmaq.PeerDeadError, match="reader 1"):
            for _ in range(1000):  # more than the ring holds
                w.put(b"m" * 500)
    assert results.get(timeout=TIMEOUT)[1] == "closed"
    procs[0].join(TIMEOUT)
    assert _leftovers(name) == []


def test_dev_shm_clean_after_writer_crash_before_ready(procs, results, shm_names):
    procs.append(start(idle_writer, "shm", results))
    handle = results.get(timeout=TIMEOUT)
    name = handle.info.name
    shm_names.append(name)
    r = rdmaq.Reader(handle, 0)
    kill_stopped(procs[0])
    procs[0].join(TIMEOUT)
    with pytest.raises(rdmaq.PeerDeadError):
        r.wait_ready(timeout=TIMEOUT)
    r.close()
    rdmaq.Writer(1, transport="shm").close()  # "or the next writer" removes it
    assert _leftovers(name) == []


def test_dev_shm_clean_after_reader_crash_before_ready(procs, results, shm_names):
    w = rdmaq.Writer(2, transport="shm")
    name = w.handle.info.name
    shm_names.append(name)
    procs.append(start(attached_reader, w.handle, 0, results))
    assert results.get(timeout=TIMEOUT)[1] == "attached"
    kill_stopped(procs[0])
    procs[0].join(TIMEOUT)
    w.close()
    assert _leftovers(name) == []


# ---------------------------------------------------------------- fork, threads
def test_close_in_a_forked_child_leaves_the_parent_queue_working(transport):
    with rdmaq.Writer(1, transport=transport) as w, rdmaq.Reader(w.handle, 0) as r:
        w.put(b"before")
        pid = os.fork()
        if pid == 0:  # the child: close its inherited copies, and exit hard
            code = 0
            try:
                r.close()
                w.close()
            except BaseException:  # noqa: BLE001 - reported through the exit code
                code = 1
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert r.get(timeout=30) == b"before"
        for i in range(100):
            w.put(bytes([i]) * 200, timeout=30)
            assert r.get(timeout=30) == bytes([i]) * 200


def test_two_threads_in_get_share_the_messages(transport):
    n = 2000
    with rdmaq.Writer(1, transport=transport, slot_bytes=1024, slots=16) as w, \
            rdmaq.Reader(w.handle, 0) as r:
        got = {0: [], 1: []}
        errors = []

        def drain(k):
            try:
                while True:
                    msg = r.get(timeout=TIMEOUT)
                    if msg == b"stop":
                        return
                    got[k].append(int.from_bytes(msg[:4], "little"))
            except BaseException as e:  # noqa: BLE001 - handed to the test
                errors.append(e)

        threads = [threading.Thread(target=drain, args=(k,), daemon=True) for k in (0, 1)]
        for t in threads:
            t.start()
        for i in range(n):
            w.put(i.to_bytes(4, "little") * (1 + i % 50), timeout=TIMEOUT)
        w.put(b"stop", timeout=TIMEOUT)
        w.put(b"stop", timeout=TIMEOUT)
        for t in threads:
            t.join(TIMEOUT)
        assert not errors, errors
        # nothing lost, nothing duplicated; each thread's share in order
        assert sorted(got[0] + got[1]) == list(range(n))
        assert got[0] == sorted(got[0]) and got[1] == sorted(got[1])
