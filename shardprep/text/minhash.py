"""MinHash signatures of documents and their LSH band keys, a batch of documents at a time, in numpy.

A document's shingles are its word ``shingle``-grams: the text lower-cased, its words the runs of
ASCII letters and digits and of non-ASCII characters (UTF-8 bytes >= 0x80); a document of fewer
words has one shingle, all of them; one without a word has none (``band_keys`` gives it no key:
it is nobody's near-duplicate). A word's hash is ``native.hash_values``'s (compiled, or its exact
Python twin), a shingle's the words' hashes chained and mixed (``fmix64``). A shingle's hash is
then the top 32 bits of that; the ``bands * rows`` permutations are ``a * x + b`` modulo 2**32
(``a`` odd: a bijection of the well-mixed 32-bit hashes), ``a`` and ``b`` drawn from numpy's PCG64
at ``seed``: the same on every machine. A signature is the minimum of each over
the document's shingles; a band key the ``rows`` minima of a band mixed into 64 bits.

Two documents of Jaccard similarity ``s`` share a band key with probability ``1 - (1 - s**rows)**bands``
(FineWeb's 14 bands x 8 rows: 0.5 at s ~ 0.72, 0.93 at s = 0.8, 0.02 at s = 0.5).

Every step is vectorised over the whole batch: the words found by one pass over the batch's bytes,
the shingles by ``shingle - 1`` shifted array operations, the minima by ``np.minimum.reduceat``.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from shardprep import native

__all__ = ["BANDS", "ROWS", "SHINGLE", "MinHasher", "NO_KEY", "keys_of", "shared_rows"]

BANDS, ROWS, SHINGLE = 14, 8, 5
NO_KEY = np.uint64(0)  # a document without a shingle: no band key (a real key that is 0 is made 1)
_WORD_SEED = 0x5EED_D0C5
_MIX = np.uint64(0x9E3779B97F4A7C15)
_WORD = bytes(1 if (48 <= c <= 57 or 97 <= c <= 122 or 65 <= c <= 90 or c >= 0x80) else 0 for c in range(256))


def _fmix64(x: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finalizer, element-wise (uint64, wrapping)."""
    x = x ^ (x >> np.uint64(33))
    x = x * np.uint64(0xFF51AFD7ED558CCD)
    x = x ^ (x >> np.uint64(33))
    x = x * np.uint64(0xC4CEB9FE1A85EC53)
    return x ^ (x >> np.uint64(33))


class MinHasher:
    """Signatures (``bands * rows`` uint32 minima a document) and band keys of batches of texts."""

    def __init__(self, bands: int = BANDS, rows: int = ROWS, shingle: int = SHINGLE, seed: int = 1) -> None:
        if bands < 1 or rows < 1 or shingle < 1:
            raise ValueError("bands, rows and shingle must be at least 1")
        self.bands, self.rows, self.shingle = bands, rows, shingle
        rng = np.random.Generator(np.random.PCG64(seed))
        n = bands * rows
        self._a = ((rng.integers(0, 1 << 31, n, dtype=np.uint32) << np.uint32(1)) | np.uint32(1))[:, None]
        self._b = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)[:, None]

    def shingles(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """The shingles' 32-bit hashes of all ``texts`` in order, and each text's first shingle's index
        (``len(texts) + 1`` entries: text ``i``'s shingles are ``[firsts[i], firsts[i + 1])``)."""
        encoded = [t.lower().encode("utf-8") for t in texts]
        data = b" ".join(encoded)
        starts_bytes = np.zeros(len(encoded) + 1, np.int64)
        np.cumsum([len(e) + 1 for e in encoded], out=starts_bytes[1:])
        word = np.frombuffer(b"\0" + data.translate(_WORD) + b"\0", np.int8)
        edges = np.flatnonzero(word[1:] != word[:-1])
        if len(edges) == 0:
            return np.zeros(0, np.uint64), np.zeros(len(texts) + 1, np.int64)
        hashes = np.frombuffer(native.hash_values(data, edges.astype(np.int64), _WORD_SEED), np.uint64)[::2]
        doc = np.searchsorted(starts_bytes, edges[::2], side="right") - 1  # each word's text
        n, k = len(hashes), self.shingle
        first_word = np.searchsorted(doc, np.arange(len(texts) + 1))  # each text's first word
        words = np.diff(first_word)
        sh = hashes.copy()
        for t in range(1, min(k, n)):  # chain the next k - 1 words of the same text
            nxt = np.zeros(n, np.uint64)
            nxt[:n - t] = hashes[t:]
            same = np.zeros(n, bool)
            same[:n - t] = doc[t:] == doc[:n - t]
            sh = np.where(same, sh * _MIX + nxt, sh)
        full = np.zeros(n, bool)  # a full k-gram starts here
        if n >= k:
            full[:n - k + 1] = doc[k - 1:] == doc[:n - k + 1]
        short = np.zeros(n, bool)  # the one shingle of a text of fewer than k words
        few = np.flatnonzero((words > 0) & (words < k))
        short[first_word[few]] = True
        keep = full | short
        counts = np.bincount(doc[keep], minlength=len(texts))
        firsts = np.zeros(len(texts) + 1, np.int64)
        np.cumsum(counts, out=firsts[1:])
        return (_fmix64(sh[keep]) >> np.uint64(32)).astype(np.uint32), firsts

    def signatures(self, texts: Sequence[str]) -> np.ndarray:
        """``(len(texts), bands * rows)`` uint32 minima; a text without a shingle: all 0xFFFFFFFF.
        Compiled (``native.minhash``: one pass over each text, its minima kept in registers), else numpy."""
        encoded = [t.lower().encode("utf-8") for t in texts]
        offsets = np.zeros(len(encoded) + 1, np.int64)
        np.cumsum([len(e) for e in encoded], out=offsets[1:])
        out = native.minhash(b"".join(encoded), offsets, self._a, self._b, self.shingle, _WORD_SEED)
        if out is not None:
            return np.frombuffer(out, np.uint32).reshape(len(texts), len(self._a)).copy()
        return self.signatures_numpy(texts)

    def signatures_numpy(self, texts: Sequence[str]) -> np.ndarray:
        """``signatures`` in numpy (the compiled path's twin)."""
        shingles, firsts = self.shingles(texts)
        out = np.full((len(texts), len(self._a)), 0xFFFFFFFF, np.uint32)
        has = np.flatnonzero(np.diff(firsts) > 0)
        if len(has) == 0:
            return out
        step = max(1, (1 << 18) // len(self._a))  # products of about 1 MB at a time: they stay in the cache
        for lo in range(0, len(shingles), step):
            hi = min(len(shingles), lo + step)
            block = self._a * shingles[None, lo:hi] + self._b
            texts_in = has[(firsts[has] < hi) & (firsts[has + 1] > lo)]
            starts = np.maximum(firsts[texts_in], lo) - lo
            mins = np.minimum.reduceat(block, starts, axis=1).T
            out[texts_in] = np.minimum(out[texts_in], mins)
        return out

    def band_keys(self, texts: Sequence[str]) -> np.ndarray:
        """``(len(texts), bands)`` uint64 keys; ``NO_KEY`` for a text without a shingle."""
        sig = self.signatures(texts)
        return keys_of(sig, self.bands, self.rows)


def keys_of(signatures: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """Band keys of signatures: each band's ``rows`` minima chained and mixed into 64 bits."""
    n = len(signatures)
    sig = signatures.reshape(n, bands, rows).astype(np.uint64)
    key = np.zeros((n, bands), np.uint64)
    for r in range(rows):
        key = _fmix64(key * _MIX + sig[:, :, r] + np.uint64(r + 1))
    key[key == NO_KEY] = 1
    key[(signatures == 0xFFFFFFFF).all(axis=1)] = NO_KEY
    return key


def shared_rows(keys: np.ndarray) -> np.ndarray:
    """The rows (ascending) of ``keys`` (rows x bands) that share a band's key with another row."""
    shared = np.zeros(len(keys), bool)
    for b in range(keys.shape[1]):
        order = np.argsort(keys[:, b], kind="stable")
        k = keys[order, b]
        same = (k[1:] == k[:-1]) & (k[1:] != NO_KEY)
        shared[order[1:][same]] = True
        shared[order[:-1][same]] = True
    return np.flatnonzero(shared)
