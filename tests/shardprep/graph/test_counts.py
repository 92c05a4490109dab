"""``shardprep.graph.counts``: the counts side input as a sorted array with prefix sums gives each batch
its first position within its split, and refuses conflicting counts and unknown batches."""
from __future__ import annotations

import random

import pytest

from shardprep.graph.counts import CountTable
from shardprep.graph.elements import BatchCount


def _naive_offsets(counts: list[BatchCount]) -> dict[tuple, int]:
    """The former plan: a dict of tuples, sorted per split, prefix sums in Python."""
    by_key = {(c.split, tuple(c.unit), c.part): c.num_records for c in counts}
    out, totals = {}, {}
    for key in sorted(by_key):
        out[key] = totals.get(key[0], 0)
        totals[key[0]] = out[key] + by_key[key]
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_first_positions_equal_the_prefix_sums_in_key_order(seed):
    rng = random.Random(seed)
    counts = [BatchCount(rng.randrange(3), (f, u), p, rng.randrange(0, 50), rng.randrange(1, 10**6))
              for f in range(rng.randrange(1, 40)) for u in range(rng.randrange(1, 5)) for p in range(rng.randrange(1, 3))]
    shuffled = counts + rng.sample(counts, len(counts) // 3)  # runners may deliver an element twice
    rng.shuffle(shuffled)
    table = CountTable(shuffled)
    assert len(table) == len(counts)
    for key, first in _naive_offsets(counts).items():
        assert table.first_position(*key) == first, key
    for s in table.splits():
        assert table.totals(s) == (sum(c.num_records for c in counts if c.split == s),
                                   sum(c.size for c in counts if c.split == s))


def test_conflicting_counts_and_unknown_batches_are_refused():
    a = BatchCount(0, (3, 1), 0, 10, 100)
    with pytest.raises(RuntimeError, match=r"two different counts for batch \[0, 3, 1, 0\]"):
        CountTable([a, a._replace(num_records=11)])
    table = CountTable([a])
    for key in [(0, (3, 1), 1), (0, (3, 2), 0), (1, (3, 1), 0), (0, (2**40, 1), 0)]:
        with pytest.raises(KeyError, match="not in the counts side input"):
            table.first_position(*key)
    assert len(CountTable([])) == 0 and CountTable([]).splits() == []
