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
every member before it). A pair is similar where its signatures agree in at least ``high`` of
places, or within the window (``window``: ``MARGIN`` standard errors either side of the threshold)
where the exact Jaccard similarity of their shingles, read back from the store's parts, is at
least the threshold: for a document's first ``MAX_EXACT`` window pairs of the group; past them
the estimate decides. Edges: the similar pairs, and those whose exact check refuted an estimate
that would have said similar (``NOT_EXACT``: another group's estimate is then overruled);
``merge_edges`` keeps one verdict a pair, an exact one where there is one. The edges follow
the duplicates, not the documents.
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
from shardprep.text.minhash import NO_KEY, MinHasher

__all__ = ["BUCKETS", "ENTRY", "ESTIMATE", "EXACT", "GROUP_LEADERS", "MARGIN", "MAX_EXACT", "NOT_EXACT", "BandPiece",
           "Edges", "GroupBands", "Shingles", "band_edges", "jaccard", "merge_edges", "window", "write_part"]

BUCKETS = 32  # a run's buckets, at most (its GroupBands tasks)
GROUP_LEADERS = 32  # the members of a band group before it that a document is compared with, at most
MARGIN = 3.0  # the exact check's window: this many standard errors of the estimate either side of the threshold
MAX_EXACT = 8  # exact checks of one document, at most (its lowest candidates first); past them the estimate decides
ESTIMATE, NOT_EXACT, EXACT = -1, 0, 1  # an edge's verdict: the estimate's (similar), the exact one's
ENTRY = np.dtype([("band", "<u2"), ("key", "<u8"), ("row", "<u4"), ("doc", "<u8"), ("offset", "<i8")])
_PAIRS_AT_ONCE = 1 << 22  # pairs formed at a time (whole groups)
_COMPARED_AT_ONCE = 1 << 16  # pairs whose signatures are compared at a time


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
    the places their signatures agree in (of ``places``), and the verdict: ``ESTIMATE`` (similar by
    the signatures), ``EXACT`` (similar by the shingles), ``NOT_EXACT`` (not similar)."""

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
               threshold: float, jaccard: Callable[[int, int], float] | None = None) -> Edges:
    """The edges of the band groups of ``entries`` (``ENTRY`` rows, ``uids`` theirs), each pair
    once, ordered by (second, first): see the module. ``signatures_of(uids)``: their signatures,
    in order (None: none; every pair similar, its band alone decides); ``jaccard(a, b)``: the exact
    similarity (None: the estimate decides)."""
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
    if not len(starts):
        return _edges([], 0)
    inside = np.cumsum(np.bincount(starts, minlength=len(uid) + 1) - np.bincount(ends, minlength=len(uid) + 1))
    members = np.unique(uid[inside[:-1] > 0])
    sig = signatures_of(members)
    places = sig.shape[1] if sig is not None else 0
    once = _once(jaccard) if jaccard is not None else None  # a pair of several groups checked once
    later = ends - starts - 1
    pairs = np.cumsum(np.where(later <= GROUP_LEADERS, later * (later + 1) // 2,
                               GROUP_LEADERS * (GROUP_LEADERS + 1) // 2 + (later - GROUP_LEADERS) * GROUP_LEADERS))
    cuts = np.unique(np.searchsorted(pairs, np.arange(0, int(pairs[-1]), _PAIRS_AT_ONCE), side="right"))
    rows = [_verified(uid, *_pairs(starts[lo:hi], ends[lo:hi]), members, sig, threshold, once)
            for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, len(starts)]) if hi > lo]
    return merge_edges([_edges(r, places) for r in rows], places)


def _verified(uid: np.ndarray, member: np.ndarray, leader: np.ndarray, members: np.ndarray, sig: np.ndarray | None,
              threshold: float, jaccard: Callable[[int, int], float] | None) -> np.ndarray:
    """The edges of pairs (``member``, ``leader``: indexes of ``uid``, by (group, member, leader))
    as rows (first, second, agree, verdict); ``sig``: the signatures of ``members``."""
    places = sig.shape[1] if sig is not None else 0
    share = np.ones(len(member))  # no signatures: every pair similar
    agree = np.zeros(len(member), np.int64)
    if sig is not None:
        at_m, at_l = np.searchsorted(members, uid[member]), np.searchsorted(members, uid[leader])
        for lo in range(0, len(member), _COMPARED_AT_ONCE):
            hi = lo + _COMPARED_AT_ONCE
            agree[lo:hi] = (sig[at_m[lo:hi]] == sig[at_l[lo:hi]]).sum(axis=1)
        share = agree / places
    verdict = np.full(len(member), ESTIMATE, np.int8)
    if sig is not None and jaccard is not None:
        low, high = window(threshold, places)
        open_ = np.flatnonzero((share >= low) & (share < high))
        run = np.r_[True, member[open_][1:] != member[open_][:-1]]
        rank = np.arange(len(open_)) - np.maximum.accumulate(np.where(run, np.arange(len(open_)), 0))
        for i in open_[rank < MAX_EXACT].tolist():
            verdict[i] = EXACT if jaccard(int(uid[leader[i]]), int(uid[member[i]])) >= threshold else NOT_EXACT
    keep = (verdict == EXACT) | (share >= threshold)  # a NOT_EXACT one only where an estimate would say similar
    return np.stack([uid[leader[keep]], uid[member[keep]], agree[keep], verdict[keep]], axis=1)


def _pairs(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each group's (member, leader) pairs as indexes: every member after the first against the
    group's first ``GROUP_LEADERS`` members before it, ordered by (group, member, leader)."""
    later = ends - starts - 1
    group = np.repeat(np.arange(len(starts)), later)
    place = np.arange(len(group)) - np.repeat(np.cumsum(later) - later, later) + 1  # 1 .. size - 1
    leaders = np.minimum(place, GROUP_LEADERS)
    member = np.repeat(starts[group] + place, leaders)
    first = np.repeat(starts[group], leaders)
    return member, first + np.arange(len(member)) - np.repeat(np.cumsum(leaders) - leaders, leaders)


def _once(jaccard: Callable[[int, int], float]) -> Callable[[int, int], float]:
    """``jaccard``, each pair's value computed once."""
    known: dict[tuple[int, int], float] = {}

    def checked(a: int, b: int) -> float:
        if (a, b) not in known:
            known[a, b] = jaccard(a, b)
        return known[a, b]

    return checked


def _edges(rows: np.ndarray | list, places: int) -> Edges:
    a = np.asarray(rows, np.int64).reshape(-1, 4)
    return Edges(a[:, 0].copy(), a[:, 1].copy(), a[:, 2].astype(np.int32), a[:, 3].astype(np.int8), places)


def merge_edges(parts: Sequence[Edges], places: int) -> Edges:
    """``parts`` as one ``Edges``, each pair once (an exact verdict over ``ESTIMATE``), ordered by
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
            yield band_edges(entries, uid, lambda u: _signatures(located, u, d.bands * d.rows), threshold=d.threshold,
                             jaccard=texts.jaccard)


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
