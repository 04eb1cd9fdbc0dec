"""Every range check at its boundary: the last valid value works, the first invalid
one is refused, naming what was wrong.  The C core's checks are reached through
segments and records forged only slightly (one field one off, a file a few bytes
short), the Python ones through the arguments."""
import errno
import mmap
import os
import struct
import subprocess

import pytest

import rdmaq
from children import TIMEOUT
from rdmaq._rdmaq import lib
from rdmaq.handle import ShmInfo

SHM = "/dev/shm"
# csrc/shm.c: hdr (64) | writer wait (64) | attach[n] (64 each) | credit[n] (64 each) | ring
HDR = struct.Struct("<IIIIIiQQQQ")
MAGIC, VERSION = 0x7164726D, 2
RING_CTRL = 256
REC = struct.Struct("<QQIIq")  # seq, msg_len, len, flags, stamp_ns
FIRST, LAST, ABORT = 1, 2, 4


def _layout(n, slot_bytes, slots):
    return 64 + 64 + n * 128 + RING_CTRL + slot_bytes * slots


@pytest.fixture
def forge(shm_names):
    """forge(size=None, **header fields) -> a Handle of a segment with that header."""
    made = []

    def make(size=None, n_readers=1, slot_bytes=1024, slots=8, max_message=1 << 20, **kw):
        h = dict(magic=MAGIC, version=VERSION, pid=os.getpid(), key=1, start=0)
        h.update(kw)
        if size is None:
            size = _layout(n_readers, slot_bytes, slots)
        seg_bytes = h.pop("seg_bytes", size)
        name = f"rdmaq-forged-{os.getpid()}-{len(made)}"
        shm_names.append(name)
        fd = os.open(os.path.join(SHM, name), os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        try:
            os.ftruncate(fd, size)
            head = HDR.pack(h["magic"], h["version"], n_readers, slot_bytes, slots, h["pid"],
                            max_message, h["key"], seg_bytes, h["start"])
            os.pwrite(fd, head[:size], 0)
        finally:
            os.close(fd)
        made.append(name)
        return rdmaq.Handle("shm", max(n_readers, 1) if n_readers <= 256 else 256, ShmInfo(name, ""))

    yield make
    for name in made:
        try:
            os.unlink(os.path.join(SHM, name))
        except FileNotFoundError:
            pass


def _attaches(handle, index=0):
    r = rdmaq.Reader(handle, index)
    r.close()


# ------------------------------------------------------------ the segment's header (C)

@pytest.mark.parametrize("field, good, bad, match", [
    ("n_readers", 256, 257, "n_readers must be in 1..256, got 257"),
    ("n_readers", 1, 0, "n_readers must be in 1..256, got 0"),
    ("slot_bytes", 128, 64,
     f"slot_bytes must be a multiple of 64 in 128..{lib.RDMAQ_MAX_SLOT_BYTES}, got 64"),
    ("slot_bytes", 192, 160,
     f"slot_bytes must be a multiple of 64 in 128..{lib.RDMAQ_MAX_SLOT_BYTES}, got 160"),
    ("slots", 2, 1, f"slots must be in 2..{lib.RDMAQ_MAX_SLOTS}, got 1"),
    ("max_message", 1, 0, "max_message must be at least 1"),
])
def test_a_header_field_one_past_its_range_is_a_corrupt_header(forge, field, good, bad, match):
    _attaches(forge(**{field: good}))
    with pytest.raises(rdmaq.ProtocolError, match=f"corrupt header: {match}") as e:
        rdmaq.Reader(forge(**{field: bad}), 0)
    assert e.value.errno == errno.EPROTO


def test_a_ring_of_exactly_16_gib_passes_the_size_check_and_one_slot_more_does_not(forge):
    # the file is small: a header that passes the ring check fails on the file's size instead
    exact = forge(size=4096, slot_bytes=1 << 20, slots=1 << 14)
    with pytest.raises(rdmaq.ProtocolError, match="is 4096 bytes, its header describes"):
        rdmaq.Reader(exact, 0)
    above = forge(size=4096, slot_bytes=1 << 20, slots=(1 << 14) + 1)
    with pytest.raises(rdmaq.ProtocolError, match="16385 x 1048576 bytes is larger than 16 GiB"):
        rdmaq.Reader(above, 0)


@pytest.mark.parametrize("delta", [-1, 1, -8])
def test_a_file_a_few_bytes_off_its_header_is_refused(forge, delta):
    size = _layout(1, 1024, 8)
    _attaches(forge(size=size))
    with pytest.raises(rdmaq.ProtocolError, match=f"is {size + delta} bytes, its header describes {size}"):
        rdmaq.Reader(forge(size=size + delta, seg_bytes=size), 0)


def test_a_header_that_lies_about_its_size_by_one_is_refused(forge):
    size = _layout(1, 1024, 8)
    with pytest.raises(rdmaq.ProtocolError, match=f"is {size} bytes, its header describes {size + 1}"):
        rdmaq.Reader(forge(size=size, seg_bytes=size + 1), 0)


def test_a_file_shorter_than_a_header_is_not_a_queue_and_one_that_long_is_read(forge):
    with pytest.raises(rdmaq.ProtocolError, match=r"is not an rdmaq queue \(63 bytes\)"):
        rdmaq.Reader(forge(size=63), 0)
    # 64 bytes hold the whole header: it is read, and its size claim checked
    with pytest.raises(rdmaq.ProtocolError, match="is 64 bytes, its header describes"):
        rdmaq.Reader(forge(size=64, seg_bytes=_layout(1, 1024, 8)), 0)


@pytest.mark.parametrize("version", [VERSION - 1, VERSION + 1])
def test_a_version_one_off_is_another_release(forge, version):
    with pytest.raises(rdmaq.ProtocolError,
                       match=f"has shm segment format v{version}, this rdmaq reads v{VERSION}: "
                             "writer and reader run different rdmaq releases"):
        rdmaq.Reader(forge(version=version), 0)


def test_the_magic_one_off_is_not_a_queue(forge):
    with pytest.raises(rdmaq.ProtocolError, match="is not an rdmaq queue"):
        rdmaq.Reader(forge(magic=MAGIC ^ 1), 0)


def test_the_first_index_past_the_queue_s_readers_is_refused_by_the_core(forge):
    handle = forge(n_readers=3)
    _attaches(handle, 2)
    liar = rdmaq.Handle("shm", 4, handle.info)  # passes the Python check
    with pytest.raises(ValueError, match="reader index 3 out of range: queue has 3 readers"):
        rdmaq.Reader(liar, 3)


def test_a_writer_pid_of_no_process_is_a_dead_writer(forge):
    with pytest.raises(rdmaq.PeerDeadError, match="writer .pid 0. is gone") as e:
        rdmaq.Reader(forge(pid=0), 0)
    assert e.value.errno == errno.EOWNERDEAD


# ------------------------------------------------------------ records in the ring (C)

class Ring:
    """A live queue (1 reader, 8 slots of 1 KiB) whose ring the test writes into."""

    def __init__(self, max_message=1 << 20):
        self.w = rdmaq.Writer(1, transport="shm", slot_bytes=1024, slots=8,
                              max_message_bytes=max_message)
        self.r = rdmaq.Reader(self.w.handle, 0)
        fd = os.open(os.path.join(SHM, self.w.handle.info.name), os.O_RDWR)
        try:
            self.m = mmap.mmap(fd, 0)  # the name goes once the queue is ready; the mapping stays
        finally:
            os.close(fd)
        self.key = HDR.unpack_from(self.m, 0)[7]
        self.ring = 64 + 64 + 128
        self.w.wait_ready(timeout=TIMEOUT)
        self.r.wait_ready(timeout=TIMEOUT)
        self.payload = lib.rdmaq_slot_payload(1024)

    def forge(self, seq, payload, *, msg_len=None, length=None, flags=FIRST | LAST, at=None, trailer=None):
        """Write record ``seq`` as the writer would, with the given fields changed."""
        slot = self.ring + RING_CTRL + ((seq if at is None else at) % 8) * 1024
        length = len(payload) if length is None else length
        body = payload[:min(len(payload), self.payload)]
        self.m[slot + 32:slot + 32 + len(body)] = body
        toff = 32 + ((length + 7) & ~7)
        if toff + 8 <= 1024:
            self.m[slot + toff:slot + toff + 8] = struct.pack("<Q", (seq ^ self.key) if trailer is None
                                                              else trailer)
        self.m[slot + 8:slot + 32] = REC.pack(0, len(payload) if msg_len is None else msg_len, length,
                                              flags, 0)[8:]
        self.m[slot:slot + 8] = struct.pack("<Q", seq)  # last, as the writer

    def close(self):
        self.r.close()
        self.w.close()
        self.m.close()


@pytest.fixture
def ring():
    r = Ring()
    yield r
    r.close()


def test_a_put_wakes_only_for_the_sleep_flags_of_its_readers(ring):
    """The writer reads n_readers credit entries, not the ring control after them, whose
    closed_seq sits where one more entry's sleep flag would."""
    closed_seq = ring.ring + 8  # credits[1], one past the last, would be the ring's control
    ring.m[closed_seq:closed_seq + 4] = struct.pack("<I", 1)
    try:
        ring.w.put(b"x")  # the reader is not asleep: nobody to wake
    finally:
        ring.m[closed_seq:closed_seq + 4] = bytes(4)
    assert ring.w.stats["wakeups"] == 0
    assert ring.r.get(timeout=TIMEOUT) == b"x"

def test_a_record_that_fills_its_slot_exactly_is_delivered(ring):
    data = bytes(i % 251 for i in range(ring.payload))
    ring.forge(1, data)
    assert ring.r.get(timeout=TIMEOUT) == data


def test_a_record_one_byte_longer_than_its_slot_is_refused(ring):
    ring.forge(1, bytes(ring.payload + 1))
    with pytest.raises(rdmaq.ProtocolError, match=f"record 1 claims {ring.payload + 1} bytes, "
                                                  f"slot holds {ring.payload}") as e:
        ring.r.get(timeout=TIMEOUT)
    assert e.value.errno == errno.EBADMSG


def test_a_record_with_its_trailer_one_off_is_not_taken_as_landed(ring):
    ring.forge(1, b"half-landed", trailer=(1 ^ ring.key) ^ 1)
    with pytest.raises(TimeoutError):
        ring.r.get(timeout=0.2)
    ring.forge(1, b"landed")  # the writer finishes it
    assert ring.r.get(timeout=TIMEOUT) == b"landed"


def test_a_record_that_continues_no_message_is_refused(ring):
    ring.forge(1, b"tail", flags=LAST)
    with pytest.raises(rdmaq.ProtocolError, match="record 1 continues a message that never started"):
        ring.r.get(timeout=TIMEOUT)


def test_a_record_of_the_next_lap_is_an_overrun(ring):
    ring.forge(9, b"next lap", at=1)  # slot of record 1, eight records ahead
    with pytest.raises(rdmaq.ProtocolError, match="ring overrun: found record 9, expected 1"):
        ring.r.get(timeout=TIMEOUT)


def test_a_record_one_byte_longer_than_its_message_overruns_it(ring):
    ring.forge(1, b"0123456789A", msg_len=10)
    with pytest.raises(rdmaq.ProtocolError, match="record 1 overruns its message"):
        ring.r.get(timeout=TIMEOUT)


def test_a_last_record_one_byte_short_of_its_message_is_refused(ring):
    ring.forge(1, b"012345678", msg_len=10)
    with pytest.raises(rdmaq.ProtocolError, match="message ended after 9 of 10 bytes"):
        ring.r.get(timeout=TIMEOUT)


def test_a_message_of_max_message_bytes_is_taken_and_one_more_refused():
    ring = Ring(max_message=100)
    try:
        ring.forge(1, bytes(100))
        assert ring.r.get(timeout=TIMEOUT) == bytes(100)
        ring.forge(2, bytes(101))
        with pytest.raises(rdmaq.ProtocolError, match="record 2 announces 101 bytes, above max_message 100"):
            ring.r.get(timeout=TIMEOUT)
    finally:
        ring.close()


@pytest.mark.parametrize("parts", [[], (), [b"", b""]], ids=["[]", "()", "empty parts"])
def test_a_list_of_no_bytes_is_one_empty_message(parts):
    """A list of no buffers (or of empty ones) is a message of 0 bytes, also when the
    put waits for room (the ring full of empty messages: 2 slots)."""
    with rdmaq.Writer(1, transport="shm", slot_bytes=128, slots=2) as w, rdmaq.Reader(w.handle, 0) as r:
        w.wait_ready(timeout=TIMEOUT)
        w.put(parts, timeout=TIMEOUT)
        w.put(parts, timeout=TIMEOUT)
        with pytest.raises(TimeoutError):
            w.put(parts, timeout=0)  # full
        assert r.get(timeout=TIMEOUT) == b""
        w.put(parts, timeout=TIMEOUT)
        assert [r.get(timeout=TIMEOUT) for _ in range(2)] == [b"", b""]
        assert w.stats["messages"] == r.stats["messages"] == 3


def test_credit_up_to_what_was_sent_is_trusted_and_one_more_is_not(ring):
    credit0 = 64 + 64 + 64  # after hdr, writer wait, attach[1]
    ring.w.put(b"one", timeout=TIMEOUT)  # next_seq 2
    ring.m[credit0:credit0 + 8] = (2).to_bytes(8, "little")  # everything sent: fine
    ring.w.put(b"two", timeout=TIMEOUT)
    ring.m[credit0:credit0 + 8] = (4).to_bytes(8, "little")  # one past the 2 records sent
    with pytest.raises(rdmaq.ProtocolError, match="reader 0 reports credit 4, only 2 records were sent"):
        ring.w.put(b"x" * 8000, timeout=TIMEOUT)  # needs room: reads the credit


# ------------------------------------------------------------ arguments (Python and C)

@pytest.mark.parametrize("kwargs", [
    {"n_readers": 256}, {"slot_bytes": 128}, {"slots": 2}, {"max_message_bytes": 1},
    {"max_message_bytes": 1 << 62},
    {"spin_us": 1_000_000}, {"spin_us": 0}, {"slice_us": 100}, {"slice_us": 100_000}, {"slice_us": 0},
])
def test_the_last_valid_writer_arguments_make_a_working_queue(kwargs):
    n = kwargs.get("n_readers", 1)
    with rdmaq.Writer(n, transport="shm", **{k: v for k, v in kwargs.items() if k != "n_readers"}) as w:
        r = rdmaq.Reader(w.handle, n - 1, **{k: v for k, v in kwargs.items() if k in ("spin_us", "slice_us")})
        for i in range(n - 1):
            rdmaq.Reader(w.handle, i).close()
        w.wait_ready(timeout=TIMEOUT)
        w.put(b"z", timeout=TIMEOUT)
        assert r.get(timeout=TIMEOUT) == b"z"
        r.close()


@pytest.mark.parametrize("kwargs, match", [
    ({"n_readers": 257}, "n_readers must be in 1..256, got 257"),
    ({"n_readers": 0}, "n_readers must be in 1..256, got 0"),
    ({"slot_bytes": 127}, "slot_bytes must be in 128"),
    ({"slot_bytes": 129}, "slot_bytes must be a multiple of 64, got 129"),
    ({"slots": 1}, "slots must be in 2"),
    ({"max_message_bytes": 0}, "max_message_bytes must be in 1"),
    ({"max_message_bytes": (1 << 62) + 1},
     "max_message_bytes must be in 1..4611686018427387904, got 4611686018427387905"),
    ({"spin_us": 1_000_001}, "spin_us must be in 0..1000000, got 1000001"),
    ({"spin_us": -1}, "spin_us must be in 0..1000000, got -1"),
    ({"slice_us": 99}, "slice_us must be 0 .off. or 100..100000, got 99"),
    ({"slice_us": 100_001}, "slice_us must be in 0..100000, got 100001"),
])
def test_the_first_invalid_writer_arguments_are_refused(kwargs, match):
    n = kwargs.pop("n_readers", 1)
    with pytest.raises(ValueError, match=match):
        rdmaq.Writer(n, transport="shm", **kwargs)


@pytest.mark.parametrize("slice_ns, ok", [(99_999, False), (100_000, True), (100_000_000, True),
                                          (100_000_001, False)])
def test_the_core_s_slice_range(slice_ns, ok):
    rc = lib.rdmaq_sched_slice_probe(slice_ns)
    assert (rc >= 0) == ok, rc
    if not ok:
        assert rc == -errno.EINVAL


@pytest.mark.parametrize("slot_bytes", [128, 192, 1024, 65536])
def test_a_slot_carries_its_size_less_40_bytes(slot_bytes):
    assert lib.rdmaq_slot_payload(slot_bytes) == slot_bytes - 40


def test_an_abort_record_before_any_message_is_skipped(ring):
    """The writer gave up on a message this reader never started."""
    ring.forge(1, b"", flags=ABORT)
    ring.forge(2, b"the next one")
    assert ring.r.get(timeout=TIMEOUT) == b"the next one"


def test_a_get_that_times_out_mid_message_resumes_it(ring):
    first = bytes(range(200)) * 4 + bytes(ring.payload - 800)
    ring.forge(1, first, msg_len=ring.payload + 10, flags=FIRST)
    with pytest.raises(TimeoutError):
        ring.r.get(timeout=0.2)  # has the first record, waits for the second
    ring.forge(2, b"0123456789", msg_len=ring.payload + 10, flags=LAST)
    assert ring.r.get(timeout=TIMEOUT) == first + b"0123456789"


def test_a_writer_that_closes_mid_message_delivers_no_half(ring):
    ring.forge(1, bytes(ring.payload), msg_len=ring.payload + 10, flags=FIRST)
    with pytest.raises(TimeoutError):
        ring.r.get(timeout=0.2)
    ring.w.close()  # closed_seq: the first record never sent (2)
    for _ in range(2):
        with pytest.raises(rdmaq.PeerClosedError):
            ring.r.get(timeout=TIMEOUT)


# ------------------------------------------------------------ leftovers of dead writers

def _start_time(pid):
    """Field 22 of /proc/PID/stat: the process's start, in clock ticks after boot."""
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[19])


def test_a_live_pid_with_another_start_time_is_a_reused_pid(forge):
    """A segment whose writer pid is alive is stale when that pid now belongs to a
    process started at another time (the writer died, its pid was reused)."""
    mine = _start_time(os.getpid())
    for start, stale in ((mine, 0), (mine + 1, 1), (mine - 1, 1), (0, 0)):  # 0: the writer did not know
        h = forge(start=start)
        assert lib.rdmaq_shm_segment_stale(h.info.name.encode()) == stale, start
    assert lib.rdmaq_shm_segment_stale(forge(pid=0).info.name.encode()) == 0  # still being created


def test_the_lowest_writer_pid_is_judged_like_any_other(forge):
    """pid 1, the lowest a writer can have (0 and below: still being created), is alive:
    its segment is stale once pid 1's start time is not the writer's."""
    init = _start_time(1)
    for start, stale in ((init, 0), (init + 1, 1)):
        assert lib.rdmaq_shm_segment_stale(forge(pid=1, start=start).info.name.encode()) == stale, start


def _fds():
    return sorted(os.listdir("/proc/self/fd"))


def test_a_refused_attach_leaves_the_process_s_descriptors_as_they_were(forge):
    # fd 0 open whatever started this process (a closed stdin would hide a close(0))
    null = os.open(os.devnull, os.O_RDONLY) if not os.path.exists("/proc/self/fd/0") else None
    before = _fds()
    for handle, exc in ((rdmaq.Handle("shm", 1, ShmInfo("rdmaq-no-such-queue", "")), rdmaq.QueueNotFoundError),
                        (forge(slots=1), rdmaq.ProtocolError), (forge(pid=0), rdmaq.PeerDeadError)):
        with pytest.raises(exc):
            rdmaq.Reader(handle, 0)
        assert _fds() == before  # stdin (fd 0) included: nothing closed that was not opened
    if null is not None:
        os.close(null)


def test_a_handle_naming_a_queue_of_the_longest_name_allowed_is_looked_for():
    name = "rdmaq-" + "a" * (lib.RDMAQ_SHM_NAME_MAX - 6)  # 200 characters: none too many for its path
    with pytest.raises(rdmaq.QueueNotFoundError, match=f"no rdmaq queue {name} here"):
        rdmaq.Reader(rdmaq.Handle("shm", 1, ShmInfo(name, "")), 0)


@pytest.mark.parametrize("name", ["x" * 201, "rdmaq-" + "a" * 195, "", "rdmaq-a/b"])
def test_the_stale_check_refuses_a_name_no_queue_can_have(name):
    assert lib.rdmaq_shm_segment_stale(name.encode()) == -errno.EINVAL
    assert lib.rdmaq_shm_segment_stale(b"rdmaq-" + b"a" * 194) == 0  # 200 characters: no such queue


def _dead_pid():
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid  # reaped: no process has it (until the kernel hands it out again)


def test_a_segment_without_the_queue_prefix_is_never_stale(shm_names):
    """Another program's segment is not judged, even one laid out as a queue of a dead writer."""
    name = f"not-rdmaq-{os.getpid()}"
    shm_names.append(name)
    with open(os.path.join(SHM, name), "wb") as f:
        f.write(HDR.pack(MAGIC, VERSION, 1, 1024, 8, _dead_pid(), 1 << 20, 1, _layout(1, 1024, 8), 0))
    assert lib.rdmaq_shm_segment_stale(name.encode()) == 0


def test_a_segment_of_the_longest_name_allowed_is_judged_stale(shm_names):
    """The stale check opens a segment whose name has all 200 characters: one of a
    dead writer is stale."""
    name = "rdmaq-" + "s" * (lib.RDMAQ_SHM_NAME_MAX - 6)
    shm_names.append(name)
    with open(os.path.join(SHM, name), "wb") as f:
        f.write(HDR.pack(MAGIC, VERSION, 1, 1024, 8, _dead_pid(), 1 << 20, 1, _layout(1, 1024, 8), 0))
        f.truncate(_layout(1, 1024, 8))
    assert lib.rdmaq_shm_segment_stale(name.encode()) == 1


def test_a_segment_without_the_magic_is_never_stale_whatever_its_writer_pid(forge):
    dead = _dead_pid()
    assert lib.rdmaq_shm_segment_stale(forge(pid=dead).info.name.encode()) == 1  # with the magic: stale
    assert lib.rdmaq_shm_segment_stale(forge(pid=dead, magic=MAGIC ^ 1).info.name.encode()) == 0


def test_the_missing_readers_list_is_cut_where_16_bytes_of_its_128_are_left():
    """The list keeps 16 bytes spare for one more index: '0, 1, .., 8, 10, .., 31' is 113
    bytes, so 32 is left out although ', 32' would still fit."""
    with rdmaq.Writer(33, transport="shm") as w:
        r = rdmaq.Reader(w.handle, 9)
        listed = ", ".join(str(i) for i in [*range(9), *range(10, 32)])
        assert len(listed) == 113
        with pytest.raises(TimeoutError, match=rf"1 of 33 readers attached \(missing: \[{listed}, \.\.\.\]\)"):
            w.wait_ready(timeout=0)
        r.close()
