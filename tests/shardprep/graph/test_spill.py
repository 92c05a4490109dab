"""``graph.spill``: a batch reordered into its shards' segments keeps one copy of its records, and a
retried bundle finds the same segments."""
from __future__ import annotations

import numpy as np

from shardprep.graph import spill
from tests.shardprep.graph.stage_fixtures import spill_config, spilled_batches


def test_reorder_keeps_one_copy_and_survives_a_retry(tmp_path):
    """Assign's spill step cuts the parsed file down to its record ends once the sorted one exists;
    a retried bundle (parsed file cut) keeps the sorted file it finds and names the same segments."""
    cfg = spill_config(tmp_path, num_shards=2, shuffle=False, in_place=False)
    (batch,), records = spilled_batches(cfg, [5])
    order, bounds = np.array([3, 0, 4, 1, 2]), [0, 2, 5]
    out = spill.sorted_url(cfg, batch)
    ranges = spill.reorder(batch, out, order, bounds)
    assert spill.fs.size(batch.url) == 5 * 4  # its ends alone: the records are in spill once
    blob = spill.fs.read_bytes(out)
    for (start, end), (lo, hi) in zip(ranges, zip(bounds, bounds[1:])):
        data, ends = spill.segment(blob[start:end], hi - lo)
        assert bytes(data) == b"".join(records[i] for i in order[lo:hi])
        assert ends.tolist() == np.cumsum([len(records[i]) for i in order[lo:hi]]).tolist()
    assert spill.reorder(batch, out, order, bounds) == ranges  # the retry
    assert spill.fs.read_bytes(out) == blob
