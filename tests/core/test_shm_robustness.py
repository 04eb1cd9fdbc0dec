"""shm transport against an adversarial user: a full /dev/shm, readers that leave
early, forged segments, lying peers, leftovers of killed processes, leaks."""
import mmap
import os
import pickle
import shutil
import signal
import struct
import subprocess
import sys
import textwrap
import time

import pytest

import rdmaq
from children import CTX, TIMEOUT
from rdmaq.handle import ShmInfo
from rdmaq.transport import shm

SHM = "/dev/shm"
# csrc/shm_format.h: hdr (64) | writer wait (64) | attach[n] (64 each) | credit[n] (64 each) | ring
HDR = struct.Struct("<IIIIIiQQQQ")
MAGIC, VERSION = 0x7164726D, 2


def _segments(prefix="rdmaq-"):
    return sorted(n for n in os.listdir(SHM) if n.startswith(prefix))


def _can_unshare():
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return False
    return subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode == 0


SMALL_SHM_CHILD = textwrap.dedent("""
    import os
    import rdmaq
    try:
        rdmaq.Writer(4, transport="shm")  # 4 MiB ring
    except rdmaq.SharedMemoryFullError as e:
        print("REFUSED", e, flush=True)
    print(sorted(n for n in os.listdir("/dev/shm") if n.startswith(f"rdmaq-{os.getpid()}-")))
""")


@pytest.mark.skipif(not _can_unshare(), reason="needs root and unshare -m for a 2 MiB /dev/shm")
def test_full_dev_shm_is_an_error_at_creation_naming_the_fix():
    p = subprocess.run(["unshare", "-m", "sh", "-c",
                        'mount -t tmpfs -o size=2m tmpfs /dev/shm && exec "$0" -c "$1"',
                        sys.executable, SMALL_SHM_CHILD],
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert p.returncode == 0, (p.returncode, p.stderr[-2000:])  # no SIGBUS
    assert p.stdout.startswith("REFUSED"), p.stdout + p.stderr
    refused, left = p.stdout.splitlines()
    assert "--shm-size" in refused and "--ipc=host" in refused and "MiB" in refused
    assert left == "[]", "the refused writer left its segment's name in /dev/shm"


def test_reader_that_closes_before_ready_is_skipped():
    with rdmaq.Writer(2, transport="shm") as w:
        early = rdmaq.Reader(w.handle, 0)
        early.close()
        r1 = rdmaq.Reader(w.handle, 1)
        w.wait_ready(timeout=TIMEOUT)
        for i in range(20):  # more than the ring's slots would hold without reader 0
            w.put(b"m%d" % i, timeout=TIMEOUT)
            assert r1.get(timeout=TIMEOUT) == b"m%d" % i
        r1.close()


def test_index_of_a_closed_reader_cannot_be_attached_again():
    with rdmaq.Writer(2, transport="shm") as w:
        rdmaq.Reader(w.handle, 0).close()
        with pytest.raises(rdmaq.IndexInUseError, match="reader index 0 is already attached"):
            rdmaq.Reader(w.handle, 0)


def _forge(name, size, **fields):
    h = dict(magic=MAGIC, version=VERSION, n_readers=1, slot_bytes=1024, slots=8, pid=os.getpid(),
             max_message=1 << 20, key=1, seg_bytes=size, start=0)
    h.update(fields)
    fd = os.open(os.path.join(SHM, name), os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    try:
        os.ftruncate(fd, size)
        os.pwrite(fd, HDR.pack(h["magic"], h["version"], h["n_readers"], h["slot_bytes"], h["slots"],
                               h["pid"], h["max_message"], h["key"], h["seg_bytes"], h["start"]), 0)
    finally:
        os.close(fd)


def _layout_bytes(n, slot_bytes, slots):
    return 64 + 64 + n * 128 + 256 + slot_bytes * slots


@pytest.mark.parametrize("case, size, fields, match", [
    ("short file", 32, {}, "not an rdmaq queue"),
    ("wrong magic", 4096, {"magic": 0xDEADBEEF}, "not an rdmaq queue"),
    ("other version", 4096, {"version": 1}, "different rdmaq releases"),
    ("huge n_readers", _layout_bytes(1, 1024, 8), {"n_readers": 100000}, "corrupt header"),
    ("zero slot_bytes", _layout_bytes(1, 1024, 8), {"slot_bytes": 0}, "corrupt header"),
    ("zero slots", _layout_bytes(1, 1024, 8), {"slots": 0}, "corrupt header"),
    ("file shorter than its header says", _layout_bytes(1, 1024, 8) - 64, {}, "bytes, its header"),
    ("header lies about its size", _layout_bytes(1, 1024, 8), {"seg_bytes": 1 << 40}, "bytes, its header"),
])
def test_forged_segment_is_refused_not_a_crash(case, size, fields, match):
    name = f"rdmaq-forged-{os.getpid()}-{abs(hash(case)) % 10**6}"
    fields.setdefault("seg_bytes", size)
    _forge(name, size, **fields)
    try:
        h = rdmaq.Handle("shm", 1, ShmInfo(name, ""))
        with pytest.raises(rdmaq.ProtocolError, match=match):
            rdmaq.Reader(h, 0)
    finally:
        os.unlink(os.path.join(SHM, name))


@pytest.mark.parametrize("field, value, why", [
    ("slots", 1, "slots must be in 2..16777216, got 1"),
    ("slots", (1 << 24) + 1, "slots must be in 2..16777216, got 16777217"),
    ("slot_bytes", 100, "slot_bytes must be a multiple of 64 in 128..1073741824, got 100"),
    ("n_readers", 0, "n_readers must be in 1..256, got 0"),
])
def test_corrupt_header_message_comes_out_intact(field, value, why):
    """The reason quoted after "corrupt header" reads as the check wrote it."""
    name = f"rdmaq-forged-{os.getpid()}-{field}"
    size = _layout_bytes(1, 1024, 8)
    _forge(name, size, **{field: value, "seg_bytes": size})
    try:
        with pytest.raises(rdmaq.ProtocolError) as e:
            rdmaq.Reader(rdmaq.Handle("shm", 1, ShmInfo(name, "")), 0)
        assert str(e.value) == f"attach reader 0: /{name} has a corrupt header: {why}"
    finally:
        os.unlink(os.path.join(SHM, name))


def test_writer_refuses_credit_from_the_future():
    """A same-user peer writing nonsense into its credit entry gets an error, not a
    writer that overwrites unread slots or waits for ever."""
    with rdmaq.Writer(2, transport="shm") as w:
        r0 = rdmaq.Reader(w.handle, 0)
        name = w.handle.info.name
        fd = os.open(os.path.join(SHM, name), os.O_RDWR)
        try:
            with mmap.mmap(fd, 0) as m:
                credit0 = 64 + 64 + 2 * 64  # after hdr, writer wait, attach[2]
                m[credit0:credit0 + 8] = (10**6).to_bytes(8, "little")
        finally:
            os.close(fd)
        r1 = rdmaq.Reader(w.handle, 1)
        w.wait_ready(timeout=TIMEOUT)
        with pytest.raises(rdmaq.ProtocolError, match="reader 0 reports credit 1000000"):
            w.put(b"x", timeout=TIMEOUT)
        r0.close()
        r1.close()


def test_segment_names_are_unguessable_and_gone_once_connected():
    w1, w2 = rdmaq.Writer(1, transport="shm"), rdmaq.Writer(1, transport="shm")
    n1, n2 = w1.handle.info.name, w2.handle.info.name
    assert n1 != n2
    for n in (n1, n2):
        assert n.startswith(f"rdmaq-{os.getpid()}-")
        assert len(n.rsplit("-", 1)[1]) == 16  # 64 random bits
        assert os.path.exists(os.path.join(SHM, n))
    r = rdmaq.Reader(w1.handle, 0)
    w1.wait_ready(timeout=TIMEOUT)
    assert not os.path.exists(os.path.join(SHM, n1))  # every reader in: unlinked
    r.close()
    w1.close()
    w2.close()
    assert not os.path.exists(os.path.join(SHM, n2))  # closed before ready: unlinked too


def _writer_then_hang(out):
    w = rdmaq.Writer(2, transport="shm")
    out.put(w.handle.info.name)
    time.sleep(TIMEOUT)


def _killed_writers_segment():
    """The segment name of a writer SIGKILLed before any reader came."""
    out = CTX.Queue()
    p = CTX.Process(target=_writer_then_hang, args=(out,), daemon=True)
    p.start()
    try:
        return out.get(timeout=TIMEOUT)
    finally:
        os.kill(p.pid, signal.SIGKILL)
        p.join(TIMEOUT)


def test_segment_of_a_killed_writer_is_swept_and_a_live_ones_kept():
    live = rdmaq.Writer(1, transport="shm")
    dead = _killed_writers_segment()
    assert os.path.exists(os.path.join(SHM, dead))  # kill -9 before ready leaves it
    removed = shm.sweep_stale()
    assert dead in removed
    assert not os.path.exists(os.path.join(SHM, dead))
    assert os.path.exists(os.path.join(SHM, live.handle.info.name))
    live.close()


def test_doctor_clean_removes_what_a_killed_writer_left():
    dead = _killed_writers_segment()
    r = subprocess.run([sys.executable, "-m", "rdmaq.cli", "doctor", "--clean", "--json"],
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert dead in r.stderr and "removed" in r.stderr
    assert not os.path.exists(os.path.join(SHM, dead))


def _maps(name_part):
    with open("/proc/self/maps") as f:
        return sum(name_part in line for line in f)


def test_attach_and_close_leak_no_mapping_or_fd():
    fds0 = len(os.listdir("/proc/self/fd"))
    maps0 = _maps("/rdmaq-")
    for _ in range(50):
        with rdmaq.Writer(2, transport="shm") as w:
            readers = [rdmaq.Reader(w.handle, i) for i in range(2)]
            assert _maps(w.handle.info.name) == 3  # the writer's and one per reader
            w.wait_ready(timeout=TIMEOUT)
            w.put(b"x")
            for r in readers:
                assert r.get(timeout=TIMEOUT) == b"x"
                r.close()
    assert _maps("/rdmaq-") == maps0
    assert len(os.listdir("/proc/self/fd")) == fds0
    assert _segments(f"rdmaq-{os.getpid()}-") == []


# 9.5e9 s: past the clock's range (2**62 ns, ~146 years) and, in nanoseconds, past an
# int64 too: a wrong bound would hand C a number it cannot take
@pytest.mark.parametrize("timeout", [float("inf"), 1e30, 10**400, 9.5e9],
                         ids=["inf", "1e30", "10**400", "300-years"])
def test_infinite_timeouts_mean_forever(timeout):
    with rdmaq.Writer(1, transport="shm") as w:
        r = rdmaq.Reader(w.handle, 0)
        w.wait_ready(timeout=timeout)
        w.put(b"late", timeout=timeout)
        assert r.get(timeout=timeout) == b"late"
        r.close()


@pytest.mark.parametrize("bad, exc, match", [
    (float("nan"), ValueError, "got nan"),
    (-1, ValueError, ">= 0"),
    ("1", TypeError, "number of seconds"),
])
def test_bad_timeouts_are_refused(bad, exc, match):
    with rdmaq.Writer(1, transport="shm") as w:
        r = rdmaq.Reader(w.handle, 0)
        with pytest.raises(exc, match=match):
            r.get(timeout=bad)
        with pytest.raises(exc, match=match):
            w.wait_ready(timeout=bad)
        r.close()


@pytest.mark.parametrize("info, exc, match", [
    (None, TypeError, "handle info must be a ShmInfo"),
    ([], TypeError, "handle info must be a ShmInfo"),
    ("rdmaq-x", TypeError, "handle info must be a ShmInfo"),
    ({"name": "rdmaq-x"}, TypeError, "handle info must be a ShmInfo for transport 'shm', got dict"),
    (ShmInfo("rdmaq-a\0b", ""), ValueError, "field 'info.name' has characters it may not have"),
    (ShmInfo("../etc/passwd", ""), ValueError, "field 'info.name' is not a segment name"),
    (ShmInfo("", ""), ValueError, "field 'info.name' is not a segment name"),
    (ShmInfo(7, ""), ValueError, "field 'info.name' must be a string"),  # type: ignore[arg-type]
])
def test_malformed_handles_name_the_field(info, exc, match):
    with pytest.raises(exc, match=match):
        rdmaq.Reader(rdmaq.Handle("shm", 1, info), 0)


@pytest.mark.parametrize("index", [2**32, 2**64, -2**40])
def test_huge_indexes_are_value_errors(index):
    with rdmaq.Writer(1, transport="shm") as w:
        with pytest.raises(ValueError, match="out of range"):
            rdmaq.Reader(w.handle, index)


def test_runtime_faults_are_rdmaq_errors():
    assert issubclass(rdmaq.MessageTooLarge, rdmaq.Error)
    assert issubclass(rdmaq.MessageTooLarge, ValueError)
    with rdmaq.Writer(1, transport="shm", max_message_bytes=10) as w:
        r = rdmaq.Reader(w.handle, 0)
        w.wait_ready(timeout=TIMEOUT)
        with pytest.raises(rdmaq.MessageTooLarge):
            w.put(bytes(11))
        r.close()
    with pytest.raises(rdmaq.QueueNotFoundError):
        rdmaq.Reader(pickle.loads(pickle.dumps(w.handle)), 0)  # a closed writer's handle


NO_ADDRESS_SPACE_CHILD = textwrap.dedent("""
    import os, resource
    import rdmaq
    rdmaq.Writer(1, transport="shm").close()  # imports done
    with open("/proc/self/status") as f:
        vm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    resource.setrlimit(resource.RLIMIT_AS, (vm + (32 << 20), resource.RLIM_INFINITY))
    try:
        rdmaq.Writer(1, transport="shm", slot_bytes=1 << 20, slots=64)  # 64 MiB: reserved, not mapped
    except rdmaq.Error as e:
        print(e.errno, e, flush=True)
    print(sorted(n for n in os.listdir("/dev/shm") if n.startswith(f"rdmaq-{os.getpid()}-")))
""")


def test_a_segment_that_cannot_be_mapped_is_an_error_and_removed():
    p = subprocess.run([sys.executable, "-c", NO_ADDRESS_SPACE_CHILD], capture_output=True, text=True,
                       timeout=TIMEOUT)
    assert p.returncode == 0, (p.returncode, p.stderr[-2000:])
    refused, left = p.stdout.splitlines()
    assert refused.startswith("12 ") and "cannot map shared memory" in refused, refused  # ENOMEM
    assert left == "[]"
