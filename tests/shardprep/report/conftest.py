"""The report tests' data set (``dataset``, one per module that asks for it)."""
from __future__ import annotations

from pathlib import Path

import pytest

from shardprep import run
from tests.conftest import write_csv
from tests.shardprep.report.report_fixtures import HOSTILE, HOSTILE_NAME, rows, schema


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    """600 good rows (train/eval) and two dead letters, one of them holding markup."""
    tmp = tmp_path_factory.mktemp("report")
    records = rows(600) + [{"id": "bad", "x": 0, "const": 7, "sparse": "", "label": "cat", "text": "zz", HOSTILE_NAME: 1},
                         {"id": HOSTILE, "x": 0, "const": 7, "sparse": "", "label": "cat", "text": "zz", HOSTILE_NAME: 1}]
    src = write_csv(tmp / "in.csv", records)
    out = tmp / "ds"
    code = run.main(["--input", str(src), "--output", str(out), "--schema", str(schema(tmp / "schema.json")),
                     "--num-shards", "4", "--split", "train=0.8,eval=0.2", "--statistics", "on",
                     "--max-bad-records", "5"])
    assert code == 0
    return out
