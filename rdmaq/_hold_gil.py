"""The ring's non-blocking calls, made without letting go of the GIL.

cffi releases the GIL around every C call.  For a call that cannot block
that buys nothing and costs a hand-off: another thread that wanted the GIL
takes it, and this one then sleeps until it gets it back (a vLLM worker's
main thread reading a step that is already there, while its output thread
runs).  ctypes' ``PYFUNCTYPE`` calls a C function pointer with the GIL held,
so these two calls go through it; every call that may wait goes through cffi
and lets the GIL go, as a blocking call must.  Also here: a bytearray made without
zeroing it (through ctypes.pythonapi, with the GIL held), for a read that fills it all.
"""
from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

_TRY_RECV = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64,
                              ctypes.c_void_p)
_TRY_PUT = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int)
# c_char_p takes a bytes object as the address of its own bytes: no iovec, no copy.
_TRY_PUT2 = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t,
                              ctypes.c_char_p, ctypes.c_size_t)
# PyByteArray_FromStringAndSize(NULL, n): a bytearray whose bytes are not set (bytearray(n)
# zeroes them, with the GIL held: ~0.7 s per 512 MiB, before a read that overwrites them all).
_bytearray_from = ctypes.pythonapi.PyByteArray_FromStringAndSize
_bytearray_from.restype = ctypes.py_object
_bytearray_from.argtypes = (ctypes.c_void_p, ctypes.c_ssize_t)


def address(ffi: Any, cdata: Any) -> int:
    """A cffi pointer as the integer ctypes passes."""
    return int(ffi.cast("uintptr_t", cdata))


def _c_function(ffi: Any, lib: Any, name: str, proto: Any) -> Callable[..., int]:
    return proto(address(ffi, ffi.addressof(lib, name)))  # type: ignore[no-any-return]


def try_recv(ffi: Any, lib: Any) -> Callable[[int, int, int, int], int]:
    """rdmaq_reader_try_recv(reader, buf, cap, &msg_len) with the GIL held."""
    return _c_function(ffi, lib, "rdmaq_reader_try_recv", _TRY_RECV)


def try_put(ffi: Any, lib: Any) -> Callable[[int, int, int], int]:
    """rdmaq_writer_try_put(writer, iov, iovcnt) with the GIL held."""
    return _c_function(ffi, lib, "rdmaq_writer_try_put", _TRY_PUT)


def try_put2(ffi: Any, lib: Any) -> Callable[[int, bytes, int, bytes, int], int]:
    """rdmaq_writer_try_put2(writer, head, len, body, len) of two bytes objects, the GIL held."""
    return _c_function(ffi, lib, "rdmaq_writer_try_put2", _TRY_PUT2)


def bytearray_of(n: int) -> bytearray:
    """A bytearray of ``n`` bytes whose content is not set: for a read that fills it all."""
    return _bytearray_from(None, n)  # type: ignore[no-any-return]
