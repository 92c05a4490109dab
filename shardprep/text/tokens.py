"""The run's tokenized documents: written once, by the unit that owns them, read packed by id by every worker.

BERT's random next segments come from the whole corpus, so every worker reads documents of every
unit. Tokenizing them where they are read made each worker tokenize the random documents of the
whole corpus once more. Instead the
job's ``CountRanges`` step (``graph.ranges``, a side input of Parse: it ends before any unit is
parsed, on every engine) tokenizes each unit's documents once (``write_unit``) into
``tokens/<first doc id>.tok`` beside the store (``text.store``), and Parse's readers take them from
there (``TokenFiles``), a seek and one read per document, into the reader's bounded LRU.

A unit's file: int64 ``n`` (its documents), int64 ``offsets[n + 1]`` (each document's bytes, from
the end of the offsets), then per document int64 ``k`` (its sentences), int64 ``ends[k]`` (the end
of each sentence in its ids) and int32 ``ids`` (native order, as ``PackedDocument.packed`` and the
compiled maker read them). ``units.npy`` (``text.store.build_store``) lists the first document id
of each unit that holds a document, so document ``i``'s file is found by bisection. A unit whose
file is missing (a reader used outside a job) is tokenized from the store, the same ids.
"""
from __future__ import annotations

import array
import bisect
import collections
import io
import itertools
import posixpath
import struct
from collections.abc import Callable, Iterator, Sequence
from typing import IO

import numpy as np

from shardprep import fs
from shardprep.text.pretraining import PackedDocument

__all__ = ["TokenFiles", "document_bytes", "folder_of", "read_unit", "unit_url", "units_url", "write_documents", "write_unit"]

MAX_OPEN = 64  # token files a reader keeps open


def folder_of(store_url: str) -> str:
    return posixpath.dirname(store_url)


def units_url(store_url: str) -> str:
    """The first document id of each unit that holds a document (.npy, int64, ascending)."""
    return f"{folder_of(store_url)}/units.npy"


def unit_url(store_url: str, first_doc: int) -> str:
    return f"{folder_of(store_url)}/tokens/{first_doc:012d}.tok"


def document_bytes(sentences: Sequence[Sequence[int]]) -> bytes:
    """A tokenized document as a unit's file holds it (4 bytes a token: what a writer keeps until the file)."""
    ends = array.array("q", itertools.accumulate(map(len, sentences)))
    ids = array.array("i", itertools.chain.from_iterable(sentences))
    return struct.pack("<q", len(ends)) + ends.tobytes() + ids.tobytes()


def write_unit(store_url: str, first_doc: int, documents: Iterator[Sequence[Sequence[int]]]) -> int:
    """Writes the unit's file from its tokenized ``documents`` (in id order, from ``first_doc``); how many.

    Nothing is written for a unit without a document (``units.npy`` does not list it)."""
    return write_documents(unit_url(store_url, first_doc), [document_bytes(d) for d in documents])


def write_documents(url: str, parts: Sequence[bytes]) -> int:
    """A unit's file at ``url`` from its documents' ``document_bytes`` (the store's first step names
    it for its part, ``fs.rename`` gives it its unit's name once the ids are known: ``text.store``); how
    many documents, none: no file."""
    if not parts:
        return 0
    offsets = np.zeros(len(parts) + 1, dtype="<i8")
    np.cumsum(np.fromiter(map(len, parts), dtype="<i8", count=len(parts)), out=offsets[1:])
    with fs.write_atomic(url, durable=False) as out:
        out.write(struct.pack("<q", len(parts)) + offsets.tobytes())
        for lo in range(0, len(parts), 4096):
            out.write(b"".join(parts[lo:lo + 4096]))
    return len(parts)


def _packed(buf: bytes) -> PackedDocument:
    view = memoryview(buf)
    k = struct.unpack_from("<q", buf)[0]
    return PackedDocument.from_packed(view[8 + 8 * k:], view[8:8 + 8 * k])


def _header(f: IO[bytes]) -> np.ndarray:
    n = struct.unpack("<q", f.read(8))[0]
    return np.frombuffer(f.read(8 * (n + 1)), dtype="<i8")


def read_unit(store_url: str, first_doc: int) -> Iterator[PackedDocument] | None:
    """The unit's documents in order, packed; None if its file was not written."""
    try:
        f = fs.open_file(unit_url(store_url, first_doc), "rb")
    except FileNotFoundError:
        return None

    def documents() -> Iterator[PackedDocument]:
        with f:
            offsets = _header(f)
            for k in range(len(offsets) - 1):
                yield _packed(f.read(int(offsets[k + 1] - offsets[k])))
    return documents()


class TokenFiles:
    """Document ``id``, packed, from its unit's token file (None where that file is missing)."""

    def __init__(self, store_url: str) -> None:
        self._store_url = store_url
        try:
            starts = np.load(io.BytesIO(fs.read_bytes(units_url(store_url))))
        except FileNotFoundError:
            starts = np.zeros(0, dtype=np.int64)
        self._starts: list[int] = starts.tolist()  # Python ints: a lookup per document, no numpy scalars
        self._headers: dict[int, list[int] | None] = {}  # unit -> its offsets (8 bytes a document), None: no file
        self._open: collections.OrderedDict[int, IO[bytes]] = collections.OrderedDict()

    def close(self) -> None:
        while self._open:
            self._open.popitem()[1].close()

    def _file(self, unit: int) -> IO[bytes] | None:
        f = self._open.get(unit)
        if f is not None:
            self._open.move_to_end(unit)
            return f
        if self._headers.get(unit, 0) is None:
            return None
        try:
            f = fs.open_file(unit_url(self._store_url, self._starts[unit]), "rb")
        except FileNotFoundError:
            self._headers[unit] = None
            return None
        if unit not in self._headers:
            self._headers[unit] = _header(f).tolist()
        self._open[unit] = f
        if len(self._open) > MAX_OPEN:
            self._open.popitem(last=False)[1].close()
        return f

    def __call__(self, doc_id: int) -> PackedDocument | None:
        unit = bisect.bisect_right(self._starts, doc_id) - 1
        if unit < 0:
            return None
        f = self._file(unit)
        if f is None:
            return None
        offsets = self._headers[unit]
        k = doc_id - self._starts[unit]
        if offsets is None or k >= len(offsets) - 1:
            return None
        f.seek(8 * (len(offsets) + 1) + offsets[k])
        return _packed(f.read(offsets[k + 1] - offsets[k]))


def tokenize_entries(entries: Iterator[dict], tokenize: Callable[[list[str]], Sequence[Sequence[int]]]) -> Iterator:
    """The tokenized documents of store entries (bad lines left out)."""
    for entry in entries:
        if "s" in entry:
            yield tokenize(entry["s"])
