"""vLLM's MessageQueue with the stage stamps rdmaq's endpoints keep (``last_trace``), taken
at the same points of its path, for ``rdmaq bench --stages`` only (the stamps cost a few
clock reads per message; runs without --stages use the queue as shipped).

Writer: ``start`` the ring write begins (after pickling), ``mid`` the message copied into
the ring (then its flags are set: the stamp readers count from, as rdmaq's record stamp),
``end`` published and readers notified.  Reader: ``start`` is the writer's ``mid`` of the
same message (the report takes it from the writer's record: vLLM's ring has no room for
it), ``mid`` the message seen (the wait over), ``end`` unpickled out of the ring (vLLM's
copy out is its ``pickle.loads``); ``how`` ready (there at the first look), spin (seen
after ``sched_yield`` waits), woken (after a wait on its notify socket).
"""

from __future__ import annotations

import functools
import time
from contextlib import contextmanager

HOW_READY, HOW_SPIN, HOW_WOKEN = 1, 2, 4


@functools.cache
def traced(message_queue: type) -> type:
    """A subclass of vLLM's ``MessageQueue`` keeping ``trace``, as rdmaq's endpoints keep
    ``last_trace``.  (``create_from_handle`` makes a ``MessageQueue`` whatever class it is
    called on: the caller sets the reader's ``__class__`` to this one.)"""
    mono = time.monotonic_ns

    class TracedMessageQueue(message_queue):  # type: ignore[misc]
        trace = (0, 0, 0, 0)

        @contextmanager
        def acquire_write(self, timeout=None):
            start = mono()
            with super().acquire_write(timeout) as buf:
                yield buf
                mid = mono()
            self.trace = (start, mid, 0, 0)

        def enqueue(self, obj, timeout=None):
            super().enqueue(obj, timeout)
            start, mid, _, _ = self.trace
            self.trace = (start, mid, mono(), 0)

        def _wait_until_readable(self, metadata_buffer, read_timeout):
            sc = self._spin_condition
            if sc is not None and time.monotonic() > sc.last_read + sc.busy_loop_s:
                self._how = HOW_WOKEN  # this wait polls the notify socket
            ready = super()._wait_until_readable(metadata_buffer, read_timeout)
            if not ready and self._how == HOW_READY:
                self._how = HOW_SPIN
            return ready

        @contextmanager
        def acquire_read(self, timeout=None, indefinite=False):
            self._how = HOW_READY
            with super().acquire_read(timeout, indefinite) as buf:
                seen = mono()
                yield buf
                self.trace = (0, seen, mono(), self._how)

    return TracedMessageQueue
