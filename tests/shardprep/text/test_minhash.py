"""``text.minhash`` and ``text.dedup``: signatures estimate Jaccard, band keys follow LSH's curve,
the batch does not change a document's signature, and the leader rule keeps the lowest id and
drops a document only for a kept one it is itself similar to."""
from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardprep import native
from shardprep.text.corpus import CorpusArrays
from shardprep.text.dedup import Verifier, first_copies, kept_of, shared_bands
from shardprep.text.minhash import NO_KEY, MinHasher, keys_of, shared_rows

VOCAB = [f"w{i}" for i in range(5000)]


def _shingles(text: str, k: int = 5) -> set:
    w = text.lower().split()
    return {tuple(w[i:i + k]) for i in range(len(w) - k + 1)} or {tuple(w)}


def _pair(r: random.Random, rate: float, n: int = 300) -> tuple[str, str]:
    a = [r.choice(VOCAB) for _ in range(n)]
    b = [r.choice(VOCAB) if r.random() < rate else w for w in a]
    return " ".join(a), " ".join(b)


def test_signatures_estimate_jaccard_without_bias():
    r = random.Random(1)
    m = MinHasher()
    errors = []
    for rate in (0.0, 0.01, 0.03, 0.06, 0.1):
        for _ in range(20):
            a, b = _pair(r, rate)
            sa, sb = _shingles(a), _shingles(b)
            truth = len(sa & sb) / len(sa | sb)
            sig = m.signatures([a, b])
            errors.append(float((sig[0] == sig[1]).mean()) - truth)
    assert abs(np.mean(errors)) < 0.02 and np.std(errors) < 0.07  # 112 permutations: std ~ 0.04


def test_a_document_signature_does_not_depend_on_its_batch():
    r = random.Random(2)
    texts = [" ".join(r.choice(VOCAB) for _ in range(r.randint(0, 40))) for _ in range(50)] + ["", "!!", "a b"]
    m = MinHasher()
    whole = m.signatures(texts)
    one_by_one = np.concatenate([m.signatures([t]) for t in texts])
    assert np.array_equal(whole, one_by_one)
    keys = m.band_keys(texts)
    assert (keys[texts.index("")] == NO_KEY).all() and (keys[texts.index("!!")] == NO_KEY).all()
    assert (keys[texts.index("a b")] != NO_KEY).all()


def test_case_and_punctuation_do_not_change_the_shingles():
    m = MinHasher()
    a, b = m.signatures(["Hello, World! foo bar baz qux", "hello world foo... bar baz qux"])
    assert np.array_equal(a, b)


def test_band_keys_follow_the_lsh_curve():
    r = random.Random(3)
    m = MinHasher()
    hits = {0.01: 0, 0.25: 0}
    for rate in hits:
        for _ in range(40):
            keys = m.band_keys(list(_pair(r, rate)))
            hits[rate] += bool((keys[0] == keys[1]).any())
    assert hits[0.01] >= 39  # Jaccard ~0.9: P(a shared band) 0.9996
    assert hits[0.25] <= 2  # Jaccard ~0.2: ~ 0


def test_first_copies_and_shared_bands():
    assert first_copies(np.array([7, 3, 7, 3, 9], np.uint64)).tolist() == [0, 1, 0, 1, 4]
    keys = np.array([[1, 2], [1, 5], [NO_KEY, 5], [1, NO_KEY], [6, 7]], np.uint64)
    rows, groups = shared_bands(keys)
    assert rows.tolist() == [0, 1, 1, 2, 3]  # band 0 key 1: rows 0, 1, 3; band 1 key 5: rows 1, 2
    assert len(set(groups[[0, 1, 4]].tolist())) == 1 and groups[2] == groups[3] != groups[0]


def test_a_chain_keeps_its_ends_when_they_are_not_similar():
    """A~B and B~C share bands, A and C agree in less than the threshold: B goes, C stays."""
    sig = np.array([[1, 1, 1, 1], [1, 1, 1, 2], [3, 1, 1, 2]], np.uint32)  # A~B 3/4, B~C 3/4, A~C 2/4
    keys = np.array([[10, 20], [10, 30], [40, 30]], np.uint64)
    arrays = CorpusArrays(np.arange(3), np.zeros(3, np.int64), np.array([1, 2, 3], np.uint64), keys, sig)
    assert kept_of(arrays, "near", 0.75).tolist() == [0, 0, 2]
    assert kept_of(arrays, "near", 0.5).tolist() == [0, 0, 2]  # B is not kept: C is not its duplicate
    keys[2, 0] = 10  # C shares a band with A too, and agrees with it in half its places
    assert kept_of(arrays, "near", 0.5).tolist() == [0, 0, 0]
    assert kept_of(arrays, "near", 0.75).tolist() == [0, 0, 2]


def test_a_copy_follows_its_first_copy():
    sig = np.array([[1, 1], [1, 2], [1, 2]], np.uint32)
    keys = np.array([[10], [10], [10]], np.uint64)
    arrays = CorpusArrays(np.arange(3), np.zeros(3, np.int64), np.array([1, 2, 2], np.uint64), keys, sig)
    assert kept_of(arrays, "near", 0.5).tolist() == [0, 0, 0]  # the copy of a near copy names the kept one
    assert kept_of(arrays, "near", 0.9).tolist() == [0, 1, 1]
    assert kept_of(arrays, "exact").tolist() == [0, 1, 1]


def test_kept_of_joins_exact_copies_and_shared_bands():
    doc = np.array([1, 2, 1, 3, 4], np.uint64)
    keys = np.array([[10, 11], [20, 21], [10, 11], [30, 21], [NO_KEY, NO_KEY]], np.uint64)
    arrays = CorpusArrays(np.arange(5), np.zeros(5, np.int64), doc, keys)
    assert kept_of(arrays, "exact").tolist() == [0, 1, 0, 3, 4]
    assert kept_of(arrays, "near").tolist() == [0, 1, 0, 1, 4]


_WORDS = st.sampled_from(["a", "B", "w1", "Ünï", "日本", "x.y", "-", ",,", " ", "\t", "\n", "é!", "ß", "0"])


@pytest.mark.skipif(not native.NATIVE, reason="the compiled extension is not built here")
@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(_WORDS, max_size=25).map(" ".join), max_size=12), st.integers(1, 7), st.integers(1, 3))
def test_compiled_signatures_are_the_numpy_ones(texts, shingle, bands):
    m = MinHasher(bands, 3, shingle, seed=shingle)
    assert np.array_equal(m.signatures(texts), m.signatures_numpy(texts))


def _exact(i: int, texts: list[str]) -> np.ndarray:
    return np.unique(MinHasher(1, 1).shingles([texts[i]])[0])


def test_the_verifier_asks_the_exact_similarity_only_near_the_threshold():
    r = random.Random(4)
    texts = [" ".join(r.choice(VOCAB) for _ in range(400))]
    words = texts[0].split()
    for rate in (0.0, 0.03, 0.3):  # Jaccard ~1, ~0.8, ~0.1
        texts.append(" ".join(w if r.random() >= rate else r.choice(VOCAB) for w in words))
    sig = MinHasher().signatures(texts)
    calls = []
    v = Verifier(sig, 0.8, lambda i: calls.append(i) or _exact(i, texts))
    truth = [len(np.intersect1d(_exact(0, texts), _exact(j, texts))) / len(np.union1d(_exact(0, texts), _exact(j, texts)))
             for j in (1, 2, 3)]
    assert v.first_similar(0, [1, 2, 3]) == 0 and v.exact_checks == 0  # a clear pair: its signatures decide
    assert v.first_similar(0, [3, 2]) == (1 if truth[1] >= 0.8 else -1)
    assert v.exact_checks == 1 and set(calls) == {0, 2}  # the far pair was decided by its signatures
    assert Verifier(None, 0.8).first_similar(0, [3, 2]) == 0  # no signatures: every candidate
    assert Verifier(sig, 0.8).first_similar(0, [3, 2]) == (1 if (sig[0] == sig[2]).mean() >= 0.8 else -1)


def test_the_signatures_of_the_rows_that_share_a_band_are_enough():
    """``text.corpus.merge`` reads only those: the same documents are kept."""
    r = random.Random(6)
    texts = []
    for _ in range(30):
        a, b = _pair(r, r.choice((0.0, 0.01, 0.03, 0.05, 0.3)), n=120)
        texts += [a, b, " ".join(r.choice(VOCAB) for _ in range(50))]
    sig = MinHasher().signatures(texts)
    keys = keys_of(sig, 14, 8)
    ids = shared_rows(keys)
    assert 0 < len(ids) < len(texts)
    doc = np.arange(len(texts), dtype=np.uint64)
    full = kept_of(CorpusArrays(np.arange(len(texts)), np.zeros(len(texts), np.int64), doc, keys, sig), "near", 0.8)
    sparse = CorpusArrays(np.arange(len(texts)), np.zeros(len(texts), np.int64), doc, keys, sig[ids], ids)
    assert np.array_equal(kept_of(sparse, "near", 0.8), full) and (full != np.arange(len(texts))).sum() >= 10
