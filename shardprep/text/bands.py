"""``--dedup near``'s band grouping, a stage of the text job: documents grouped by LSH band key in
the engine's shuffle, each group's candidate pairs verified there.

BuildStore writes beside each store part its documents' band entries (``write_part``: band, key,
row in the part, text hash, offset in the part; sorted by bucket, a key's bucket its value modulo
the run's buckets) and their signatures (raw rows), and gives one ``BandPiece`` a bucket.
``GroupBands`` gets every part's piece of one bucket (the engine's group-by-key), groups the
entries by (band, key) and gives the verified edges of its groups (``Edges``), a few a duplicate.

A group's members are its documents less the later exact copies (a copy has its first copy's
keys: it is in every group of it); a document is compared with the group's first
``GROUP_LEADERS`` members before it (in a group of at most ``GROUP_LEADERS + 1`` members: with
every member before it). A pair is an edge where its signatures agree in at least the window's low
end (``window``: ``MARGIN`` standard errors under the threshold): its agreement, and where it lies
within the window its exact Jaccard verdict (``EXACT``, ``NOT_EXACT``), read from the store's parts,
computed for a document's first ``MAX_EXACT`` window pairs of the group and only in the pair's
lowest shared band's group (else ``UNDECIDED``: the leader rule asks, if it gets that far).
Documents are named ``uid``: part << 32 | row, in store order. Everything is a function of the
texts and their order, never of the buckets, the engine or the worker count.
"""
from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np

from shardprep import fs
from shardprep.text.corpus import DedupSettings, entry_text
from shardprep.text.minhash import NO_KEY, MinHasher, keys_of

__all__ = ["BUCKETS", "ENTRY", "EXACT", "GROUP_LEADERS", "MARGIN", "MAX_EXACT", "NOT_EXACT", "UNDECIDED", "BandPiece",
           "Edges", "GroupBands", "Shingles", "band_edges", "jaccard", "merge_edges", "window", "write_part"]

BUCKETS = 32  # a run's buckets, at most (its GroupBands tasks)
GROUP_LEADERS = 32  # the members of a band group before it that a document is compared with, at most
MARGIN = 3.0  # the exact check's window: this many standard errors of the estimate either side of the threshold
MAX_EXACT = 8  # exact checks of one document, at most (its lowest candidates first); past them the estimate decides
UNDECIDED, NOT_EXACT, EXACT = -1, 0, 1
ENTRY = np.dtype([("band", "<u2"), ("key", "<u8"), ("row", "<u4"), ("doc", "<u8"), ("offset", "<i8")])
_ROWS_AT_ONCE = 2048  # a group's members compared at a time with its leaders


def window(threshold: float, places: int) -> tuple[float, float]:
    """The estimate's agreement range ``[low, high)`` where the exact Jaccard similarity decides."""
    margin = MARGIN * (threshold * (1 - threshold) / places) ** 0.5
    return threshold - margin, threshold + margin


class BandPiece(NamedTuple):
    """Store part ``part``'s entries of one bucket: bytes ``[start, end)`` of ``url``; its
    ``count`` documents' signatures in ``signatures`` (raw uint32 rows), their texts in ``store``."""

    part: int
    url: str
    start: int
    end: int
    signatures: str
    store: str
    count: int


class Edges(NamedTuple):
    """Verified candidate pairs, ``first`` < ``second`` (uids, or ids once the launcher maps them):
    the places their signatures agree in (of ``places``), and the exact verdict (``EXACT`` ...)."""

    first: np.ndarray  # int64
    second: np.ndarray  # int64
    agree: np.ndarray  # int32
    exact: np.ndarray  # int8
    places: int


def write_part(k: int, part: Any, buckets: int) -> list[tuple[int, BandPiece]]:
    """Writes ``part``'s (``text.store.StorePart``, the k-th) band entries and signatures beside it,
    from its sketch; a ``(bucket, BandPiece)`` for each bucket it has entries of."""
    with np.load(io.BytesIO(fs.read_bytes(part.corpus))) as z:
        keys, doc, sig = z["keys"], z["doc"], z["signatures"]
    n, bands = keys.shape
    entries = np.zeros(n * bands, ENTRY)
    entries["band"] = np.tile(np.arange(bands, dtype=np.uint16), n)
    entries["key"], entries["row"] = keys.reshape(-1), np.repeat(np.arange(n, dtype=np.uint32), bands)
    entries["doc"], entries["offset"] = np.repeat(doc, bands), np.repeat(part.offsets, bands)
    entries = entries[entries["key"] != NO_KEY]
    bucket = (entries["key"] % np.uint64(buckets)).astype(np.int64)
    order = np.argsort(bucket, kind="stable")
    entries, bucket = entries[order], bucket[order]
    url, sig_url = part.url + ".bands", part.url + ".sig"
    with fs.write_atomic(url, durable=False) as out:
        out.write(entries.tobytes())
    with fs.write_atomic(sig_url, durable=False) as out:
        out.write(np.ascontiguousarray(sig, "<u4").tobytes())
    bounds = np.searchsorted(bucket, np.arange(buckets + 1)) * ENTRY.itemsize
    return [(b, BandPiece(k, url, int(bounds[b]), int(bounds[b + 1]), sig_url, part.url, n))
            for b in range(buckets) if bounds[b + 1] > bounds[b]]


def band_edges(entries: np.ndarray, uids: np.ndarray, signatures_of: Callable[[np.ndarray], np.ndarray | None], *,
               threshold: float, bands: int, rows: int, jaccard: Callable[[int, int], float] | None = None) -> Edges:
    """The edges of the band groups of ``entries`` (``ENTRY`` rows, ``uids`` theirs), each pair
    once, ordered by (second, first): see the module. ``signatures_of(uids)``: their signatures, in order (None: none; every pair an edge,
    ``places`` 0: its band alone decides); ``jaccard(a, b)``: the exact similarity (None: the estimate decides)."""
    order = np.lexsort((uids, entries["doc"], entries["key"], entries["band"]))
    band, key, doc, uid = entries["band"][order], entries["key"][order], entries["doc"][order], uids[order]
    copy = np.zeros(len(uid), bool)  # a later exact copy of a member of the same group
    copy[1:] = (band[1:] == band[:-1]) & (key[1:] == key[:-1]) & (doc[1:] == doc[:-1])
    band, key, uid = band[~copy], key[~copy], uid[~copy]
    order = np.lexsort((uid, key, band))
    band, key, uid = band[order], key[order], uid[order]
    starts = np.flatnonzero(np.r_[True, (band[1:] != band[:-1]) | (key[1:] != key[:-1])])
    ends = np.r_[starts[1:], len(uid)]
    many = ends - starts >= 2
    starts, ends = starts[many], ends[many]
    out: list[tuple] = []
    if not len(starts):
        return _edges([], bands * rows)
    members = np.unique(np.concatenate([uid[s:e] for s, e in zip(starts, ends)]))
    sig = signatures_of(members)
    places = sig.shape[1] if sig is not None else 0
    limits = (threshold, *window(threshold, places)) if places else (threshold, 0.0, 0.0)
    sig_keys = keys_of(sig, bands, rows) if sig is not None else None
    for s, e in zip(starts.tolist(), ends.tolist()):
        at = np.searchsorted(members, uid[s:e])
        out += _group_edges(uid[s:e], at, int(band[s]), sig, sig_keys, limits, jaccard)
    return merge_edges([_edges(out, places)], places)


def _group_edges(group: np.ndarray, at: np.ndarray, band: int, sig: np.ndarray | None, sig_keys: np.ndarray | None,
                 limits: tuple[float, float, float], jaccard: Callable[[int, int], float] | None) -> list[tuple]:
    """One group's edges ``(first, second, agree, exact)``: each member (``at``: its signature's
    row) against the leaders before it; ``limits``: the threshold and the window."""
    threshold, low, high = limits
    n, lead = len(group), min(len(group) - 1, GROUP_LEADERS)
    out: list[tuple] = []
    for lo in range(1, n, _ROWS_AT_ONCE):
        hi = min(n, lo + _ROWS_AT_ONCE)
        before = np.arange(lead)[None, :] < np.arange(lo, hi)[:, None]
        if sig is None:  # no signatures: every pair, each decided by its band alone
            agree = np.zeros((hi - lo, lead), np.int64)
            i_s, j_s = np.nonzero(before)
        else:
            agree = (sig[at[lo:hi], None, :] == sig[at[None, :lead], :]).sum(axis=2)
            i_s, j_s = np.nonzero(before & (agree / sig.shape[1] >= low))
        last, checks = -1, 0
        for i, j in zip(i_s.tolist(), j_s.tolist()):  # each member's leaders in ascending order
            r, a = lo + i, int(agree[i, j])
            if r != last:
                last, checks = r, 0
            verdict = UNDECIDED
            if sig is not None and jaccard is not None and a / sig.shape[1] < high:
                checks += 1
                if checks <= MAX_EXACT and _lowest_shared(sig_keys, at[j], at[r]) == band:
                    verdict = EXACT if jaccard(int(group[j]), int(group[r])) >= threshold else NOT_EXACT
            out.append((int(group[j]), int(group[r]), a, verdict))
    return out


def _lowest_shared(keys: np.ndarray, a: int, b: int) -> int:
    """The lowest band whose key rows ``a`` and ``b`` share (-1: none)."""
    same = np.flatnonzero(keys[a] == keys[b])
    return int(same[0]) if len(same) else -1


def _edges(rows: list[tuple], places: int) -> Edges:
    a = np.asarray(rows, np.int64).reshape(-1, 4)
    return Edges(a[:, 0].copy(), a[:, 1].copy(), a[:, 2].astype(np.int32), a[:, 3].astype(np.int8), places)


def merge_edges(parts: Sequence[Edges], places: int) -> Edges:
    """``parts`` as one ``Edges``, each pair once (a decided verdict over ``UNDECIDED``), ordered by
    (second, first)."""
    parts = [p for p in parts if len(p.first)]
    if not parts:
        return Edges(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int32), np.zeros(0, np.int8), places)
    first, second = np.concatenate([p.first for p in parts]), np.concatenate([p.second for p in parts])
    agree, exact = np.concatenate([p.agree for p in parts]), np.concatenate([p.exact for p in parts])
    order = np.lexsort((-exact.astype(np.int16), first, second))
    first, second, agree, exact = first[order], second[order], agree[order], exact[order]
    new = np.r_[True, (first[1:] != first[:-1]) | (second[1:] != second[:-1])]
    return Edges(first[new], second[new], agree[new], exact[new], parts[0].places)


class GroupBands:
    """``(bucket, [BandPiece, ...])`` in (every part's piece of the bucket), its groups' ``Edges`` out."""

    def __init__(self, dedup: DedupSettings) -> None:
        self._dedup = dedup

    def process(self, group: tuple[int, list]) -> Iterator[Edges]:
        pieces = sorted(group[1])
        chunks, uids, located = [], [], {}
        for p in pieces:
            with fs.open_file(p.url, "rb") as f:
                f.seek(p.start)
                entries = np.frombuffer(f.read(p.end - p.start), ENTRY)
            chunks.append(entries)
            uids.append((np.int64(p.part) << np.int64(32)) | entries["row"].astype(np.int64))
            located[p.part] = p
        entries, uid = np.concatenate(chunks), np.concatenate(uids)
        by_uid = np.argsort(uid, kind="stable")
        sorted_uid, offsets = uid[by_uid], entries["offset"][by_uid]

        def at(u: int) -> tuple[str, int]:
            return located[u >> 32].store, int(offsets[np.searchsorted(sorted_uid, u)])

        d = self._dedup
        with Shingles(at, d.shingle) as texts:
            yield band_edges(entries, uid, lambda u: _signatures(located, u, d.bands * d.rows),
                             threshold=d.threshold, bands=d.bands, rows=d.rows, jaccard=texts.jaccard)


def _signatures(located: dict[int, BandPiece], uids: np.ndarray, places: int) -> np.ndarray:
    """The signatures of ``uids`` (ascending), read from their parts' signature files."""
    out = np.zeros((len(uids), places), np.uint32)
    parts, rows = uids >> 32, uids & 0xFFFFFFFF
    size = places * 4
    for k in np.unique(parts).tolist():
        mine = np.flatnonzero(parts == k)
        piece = located[k]
        with fs.open_file(piece.signatures, "rb") as f:
            if len(mine) * 8 >= piece.count:
                whole = np.frombuffer(f.read(), "<u4").reshape(piece.count, places)
                out[mine] = whole[rows[mine]]
                continue
            for i in mine.tolist():
                f.seek(int(rows[i]) * size)
                out[i] = np.frombuffer(f.read(size), "<u4")
    return out


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """The exact Jaccard similarity of two sorted distinct shingle hash arrays."""
    both = len(np.intersect1d(a, b, assume_unique=True))
    union = len(a) + len(b) - both
    return both / union if union else 1.0


class Shingles:
    """A document's shingle hashes (sorted, distinct) by name, its store entry found by ``at(name)``
    (a part's url, an offset) and hashed as the part's sketch hashed its text (``corpus.entry_text``);
    the last 4096 kept; a context manager that closes the files it opened."""

    def __init__(self, at: Callable[[int], tuple[str, int]], shingle: int) -> None:
        self._at, self._hasher = at, MinHasher(1, 1, shingle)
        self._files: dict[str, Any] = {}
        self._memo: dict[int, np.ndarray] = {}

    def __call__(self, name: int) -> np.ndarray:
        if name not in self._memo:
            if len(self._memo) >= 4096:
                self._memo.pop(next(iter(self._memo)))
            url, offset = self._at(name)
            if url not in self._files:
                self._files[url] = fs.open_file(url, "rb")
            f = self._files[url]
            f.seek(offset)
            self._memo[name] = np.unique(self._hasher.shingles([entry_text(json.loads(f.readline()))])[0])
        return self._memo[name]

    def jaccard(self, a: int, b: int) -> float:
        """The exact Jaccard similarity of documents ``a`` and ``b``."""
        return jaccard(self(a), self(b))

    def __enter__(self) -> Shingles:
        return self

    def __exit__(self, *exc: object) -> None:
        for f in self._files.values():
            f.close()
        self._files.clear()
