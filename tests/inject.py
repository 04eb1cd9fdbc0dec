"""Raise KeyboardInterrupt at a chosen point of an rdmaq call, as a signal handler can.

A Python signal handler runs where the interpreter checks for pending calls: as
a C function returns, and as a Python function starts.  A profile function
(sys.setprofile) sees exactly those points inside rdmaq's code; raising from it
at the n-th, for every n, is the handler's exception landing at each of them.

The cyclic garbage collector is held off while a call is armed: a collection there
would run an earlier endpoint's finalizer inside the call, which would then take the
injection (its exception printed as unraisable, never the call's).

Stdlib only (tests/vllm imports it from another venv).
"""
import gc
import os
import sys

import rdmaq

RDMAQ_DIR = os.path.dirname(os.path.abspath(rdmaq.__file__)) + os.sep


class Injector:
    """After ``arm(n)``, raise ``exc`` (KeyboardInterrupt) at the n-th point (a C function's
    return, a Python function's start) in rdmaq's code; ``fired`` says whether it did."""

    def __init__(self, exc=KeyboardInterrupt):
        self.n = 0
        self.fired = False
        self._collecting = True
        self.exc = exc  # what the handler raises

    def arm(self, n):
        self.n, self.fired = n, False
        self._collecting = gc.isenabled()
        gc.disable()
        sys.setprofile(self._profile)

    def disarm(self):
        sys.setprofile(None)
        if self._collecting:
            gc.enable()

    def _profile(self, frame, event, arg):
        if event not in ("call", "c_return") or not frame.f_code.co_filename.startswith(RDMAQ_DIR):
            return
        self.n -= 1
        if self.n == 0:
            self.fired = True
            sys.setprofile(None)
            raise self.exc

    def call(self, n, fn):
        """fn() with the n-th point raising: ("raised", None) or ("returned", its value)."""
        self.arm(n)
        try:
            return "returned", fn()
        except self.exc:
            return "raised", None
        finally:
            self.disarm()


def next_call(fn):
    """fn() as a caller goes on: a KeyboardInterrupt held from the last call comes first."""
    try:
        return fn()
    except KeyboardInterrupt:
        return fn()
