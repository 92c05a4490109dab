"""Work on a thread of its own, one call behind the caller: a shard stored, or its statistics
counted, while the caller builds the next (``writer.ShardWriter``, ``graph.stages.WriteShards``)."""
from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

__all__ = ["Behind"]


class Behind:
    """Runs each submitted call on one thread, after the call before it has ended, so calls take
    effect in the order given. ``submit`` waits for the call before (at most one runs while the
    caller goes on, and holds its arguments); ``wait`` waits for the last and raises any error of
    the calls since the last ``wait``. The thread starts at the first call. ``inline``: each call
    runs in ``submit`` instead (where no core is free for the thread), with the same effects."""

    def __init__(self, name: str, *, inline: bool = False) -> None:
        self._name = name
        self._inline = inline
        self._thread: ThreadPoolExecutor | None = None
        self._pending: Future | None = None

    def submit(self, call: Callable[..., Any], *args: Any) -> None:
        if self._inline:
            call(*args)
            return
        self.wait()
        if self._thread is None:
            self._thread = ThreadPoolExecutor(1, thread_name_prefix=self._name)
        self._pending = self._thread.submit(call, *args)

    def wait(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def close(self) -> None:
        try:
            self.wait()
        finally:
            if self._thread is not None:
                self._thread.shutdown()
                self._thread = None
