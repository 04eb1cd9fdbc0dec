"""Forged and corrupt bootstrap data: every field is checked before use.

The verbs bootstrap (rdmaq/transport/verbs) is JSON over pyzmq, and the handle
travels through the caller's hands: all of it comes from another process.
Here a forger talks to a real writer, and a fake writer answers a real
reader; each bad field must give an error naming it (never a crash, an
out-of-bounds read or a hang), and the real endpoint must keep working.
"""
import copy
import dataclasses
import errno
import json
import os
import secrets
import socket
import threading

import pytest
import zmq

import rdmaq
from children import checksum_reader, start
from rdmaq.handle import VerbsInfo
from rdmaq.transport.verbs.device import open_context
from rdmaq.transport.verbs.protocol import PROTO

GEOMETRY = {"n_readers": 1, "slot_bytes": 1024, "slots": 8}


def _writer():
    return rdmaq.Writer(1, transport="verbs", slot_bytes=GEOMETRY["slot_bytes"], slots=GEOMETRY["slots"])


class Forger:
    """A process that speaks the writer's protocol, badly on purpose."""

    def __init__(self, handle):
        self.handle = handle
        self.dealer = zmq.Context.instance().socket(zmq.DEALER)
        self.dealer.linger = 0
        self.dealer.connect(handle.info.endpoint)
        self.live = socket.create_connection(handle.info.live, timeout=30)

    def attach(self):
        """A well-formed ATTACH (a new pool of one QP that exists nowhere)."""
        w = self.handle.info
        return {
            "op": "attach", "proto": PROTO, "queue": w.queue, "index": 0,
            "geometry": dict(GEOMETRY), "proc": secrets.token_hex(16), "pid": os.getpid(),
            "host": socket.gethostname(),
            "port": {"device": w.device, "port": 1, "gid_index": 1, "gid": w.gid, "lid": 0,
                     "link_layer": 2, "mtu": 3},
            "pool": {"id": 12345, "qps": [[4000, 7]]},
            "ring": {"ep_id": 9, "rkey": 77, "addr": 0x10000, "key": 0},
            "live": list(self.live.getsockname()[:2]),
        }

    def ask(self, payload):
        self.dealer.send(payload if isinstance(payload, bytes) else json.dumps(payload).encode())
        assert self.dealer.poll(60_000), "the writer did not answer"
        return json.loads(self.dealer.recv())

    def close(self):
        self.dealer.close()
        self.live.close()


def _set(msg, path, value):
    """msg with msg[path] = value (path "a.b.0"; value DELETE removes it)."""
    msg = copy.deepcopy(msg)
    *parents, last = path.split(".")
    d = msg
    for p in parents:
        d = d[int(p)] if isinstance(d, list) else d[p]
    if isinstance(d, list):
        last = int(last)
    if value is DELETE:
        del d[last]
    else:
        d[last] = value
    return msg


DELETE = object()

# (path, forged value, what the error must say)
BAD_ATTACH = [
    ("op", "steal", "field 'op' must be 'attach' or 'attached'"),
    ("proto", 1, "protocol 1"),
    ("queue", "../x", "field 'queue' has characters"),
    ("index", "0", "field 'index' must be an integer"),
    ("index", True, "field 'index' must be an integer"),
    ("index", 0.0, "field 'index' must be an integer"),
    ("index", 1 << 40, "field 'index' must be in 0..4294967295"),
    ("index", 3, "reader index 3 out of range: queue has 1 readers"),
    ("geometry.slots", 16, "handle describes rings of"),
    ("geometry", [1, 2], "field 'geometry' must be an object"),
    ("proc", "abcd", "field 'proc' must be 16 bytes"),  # C reads 16 bytes from it
    ("proc", "zz" * 16, "field 'proc' has characters"),
    ("pid", -1, "field 'pid' must be in 1.."),
    ("host", "x" * 300, "field 'host' is longer than 255"),
    ("host", "a\nb", "field 'host' has characters"),
    ("port", DELETE, "field 'port' is missing"),
    ("port.gid", "00", "field 'port.gid' must be 16 bytes"),
    ("port.mtu", 9, "field 'port.mtu' must be in 1..5"),
    ("port.lid", 1 << 16, "field 'port.lid' must be in 0..65535"),
    ("port.link_layer", 3, "field 'port.link_layer' must be in 1..2"),
    ("port.device", "d" * 64, "field 'port.device' is longer than 63"),
    ("pool.id", 0, "field 'pool.id' must be in 1.."),
    ("pool.id", 1 << 64, "field 'pool.id' must be in 1.."),
    ("pool.qps", [[0, 1]], "field 'pool.qps[0][0]' must be in 2..16777215"),
    ("pool.qps", [[1 << 24, 1]], "field 'pool.qps[0][0]' must be in 2..16777215"),
    ("pool.qps", [[100, -1]], "field 'pool.qps[0][1]' must be in 0..16777215"),
    ("pool.qps", [[100, 1], [100, 2]], "field 'pool.qps[1][0]' repeats QP number 100"),
    ("pool.qps", [[100 + i, 0] for i in range(65)], "field 'pool.qps' must have 1..64 entries"),
    ("pool.qps", [[100]], "field 'pool.qps[0]' must be a [qpn, psn] pair"),
    ("pool.qps", "lots", "field 'pool.qps' must be a list"),
    ("ring.addr", 0, "field 'ring.addr' must be in 1.."),
    ("ring.rkey", 1 << 32, "field 'ring.rkey' must be in 0..4294967295"),
    ("ring.ep_id", "1", "field 'ring.ep_id' must be an integer"),
    ("ring.key", -5, "field 'ring.key' must be in 0.."),
    ("live", ["192.0.2.1"], "field 'live' must have 2..2 entries"),
    ("live.1", 70000, "field 'live[1]' must be in 1..65535"),
]


def test_forged_requests_get_errors_naming_the_field_and_the_writer_keeps_serving(procs, results):
    with _writer() as w:
        served = threading.Thread(target=w.wait_ready, kwargs={"timeout": 600})
        served.start()
        forger = Forger(w.handle)
        try:
            good = forger.attach()
            for path, value, want in BAD_ATTACH:
                reply = forger.ask(_set(good, path, value))
                assert reply["ok"] is False and want in reply["error"], (path, value, reply)
            for raw, want in [
                (b"not json", "field 'request' is not valid JSON"),
                (b"\xff\xfe", "field 'request' is not valid JSON"),
                (b"[" * 30000 + b"]" * 30000, "field 'request' is not valid JSON"),  # too deep
                (b"[1, 2]", "field 'request' must be an object"),
                (b'{"op": "attach", "proto": NaN}', "protocol nan"),
            ]:
                reply = forger.ask(raw)
                assert reply["ok"] is False and want in reply["error"], (raw[:20], reply)
            own = _set(good, "proc", w.handle.info.writer.hex())
            assert "field 'proc' is this writer's own process id" in forger.ask(own)["error"]
            attached = forger.ask({"op": "attached", "proto": PROTO, "queue": good["queue"], "index": 0})
            assert "sent ATTACHED without ATTACH" in attached["error"], attached
            # Above the size limit zmq drops the message (and the connection).
            forger.dealer.send(b"x" * (200 * 1024))
        finally:
            forger.close()
        # A real reader still attaches and reads.
        procs.append(start(checksum_reader, w.handle, 0, 3, results))
        served.join(600)
        assert not served.is_alive()
        for i in range(3):
            w.put(i.to_bytes(8, "little") * 4, timeout=120)
        got = results.get(timeout=300)
        assert got[1] == "ok", got


def test_half_attached_reader_holds_its_index_until_its_connection_ends(procs, results):
    """ATTACH without ATTACHED (a reader that died half-way): the index is
    taken while its liveness connection lives, free once it has ended."""
    with _writer() as w:
        served = threading.Thread(target=w.wait_ready, kwargs={"timeout": 600})
        served.start()
        forger = Forger(w.handle)
        reply = forger.ask(forger.attach())
        assert reply["ok"] is True, reply
        forger.dealer.close()
        procs.append(start(checksum_reader, w.handle, 0, 2, results))
        got = results.get(timeout=300)
        assert got[1] == "error" and got[2].startswith("IndexInUseError("), got
        assert "already being attached by another reader" in got[2], got
        forger.live.close()
        procs.append(start(checksum_reader, w.handle, 0, 2, results))
        served.join(600)
        assert not served.is_alive()
        for i in range(2):
            w.put(i.to_bytes(8, "little"), timeout=120)
        got = results.get(timeout=300)
        assert got[1] == "ok", got


def _handle(w, **changes):
    info = copy.copy(w.handle.info)
    for k, v in changes.items():
        if v is DELETE:
            object.__delattr__(info, k)  # as in a handle another release pickled
        else:
            info = dataclasses.replace(info, **{k: v})
    return rdmaq.Handle("verbs", w.handle.n_readers, info)


BAD_HANDLE = [
    ("writer", b"abcd", "field 'info.writer' must be 16 bytes"),  # C reads 16 bytes from it
    ("writer", "ab" * 16, "field 'info.writer' must be 16 bytes"),
    ("endpoint", "ipc://x", "field 'info.endpoint' must be tcp://HOST:PORT"),
    ("live", ("192.0.2.1",), "field 'info.live' must have 2..2 entries"),
    ("live", (7, 1), "field 'info.live[0]' must be a string"),
    ("pid", "42", "field 'info.pid' must be an integer"),
    ("slots", 1 << 40, "field 'info.slots' must be in 2..16777216"),
    ("slot_bytes", "4096", "field 'info.slot_bytes' must be an integer"),
    ("max_message", 0, "field 'info.max_message' must be in 1.."),
    ("gid", "00", "field 'info.gid' must be 16 bytes"),
    ("queue", DELETE, "field 'info.queue' is missing"),
]


def test_corrupt_handle_fields_are_named():
    with _writer() as w:
        for field, value, want in BAD_HANDLE:
            with pytest.raises(ValueError, match="corrupt verbs handle") as e:
                rdmaq.Reader(_handle(w, **{field: value}), 0)
            assert want in str(e.value), (field, value)


def test_handle_info_of_another_type():
    with pytest.raises(TypeError, match="handle info must be a VerbsInfo for transport 'verbs', got list"):
        rdmaq.Reader(rdmaq.Handle("verbs", 1, ["not", "a", "VerbsInfo"]), 0)


def test_handle_geometry_other_than_the_writers():
    with _writer() as w:
        with pytest.raises(ValueError, match="handle describes rings of"):
            rdmaq.Reader(_handle(w, slots=GEOMETRY["slots"] * 2), 0)


class FakeWriter:
    """Answers a real reader's ATTACH with whatever the test says."""

    def __init__(self):
        ip = os.environ.get("RDMAQ_VM_IP0", "127.0.0.1")
        self.router = zmq.Context.instance().socket(zmq.ROUTER)
        self.router.linger = 0
        zport = self.router.bind_to_random_port(f"tcp://{ip}")
        self.listener = socket.create_server((ip, 0))
        port = open_context().port  # the reader's own port: its QPs connect to it
        gid = port.gid.hex()
        self.port = {"device": "fake0", "port": 1, "gid_index": 1, "gid": gid, "lid": 0,
                     "link_layer": port.link_layer, "mtu": port.mtu}
        self.handle = rdmaq.Handle("verbs", 1, VerbsInfo(
            proto=PROTO, endpoint=f"tcp://{ip}:{zport}", live=(ip, self.listener.getsockname()[1]),
            queue=secrets.token_hex(8), writer=secrets.token_bytes(16), pid=4242,
            host=socket.gethostname(), device="fake0", gid=gid,
            slot_bytes=GEOMETRY["slot_bytes"], slots=GEOMETRY["slots"], max_message=1 << 20))
        self.conns = []

    def attach_request(self):
        assert self.router.poll(120_000), "no ATTACH from the reader"
        ident, raw = self.router.recv_multipart()
        self.conns.append(self.listener.accept()[0])
        return ident, json.loads(raw)

    def good_reply(self, req):
        return {"ok": True, "port": self.port, "geometry": dict(GEOMETRY),
                "writer": {"ep_id": 5, "rkey": 6, "addr": 0x20000, "key": 99},
                "pool": {"id": req["pool"]["id"],
                         "qps": [[5000 + i, 1] for i in range(len(req["pool"]["qps"] or []))] or None}}

    def close(self):
        self.router.close()
        self.listener.close()
        for c in self.conns:
            c.close()


def _forged_reply(fake, mutate):
    """A real reader's wait_ready against a fake writer whose ATTACH reply is mutate(good)."""
    r = rdmaq.Reader(fake.handle, 0)
    out = {}

    def wait():
        try:
            r.wait_ready(timeout=60)
        except BaseException as e:
            out["error"] = e

    t = threading.Thread(target=wait)
    t.start()
    ident, req = fake.attach_request()
    assert req["op"] == "attach" and req["geometry"] == GEOMETRY  # the real reader speaks well
    reply = mutate(fake.good_reply(req), req)
    fake.router.send_multipart([ident, reply if isinstance(reply, bytes) else json.dumps(reply).encode()])
    t.join(120)
    assert not t.is_alive(), "the reader hung on a forged reply"
    r.close()
    return out.get("error")


BAD_REPLY = [
    (lambda g, q: b"\x00garbage", "field 'reply' is not valid JSON"),
    (lambda g, q: {"ok": "yes"}, "field 'ok' must be true or false"),
    (lambda g, q: _set(g, "pool.id", q["pool"]["id"] + 1), "field 'pool.id' must be"),
    (lambda g, q: _set(g, "pool.qps", None), "field 'pool.qps' is missing: the pool is new"),
    (lambda g, q: _set(g, "pool.qps", g["pool"]["qps"] + [[6000, 0]]), "field 'pool.qps' must have"),
    (lambda g, q: _set(g, "pool.qps", [[1, 0]] * len(q["pool"]["qps"])), "field 'pool.qps[0][0]'"),
    (lambda g, q: _set(g, "port.gid", "ab"), "field 'port.gid' must be 16 bytes"),
    (lambda g, q: _set(g, "port.mtu", 0), "field 'port.mtu' must be in 1..5"),
    (lambda g, q: _set(g, "writer.addr", 0), "field 'writer.addr' must be in 1.."),
    (lambda g, q: _set(g, "writer.rkey", -1), "field 'writer.rkey' must be in 0..4294967295"),
    (lambda g, q: _set(g, "geometry.slots", 64), "field 'geometry' must be the handle's"),
    (lambda g, q: _set(g, "writer", DELETE), "field 'writer' is missing"),
]


@pytest.mark.parametrize("mutate, want", BAD_REPLY, ids=[w.split("'")[1] if "'" in w else w for _, w in BAD_REPLY])
def test_forged_writer_reply_is_a_protocol_error_naming_the_field(mutate, want):
    fake = FakeWriter()
    try:
        err = _forged_reply(fake, mutate)
    finally:
        fake.close()
    assert isinstance(err, rdmaq.ProtocolError), repr(err)
    assert want in str(err) and "writer (pid 4242)" in str(err), str(err)


def test_refusal_of_a_taken_index_is_index_in_use():
    """The writer's EBUSY (the index attached, or being attached by a live reader) is
    rdmaq.IndexInUseError, as over shm (docs/api.md's error table)."""
    fake = FakeWriter()
    try:
        err = _forged_reply(fake, lambda g, q: {"ok": False, "error": "reader index 0 is already attached",
                                                "errno": errno.EBUSY})
    finally:
        fake.close()
    assert type(err) is rdmaq.IndexInUseError and err.errno == errno.EBUSY, repr(err)
    assert "writer refused: reader index 0 is already attached" in str(err), str(err)


def test_junk_refusal_is_an_error_not_a_crash():
    fake = FakeWriter()
    try:
        err = _forged_reply(fake, lambda g, q: {"ok": False, "error": 5, "errno": "x", "value_error": 1})
    finally:
        fake.close()
    assert type(err) is rdmaq.Error and "writer refused: ?" in str(err), repr(err)
