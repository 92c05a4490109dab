"""``--dedup exact|near`` of a text run's documents: which to drop, and the store part without them.

``kept_of`` gives each document the id of the document kept for it (itself where it is kept).
Exact: a document whose text hash an earlier one has is a copy of the first (the lowest input
position: ids are in input order). Near: the first copies are taken in id order, each dropped for
the lowest *kept* document that shares an LSH band key with it (``text.minhash``) and whose
signature agrees with its own in at least ``threshold`` of places (their estimated Jaccard
similarity; where that is within three standard errors of ``threshold``, the exact Jaccard
similarity of their shingles, read back from the store, decides: ``Verifier``), else kept: a
leader rule, so a document is only ever dropped for one it is itself similar to (a chain A~B~C,
C not near A, keeps A and C). A later copy follows its first copy. Bounded where many documents
share bands without being near each other (templated pages): a document is compared with the
first ``GROUP_LEADERS`` kept documents of each band it shares, and checked exactly ``MAX_EXACT``
times at most (past that the estimate decides). It is a rule of the texts and their order alone,
whatever engine or worker count read them.
``rewrite`` copies one store part with each dropped document's entry replaced by a dead letter
(``duplicate``: an exact copy of the one kept; ``near_duplicate``: a near copy) that names the
document kept, and gives the part's new document offsets and unit cuts.
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from shardprep import fs
from shardprep.text.corpus import CorpusArrays
from shardprep.text.minhash import NO_KEY, MinHasher

__all__ = ["DUPLICATE", "NEAR_DUPLICATE", "StoreShingles", "Verifier", "entry_text", "first_copies", "kept_of", "rewrite",
           "shared_bands"]

DUPLICATE, NEAR_DUPLICATE = "duplicate", "near_duplicate"
GROUP_LEADERS = 32  # the kept documents of one band key a later document is compared with, at most
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
    document ``i``). Without signatures every candidate is one."""

    MARGIN = 3.0
    MAX_EXACT = 8  # exact checks of one document, at most (the lowest ids first); past them the estimate decides

    def __init__(self, signatures: np.ndarray | None, threshold: float,
                 shingles_of: Callable[[int], np.ndarray] | None = None, ids: np.ndarray | None = None) -> None:
        self._sig, self._threshold, self._shingles_of, self._ids = signatures, threshold, shingles_of, ids
        places = signatures.shape[1] if signatures is not None else 1
        margin = self.MARGIN * (threshold * (1 - threshold) / places) ** 0.5
        self._low, self._high = threshold - margin, threshold + margin
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
        a, b = self._shingles(i), self._shingles(j)
        both = len(np.intersect1d(a, b, assume_unique=True))
        union = len(a) + len(b) - both
        return both / union if union else 1.0

    def _shingles(self, i: int) -> np.ndarray:
        if i not in self._memo:
            if len(self._memo) >= 4096:
                self._memo.pop(next(iter(self._memo)))
            self._memo[i] = self._shingles_of(i)  # type: ignore[misc]
        return self._memo[i]


class StoreShingles:
    """A document's shingle hashes by id (``Verifier``'s ``shingles_of``), read from the store's
    parts (``text.store.StorePart``s in store order: their urls and document offsets), the text
    the part's sketch hashed (``entry_text``); a context manager that closes the parts it opened."""

    def __init__(self, parts: Sequence, shingle: int) -> None:
        self._parts = list(parts)
        self._firsts = np.cumsum([0] + [len(p.offsets) for p in self._parts])
        self._hasher = MinHasher(1, 1, shingle)
        self._files: dict[int, Any] = {}

    def __call__(self, i: int) -> np.ndarray:
        k = int(np.searchsorted(self._firsts, i, side="right")) - 1
        if k not in self._files:
            self._files[k] = fs.open_file(self._parts[k].url, "rb")
        f = self._files[k]
        f.seek(int(self._parts[k].offsets[i - self._firsts[k]]))
        hashes, _ = self._hasher.shingles([entry_text(json.loads(f.readline()))])
        return np.unique(hashes)

    def __enter__(self) -> StoreShingles:
        return self

    def __exit__(self, *exc: object) -> None:
        for f in self._files.values():
            f.close()
        self._files.clear()


def entry_text(entry: dict) -> str:
    """A store entry's text as its part's sketch hashes it: the sentences, or text and pair, one a line."""
    if "s" in entry:
        return "\n".join(entry["s"])
    b = entry.get("b")
    return entry["a"] + ("\n" + b if b else "")


def _leaders(keys: np.ndarray, ids: np.ndarray, verifier: Verifier) -> np.ndarray:
    """The leader rule over rows in order: each row's kept row (itself, or the lowest kept row of a
    shared band that ``verifier`` finds it similar to, among the first ``GROUP_LEADERS`` kept rows
    of each band it shares; ``ids``: each row's document id)."""
    kept = np.arange(len(keys), dtype=np.int64)
    rows, groups = shared_bands(keys)
    if len(rows) == 0:
        return kept
    leaders: dict[int, list[int]] = {}
    starts = np.flatnonzero(np.r_[True, rows[1:] != rows[:-1]])
    ends = np.r_[starts[1:], len(rows)]
    for r, lo, hi in zip(rows[starts].tolist(), starts.tolist(), ends.tolist()):
        mine = groups[lo:hi].tolist()
        found = sorted({c for g in mine for c in leaders.get(g, ())})
        j = verifier.first_similar(int(ids[r]), ids[found].tolist()) if found else -1
        if j >= 0:
            kept[r] = found[j]
        else:
            for g in mine:
                held = leaders.setdefault(g, [])
                if len(held) < GROUP_LEADERS:
                    held.append(r)
    return kept


def kept_of(arrays: CorpusArrays, mode: str, threshold: float = 0.0,
            shingles_of: Callable[[int], np.ndarray] | None = None) -> np.ndarray:
    """Each document's kept document id (itself where it is kept): the module's rule, candidates
    checked by a ``Verifier`` (``shingles_of``: a document's shingle hashes by id). Near without
    ``arrays.signatures``: a shared band alone makes a pair."""
    first = first_copies(arrays.doc)
    if mode != "near" or arrays.keys is None:
        return first
    reps = np.flatnonzero(first == np.arange(len(first)))
    verifier = Verifier(arrays.signatures, threshold, shingles_of, arrays.signature_ids)
    lead = reps[_leaders(arrays.keys[reps], reps, verifier)]
    kept = np.arange(len(first), dtype=np.int64)
    kept[reps] = lead
    return kept[first]


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
