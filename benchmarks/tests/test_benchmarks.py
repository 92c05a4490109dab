"""Checks of the benchmark's own arithmetic and report (``python -m pytest benchmarks/tests``)."""
from __future__ import annotations

import json
import os
import struct

import pytest

from benchmarks import balance, profile, report, scaling
from benchmarks.harness import Contender, alternate, run_process, summarize
from benchmarks.tfrecords import count_records


def test_spread_and_file_mode_idle_steps() -> None:
    assert balance.spread([10, 12, 11])["max"] == 12
    # 3 files for 2 workers: worker 0 reads files 0 and 2 (150 records), worker 1 file 1 (50)
    row = balance._file_mode([100, 50, 50], 2, 10)
    assert row["records"] == [150, 50] and row["steps"] == [15, 5]
    assert row["empty_replica_steps"] == 10 and row["idle_fraction"] == pytest.approx(10 / 30, abs=1e-3)
    assert "fails" in balance._file_mode([5, 5], 3, 2)


def test_exact_plan_has_equal_steps() -> None:
    row = balance._exact([101] * 64, 3, 64)
    assert len(set(row["steps"])) == 1 and row["empty_replica_steps"] == 0


def test_split_record_counts_and_round_robin(tmp_path) -> None:
    path = tmp_path / "a.csv"
    path.write_bytes(b"id,x\n" + b"".join(b"%05d,x\n" % i for i in range(1000)))  # 8 bytes a record
    counts = balance._split_record_counts(str(path), 800)
    assert counts == [100] * 10
    rr = balance.beam_round_robin([str(path)], 8, split_bytes=800, seed=1)
    assert sum(rr) == 1000 and max(rr) - min(rr) <= len(counts)
    assert sum(balance.hashed([str(path)], 8)) == 1000
    assert balance.raw_counts([str(path)]) == [1000]


def test_count_records(tmp_path) -> None:
    path = tmp_path / "r.tfrecord"
    with open(path, "wb") as f:
        for data in (b"a", b"bc", b""):
            f.write(struct.pack("<Q", len(data)) + b"\0" * 4 + data + b"\0" * 4)
    assert count_records(str(path)) == 3


def test_run_process_measures_a_child() -> None:
    run = run_process(["python3", "-c", "x = bytearray(50 << 20); print('ok')"])
    assert run.returncode == 0 and run.max_rss_mb >= 50 and run.wall_s > 0
    assert summarize([run, run])["n"] == 2


def test_alternate_times_unpolled_rounds_and_measures_memory_in_one_more(tmp_path) -> None:
    marks = tmp_path / "runs"
    code = (f"import time; x = bytearray(80 << 20); open({str(marks)!r}, 'a').write('run\\n'); "
            "time.sleep(0.5)")  # long enough for the 50 ms sampler
    runs = alternate([Contender("alloc", ["python3", "-c", code])], 2, log=lambda _: None)["alloc"]
    assert marks.read_text().count("run") == 3  # 2 timed rounds, then the memory round
    assert len(runs) == 2 and all(r.tree_rss_mb >= 60 and r.tree_pss_mb >= 60 for r in runs), runs
    polled = run_process(["python3", "-c", code])
    unpolled = run_process(["python3", "-c", code], poll=False)
    assert polled.tree_rss_mb >= 60 and unpolled.tree_rss_mb == 0


def test_scaling_compare_runs_every_format_and_compares_their_shards() -> None:
    # issue 12's comparison (make bench): the same rows as CSV, Parquet and JSON Lines, for real;
    # every contender must write the shards of the one-process CSV run (crc32c)
    # and two one-process runs at once, each into its own folder (the machine's ceiling)
    result = scaling.compare(3000, 4, 1, names=["two_at_once", "parquet_one_process", "jsonl_one_process"],
                             log=lambda _: None)
    summary = result["summary"]
    assert list(summary) == ["one_process", "two_at_once", "parquet_one_process", "jsonl_one_process"]
    pair = summary["two_at_once"]  # its throughput counts both copies' work
    one = summary["one_process"]
    assert pair["mb_per_s"] * pair["wall_s"] == pytest.approx(2 * one["mb_per_s"] * one["wall_s"], rel=0.05), pair
    assert not os.path.exists(scaling.WORK)  # both copies' folders removed with the rest
    assert all(v["same_shards"] and v["n"] == 1 and v["peak_over_final"] >= 1.0 for v in summary.values()), summary
    assert summary["one_process"]["speedup"] == 1.0
    goals = {g["goal"]: g for g in result["goals"]}
    assert goals["contenders whose shards differ from one process's (crc32c)"]["value"] == 0
    assert {"Parquet time / CSV time (one process)", "JSON Lines time / CSV time (one process)"} <= set(goals)
    assert not any("Dask" in name for name in goals)  # only the goals of the contenders that ran
    assert 0 < result["share_of_pyarrow_first_pass"] < 10
    assert len(scaling.table(result)) == 2 + 4


def test_report_renders_from_results(tmp_path, monkeypatch) -> None:
    results = os.path.join(os.path.dirname(report.__file__), "results", "latest.json")
    if not os.path.exists(results):
        pytest.skip("no results yet")
    monkeypatch.setattr(report, "RESULTS", str(tmp_path))
    with open(results) as f:
        text = report.render(json.load(f))
    assert text.startswith("# Benchmarks") and "Goals at a glance" in text


def test_profile_puts_each_stack_in_the_stage_on_it():
    classify = profile.classify
    run = ["<module> (shardprep/run.py:1)", "run_job (pipelines/driver.py:59)", "run_inline (shardprep/graph/tasks.py:108)"]
    assert classify([*run, "Parse.process (shardprep/graph/parse.py:194)",
                     "framed_batches (shardprep/formats/csv/arrow.py:205)"]) == "parse: read + split CSV/JSON/TFRecord"
    assert classify([*run, "Parse.process (shardprep/graph/parse.py:194)", "spill (shardprep/graph/spill.py:45)",
                     "pack (shardprep/example/columnar.py:1)"]) == "parse: encode tf.train.Example"  # innermost decides
    assert classify([*run, "WriteShards.flush (shardprep/graph/stages.py:180)",
                     "ShardWriter.flush (shardprep/writer.py:90)"]) == "write: write + fsync shard"
    assert classify([*run, "Commit.process (shardprep/graph/stages.py:279)"]) == "commit: manifest"
    assert classify([*run, "_pickled (shardprep/job.py:139)", "StringCounts._whole (shardprep/stats/distinct.py:53)"]) \
        == "statistics: merge"
    assert classify(["<module> (shardprep/run.py:1)", "_find_and_load (<frozen importlib._bootstrap>:1165)"]) \
        == "imports and start-up"
    assert classify(["_schema (shardprep/run.py:178)", "sample_rows (shardprep/formats/files.py:259)"]) \
        == "plan: list, sample, infer schema"
    assert classify(["_shutdown (threading.py:1)"]) == "other (interpreter, logging, exit)"
