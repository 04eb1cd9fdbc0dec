"""The small picklable token a writer hands to its readers."""
from dataclasses import dataclass, field

HANDLE_VERSION = 2
MAX_READERS = 256


@dataclass(frozen=True)
class Handle:
    """Everything a reader needs to attach: which transport, and its details.

    ``info`` is transport-specific (a shm segment name, or a rendezvous
    address and device GID for verbs).  Handles pickle to a few hundred bytes.
    """

    transport: str
    n_readers: int
    info: dict = field(default_factory=dict)
    version: int = HANDLE_VERSION

    def check(self, index):
        """Raise ValueError/TypeError naming the field if this handle or ``index`` is unusable."""
        if not isinstance(self, Handle):
            raise TypeError(f"not an rdmaq.Handle: {type(self).__name__}")
        if not _is_int(self.version):
            raise TypeError(f"handle version must be an int, got {type(self.version).__name__}")
        if self.version != HANDLE_VERSION:
            raise ValueError(f"handle version {self.version} is not {HANDLE_VERSION}: "
                             "writer and reader run different rdmaq releases")
        if not isinstance(self.transport, str):
            raise TypeError(f"handle transport must be a str, got {type(self.transport).__name__}")
        if not _is_int(self.n_readers):
            raise TypeError(f"handle n_readers must be an int, got {type(self.n_readers).__name__}")
        if not 1 <= self.n_readers <= MAX_READERS:
            raise ValueError(f"handle n_readers must be in 1..{MAX_READERS}, got {self.n_readers}")
        if not isinstance(self.info, dict):
            raise TypeError(f"handle info must be a dict, got {type(self.info).__name__}")
        if not _is_int(index):
            raise TypeError(f"reader index must be an int, got {type(index).__name__}")
        if not 0 <= index < self.n_readers:
            raise ValueError(f"reader index {index} out of range: queue has {self.n_readers} readers")

    def info_str(self, key, max_len=200):
        """``info[key]`` as a non-empty str without NUL or '/', or ValueError naming it."""
        v = self.info.get(key)
        if not isinstance(v, str) or not v:
            raise ValueError(f"corrupt {self.transport} handle: info[{key!r}] must be a non-empty str, "
                             f"got {v!r}")
        if len(v) > max_len or "\0" in v or "/" in v:
            raise ValueError(f"corrupt {self.transport} handle: info[{key!r}] = {v!r} is not a valid name")
        return v


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)
