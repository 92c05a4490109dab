"""Work units and the input list staged next to the run folder, so the job graph stays small.

The launcher writes ``DIR/<run-id>/units.bin`` once (``stage``); the graph then carries only its
URL and a chunk count, whatever the number of files or units. ``ExpandUnits`` reads one chunk of
units per element (a byte range of the file: one small read, not the whole file), and the commit
reads the input list back (``with_sources``) for the manifest's sources and the input-change
check. The DoFns carry the config without the input list (``slim``). A text run stages the parts of
its document store the same way (``text.store_stages``), and its units once the store is built.

Layout: ``MAGIC``, the number of chunks n, n + 2 little-endian uint64 offsets, then n + 1
zlib-compressed pickles: the input list ``(sources, versions, text)`` and the n chunks of units, in
unit order. Pickle, as Beam uses for the DoFns themselves: the file is written and read by the same
job's code, in the run's own folder.
"""
from __future__ import annotations

import dataclasses
import pickle
import struct
import zlib
from collections.abc import Iterator, Sequence
from typing import Any

from shardprep import fs, naming
from shardprep.config import ReshardConfig
from shardprep.formats import WorkUnit

__all__ = ["MAX_CHUNKS", "ExpandUnits", "num_chunks", "read_all", "read_chunk", "slim", "stage", "units_url",
           "with_sources"]

MAX_CHUNKS = 4096  # elements of the graph's ``Units`` step: bounded, and one Dask partition each
MAGIC = b"SPUNITS2"
_HEAD = len(MAGIC) + 8


def num_chunks(num_units: int) -> int:
    """Chunks the units are staged in: one per unit up to ``MAX_CHUNKS`` (as many parallel reads)."""
    return max(1, min(num_units, MAX_CHUNKS))


def units_url(config: ReshardConfig) -> str:
    return naming.join(config.output, naming.units_path(config.run_id))


def slim(config: ReshardConfig) -> ReshardConfig:
    """The config without the input list: what every DoFn carries (its size does not grow with the input)."""
    return dataclasses.replace(config, sources=(), versions=())


def _blob(value: object) -> bytes:
    return zlib.compress(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL), 1)


def stage(config: ReshardConfig, units: Sequence[Any], *, url: str | None = None) -> tuple[str, int]:
    """Writes the units and the input list of ``config`` (with its ``text`` entry) to ``url``
    (default: ``units_url``); returns (URL, number of chunks). ``units``: any picklable elements."""
    n = num_chunks(len(units))
    bounds = [len(units) * i // n for i in range(n + 1)]
    blobs = [_blob((config.sources, config.versions, config.text))]
    blobs += [_blob(list(units[a:b])) for a, b in zip(bounds, bounds[1:])]
    start = _HEAD + 8 * (len(blobs) + 1)
    offsets = [start]
    for blob in blobs:
        offsets.append(offsets[-1] + len(blob))
    url = url or units_url(config)
    with fs.write_atomic(url) as f:
        f.write(b"".join([MAGIC, struct.pack("<Q", n), struct.pack(f"<{len(offsets)}Q", *offsets), *blobs]))
    return url, n


def _chunks(url: str) -> int:
    head = fs.read_bytes(url, 0, _HEAD)
    if head[: len(MAGIC)] != MAGIC:
        raise ValueError(f"{url} is not a staged units file of this version (expected {MAGIC!r})")
    return struct.unpack("<Q", head[len(MAGIC):])[0]


def _read_blob(url: str, index: int) -> object:
    """Blob ``index`` of a staged file (0: the input list; 1..n: the chunks of units)."""
    n = _chunks(url)
    if not 0 <= index <= n:
        raise ValueError(f"{url}: blob {index} of {n + 1}")
    lo, hi = struct.unpack("<2Q", fs.read_bytes(url, _HEAD + 8 * index, _HEAD + 8 * index + 16))
    return pickle.loads(zlib.decompress(fs.read_bytes(url, lo, hi)))


def read_chunk(url: str, chunk: int) -> list[WorkUnit]:
    return _read_blob(url, chunk + 1)  # type: ignore[return-value]


def read_all(url: str) -> list:
    """Every unit of a staged file, in order."""
    return [unit for chunk in range(_chunks(url)) for unit in read_chunk(url, chunk)]


def with_sources(config: ReshardConfig, url: str) -> ReshardConfig:
    """``config`` with the input list (and a text run's ``text`` entry) read back from the staged
    file (for the commit)."""
    sources, versions, text = _read_blob(url, 0)  # type: ignore[misc]
    return dataclasses.replace(config, sources=sources, versions=versions, text=text)


class ExpandUnits:
    """A chunk index in; that chunk's work units out, read from the staged file."""

    def __init__(self, url: str) -> None:
        self._url = url

    def process(self, chunk: int) -> Iterator[WorkUnit]:
        yield from read_chunk(self._url, chunk)
