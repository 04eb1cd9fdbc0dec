"""A stand-in for torch with a GPU, for `rdmaq bench step --device cuda` on machines without one:
just what bench/step/main.py and bench/step/proc.py call. A matmul is a timed spin of MATMUL_NS
(its time on the GPU, as the benchmark sees it after the synchronize)."""

import time
import types

__version__ = "0+fake"
version = types.SimpleNamespace(cuda="0")
bfloat16 = "bfloat16"
MATMUL_NS = 20_000


def _spin(ns):
    end = time.monotonic_ns() + ns
    while time.monotonic_ns() < end:
        pass


class Generator:
    def __init__(self, device=None):
        self.device = device

    def manual_seed(self, seed):
        return self


def randn(*shape, device=None, dtype=None, generator=None):
    return ("tensor", shape, device, dtype)


def empty_like(x):
    return x


def mm(a, b, out=None):
    _spin(MATMUL_NS)
    return out


class _Cuda:
    @staticmethod
    def is_available():
        return True

    @staticmethod
    def init():
        pass

    @staticmethod
    def synchronize():
        pass

    @staticmethod
    def get_device_name():
        return "fake GPU"


cuda = _Cuda()


class Tensor:  # what rdmaq's pickling looks for when torch is loaded
    pass
