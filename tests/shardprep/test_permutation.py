"""``shardprep.permutation``: the shuffle's keyed permutation of a split's positions is a bijection
that depends on its seed, its inverse leads a shard's positions back to their records, a batch's
positions are those of the whole, and the compiled rounds equal their numpy twin."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardprep import planning
from shardprep.permutation import Permutation


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 3000), st.integers(-(2**63), 2**63 - 1))
def test_permutation_is_a_bijection(n, seed):
    positions = Permutation(n, seed)(np.arange(n))
    assert sorted(positions.tolist()) == list(range(n))


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 3000), st.integers(-(2**63), 2**63 - 1), st.integers(1, 64))
def test_permutation_inverse_undoes_it_and_finds_a_shards_records(n, seed, num_shards):
    perm = Permutation(n, seed)
    positions = perm(np.arange(n))
    assert np.array_equal(perm.inverse(positions), np.arange(n))
    shards, _ = planning.shard_of(positions, np.uint64(num_shards))
    for shard in {0, num_shards // 2, num_shards - 1}:  # its positions, in order, lead back to its records
        mine = perm.inverse(planning.positions_of(shard, num_shards, n))
        assert sorted(mine.tolist()) == np.flatnonzero(shards == shard).tolist()
        assert np.array_equal(positions[mine.astype(np.int64)], planning.positions_of(shard, num_shards, n))


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 2**64 - 1), st.integers(-(2**63), 2**63 - 1), st.booleans())
def test_compiled_rounds_equal_their_numpy_twin(n, seed, inverse):
    compiled = pytest.importorskip("shardprep.native._native")
    from shardprep.native import fallback

    perm = Permutation(n, seed)
    values = np.random.default_rng(abs(seed) % 2**32).integers(0, n, size=300, dtype=np.uint64)
    a, b = values.copy(), values.copy()
    compiled.feistel(a, perm._keys, perm._half, n, inverse)
    fallback.feistel(b, perm._keys, perm._half, n, inverse)
    assert np.array_equal(a, b)
    with pytest.raises(ValueError, match="outside"):
        compiled.feistel(np.array([n], np.uint64) if n < 2**64 - 1 else np.array([2**64 - 1], np.uint64), perm._keys,
                         perm._half, n, inverse)


def test_permutation_depends_on_seed_and_shuffles():
    a = Permutation(1000, 1)(np.arange(1000))
    b = Permutation(1000, 2)(np.arange(1000))
    assert (a != b).mean() > 0.9
    assert (a != np.arange(1000)).mean() > 0.9
    assert np.array_equal(a, Permutation(1000, 1)(np.arange(1000)))


def test_permutation_of_a_batch_equals_the_whole():
    whole = Permutation(10**6, 5)(np.arange(10**6))
    part = Permutation(10**6, 5)(np.arange(123456, 123999))
    assert np.array_equal(whole[123456:123999], part)
