"""A checked message stream between the VM's two hosts, for network-fault tests.

Message ``seq`` is ``seq`` as 8 little-endian bytes, repeated: a reader can
tell a torn message (two messages' bytes mixed), a repeated one and a
missing one from the bytes alone.  Sizes vary (up to ~7 KB) so that records
span slots and flushes carry several WRITEs.

Run as the second host (``rxe-peer python tests/verbs/vstream.py ROLE ...``):

    read HANDLE_HEX INDEX TIMEOUT    read until an error; one JSON line per
                                     100 messages and a last one with the error
    write TIMEOUT [SLOT_BYTES SLOTS] print the handle (hex pickle), then
                                     put until an error; JSON lines as above

Both ends flush stdout at every line, so the test sees progress live.
"""
import json
import os
import pickle
import sys
import time

import rdmaq


def message(seq):
    return seq.to_bytes(8, "little") * (1 + seq * 7 % 900)


def check(seq, msg):
    """None if msg is message seq, else what is wrong with it."""
    if len(msg) < 8:
        return f"message {seq}: {len(msg)} bytes"
    got = int.from_bytes(msg[:8], "little")
    if got != seq:
        return f"message {seq} expected, message {got} arrived"
    if bytes(msg) != message(seq):
        return f"message {seq} is torn ({len(msg)} bytes, {len(message(seq))} expected)"
    return None


def _say(**kw):
    print(json.dumps(kw), flush=True)


def _error(e):
    return {"type": type(e).__name__, "error": str(e)}


def read(handle, index, timeout):
    n = 0
    with rdmaq.Reader(handle, index) as r:
        r.wait_ready(timeout=120)
        _say(event="ready", pid=os.getpid())
        while True:
            try:
                msg = r.get(timeout=timeout)
            except Exception as e:
                _say(event="end", count=n, t=time.monotonic(), **_error(e))
                return
            bad = check(n, msg)
            if bad:
                _say(event="bad", count=n, bad=bad)
                return
            n += 1
            if n % 100 == 0:
                _say(event="progress", count=n)


def write(timeout, slot_bytes=2048, slots=16):
    n = 0
    with rdmaq.Writer(1, transport="verbs", slot_bytes=slot_bytes, slots=slots) as w:
        _say(event="handle", handle=pickle.dumps(w.handle).hex(), pid=os.getpid())
        w.wait_ready(timeout=120)
        _say(event="ready")
        while True:
            try:
                w.put(message(n), timeout=timeout)
            except Exception as e:
                _say(event="end", count=n, t=time.monotonic(), **_error(e))
                return
            n += 1
            if n % 100 == 0:
                _say(event="progress", count=n)


def main(argv):
    if argv[0] == "read":
        read(pickle.loads(bytes.fromhex(argv[1])), int(argv[2]), float(argv[3]))
    elif argv[0] == "write":
        write(float(argv[1]), *map(int, argv[2:4]))
    else:
        raise SystemExit(f"unknown role {argv[0]!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
