"""The small picklable token a writer hands to its readers."""
from dataclasses import dataclass, field

HANDLE_VERSION = 1


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
        if not isinstance(self, Handle):
            raise ValueError(f"not an rdmaq.Handle: {self!r}")
        if self.version != HANDLE_VERSION:
            raise ValueError(f"handle version {self.version} is not {HANDLE_VERSION}: "
                             "writer and reader run different rdmaq releases")
        if not isinstance(index, int) or isinstance(index, bool):
            raise ValueError(f"reader index must be an int, got {type(index).__name__}")
        if not 0 <= index < self.n_readers:
            raise ValueError(f"reader index {index} out of range: queue has {self.n_readers} readers")
