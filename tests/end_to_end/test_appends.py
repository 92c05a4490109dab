"""Appends (issue 56): generations, the exclusive commit, the schema check, versions, merged statistics,
``--dedup exact`` (in a run and against the data set), on the local engine, Beam, Dask and GCS.

Every run is a real ``python -m shardprep.run`` process; races are real processes on one folder; GCS
is the emulator (``tests.gcs_emulator``)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shardprep import manifest, reader, verify, versions
from tests.conftest import ROOT, run_cli, sample_rows, write_csv
from tests.gcs_emulator import gcs, gcs_emulator  # noqa: F401 - fixtures

RUN = "shardprep.run"
FLAGS = ("--num-shards", "4", "--split", "train=0.8,eval=0.2")


def _ids(root: Path, split: str, **kwargs) -> list[int]:
    return sorted(int(r["id"]) for r in reader.open(str(root), split, parsed=True, **kwargs))


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*.tfrecord"))}


@pytest.fixture
def inputs(tmp_path: Path) -> dict[str, Path]:
    rows = {name: sample_rows(n, start=start)
            for name, (start, n) in {"base": (0, 600), "day2": (600, 60), "day3": (660, 3), "day4": (700, 40),
                                              "day5": (800, 50)}.items()}
    rows["all"] = rows["base"] + rows["day2"] + rows["day3"]
    return {name: write_csv(tmp_path / "in" / f"{name}.csv", r) for name, r in rows.items()}


def test_append_adds_a_balanced_generation_and_keeps_every_version(inputs, tmp_path) -> None:
    out = tmp_path / "ds"
    run_cli(RUN, "--input", inputs["base"], "--output", out, *FLAGS, check=True)
    first = _files(out)
    run_cli(RUN, "--input", inputs["day2"], "--output", out, "--append", *FLAGS, check=True)
    tiny = run_cli(RUN, "--input", inputs["day3"], "--output", out, "--append", *FLAGS, check=True)
    assert "shardprep.compact" in tiny.stderr  # a generation of a few records is warned about
    m = manifest.load(str(out))
    assert (m.data_version, m.parent, [g.data_version for g in m.generations]) == (3, 2, [1, 2, 3])
    assert {k: v for k, v in _files(out).items() if k in first} == first  # committed shards never rewritten
    assert verify.verify(str(out))[0] == [] and m.accounting.written == 663
    for split in m.splits:  # each generation exactly balanced on its own
        for g in m.generations:
            counts = [s.num_records for s in m.splits[split].shards if s.path.startswith(g.run_id)]
            assert not counts or max(counts) - min(counts) <= 1
    assert sorted(_ids(out, "train") + _ids(out, "eval")) == list(range(663))
    # every version stays readable: the reader, verify --version, a pinned run id
    assert sorted(_ids(out, "train", version=1) + _ids(out, "eval", version=1)) == list(range(600))
    assert len(_ids(out, "train", version=2) + _ids(out, "eval", version=2)) == 660
    assert verify.verify(str(out), version=1)[0] == []
    assert run_cli("shardprep.verify", out, "--version", "2", check=True).stdout.startswith("OK")
    assert manifest.load(str(out), run_id=m.generations[0].run_id).data_version == 1
    # the statistics of the merged sketches are those of one run over every record
    whole = tmp_path / "whole"
    run_cli(RUN, "--input", inputs["all"], "--output", whole, *FLAGS, check=True)
    one = manifest.load(str(whole))
    assert m.statistics == one.statistics and m.features == one.features
    assert _ids(out, "eval") == _ids(whole, "eval")  # the split of a record is its own hash: the same
    # compaction: one exactly balanced generation of the same records and statistics, version 4
    run_cli("shardprep.compact", out, check=True)
    c = manifest.load(str(out))
    assert (c.data_version, c.parent, len(c.generations), c.statistics) == (4, 3, 1, one.statistics)
    assert {c.head_run} == c.run_ids and verify.verify(str(out))[0] == []
    for split, info in c.splits.items():
        assert max(s.num_records for s in info.shards) - min(s.num_records for s in info.shards) <= 1
        assert _ids(out, split) == _ids(whole, split)
    assert verify.verify(str(out), version=3)[0] == []  # the version before stays readable
    # clean --keep-versions 1: older versions are refused, their files gone, the current one is whole
    run_cli("shardprep.clean", out, "--keep-versions", "1", check=True)
    with pytest.raises(manifest.ManifestError, match="version 1 of .* is not kept"):
        versions.load(str(out), version=1)
    refused = run_cli("shardprep.verify", out, "--version", "3")
    assert refused.returncode == 2 and "not kept" in refused.stderr and "Traceback" not in refused.stderr
    assert verify.verify(str(out))[0] == [] and sorted(p.name for p in out.glob("run-*")) == [c.head_run]


def test_an_append_of_another_schema_is_refused_before_any_record_is_read(inputs, tmp_path) -> None:
    out = tmp_path / "ds"
    run_cli(RUN, "--input", inputs["base"], "--output", out, *FLAGS, check=True)
    before = sorted(p.name for p in out.iterdir())
    extra = write_csv(tmp_path / "in" / "extra.csv", [{**r, "z": 1} for r in sample_rows(20, start=900)])
    typed = write_csv(tmp_path / "in" / "typed.csv", [{**r, "label": f"c{r['label']}"} for r in sample_rows(20, start=900)])
    lacking = write_csv(tmp_path / "in" / "lacking.csv", [{k: v for k, v in r.items() if k != "x1"}
                                                          for r in sample_rows(20, start=900)])
    for path, expected in ((extra, "has feature 'z', which the data set"), (typed, "feature 'label' is string []"),
                           (lacking, "feature 'x1' (float32 []) of the data set")):
        proc = run_cli(RUN, "--input", path, "--output", out, "--append", *FLAGS)
        assert proc.returncode == 2 and expected in proc.stderr, proc.stderr
        assert len([line for line in proc.stderr.splitlines() if "error" in line]) == 1 and "Traceback" not in proc.stderr
    for args, expected in ((("--split", "train=0.5,test=0.5"), "has splits eval, train"), (("--split", "train=0.8,eval=0.2", "--seed", "3"), "--seed 42"),
                           ((), "give --split")):
        proc = run_cli(RUN, "--input", inputs["day2"], "--output", out, "--append", "--num-shards", "4", *args)
        assert proc.returncode == 2 and expected in proc.stderr, proc.stderr
    again = run_cli(RUN, "--input", inputs["base"], "--output", out, "--append", *FLAGS)  # the same input twice
    assert again.returncode == 1 and "appended before" in again.stderr, again.stderr
    proc = run_cli(RUN, "--input", inputs["day2"], "--output", tmp_path / "none", "--append", *FLAGS)
    assert proc.returncode == 2 and "holds no committed data set" in proc.stderr
    assert manifest.load(str(out)).data_version == 1 and verify.verify(str(out))[0] == []
    assert sorted(p.name for p in out.iterdir()) == before or len(list(out.glob("run-*"))) == 2  # a refused run's report


def _slow(args: list, delays: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SHARDPREP_TEST_DELAYS": delays}
    return subprocess.Popen([sys.executable, "-m", RUN, *map(str, args)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT)


@pytest.mark.parametrize("second", ["--append", "--overwrite"])
def test_racing_runs_exactly_one_commits_and_the_other_loses_nothing(inputs, tmp_path, second) -> None:
    """A run that read version 1, slowed before its lease, while an append commits version 2: refused at
    its commit (exit 1, naming it), its folder removed; its rerun commits. And two runs that overlap
    under the lease: the second is refused at once."""
    out = tmp_path / "ds"
    run_cli(RUN, "--input", inputs["base"], "--output", out, *FLAGS, check=True)
    late = _slow(["--input", inputs["day5"], "--output", out, second, *FLAGS], "run.planned=12")
    time.sleep(3)  # it has read version 1 and waits
    run_cli(RUN, "--input", inputs["day2"], "--output", out, "--append", *FLAGS, check=True)
    _, err = late.communicate(timeout=300)
    assert late.returncode == 1, err
    assert "changed while run" in err and "version 2" in err and "nothing was committed" in err, err
    m = manifest.load(str(out))
    assert m.data_version == 2 and m.accounting.written == 660
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("run-")) == sorted(m.run_ids)  # nothing left
    run_cli(RUN, "--input", inputs["day5"], "--output", out, second, *FLAGS, check=True)  # the rerun: nothing lost
    assert manifest.load(str(out)).accounting.written == (710 if second == "--append" else 50)
    # overlapping under the lease: the second is refused at once, the first commits
    first = _slow(["--input", inputs["day4"], "--output", out, "--append", *FLAGS], "commit.leased=8")
    deadline = time.time() + 120
    while not (out / "_lease.json").exists() and time.time() < deadline:
        time.sleep(0.1)
    other = run_cli(RUN, "--input", inputs["day3"], "--output", out, second, *FLAGS)
    assert other.returncode == 1 and "another run owns" in other.stderr, other.stderr
    assert first.wait(300) == 0
    assert verify.verify(str(out))[0] == [] and manifest.load(str(out)).data_version == 4


def _dead_letters(root: Path) -> list[dict]:
    m = manifest.load(str(root))
    return [json.loads(line) for path in m.rejected.paths for line in (root / path).read_text().splitlines()]


def _shard_bytes(root: Path) -> dict[str, bytes]:
    """Every shard's bytes by its path below its run folder (run ids differ between runs)."""
    return {p.split("/", 1)[1]: (root / p).read_bytes() for s in manifest.load(str(root)).splits.values()
            for p in (x.path for x in s.shards)}


@pytest.fixture
def repeats(tmp_path: Path) -> dict[str, Path]:
    """``base``: 300 rows then rows 0-99 again; ``day2``: rows 250-349 (50 in the data set), 300-309 twice;
    ``keyed``: rows 340-359 with new x values (ids 340-349 already appended)."""
    base = sample_rows(300)
    day2 = base[250:] + sample_rows(50, start=300)
    keyed = [{**r, "x0": 9.0} for r in sample_rows(20, start=340)]
    return {"base": write_csv(tmp_path / "in" / "base.csv", base + base[:100]),
            "day2": write_csv(tmp_path / "in" / "day2.csv", day2 + day2[50:60]),
            "keyed": write_csv(tmp_path / "in" / "keyed.csv", keyed)}


def test_dedup_exact_drops_repeats_in_the_run_and_of_the_data_set(repeats, tmp_path) -> None:
    """A repeat is a dead letter ``duplicate`` naming its position and the record kept (the lowest
    position); the same shards for any worker count; an append drops records already in the data set."""
    out, again = tmp_path / "ds", tmp_path / "two"
    run_cli(RUN, "--input", repeats["base"], "--output", out, *FLAGS, "--dedup", "exact", "--local-workers", "1",
            check=True)
    run_cli(RUN, "--input", repeats["base"], "--output", again, *FLAGS, "--dedup", "exact", "--local-workers", "2",
            "--unit-mb", "0.01", check=True)
    assert _shard_bytes(out) == _shard_bytes(again)
    m = manifest.load(str(out))
    assert (m.accounting.read, m.accounting.written, m.rejected.by_reason) == (400, 300, {"duplicate": 100})
    assert m.sources[0].num_records == 300 and m.sources[0].num_rejected == 100
    letters = sorted(_dead_letters(out), key=lambda x: x["position"])
    assert [x["position"] for x in letters] == list(range(300, 400))
    assert letters[0]["detail"] == f"the same Example bytes as record 0 of {repeats['base']}, kept"
    assert m.generations[0].hashes.num_records == 300 and verify.verify(str(out))[0] == []
    assert {s: m.statistics[s]["id"]["count"] for s in m.splits} == {s: x.num_records for s, x in m.splits.items()}
    assert sorted(_ids(out, "train") + _ids(out, "eval")) == list(range(300))

    run_cli(RUN, "--input", repeats["day2"], "--output", out, "--append", *FLAGS, "--dedup", "exact", check=True)
    m = manifest.load(str(out))
    assert m.generations[1].duplicates == 60 and m.rejected.by_reason == {"duplicate": 160}
    assert {s: m.statistics[s]["id"]["count"] for s in m.splits} == {s: x.num_records for s, x in m.splits.items()}
    assert sorted(_ids(out, "train") + _ids(out, "eval")) == list(range(350))
    details = [x["detail"] for x in _dead_letters(out) if x["source"] == str(repeats["day2"])]
    assert sum("already in the data set (generation 1" in d for d in details) == 50 and len(details) == 60
    assert verify.verify(str(out))[0] == [] and verify.verify(str(out), version=1)[0] == []
    run_cli("shardprep.compact", out, check=True)  # the compacted generation keeps every generation's hashes
    c = manifest.load(str(out))
    assert len(c.generations) == 1 and c.generations[0].hashes.num_records == 350
    twice = run_cli(RUN, "--input", repeats["day2"], "--output", out, "--append", *FLAGS, "--dedup", "exact")
    assert twice.returncode == 1 and "nothing to append" in twice.stderr, twice.stderr

    # --dedup-key: the same id is a repeat whatever the other values; the data set's hashes are of whole records
    proc = run_cli(RUN, "--input", repeats["keyed"], "--output", out, "--append", *FLAGS, "--dedup", "exact",
                   "--dedup-key", "id")
    assert proc.returncode == 2 and "deduplicated with no --dedup-key" in proc.stderr, proc.stderr
    keyed = tmp_path / "keyed"
    run_cli(RUN, "--input", repeats["base"], "--output", keyed, *FLAGS, "--dedup", "exact", "--dedup-key", "id",
            check=True)
    run_cli(RUN, "--input", repeats["keyed"], "--output", keyed, "--append", *FLAGS, "--dedup", "exact",
            "--dedup-key", "id", check=True)
    assert manifest.load(str(keyed)).generations[1].duplicates == 0  # ids 340-359 are new to that data set
    again_keyed = run_cli(RUN, "--input", repeats["keyed"], "--output", keyed, "--append", *FLAGS, "--dedup", "exact",
                          "--dedup-key", "id")
    assert again_keyed.returncode == 1 and "nothing to append" in again_keyed.stderr, again_keyed.stderr


def test_dedup_exact_statistics_are_those_of_the_records_kept(tmp_path) -> None:
    """Parse counts every record it reads; where the run drops repeats, the statistics of the shards
    written replace those (``graph.stages.MergeStats``): the same as a run over the records kept."""
    rows = sample_rows(3000)
    kept, repeated = tmp_path / "kept", tmp_path / "repeated"
    run_cli(RUN, "--input", write_csv(tmp_path / "kept.csv", rows), "--output", kept, *FLAGS, "--statistics", "on",
            check=True)
    run_cli(RUN, "--input", write_csv(tmp_path / "repeated.csv", rows + rows[:700]), "--output", repeated, *FLAGS,
            "--statistics", "on", "--dedup", "exact", "--local-workers", "2", "--unit-mb", "0.05", check=True)
    a, b = manifest.load(str(kept)), manifest.load(str(repeated))
    assert b.rejected.by_reason == {"duplicate": 700} and set(b.sketches) == set(b.splits)
    assert a.statistics == b.statistics and a.statistics["train"]["id"]["count"] == a.splits["train"].num_records


def test_dedup_flags_that_cannot_work_are_refused_in_one_line(repeats, tmp_path) -> None:
    out = tmp_path / "ds"
    run_cli(RUN, "--input", repeats["base"], "--output", out, *FLAGS, check=True)
    for args, expected in (
        (("--append", "--dedup", "exact"), "generation 1 (run"),
        (("--append", "--dedup", "near"), "--dedup near goes with --task"),
        (("--append", "--dedup-key", "id"), "--dedup-key id goes with --dedup exact"),
        (("--overwrite", "--dedup", "exact", "--dedup-key", "nope"), "--dedup-key nope: not a feature"),
    ):
        proc = run_cli(RUN, "--input", repeats["day2"], "--output", out, *FLAGS, *args)
        assert proc.returncode == 2 and expected in proc.stderr, (args, proc.stderr)
        assert len([x for x in proc.stderr.splitlines() if "error" in x]) == 1 and "Traceback" not in proc.stderr
    assert manifest.load(str(out)).data_version == 1


@pytest.mark.slow
@pytest.mark.parametrize("engine", [["--runner", "beam"], ["--runner", "dask", "--dask-workers", "2"]],
                         ids=["beam", "dask"])
def test_append_and_dedup_on_beam_and_dask_match_the_local_engine(repeats, tmp_path, engine) -> None:
    local, other = tmp_path / "local", tmp_path / "other"
    for root, extra in ((local, ["--local-workers", "1"]), (other, engine)):
        run_cli(RUN, "--input", repeats["base"], "--output", root, *FLAGS, "--dedup", "exact", "--unit-mb", "0.01",
                *extra, check=True)
        run_cli(RUN, "--input", repeats["day2"], "--output", root, "--append", *FLAGS, "--dedup", "exact",
                "--unit-mb", "0.01", *extra, check=True)
    assert _shard_bytes(other) == _shard_bytes(local)
    def strip(root: Path) -> list[dict]:  # the run ids in the details differ
        return [{**x, "detail": re.sub(r"run-[0-9TZ]+-[0-9a-f]+", "RUN", x["detail"])} for x in _dead_letters(root)]

    assert strip(other) == strip(local)
    a, b = manifest.load(str(local)), manifest.load(str(other))
    assert ([g.hashes.crc32c for g in a.generations] == [g.hashes.crc32c for g in b.generations]
            and b.rejected.by_reason == {"duplicate": 160} and verify.verify(str(other))[0] == [])
    # the statistics of the records kept (recounted from the shards written), the same on every engine
    assert b.statistics == a.statistics and a.statistics["train"]["id"]["count"] == a.splits["train"].num_records


@pytest.mark.slow
def test_append_and_dedup_on_gcs_match_a_local_data_set(gcs, repeats, tmp_path) -> None:  # noqa: F811
    local = tmp_path / "local"
    out = gcs.url("ds")
    for name, extra in (("base", []), ("day2", ["--append"])):
        gcs.upload(repeats[name], f"in/{name}.csv")
        run_cli(RUN, "--input", repeats[name], "--output", local, *FLAGS, "--dedup", "exact", *extra, check=True)
        run_cli(RUN, "--input", gcs.url(f"in/{name}.csv"), "--output", out, *FLAGS, "--dedup", "exact", *extra,
                check=True)
    m, here = manifest.load(out), manifest.load(str(local))
    assert [s.crc32c for x in m.splits.values() for s in x.shards] == [s.crc32c for x in here.splits.values()
                                                                       for s in x.shards]
    assert m.rejected.by_reason == {"duplicate": 160} and m.data_version == 2
    assert [g.hashes.crc32c for g in m.generations] == [g.hashes.crc32c for g in here.generations]
    assert verify.verify(out)[0] == [] and verify.verify(out, deep=True)[0] == []


def test_dedup_exact_reads_tfrecord_input_as_the_same_examples(repeats, tmp_path) -> None:
    """TFRecord input (a data set's shard, given as two files): its records pass through as they are,
    and the second file's copies are duplicates of the first file's records."""
    made = tmp_path / "made"
    run_cli(RUN, "--input", repeats["day2"], "--output", made, "--num-shards", "1", check=True)  # 110, 10 repeated
    (shard,) = made.glob("run-*/train/*.tfrecord")
    a, b = tmp_path / "in" / "a.tfrecord", tmp_path / "in" / "b.tfrecord"
    a.write_bytes(shard.read_bytes())
    b.write_bytes(shard.read_bytes())
    out = tmp_path / "ds"
    run_cli(RUN, "--input", a, "--input", b, "--output", out, "--num-shards", "2", "--dedup", "exact", check=True)
    m = manifest.load(str(out))
    assert (m.accounting.written, m.rejected.by_reason) == (100, {"duplicate": 120})
    letters = _dead_letters(out)
    assert sorted(x["position"] for x in letters if x["source"] == str(b)) == list(range(110))
    assert all(x["detail"].endswith(f"of {a}, kept") for x in letters)
    assert sorted(_ids(out, "train")) == sorted({int(r["id"]) for r in reader.open(str(made), "train", parsed=True)})
