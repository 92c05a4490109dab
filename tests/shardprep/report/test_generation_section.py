"""The generations of an appended data set in the report and in ``inspect`` (issue 56 item 4), on a
real data set: a first run and two appends by ``python -m shardprep.run`` processes, ``--dedup exact``."""
from __future__ import annotations

import dataclasses
import html
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from shardprep import manifest
from shardprep.report import page as report_page
from shardprep.summary import human_bytes
from tests.conftest import run_cli, sample_rows, write_csv

RUN = "shardprep.run"
FLAGS = ("--num-shards", "4", "--split", "train=0.8,eval=0.2", "--statistics", "on", "--dedup", "exact")
HOSTILE = "<script>alert('x')</script>\u202e"


class _Cells(HTMLParser):
    """The header and body cells of the first table of an HTML fragment, as text."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append("".join(self._cell))
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def _section(page: str) -> str:
    found = re.search(r'<h2 id="generations">.*?(?=<h2 id="dead-letters">)', page, re.S)
    assert found, "no generations section"
    return found.group(0)


def _table(page: str) -> list[dict[str, str]]:
    parser = _Cells()
    parser.feed(_section(page))
    header, *rows = parser.rows
    return [dict(zip(header, r)) for r in rows]


@pytest.fixture(scope="module")
def appended(tmp_path_factory) -> Path:
    """300 records, then 40 new and 10 repeats of the first (dropped), then 20 new: three generations."""
    tmp = tmp_path_factory.mktemp("generations")
    base = sample_rows(300)
    inputs = [write_csv(tmp / "base.csv", base), write_csv(tmp / "day2.csv", sample_rows(40, start=300) + base[:10]),
              write_csv(tmp / "day3.csv", sample_rows(20, start=340))]
    out = tmp / "ds"
    for i, path in enumerate(inputs):
        run_cli(RUN, "--input", path, "--output", out, *FLAGS, *(["--append"] if i else []), check=True)
    return out


def test_the_report_lists_each_generation_with_its_run_records_shards_duplicates_bytes_and_version(appended, tmp_path):
    out = tmp_path / "r.html"
    run_cli("shardprep.report", appended, "-o", out, check=True)
    page = out.read_text()
    m = manifest.load(str(appended))
    rows = _table(page)
    assert [r["run"] for r in rows] == [g.run_id for g in m.generations]
    assert [r["added by version"] for r in rows] == ["1", "2", "3"]
    assert [r["committed"] for r in rows] == [g.created for g in m.generations]
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", r["committed"]) for r in rows)  # the first's too
    assert [r["read"] for r in rows] == ["300", "50", "20"]
    assert [r["duplicates dropped"] for r in rows] == ["0", "10", "0"]
    assert [r["rejected"] for r in rows] == ["0", "10", "0"]
    assert [r["record hashes"] for r in rows] == ["kept"] * 3
    for split in ("train", "eval"):
        assert [r[f"{split} shards"] for r in rows] == ["4"] * 3
        per_run = [int(r[f"{split} records"].replace(",", "")) for r in rows]
        assert sum(per_run) == m.splits[split].num_records
    assert sum(int(r["train records"]) + int(r["eval records"]) for r in rows) == 360
    for r in rows:  # the bytes of the shards in each generation's run folder, as on disk
        on_disk = sum(p.stat().st_size for p in (appended / r["run"]).glob("*/*.tfrecord"))
        assert r["bytes"] == html.escape(human_bytes(on_disk))
    section = _section(page)
    assert "manifest version 3, made from version 2" in section
    assert "merged across all 3 generations" in section and "merged across all 3 generations" in page.split(
        '<h2 id="features">', 1)[1]
    assert m.statistics["train"]["id"]["count"] == m.splits["train"].num_records  # stated merged: they are


def test_a_generations_text_from_the_manifest_goes_through_the_one_escape(appended):
    m = manifest.load(str(appended))
    hostile = dataclasses.replace(m, generations=(m.generations[0], dataclasses.replace(m.generations[1], created=HOSTILE),
                                                  m.generations[2]))
    section = _section(report_page.render(str(appended), hostile))
    assert "<script>" not in section and "\u202e" not in section
    assert "&lt;script&gt;" in section


def test_a_data_set_of_one_run_draws_no_generations_section(tmp_path):
    out = tmp_path / "one"
    run_cli(RUN, "--input", write_csv(tmp_path / "a.csv", sample_rows(50)), "--output", out, "--num-shards", "2",
            check=True)
    assert 'id="generations"' not in report_page.build(str(out))


def test_inspect_prints_the_generations_and_their_json(appended):
    m = manifest.load(str(appended))
    text = run_cli("shardprep.inspect", appended, check=True).stdout
    block = text.split("generations (manifest version 3):", 1)[1].split("\n\n", 1)[0]
    lines = [line.split() for line in block.strip().splitlines()[2:5]]
    assert [line[1] for line in lines] == [g.run_id for g in m.generations]
    assert [line[3] for line in lines] == ["1", "2", "3"]
    assert "merged across all 3 generations" in block
    doc = json.loads(run_cli("shardprep.inspect", appended, "--json", check=True).stdout)
    assert doc["data_version"] == 3
    assert [(g["run_id"], g["duplicates"], g["read"]) for g in doc["generations"]] == [
        (g.run_id, d, r) for g, d, r in zip(m.generations, (0, 10, 0), (300, 50, 20))]
