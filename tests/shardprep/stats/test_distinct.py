"""``shardprep.stats.distinct``: strings counted exactly until a cap (counted now or pending: the same
state), HyperLogLog within 3% at a million distinct values, hashes alike in both implementations."""
from __future__ import annotations

import pickle
import random

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from shardprep import native
from shardprep.stats import distinct


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_pending_string_counts_count_as_counted_ones(seed):
    """A batch's values kept uncounted (``StringCounts.pending``, counted with the other parts when
    asked) give the same mapping, hashes' sketch and pickled state as each batch counted at once."""
    rng = random.Random(seed)
    batches = [pa.array([b"v%d" % rng.randrange(rng.choice([3, 50, 10**6])) for _ in range(rng.randrange(0, 60))],
                        rng.choice([pa.binary(), pa.large_binary()])) for _ in range(rng.randrange(1, 8))]
    eager, lazy = distinct.StringCounts(), distinct.StringCounts()
    for i, values in enumerate(batches):
        eager = eager.merge(distinct.StringCounts.of(values))
        lazy = lazy.merge(distinct.StringCounts.pending(values))
        if i % 3 == 2:
            assert len(lazy) == len(eager)  # counted together here: the later parts join the counted one
    assert lazy.items() == eager.items() and lazy.top(5) == eager.top(5) and lazy.held_bytes == eager.held_bytes
    hashes, held = distinct.StringCounts.pending(pa.concat_arrays([b.cast(pa.large_binary()) for b in batches])) \
        .distinct_hashes()  # the cap's test without counting: the distinct values' hashes and bytes
    assert held == eager.held_bytes and np.array_equal(hashes, np.unique(eager.hashes()))
    hashes, held = distinct.StringCounts.pending(batches).distinct_hashes()  # the batches as pieces, not joined
    assert held == eager.held_bytes and np.array_equal(hashes, np.unique(eager.hashes()))
    assert np.array_equal(distinct.HyperLogLog.of_hashes(lazy.hashes()).registers,
                          distinct.HyperLogLog.of_hashes(eager.hashes()).registers)
    assert pickle.loads(pickle.dumps(lazy)).items() == eager.items()


def test_hyperloglog_is_within_three_percent_at_a_million():
    values = [b"v%d" % i for i in range(1_000_000)]
    halves = distinct.HyperLogLog.of(values[::2]).merge(distinct.HyperLogLog.of(values[1::2]))
    assert abs(halves.estimate() - 1_000_000) <= 30_000
    assert np.array_equal(halves.registers, distinct.HyperLogLog.of(values).registers)
    small = distinct.HyperLogLog.of(values[:1000])
    assert abs(small.estimate() - 1000) <= 30


def test_long_values_hash_in_lanes_alike_and_still_count_distinct():
    """``native.hash_values`` takes a value's 32-byte blocks in four lanes: the Python twin gives the
    same bits at every length around the blocks, and texts that differ in one byte anywhere (one lane's
    word, the tail) still count as distinct within the HyperLogLog's error."""
    from shardprep.native import fallback

    rng = np.random.default_rng(7)
    values = [rng.bytes(n) for n in (0, 1, 7, 8, 31, 32, 33, 40, 63, 64, 65, 96, 100, 400) for _ in range(5)]
    data, offsets = b"".join(values), np.cumsum([0] + [len(v) for v in values]).astype(np.int64)
    for seed in (0, 99, 2**63 - 1):
        assert native.hash_values(data, offsets, seed) == fallback.hash_values(data, offsets.tobytes(), seed)
    base = bytearray(rng.bytes(400))
    texts = []
    for i in range(100_000):  # one byte changed, at a place that moves through every lane and the tail
        t = bytearray(base)
        t[i % 400] = (t[i % 400] + 1 + i // 400) % 256
        texts.append(bytes(t))
    assert abs(distinct.HyperLogLog.of(texts).estimate() - len(set(texts))) <= 0.03 * len(set(texts))


def test_long_values_never_counted_travel_uncounted_over_their_own_bytes():
    """Issue 61: a partial's long values (``LONG_VALUE`` bytes on average) not counted yet are pickled
    as they are, without the rest of a buffer they share with other columns, and count the same at
    the merge; short ones are counted to travel (their repeats once)."""
    texts = [b"text %d " % i * 20 for i in range(200)]
    offsets = np.cumsum([0] + [len(t) for t in texts]).astype(np.int64) + 1000
    shared = pa.py_buffer(b"-" * 1000 + b"".join(texts) + b"-" * 1_000_000)  # a block's buffer, other columns' bytes
    part = pa.Array.from_buffers(pa.large_binary(), len(texts), [None, pa.py_buffer(offsets), shared])
    long = distinct.StringCounts.pending([part, part.slice(5, 20)])
    data = pickle.dumps(long)
    assert len(data) < 2 * sum(map(len, texts)) + 16 * len(texts)  # not the shared megabyte
    back = pickle.loads(data)
    assert back.never_counted and back.size_bound == 220
    assert back.items() == sorted((t, 2 if 5 <= i < 25 else 1) for i, t in enumerate(texts))
    short = distinct.StringCounts.pending(pa.array([b"a", b"bb", b"a"] * 100, pa.binary()))
    back = pickle.loads(pickle.dumps(short))
    assert not back.never_counted and back.size_bound == 2 and back.items() == [(b"a", 200), (b"bb", 100)]
