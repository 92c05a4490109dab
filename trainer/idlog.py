"""``--debug-record-ids``: which records each worker trained on, step by step (a test and debug aid).

Each worker appends one line per global step to ``model_dir/debug/worker-<i>-epoch-<e>.ids``:
``STEP ID ID ...``, the ids being 63-bit hashes of the serialized records (``data.record_ids``), so
any data set works without an id feature. Steps after the last checkpoint of a killed run appear
again after the resume (the resumed job redoes them); a half-written last line left by a kill is
cut off before the next run appends. Hidden from ``--help``; local ``--model-dir`` only. TF-free.
"""
from __future__ import annotations

import os
from collections.abc import Iterable
from typing import IO

__all__ = ["IdLog", "log_path", "read_log"]


def log_path(model_dir: str, worker: int, epoch: int) -> str:
    return os.path.join(model_dir, "debug", f"worker-{worker}-epoch-{epoch}.ids")


def _cut_partial_line(path: str) -> None:
    """Truncates ``path`` after its last newline (a writer killed mid-line leaves a tail)."""
    with open(path, "rb+") as f:
        data = f.read()
        if data and not data.endswith(b"\n"):
            f.truncate(data.rfind(b"\n") + 1)


class IdLog:
    """Appends the record ids of each step to this worker's per-epoch files."""

    def __init__(self, model_dir: str, worker: int) -> None:
        self.model_dir, self.worker = model_dir, worker
        self._files: dict[int, IO[str]] = {}
        os.makedirs(os.path.dirname(log_path(model_dir, worker, 0)), exist_ok=True)

    def write(self, *, step: int, epoch: int, ids: Iterable[int]) -> None:
        """Ids of the records consumed by global step ``step`` (0-based: the batch it trained on)."""
        f = self._files.get(epoch)
        if f is None:
            path = log_path(self.model_dir, self.worker, epoch)
            if os.path.exists(path):
                _cut_partial_line(path)
            f = self._files[epoch] = open(path, "a")
        f.write(f"{step} {' '.join(map(str, ids))}\n")
        f.flush()

    def close(self) -> None:
        for f in self._files.values():
            f.close()
        self._files.clear()


def read_log(path: str) -> list[tuple[int, list[int]]]:
    """(step, ids) of every complete line, in file order (replayed steps appear more than once)."""
    out = []
    with open(path) as f:
        for line in f:
            if line.endswith("\n"):
                step, *ids = line.split()
                out.append((int(step), [int(i) for i in ids]))
    return out
