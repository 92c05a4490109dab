"""``text.minhash`` and ``text.dedup``: signatures estimate Jaccard, band keys follow LSH's curve,
components keep the lowest id, and the batch does not change a document's signature."""
from __future__ import annotations

import random

import numpy as np

from shardprep.text.corpus import CorpusArrays
from shardprep.text.dedup import components, kept_of
from shardprep.text.minhash import NO_KEY, MinHasher

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


def test_components_keep_the_lowest_id_through_chains():
    u, v = np.array([5, 3, 9, 1]), np.array([3, 7, 7, 2])
    label = components(10, [(u, v)])
    assert label.tolist() == [0, 1, 1, 3, 4, 3, 6, 3, 8, 3]


def test_kept_of_joins_exact_copies_and_shared_bands():
    doc = np.array([1, 2, 1, 3, 4], np.uint64)
    keys = np.array([[10, 11], [20, 21], [10, 11], [30, 21], [NO_KEY, NO_KEY]], np.uint64)
    arrays = CorpusArrays(np.arange(5), np.zeros(5, np.int64), doc, keys)
    assert kept_of(arrays, "exact").tolist() == [0, 1, 0, 3, 4]
    assert kept_of(arrays, "near").tolist() == [0, 1, 0, 1, 4]
