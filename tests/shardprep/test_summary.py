"""``shardprep.summary``: the tables ``run`` and ``inspect`` print. Sizes in binary units, a split's
shard figures (records exactly balanced, bytes' spread), fixed-width columns whose cells from the
data are escaped (a name cannot move the cursor or reorder the line), and the run's summary of a
committed data set."""
from __future__ import annotations

import pytest

from shardprep import manifest, naming, summary
from tests.commit_fixtures import committed, numbered_run_id


@pytest.mark.parametrize("n, text", [(0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (1536, "1.5 KiB"),
                                     (5 * 2**20, "5.0 MiB"), (3 * 2**40, "3.0 TiB"), (2**52, "4096.0 TiB"),
                                     (-2048, "-2.0 KiB")])
def test_human_bytes(n, text):
    assert summary.human_bytes(n) == text


def test_a_table_pads_its_columns_and_escapes_its_cells():
    text = summary.table(["split", "records"], [["train", "1,000"], ["e\x1b[2Jval\u202e", 7]])
    lines = text.splitlines()
    assert lines[0].startswith("split") and lines[0].endswith("records")
    assert lines[1] == "-" * len("e\\x1b[2Jval\\u202e") + "  " + "-" * len("records")  # the widest cell, escaped
    assert "\x1b" not in text and "\u202e" not in text and "e\\x1b[2Jval\\u202e" in text
    assert len({len(line) for line in lines}) == 1  # every line as wide: the columns line up
    assert lines[2].endswith("1,000") and lines[3].endswith("      7")  # numbers right-aligned
    assert summary.table(["a"], []) == "a\n-"


def test_split_figures_and_the_run_summary(tmp_path, capsys):
    out = str(tmp_path / "ds")
    committed(out, numbered_run_id(1), records=9, num_shards=3)
    m = manifest.load(out)
    figures = summary.split_stats(m.splits["train"])
    sizes = sorted(s.num_bytes for s in m.splits["train"].shards)
    assert (figures["shards"], figures["records"], figures["min_records"], figures["max_records"]) == (3, 9, 3, 3)
    assert (figures["min_bytes"], figures["median_bytes"], figures["max_bytes"]) == tuple(sizes)
    assert figures["bytes_spread"] == round((sizes[2] - sizes[0]) / sizes[1], 4)
    summary.print_summary(out, m)
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].split() == ["split", "shards", "records", "bytes", "min/shard", "max/shard"]
    assert {line.split()[0] for line in printed[2:4]} == {"train", "eval"}
    assert printed[4] == f"read {m.accounting.read:,} = written {m.accounting.written:,} + rejected 0"
    assert printed[5] == f"manifest: {naming.join(out, naming.MANIFEST)}"
