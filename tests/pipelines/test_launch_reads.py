"""Issue 17 (1): the launcher reads listings and a bounded sample, never a whole input file.

A ``--runner dataflow --dry_run=True`` launch (the real command, the real GCS emulator behind a
byte-counting proxy) of a large CSV reads no more than a fixed bound more than the launch of a
small CSV of the same rows: the large file's cuts are found by the pipeline, not by the launcher.
Issue 62: 10,000 small files are planned from their listing and a head each, a bounded number of
requests in flight.
"""
from __future__ import annotations

import collections
import csv
import io
import time

import pytest

from pipelines import dataflow
from shardprep.formats.base import SAMPLE_BYTES, SAMPLE_FILES
from shardprep.formats.files import PLAN_THREADS
from tests.gcs_emulator import FaultProxy, gcs, gcs_emulator, proxied  # noqa: F401 - fixtures

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


SMALL_FILES = 10_000


class _InFlight(FaultProxy):
    """The counting proxy, also counting the requests in flight at once (its handlers share one event loop)."""

    in_flight = peak = 0

    async def _handle(self, request):
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            return await super()._handle(request)
        finally:
            self.in_flight -= 1


def test_ten_thousand_small_files_are_planned_from_one_listing_and_a_head_each(gcs, tmp_path):  # noqa: F811
    """Issue 62: 10,000 small CSV files on GCS. The launch lists them (a few pages: names, sizes and
    generations) and reads what planning needs of each, its header (one ranged read), at most
    ``PLAN_THREADS`` requests at a time; never a request per file to ask its size or version."""
    folder = tmp_path / "small"
    folder.mkdir()
    for i in range(SMALL_FILES):
        (folder / f"part-{i:05d}.csv").write_text(f"id,x,text\n{i},{i / 4},row {i}\n{-i},0.5,again {i}\n")
    gcs.filesystem().put(str(folder) + "/", f"{gcs.bucket}/small/", recursive=True)
    started = time.monotonic()
    with _InFlight(gcs.emulator.url) as proxy:
        gcs.use(proxy.url)
        try:
            rc = dataflow.main(["--input", gcs.url("small/*.csv"), "--output", gcs.url("ds-small"), "--num-shards", "2",
                                *CLOUD, *DRY])
        finally:
            gcs.use(gcs.emulator.url)
    seconds = time.monotonic() - started
    assert rc == 0
    media = proxy.media_downloads("small%2Fpart-")
    per_file = collections.Counter(path.split("?")[0] for path in media)
    assert len(per_file) == SMALL_FILES and max(per_file.values()) <= 4, per_file.most_common(3)  # sample files: a few
    assert len(media) <= SMALL_FILES + 4 * SAMPLE_FILES, len(media)
    other = [p for m, p, _ in proxy.log if "small%2Fpart-" in p and "alt=media" not in p]
    assert len(other) <= 2 * SAMPLE_FILES, other[:5]  # the sample's opens only: the listing gave sizes and versions
    assert proxy.requests <= len(media) + 200, proxy.requests  # listing pages, the lease, the staged units
    assert proxy.peak <= PLAN_THREADS + 4, proxy.peak
    print(f"launch of {SMALL_FILES} small files on the emulator: {seconds:.1f} s, {proxy.requests} requests, "
          f"at most {proxy.peak} in flight")
