"""Issue 17 (3): the job graph's size does not grow with the input.

100,000 input files summing to 10 TB, listed by a file system that holds no bytes (a listing
stubbed at the fsspec layer: names and sizes, and a 16-byte head per file, any further read refused), planned by the real
launcher code and built into a Dataflow job graph with ``--dry_run=True``: the serialized graph
stays under 1 MB, although the work units alone pickle to several MB.
"""
from __future__ import annotations

import io
import pickle

import apache_beam as beam
import fsspec
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to
from fsspec.spec import AbstractFileSystem

from pipelines import beam_graph
from shardprep import config, formats, naming, planning
from shardprep.graph import units as staged

FILES = 100_000
TOTAL_BYTES = 10 * 10**12
MB = 10**6
CLOUD = ["--project=shardprep-test", "--region=us-central1", "--temp_location=gs://shardprep-test-bucket/tmp"]
DRY = ["--dry_run=True", "--experiments=disable_logging_submission_environment"]


class ListingOnly(AbstractFileSystem):
    """``listonly://in/part-NNNNNN.tfrecord``: FILES files of TOTAL_BYTES / FILES bytes, no content."""

    protocol = "listonly"
    root_marker = ""

    def _entry(self, i: int) -> dict:
        return {"name": f"in/part-{i:06d}.tfrecord", "size": TOTAL_BYTES // FILES, "type": "file", "mtime": 1}

    def ls(self, path, detail=True, **kwargs):
        if self._strip_protocol(path).strip("/") != "in":
            raise FileNotFoundError(path)
        entries = [self._entry(i) for i in range(FILES)]
        return entries if detail else [e["name"] for e in entries]

    def info(self, path, **kwargs):
        path = self._strip_protocol(path).strip("/")
        if path == "in":
            return {"name": "in", "size": 0, "type": "directory"}
        name = path.removeprefix("in/part-").removesuffix(".tfrecord")
        if path.startswith("in/part-") and path.endswith(".tfrecord") and name.isdigit() and int(name) < FILES:
            return self._entry(int(name))
        raise FileNotFoundError(path)

    def _open(self, path, mode="rb", **kwargs):
        return _Head()


HEAD_BYTES = 16  # what the launcher may read of each file: a format sniff (TFRecord: gzip magic or not)
read_bytes = [0]


class _Head(io.RawIOBase):
    """An open file of zeros whose first HEAD_BYTES may be read (counted); reading further fails."""

    def __init__(self) -> None:
        super().__init__()
        self._pos = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        n = min(len(buffer), HEAD_BYTES - self._pos)
        if n <= 0:
            raise AssertionError(f"the launcher read past the first {HEAD_BYTES} bytes of an input file")
        buffer[:n] = bytes(n)
        self._pos += n
        read_bytes[0] += n
        return n


@pytest.fixture(scope="module")
def planned():
    fsspec.register_implementation(ListingOnly.protocol, ListingOnly, clobber=True)
    files = formats.expand_inputs(["listonly://in/*.tfrecord"], "auto")
    units = formats.plan_units(files, unit_bytes=64 * 2**20)
    return files, units


def _config(files, output: str) -> config.ReshardConfig:
    return config.ReshardConfig(
        output=output, run_id=naming.new_run_id(), features={"id": {"dtype": "int64", "shape": []}},
        sources=tuple((f.url, f.size) for f in files), versions=tuple(f.version for f in files),
        splits=planning.parse_splits("train=0.9,eval=0.1"), num_shards=1024,
    )


@pytest.mark.slow
def test_dataflow_graph_of_100k_files_and_10_tb_stays_under_1_mb(planned, tmp_path):
    files, units = planned
    assert len(files) == FILES and sum(f.size for f in files) == TOTAL_BYTES
    assert read_bytes[0] <= HEAD_BYTES * FILES  # 1.6 MB of heads for 10 TB: no scan of the content
    assert len(units) == 2 * FILES  # 100 MB files, 64 MiB units
    assert len(pickle.dumps(units)) > 5 * MB  # what embedding the units in the graph would cost
    cfg = _config(files, str(tmp_path / "ds"))
    assert len(pickle.dumps(cfg)) > 5 * MB  # the full config, which no step carries any more

    pipeline = beam.Pipeline(options=PipelineOptions(["--runner=DataflowRunner", *CLOUD, *DRY]))
    beam_graph.build(pipeline, cfg, len(units))  # builds and writes nothing
    assert not (tmp_path / "ds").exists()
    staged.stage(cfg, units)  # what the engine does before it runs the pipeline
    job = pipeline.run().job
    graph = job.proto_pipeline.SerializeToString()  # what Dataflow receives (runner v2), 57 kB here
    assert len(graph) < 1 * MB, len(graph)
    names = {t.unique_name for t in job.proto_pipeline.components.transforms.values()}
    assert {"Reshard/Units", "Reshard/ExpandUnits", "Reshard/Distribute", "Reshard/Commit"} <= names

    url = naming.join(cfg.output, naming.units_path(cfg.run_id))  # what the workers read instead
    n = staged.num_chunks(len(units))
    assert n == staged.MAX_CHUNKS
    assert [u for i in range(n) for u in staged.read_chunk(url, i)] == units
    assert staged.with_sources(staged.slim(cfg), url) == cfg


def test_staged_units_round_trip_in_order_and_chunks(tmp_path):
    files = [formats.InputFile(i, f"gs://b/in/{i}.csv", 100 + i, "csv", False, f"v{i}") for i in range(7)]
    units = [formats.WorkUnit(f, k, 10 * k, 10 * k + 10, 1) for f in files for k in range(3)]
    cfg = _config(files, str(tmp_path / "ds"))
    url, n = staged.stage(cfg, units)
    assert url == naming.join(cfg.output, naming.units_path(cfg.run_id)) and n == len(units)
    assert [u for i in range(n) for u in staged.read_chunk(url, i)] == units
    with beam.Pipeline() as p:  # the real DoFn in a real pipeline
        out = p | beam.Create(list(range(n))) | beam.ParDo(beam_graph.StageFn(staged.ExpandUnits(url))) | beam.Map(lambda u: u.key)
        assert_that(out, equal_to([u.key for u in units]))
    slim = staged.slim(cfg)
    assert slim.sources == () and slim.versions == () and staged.with_sources(slim, url) == cfg
    url, n = staged.stage(cfg, [])  # no units: one empty chunk
    assert n == 1 and staged.read_chunk(url, 0) == []
    with open(url, "r+b") as f:
        f.write(b"X")
    with pytest.raises(ValueError, match="not a staged units file"):
        staged.read_chunk(url, 0)
