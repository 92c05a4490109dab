"""``--dedup exact|near`` of a text run's documents: which to drop, and the store part without them.

``kept_of`` gives each document the id of the document kept for it (itself where it is kept).
Exact: a document whose text hash an earlier one has is a copy of the first (the lowest input
position: ids are in input order). Near: the first copies are taken in id order, each dropped for
the lowest *kept* document it has a similar edge with (``text.bands``: a candidate of a band group
it shares, one of the group's first ``bands.GROUP_LEADERS`` members before it, kept or not; similar
by their signatures' agreement, their estimated Jaccard similarity, or within three standard
errors of ``threshold`` by the exact Jaccard similarity of their shingles, read back from the
store, for its first ``bands.MAX_EXACT`` such candidates of a group; past them the estimate
decides), else kept: a leader rule, so a document is only ever dropped for one it is itself
similar to (a chain A~B~C, C not near A, keeps A and C). A later copy follows its first copy.
The edges come from the job's GroupBands stage (or, in memory, ``edges_of`` over
``CorpusArrays``' keys and signatures); the rule walks only them, in id order: a rule of the
texts and their order alone, whatever engine or worker count read them.
``rewrite`` copies one store part with each dropped document's entry replaced by a dead letter
(``duplicate``: an exact copy of the one kept; ``near_duplicate``: a near copy) that names the
document kept, and gives the part's new document offsets and unit cuts.
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence

import numpy as np

from shardprep import fs
from shardprep.text import bands
from shardprep.text.bands import MAX_EXACT, NOT_EXACT, Edges, band_edges, jaccard, window
from shardprep.text.corpus import CorpusArrays, DedupSettings, entry_text
from shardprep.text.minhash import NO_KEY

__all__ = ["DUPLICATE", "NEAR_DUPLICATE", "Verifier", "edges_of", "first_copies", "follow_edges",
           "kept_in_store", "kept_of", "rewrite", "shared_bands"]

DUPLICATE, NEAR_DUPLICATE = "duplicate", "near_duplicate"
_BAD = re.compile(rb'\{"p": -?\d+, "r": ')  # a store entry that is a dead letter (``text.store._bad``)


def first_copies(doc: np.ndarray) -> np.ndarray:
    """Each id's lowest id of the same text hash."""
    if len(doc) == 0:
        return np.zeros(0, np.int64)
    _, first, inverse = np.unique(doc, return_index=True, return_inverse=True)
    return first[inverse.reshape(-1)].astype(np.int64)


def shared_bands(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The band groups of ``keys`` (rows x bands) with two rows or more, as ``(rows, groups)``: each
    row's groups, rows ascending (a group's id: its place among the groups of its band and key)."""
    m, bands = keys.shape
    row = np.repeat(np.arange(m, dtype=np.int64), bands)
    band = np.tile(np.arange(bands, dtype=np.int64), m)
    key = keys.reshape(-1)
    valid = key != NO_KEY
    row, band, key = row[valid], band[valid], key[valid]
    order = np.lexsort((row, key, band))
    row, band, key = row[order], band[order], key[order]
    new = np.ones(len(row), bool)
    new[1:] = (band[1:] != band[:-1]) | (key[1:] != key[:-1])
    group = np.cumsum(new) - 1
    size = np.bincount(group)
    many = size[group] >= 2
    row, group = row[many], group[many]
    by_row = np.argsort(row, kind="stable")
    return row[by_row], group[by_row]


class Verifier:
    """Whether a document is a near-duplicate of candidates that share a band with it: their
    signatures' agreement (the estimated Jaccard similarity, ``places`` permutations) decides where
    it is farther than ``MARGIN`` standard errors from ``threshold``; nearer, the exact Jaccard
    similarity of their shingles' hashes (``shingles_of(id)``: sorted distinct uint32) does, where
    given. ``ids``: the document id of each row of ``signatures``, ascending (None: row ``i`` is
    document ``i``). Without signatures every candidate is one. (The rule ``follow_edges`` walks,
    for one document and its candidates.)"""

    MARGIN = bands.MARGIN
    MAX_EXACT = MAX_EXACT

    def __init__(self, signatures: np.ndarray | None, threshold: float,
                 shingles_of: Callable[[int], np.ndarray] | None = None, ids: np.ndarray | None = None) -> None:
        self._sig, self._threshold, self._shingles_of, self._ids = signatures, threshold, shingles_of, ids
        self._low, self._high = window(threshold, signatures.shape[1] if signatures is not None else 1)
        self._memo: dict[int, np.ndarray] = {}
        self.exact_checks = 0

    def first_similar(self, i: int, found: Sequence[int]) -> int:
        """The place in ``found`` of the first document that document ``i`` is a near-duplicate of, or
        -1: each in turn, the exact similarity asked only where the estimate leaves it open (at most
        ``MAX_EXACT`` times; past them the estimate decides)."""
        if self._sig is None:
            return 0 if len(found) else -1
        rows = np.asarray([i, *found], np.int64)
        if self._ids is not None:
            rows = np.searchsorted(self._ids, rows)
        sig = self._sig[rows]
        agree = (sig[1:] == sig[0]).sum(axis=1) / self._sig.shape[1]
        exact = self.MAX_EXACT if self._shingles_of is not None else 0
        for j in np.flatnonzero(agree >= (self._low if exact else self._threshold)).tolist():
            if agree[j] >= self._high or (exact <= 0 and agree[j] >= self._threshold):
                return j
            if exact > 0:
                exact -= 1
                if self.jaccard(i, found[j]) >= self._threshold:
                    return j
        return -1

    def jaccard(self, i: int, j: int) -> float:
        """The exact Jaccard similarity of two documents' shingle hashes."""
        self.exact_checks += 1
        return jaccard(self._shingles(i), self._shingles(j))

    def _shingles(self, i: int) -> np.ndarray:
        if i not in self._memo:
            if len(self._memo) >= 4096:
                self._memo.pop(next(iter(self._memo)))
            self._memo[i] = self._shingles_of(i)  # type: ignore[misc]
        return self._memo[i]


def follow_edges(edges: Edges, n: int) -> np.ndarray:
    """The leader rule over ``edges`` (ids, ordered by (second, first)) of ``n`` documents: each
    one's kept document (itself, or the lowest kept one it has a similar edge with)."""
    kept = np.arange(n, dtype=np.int64)
    similar = edges.exact != NOT_EXACT
    for c, r in zip(edges.first[similar].tolist(), edges.second[similar].tolist()):
        if kept[r] == r and kept[c] == c:
            kept[r] = c
    return kept


def kept_of(arrays: CorpusArrays, mode: str, threshold: float = 0.0,
            shingles_of: Callable[[int], np.ndarray] | None = None, edges: Edges | None = None) -> np.ndarray:
    """Each document's kept document id (itself where it is kept): the module's rule over ``edges``
    (ids), else over those of ``arrays.keys`` and ``arrays.signatures`` found here
    (``shingles_of``: a document's shingle hashes by id). Near without signatures: a shared band
    alone makes a pair."""
    first = first_copies(arrays.doc)
    if mode != "near" or (edges is None and arrays.keys is None):
        return first
    if edges is None:
        edges = edges_of(arrays, threshold, shingles_of)
    return follow_edges(edges, len(first))[first]


def edges_of(arrays: CorpusArrays, threshold: float, shingles_of: Callable[[int], np.ndarray] | None = None) -> Edges:
    """The edges (ids) of ``arrays``' band keys and signatures, in memory: what GroupBands gives a run."""
    keys = arrays.keys
    n, nb = keys.shape  # type: ignore[union-attr]
    entries = np.zeros(n * nb, bands.ENTRY)
    entries["band"], entries["key"] = np.tile(np.arange(nb, dtype=np.uint16), n), keys.reshape(-1)  # type: ignore
    entries["doc"] = np.repeat(arrays.doc, nb)
    uid = np.repeat(np.arange(n, dtype=np.int64), nb)
    valid = entries["key"] != NO_KEY
    sig, ids = arrays.signatures, arrays.signature_ids

    def signatures_of(u: np.ndarray) -> np.ndarray | None:
        return None if sig is None else sig[u if ids is None else np.searchsorted(ids, u)]

    memo: dict[int, np.ndarray] = {}

    def shingles(i: int) -> np.ndarray:
        if i not in memo:
            if len(memo) >= 4096:
                memo.pop(next(iter(memo)))
            memo[i] = shingles_of(i)  # type: ignore[misc]
        return memo[i]

    check = (lambda a, b: jaccard(shingles(a), shingles(b))) if shingles_of is not None else None
    return band_edges(entries[valid], uid[valid], signatures_of, threshold=threshold, jaccard=check)


def kept_in_store(parts: Sequence, arrays: CorpusArrays, dedup: DedupSettings, edges: Edges | None) -> np.ndarray:
    """Each document's kept id in the store of ``parts`` (``text.store.StorePart``s in store order):
    ``kept_of`` with the job's ``edges`` (uids of ``text.bands``; None: grouped here, in this
    process)."""
    n = len(arrays.doc)
    if dedup.mode == "none" or n == 0:
        return np.arange(n, dtype=np.int64)
    if dedup.mode != "near":
        return kept_of(arrays, dedup.mode)
    if edges is None:
        pieces = [piece for k, part in enumerate(parts) for _, piece in bands.write_part(k, part, 1)]
        edges = bands.merge_edges(list(bands.GroupBands(dedup).process((0, pieces))) if pieces else [],
                                  dedup.bands * dedup.rows)
    firsts = np.cumsum([0] + [len(p.offsets) for p in parts])
    ids = [firsts[u >> 32] + (u & 0xFFFFFFFF) for u in (edges.first, edges.second)]
    order = np.lexsort((ids[0], ids[1]))
    mapped = Edges(ids[0][order], ids[1][order], edges.agree[order], edges.exact[order], edges.places)
    return kept_of(arrays, "near", dedup.threshold, edges=mapped)


def rewrite(url: str, out_url: str, first_id: int, kept: np.ndarray, arrays: CorpusArrays,
            cuts: Sequence[tuple[int, int, int]], name: Callable[[int], str]) -> tuple[int, np.ndarray, list]:
    """Copies part ``url`` (its documents ``first_id ..``) to ``out_url``, each dropped document as a
    dead letter naming the one kept (``name(file index)``: its input file); its size, its kept
    documents' offsets and its cuts ``(start, end, first document)``, all from the part's start."""
    ends = {end for _, end, _ in cuts} | {start for start, _, _ in cuts}
    new_at: dict[int, int] = {0: 0}
    kept_before: dict[int, int] = {0: 0}
    offsets: list[int] = []
    at = new = doc = docs_kept = 0
    with fs.open_file(url, "rb") as src, fs.write_atomic(out_url, durable=False) as out:
        for line in src:
            at += len(line)
            if not _BAD.match(line):
                i = first_id + doc
                doc += 1
                k = int(kept[i])
                if k != i:
                    line = _dead_letter(json.loads(line), k, i, arrays, name)
                else:
                    offsets.append(new)
                    docs_kept += 1
            out.write(line)
            new += len(line)
            if at in ends:
                new_at[at], kept_before[at] = new, docs_kept
    new_cuts = [(new_at[s], new_at[e], kept_before[s]) for s, e, _ in cuts]
    return new, np.asarray(offsets, np.int64), new_cuts


def _dead_letter(entry: dict, k: int, i: int, arrays: CorpusArrays, name: Callable[[int], str]) -> bytes:
    exact = arrays.doc[k] == arrays.doc[i]
    where = f"{name(int(arrays.files[k]))} position {int(arrays.positions[k])}"
    text = entry_text(entry)
    bad = {"p": entry["p"], "r": DUPLICATE if exact else NEAR_DUPLICATE,
           "d": f"{'a copy' if exact else 'a near-duplicate'} of the document kept at {where}", "x": text[:1024]}
    return json.dumps(bad, ensure_ascii=False).encode("utf-8") + b"\n"
