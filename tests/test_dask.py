"""``--runner dask`` on a real dask.distributed LocalCluster (worker processes), against DirectRunner.

A run whose spill stays in place runs Beam in the launcher and the steps on the cluster's workers
(``pipelines.local.beam_in_process``); any other sends Beam's graph to the cluster. Beam's Dask
runner as shipped mixes the outputs of a multi-output ParDo, reads side inputs through a nested
compute and runs only the last step; ``pipelines.dask_runner`` fixes that. These tests check both
ways on a real cluster, the fixes, and that the shards are byte-identical to DirectRunner's.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam import pvalue
from apache_beam.options.pipeline_options import PipelineOptions

from conftest import ROOT, run_cli, sample_rows, uneven_csvs, write_csv
from pipelines.dask_runner import DaskRunner
from shardprep import config, formats, manifest, naming, planning, run
from shardprep.graph import elements, parse, spill, stages
from shardprep.graph.dofns import InLine
from shardprep.graph.ranges import CountRanges

pytestmark = pytest.mark.slow

TWO_SPLITS = ["--workers", 2, "--split", "train=0.9,eval=0.1", "--unit-mb", 0.05]
DEAD_LETTERS = ["--num-shards", 3, "--split", "train=0.8,eval=0.2", "--unit-mb", 0.05, "--max-bad-records", 2,
                "--compression", "gzip"]


@pytest.fixture(scope="module")
def cluster():
    from distributed import LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address="127.0.0.1:0") as c:
        yield c.scheduler_address


@pytest.fixture(scope="module")
def raw(tmp_path_factory) -> Path:
    """3 000 good rows in three very unequal CSV files (several work units each at --unit-mb 0.05)."""
    folder = tmp_path_factory.mktemp("raw")
    uneven_csvs(folder, 3000)
    return folder


@pytest.fixture(scope="module")
def raw_with_bad(raw, tmp_path_factory) -> Path:
    """The same files plus one holding 400 good rows and 2 bad ones."""
    folder = tmp_path_factory.mktemp("raw-bad")
    for f in raw.glob("*.csv"):
        shutil.copy(f, folder / f.name)
    path = write_csv(folder / "part-9.csv", sample_rows(400, start=3000))
    with open(path, "a") as f:  # at the end: text fields hold quoted newlines, a line in the middle may be inside one
        f.write("1,2,3\nx,0.1,0.2,0.3,1,more,extra\n")  # too few columns, too many
    return folder


def reshard(raw: Path, out: Path, *args) -> int:
    return run.main([str(a) for a in ("--input", f"{raw}/*.csv", "--output", out, *args)])


def contents(root: Path) -> dict[str, object]:
    """Everything that must not depend on the runner: every shard's crc32c, dead letters, accounting."""
    m = manifest.load(str(root))
    rejected = [(root / p).read_bytes() for p in m.rejected.paths]
    return {
        "shards": {s.path.split("/", 1)[1]: (s.crc32c, s.num_records) for sp in m.splits.values() for s in sp.shards},
        "rejected": rejected,
        "accounting": m.accounting,
        "sources": [(os.path.basename(s.uri), s.num_records, s.num_rejected) for s in m.sources],
        "by_reason": m.rejected.by_reason,
    }


@pytest.fixture(scope="module")
def direct(raw, raw_with_bad, tmp_path_factory) -> dict[str, dict]:
    out = tmp_path_factory.mktemp("direct")
    assert reshard(raw, out / "two-splits", *TWO_SPLITS) == 0
    assert reshard(raw_with_bad, out / "dead-letters", *DEAD_LETTERS) == 0
    return {"two-splits": contents(out / "two-splits"), "dead-letters": contents(out / "dead-letters")}


def _steps_run(client, out: Path, *args) -> list[str]:
    """The names of the tasks the cluster of ``client`` ran for ``reshard(out, *args)``."""
    from distributed import get_task_stream

    with get_task_stream(client=client) as stream:
        assert reshard(*args[:1], out, *args[1:]) == 0
    return [task["key"][0] if isinstance(task["key"], tuple) else task["key"] for task in stream.data]


@pytest.mark.parametrize("engine", ["steps on the workers", "graph on the cluster"])
@pytest.mark.parametrize("case", ["two-splits", "dead-letters"])
def test_dask_shards_are_byte_identical_to_direct_runner(case, engine, raw, raw_with_bad, direct, cluster, tmp_path,
                                                         monkeypatch):
    from distributed import Client

    from pipelines import dask_cluster

    if engine == "graph on the cluster":  # as for a scheduler of another machine (no spill in place)
        monkeypatch.setattr(dask_cluster, "on_this_machine", lambda address: False)
    source, args = (raw, TWO_SPLITS) if case == "two-splits" else (raw_with_bad, DEAD_LETTERS)
    out = tmp_path / "ds"
    with Client(cluster, timeout=60) as client:
        tasks = _steps_run(client, out, source, *args, "--runner", "dask", "--dask-address", cluster)
    got = contents(out)
    assert got == direct[case]
    if engine == "steps on the workers":  # CountRanges and Parse per unit, Assign per batch, WriteShards per shard
        assert all(name.startswith(("remote_task", "remote_each")) for name in tasks), set(tasks)
        assert len(tasks) >= 4, tasks
    else:
        assert any("Reshard_Parse" in name for name in tasks), set(tasks)
    assert len(got["shards"]) == (4 if case == "two-splits" else 6)
    if case == "dead-letters":
        assert got["accounting"] == manifest.Accounting(read=3402, written=3400, rejected=2)
        assert len(got["rejected"]) == 1 and got["rejected"][0].count(b"\n") == 2


def test_dask_cli_starts_its_own_local_cluster(raw, direct, tmp_path):
    out = tmp_path / "ds"
    proc = run_cli("shardprep.run", "--input", f"{raw}/*.csv", "--output", out, *TWO_SPLITS,
                   "--runner", "dask", "--dask-workers", 2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "starting a Dask LocalCluster with 2 worker processes" in proc.stderr
    assert "[distributed" not in proc.stderr, proc.stderr[-3000:]  # its INFO chatter stays out of the output
    read = manifest.load(str(out)).accounting.read  # the stage summary, from the workers' counters
    assert f"Parse: {read} records read (0 rejected)" in proc.stderr and "2 worker processes, " in proc.stderr, proc.stderr
    assert contents(out) == direct["two-splits"]


class _Noop:
    """A step's work that passes its elements on."""

    def process(self, element):
        yield element


def _faults_of_reused_blocks() -> int:
    """In a worker: the page faults of allocating, filling and freeing a 1 MB block 64 times."""
    import resource

    import numpy as np

    before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
    for _ in range(64):
        block = np.ones(1 << 17)
        del block
    return resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before


def test_a_worker_that_ran_a_step_reuses_the_memory_it_frees():
    """A Nanny starts its worker with ``MALLOC_TRIM_THRESHOLD_=65536``: 256 fresh pages for each
    1 MB block; a step's set-up (``shardprep.malloc``) restores glibc's limits in that process."""
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address="127.0.0.1:0") as c:
        with Client(c.scheduler_address, timeout=60) as client:
            (before,) = client.run(_faults_of_reused_blocks).values()
            p = beam.Pipeline(runner=DaskRunner(), options=PipelineOptions([f"--dask_client_address={c.scheduler_address}"]))
            _ = p | beam.Create([1, 2, 3]) | beam.ParDo(InLine(_Noop()))
            result = p.run()
            result.wait_until_finish()
            result.client.close()
            (after,) = client.run(_faults_of_reused_blocks).values()
    assert before > 64 * 128, before  # distributed's setting, as shipped
    assert after < 64 * 16, after


def _imported(modules: list[str]) -> tuple[bool, bool, bool, list[str]]:
    from pipelines.startup import CONNECTOR_LIBRARIES

    return ("apache_beam" in modules, "apache_beam.runners.dask.dask_runner" in modules,
            "shardprep.graph.stages" in modules,
            sorted(m for m in modules if m.startswith(CONNECTOR_LIBRARIES) and m != "google.cloud"))


@pytest.mark.parametrize("graph", [False, True])
def test_a_runs_own_cluster_starts_apart_and_its_workers_join_with_the_steps_imported(graph):
    """``pipelines.dask_cluster.ahead``: the cluster starts in a thread (the launcher imports Beam
    meanwhile); its workers preload the steps, and Beam's graph on the cluster also Beam (without the
    cloud connectors), and are forked from one fork server, which imported them once, not started
    as an interpreter each. Workers that run only the steps never import Beam."""
    from distributed import Client

    from pipelines import dask_cluster

    with dask_cluster.ahead(2, graph=graph) as address:
        with Client(address(), timeout=60) as client:
            assert len(client.scheduler_info()["workers"]) == 2
            # a worker's modules, asked through a builtin: a function of this module would import it, and Beam
            imported = [_imported(modules) for modules in client.run(eval, "list(__import__('sys').modules)").values()]
            parents = set(client.run(os.getppid).values())
            server = Path(f"/proc/{min(parents)}/cmdline").read_bytes()
    assert imported == [(graph, graph, True, [])] * 2, imported
    assert len(parents) == 1 and os.getpid() not in parents, parents  # not this process's (the nannies') children
    assert b"forkserver" in server and b"pipelines.dask_worker" in server, server
    assert (b"pipelines.dask_graph_worker" in server) == graph, server
    assert not Path(f"/proc/{parents.pop()}").exists()  # the fork server stopped with the cluster


def test_an_exchange_deals_consecutive_shards_to_its_buckets_in_turn():
    """A GroupByShard bucket is one WriteShards task: buckets of equal shard counts end together (a
    digest of the key put 13 to 18 of 64 shards in each of 4 buckets)."""
    import collections

    from pipelines.dask_graph import _bucket

    for shards, buckets in ((64, 4), (10, 4), (7, 3), (1000, 16)):
        for split in (0, 1, 2):
            dealt = collections.Counter(_bucket(elements.shard_key(split, s, shards), buckets) for s in range(shards))
            assert len(dealt) == min(shards, buckets) and max(dealt.values()) - min(dealt.values()) <= 1, dealt
    assert {_bucket(key, 3) for key in ("a", None, (1, "b"), 2.5)} <= {0, 1, 2}  # other keys: a digest


@pytest.fixture(scope="module")
def separate_cluster(tmp_path_factory):
    """``dask scheduler`` and ``dask worker`` as separate processes on loopback: the shape of a
    cluster of machines (nothing shared with this process but the file system)."""
    folder = tmp_path_factory.mktemp("cluster")
    info = folder / "scheduler.json"
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([str(bin_dir / "dask"), "scheduler", "--host", "127.0.0.1", "--port", "0",
                               "--dashboard-address", "127.0.0.1:0", "--scheduler-file", str(info)],
                              env=env, cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        deadline = time.monotonic() + 60
        while not info.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        address = json.loads(info.read_text())["address"]
        procs.append(subprocess.Popen([str(bin_dir / "dask"), "worker", address, "--nworkers", "2", "--nthreads", "1",
                                       "--host", "127.0.0.1", "--no-dashboard", "--local-directory", str(folder),
                                       "--preload", "pipelines.dask_runner"],  # as README's sizing says
                                      env=env, cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        from distributed import Client

        with Client(address, timeout=60) as client:
            client.wait_for_workers(2, timeout=120)
        yield address
    finally:
        for proc in reversed(procs):
            proc.terminate()
            proc.wait(30)


def test_dask_cluster_of_separate_processes_gives_direct_runners_bytes(raw_with_bad, direct, separate_cluster,
                                                                       tmp_path):
    out = tmp_path / "ds"
    proc = run_cli("shardprep.run", "--input", f"{raw_with_bad}/*.csv", "--output", out, *DEAD_LETTERS,
                   "--runner", "dask", "--dask-address", separate_cluster)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert contents(out) == direct["dead-letters"]
    assert not list(out.glob("run-*/spill")), "spill left after commit"


def test_an_interrupt_waits_for_the_tasks_a_standing_clusters_workers_began(separate_cluster, tmp_path):
    """A task a worker has begun runs on after its future is cancelled (a thread cannot be stopped):
    the launcher waits for it (``graph.pool.remote_idle``) before it removes the run's folder, which
    a Parse under way wrote its spill into after the removal."""
    import signal

    from distributed import Client

    raw = tmp_path / "raw"
    for i in range(4):  # a unit each
        write_csv(raw / f"part-{i}.csv", sample_rows(300, start=300 * i))
    out = tmp_path / "ds"
    with Client(separate_cluster, timeout=60) as client:  # each of the workers' tasks sleeps first (lease.pause)
        client.run(eval, "__import__('os').environ.__setitem__('SHARDPREP_TEST_DELAYS', 'pool.task=2')")
        try:
            proc = subprocess.Popen([sys.executable, "-m", "shardprep.run", "--input", f"{raw}/*.csv", "--output",
                                     str(out), "--num-shards", "2", "--runner", "dask", "--dask-address",
                                     separate_cluster], env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            deadline = time.monotonic() + 120
            while not list(out.glob("run-*/spill/parsed-*")):  # a unit parsed: the next ones are under way
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline, "Parse never wrote its spill"
                time.sleep(0.02)
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=120)
            time.sleep(3)  # longer than a task's delay: what a task under way writes, it has written
        finally:
            client.run(eval, "__import__('os').environ.pop('SHARDPREP_TEST_DELAYS', None)")
    assert proc.returncode == 130, err
    assert err.splitlines()[-1] == "shardprep.run: interrupted", err
    assert not list(out.glob("run-*")), sorted(str(p) for p in out.rglob("*"))


def test_too_many_bad_records_commit_nothing_on_dask(raw_with_bad, cluster, tmp_path, capsys):
    out = tmp_path / "ds"
    assert reshard(raw_with_bad, out, "--num-shards", 2, "--unit-mb", 0.05, "--runner", "dask",
                   "--dask-address", cluster) == 1
    assert "2 bad records (more than --max-bad-records 0)" in capsys.readouterr().err
    assert not (out / "manifest.json").exists()
    (report,) = out.glob("run-*/report.json")
    assert json.loads(report.read_text())["accounting"] == {"read": 3402, "written": 3400, "rejected": 2}
    dead = [json.loads(line) for f in out.glob("run-*/rejected/*.jsonl") for line in f.read_text().splitlines()]
    assert sorted(d["reason"] for d in dead) == ["csv_columns", "csv_columns"]


# --- the runner itself: multiple outputs, side inputs, every sink --------------------------------


class _Fork(beam.DoFn):
    def process(self, x: int):
        yield x
        if x % 3 == 0:
            yield pvalue.TaggedOutput("threes", ("three", x))
        yield pvalue.TaggedOutput("facts", {"seen": x})


class _WithSide(beam.DoFn):
    def process(self, x: int, squares: list):
        yield {"x": x, "side_len": len(squares), "side_unique": len(set(squares)), "pid": os.getpid()}


def _dump(element: object, folder: str, name: str) -> None:
    """A sink: one JSON file per element, so the test sees what each branch received."""
    import uuid

    path = os.path.join(folder, name)
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, f"{uuid.uuid4().hex}.json"), "w") as f:
        json.dump(element, f)


def _read(folder: Path, name: str) -> list:
    return [json.loads(p.read_text()) for p in sorted((folder / name).glob("*.json"))]


def _dask_pipeline(cluster: str, partitions: int = 5) -> beam.Pipeline:
    options = PipelineOptions([f"--dask_client_address={cluster}", f"--dask_npartitions={partitions}"])
    return beam.Pipeline(runner=DaskRunner(), options=options)


def _run(pipeline: beam.Pipeline) -> None:
    result = pipeline.run()
    try:
        result.wait_until_finish()
    finally:
        result.client.close()


def test_multiple_outputs_side_inputs_and_every_sink_on_dask(cluster, tmp_path):
    p = _dask_pipeline(cluster)
    forked = p | beam.Create(list(range(30))) | "Fork" >> beam.ParDo(_Fork()).with_outputs("threes", "facts", main="nums")
    # Three consumers of one PCollection, and a side input that flattens two of them: Beam's own
    # translation hands all three the same one-shot iterator and this side input lost a partition.
    squares = forked.nums | "Square" >> beam.Map(lambda x: x * x)
    cubes = forked.nums | "Cube" >> beam.Map(lambda x: -x * x * x - 1)
    powers = (squares, cubes) | "Powers" >> beam.Flatten()
    (forked.nums | "WithSide" >> beam.ParDo(_WithSide(), squares=beam.pvalue.AsList(powers))
     | "DumpSide" >> beam.Map(_dump, str(tmp_path), "side"))
    forked.threes | "DumpThrees" >> beam.Map(_dump, str(tmp_path), "threes")  # a sink that is not the last step
    forked.facts | "DumpFacts" >> beam.Map(_dump, str(tmp_path), "facts")
    _run(p)

    side = _read(tmp_path, "side")
    assert sorted(r["x"] for r in side) == list(range(30))  # the main output only, each element once
    assert {(r["side_len"], r["side_unique"]) for r in side} == {(60, 60)}  # side input whole, no duplicates
    assert os.getpid() not in {r["pid"] for r in side}  # ran in the cluster's worker processes
    assert sorted(tuple(r) for r in _read(tmp_path, "threes")) == [("three", x) for x in range(0, 30, 3)]
    assert sorted(r["seen"] for r in _read(tmp_path, "facts")) == list(range(30))


def _compute(pipeline: beam.Pipeline, scheduler: str, buckets: int = 2) -> list:
    """The task graph ``DaskRunner`` submits for ``pipeline``, run in this process by one of Dask's
    local schedulers; the sinks' partitions concatenated."""
    import dask.threaded
    from apache_beam.runners.dask.overrides import dask_overrides

    from pipelines.dask_graph import Visitor, fused

    pipeline.replace_all(dask_overrides())
    visitor = Visitor({"npartitions": 2}, buckets=buckets)
    pipeline.visit(visitor)
    graph, keys = fused(visitor.sinks())
    get = dask.get if scheduler == "sync" else dask.threaded.get
    return [x for part in get(graph, keys) for x in part]


@pytest.mark.parametrize("scheduler", ["sync", "threads"])
def test_each_partition_returns_only_its_own_outputs_and_shared_inputs_are_not_drained(scheduler):
    """Deterministic, no cluster. Beam's own translation returned 8 (sync) and 56 (threads) elements
    for this Flatten instead of 4: every partition also returned what earlier ones produced."""
    p = beam.Pipeline()
    src = p | beam.Create([1, 2, 3])
    a = src | "A" >> beam.Map(lambda x: ("a", x))
    b = src | "B" >> beam.Filter(lambda x: x == 1) | "B2" >> beam.Map(lambda x: ("b", x))
    both = (a, b) | "Both" >> beam.Flatten()
    src | "WithSide" >> beam.Map(lambda x, side: (x, sorted(side)), beam.pvalue.AsList(both))
    expected = [("a", 1), ("a", 2), ("a", 3), ("b", 1)]
    assert sorted(_compute(p, scheduler)) == [(None, (x, expected)) for x in (1, 2, 3)]


_CALLS: list = []


def _counted(x: int) -> int:
    _CALLS.append(x)
    return x


@pytest.mark.parametrize("scheduler", ["sync", "threads"])
def test_steps_upstream_of_a_side_input_and_a_group_by_key_run_once_per_element(scheduler):
    """Handed to Dask as an ``Item``, a side input was optimised as a graph of its own, so every step
    upstream of it ran twice (in the re-shard: Parse, its spill files written twice)."""
    _CALLS.clear()
    p = beam.Pipeline()
    src = p | beam.Create(list(range(8))) | "Counted" >> beam.Map(_counted)
    side = src | "Side" >> beam.Map(lambda x: x * 10)
    keyed = src | "WithSide" >> beam.Map(lambda x, s: (x % 3, (x, sum(s))), beam.pvalue.AsList(side))
    keyed | "Group" >> beam.GroupByKey() | "Sorted" >> beam.MapTuple(lambda k, vs: (k, sorted(vs)))
    out = sorted(element for _, element in _compute(p, scheduler, buckets=2))
    assert sorted(_CALLS) == list(range(8))
    assert out == [(k, [(x, 280) for x in range(k, 8, 3)]) for k in range(3)]


def test_the_reshard_graph_grows_linearly_with_work_units(raw, tmp_path):
    """Beam's translation made 2,176 tasks of 12 work units (Dask's concat and groupby shuffles, an
    alias per fused chain, the side inputs' upstream twice), ~3 ms of CPU each; each step now runs
    once per partition, and an exchange costs n + m tasks."""
    from apache_beam.runners.dask.overrides import dask_overrides
    from dask._task_spec import Alias

    from pipelines.dask_graph import Visitor, fused
    from pipelines.reshard import build

    assert reshard(raw, tmp_path / "template", "--num-shards", 2) == 0
    m = manifest.load(str(tmp_path / "template"))
    files = formats.expand_inputs([f"{raw}/*.csv"], "auto")
    units = formats.plan_units(files, unit_bytes=20_000)
    cfg = config.ReshardConfig(output=str(tmp_path / "ds"), run_id=naming.new_run_id(), features=m.features,
                               sources=tuple((f.url, f.size) for f in files), splits=planning.parse_splits("train"),
                               num_shards=2)
    n, buckets = len(units), 4
    p = beam.Pipeline(options=PipelineOptions([f"--dask_npartitions={n}"]))
    build(p, cfg, units)
    p.replace_all(dask_overrides())
    visitor = Visitor({"npartitions": n}, buckets=buckets)
    p.visit(visitor)
    graph, _ = fused(visitor.sinks())
    names = [(key[0] if isinstance(key, tuple) else key).rsplit("-", 1)[0] for key in graph]
    assert n >= 8
    assert not [k for k, node in graph.items() if isinstance(node, Alias)]
    for step in ("Reshard_Parse_ParDo_Parse", "Reshard_Assign_ParDo_Assign", "Reshard_Count"):
        assert names.count(step) == n, step
    assert names.count("Reshard_WriteShards") == buckets
    exchanges = sum(1 for name in set(names) if name.endswith("GroupByKey_split"))
    assert len(graph) <= 10 * n + exchanges * (n + buckets) + 2  # each exchange: n splits, m groups


def _bump(count: tuple) -> tuple:
    """The same (split, unit, part) key with one record more: a runner delivering inconsistent counts."""
    split, unit, part, n, size = count
    return split, unit, part, n + 1, size


def _shards_with_side_input(cluster: str, raw: Path, out: Path, *, copies: int, conflict: bool = False) -> list:
    """Parse -> Assign -> GroupByShard -> WriteShards as in ``Reshard``, with the counts side input
    delivered ``copies`` times (plus one conflicting count); returns (split, shard, crc32c, records)."""
    m = manifest.load(str(out.parent / "template"))
    files = formats.expand_inputs([f"{raw}/*.csv"], "auto")
    units = formats.plan_units(files, unit_bytes=50_000)
    cfg = config.ReshardConfig(output=str(out), run_id=naming.new_run_id(), features=m.features,
                               sources=tuple((f.url, f.size) for f in files),
                               splits=planning.parse_splits("train=0.9,eval=0.1"), num_shards=2)
    p = _dask_pipeline(cluster, partitions=len(units))
    planned = p | beam.Create(units)
    ranges = planned | "CountRanges" >> beam.ParDo(InLine(CountRanges()))  # the nominal units' cuts, as in Reshard
    parsed = planned | "Parse" >> beam.ParDo(InLine(parse.Parse(cfg)), beam.pvalue.AsList(ranges)).with_outputs(
        elements.REJECTED, elements.FACTS, main="records")
    counts = [parsed.records | f"Count{i}" >> beam.Map(spill.count) for i in range(copies)]
    if conflict:
        counts.append(parsed.records | "Bump" >> beam.Filter(lambda b: tuple(b[1]) == (0, 0) and b[2] == 0)
                      | "Count" >> beam.Map(spill.count) | beam.Map(_bump))
    side = tuple(counts) | "Counts" >> beam.Flatten()
    assigned = parsed.records | "Assign" >> beam.ParDo(InLine(stages.Assign(cfg)), beam.pvalue.AsList(side)).with_outputs(
        elements.FACTS, main="pieces")
    (assigned.pieces | beam.GroupByKey() | beam.ParDo(InLine(stages.WriteShard(cfg)))
     | beam.Map(lambda f: _dump([f.split, f.index, f.info.crc32c, f.info.num_records], str(out), "facts")))
    _run(p)
    return sorted(map(tuple, _read(out, "facts")))


def test_side_input_delivered_three_times_gives_the_same_shards_and_a_conflict_fails(cluster, raw, tmp_path):
    assert reshard(raw, tmp_path / "template", "--num-shards", 2, "--split", "train=0.9,eval=0.1") == 0
    once = _shards_with_side_input(cluster, raw, tmp_path / "once", copies=1)
    thrice = _shards_with_side_input(cluster, raw, tmp_path / "thrice", copies=3)
    assert once == thrice
    assert [(s, k, n) for s, k, _, n in once] == [(0, 0, 1347), (0, 1, 1346), (1, 0, 154), (1, 1, 153)]
    template = manifest.load(str(tmp_path / "template"))
    assert [c for _, _, c, _ in once] == [s.crc32c for split in ("train", "eval") for s in template.splits[split].shards]

    with pytest.raises(Exception, match="two different counts"):
        _shards_with_side_input(cluster, raw, tmp_path / "conflict", copies=1, conflict=True)
    assert not list((tmp_path / "conflict").rglob("*.tfrecord"))
