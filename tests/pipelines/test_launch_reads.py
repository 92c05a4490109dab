"""Issue 17 (1): the launcher reads listings and a bounded sample, never a whole input file.

A ``--runner dataflow --dry_run=True`` launch (the real command, the real GCS emulator behind a
byte-counting proxy) of a large CSV reads no more than a fixed bound more than the launch of a
small CSV of the same rows: the large file's cuts are found by the pipeline, not by the launcher.
"""
from __future__ import annotations

import csv
import io

import pytest

from pipelines import dataflow
from shardprep.formats.base import SAMPLE_BYTES
from tests.gcs_emulator import gcs, gcs_emulator, proxied  # noqa: F401 - fixtures

pytestmark = pytest.mark.slow

CLOUD = ["--project=shardprep-test", "--region=us-central1", "--temp_location=gs://shardprep-test-bucket/tmp"]
DRY = ["--dry_run=True", "--experiments=disable_logging_submission_environment"]
MB = 1 << 20


def _csv(rows: int) -> bytes:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["id", "x", "text"])
    w.writerows((i, i / 4, f"row {i}\nwith a quoted newline, and \"quotes\"" if i % 7 == 0 else f"row {i}" * 3)
                for i in range(rows))
    return buf.getvalue().encode()


def _launch(gcs, name: str, data: bytes, tmp_path) -> int:  # noqa: F811 - the fixture imported above
    path = tmp_path / name
    path.write_bytes(data)
    url = gcs.upload(path, f"raw/{name}")
    with proxied(gcs) as proxy:
        rc = dataflow.main(["--input", url, "--output", gcs.url(f"ds-{name}"), "--num-shards", "2", "--unit-mb", "1",
                            *CLOUD, *DRY])
    assert rc == 0
    return proxy.bytes_served


def test_a_dry_run_launch_reads_bounded_bytes_whatever_the_input_size(gcs, tmp_path):  # noqa: F811
    small = _csv(20_000)
    large = small + b"".join(_csv(20_000).split(b"\n", 1)[1] for _ in range(int(32 * MB / len(small))))
    assert len(small) < 2 * MB and len(large) > 32 * MB
    read_small = _launch(gcs, "small.csv", small, tmp_path)
    read_large = _launch(gcs, "large.csv", large, tmp_path)
    assert read_large - read_small < SAMPLE_BYTES, (read_small, read_large)
    assert read_large < len(large) / 3, (read_large, len(large))
