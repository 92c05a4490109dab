"""Crash safety: SIGKILL the re-shard at several points; nothing half-written ever looks finished.

Kill points:

- ``parsing``: the test kills the process from outside as soon as the first of 9 work units has
  spilled a batch (the others are still being read; the launcher logs a unit as parsed only when
  Beam takes the pool's results, by which time the pool may be writing shards);
- ``first_shard_file``: from outside, as soon as a file appears in the run's shard folder (a
  finished shard or a ``.tmp-`` one being written);
- ``mid_shard``: inside the process, half-way through writing the 3rd shard's bytes (its ``.tmp-``
  file is left behind, 2 shards are complete);
- ``before_manifest``: inside the process, when every shard and dead letter is written and the
  commit step calls ``manifest.write``.

The in-process points patch the library from a small launcher (``python -c``), so the library
reads no test-only environment variable. After every kill: no manifest, ``verify`` and the trainer
refuse the folder with one clear line, and a rerun into the same folder commits shards that are
byte-identical to an uninterrupted run and removes the crashed run's files.
"""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from shardprep import manifest, verify
from tests.conftest import ROOT, run_cli

pytestmark = pytest.mark.slow

ROWS = 80_000
RUN_ARGS = ("--num-shards", "8", "--unit-mb", "0.3", "--max-bad-records", "3")

# Launcher: runs the CLI with one library function replaced by one that SIGKILLs the process.
LAUNCHER = r"""
import os, signal, sys
from shardprep import fs, manifest, run

point = sys.argv[1]

def die():
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)

if point == "before_manifest":
    def write(root, m, data=None):
        print("KILL before manifest.write", file=sys.stderr)
        die()
    manifest.write = write
elif point == "mid_shard":
    import contextlib
    real = fs.write_atomic
    started = []

    @contextlib.contextmanager
    def write_atomic(url, **kwargs):
        with real(url, **kwargs) as f:
            if "/train/" not in url or not url.endswith(".tfrecord"):  # a shard, not its record index
                yield f
                return
            started.append(url)
            if len(started) < 3:
                yield f
                return

            class Half:
                def write(self, data):
                    f.write(data[: len(data) // 2])
                    f.flush()
                    print(f"KILL half-way through {url}", file=sys.stderr)
                    die()
            yield Half()
    fs.write_atomic = write_atomic  # the writer looks it up on the module at each call
sys.exit(run.main(sys.argv[2:]))
"""


def _write_input(folder: Path) -> Path:
    """A 5 MB CSV of ROWS rows with 2 bad ones (dead letters are part of what a crash must not break)."""
    rng = random.Random(0)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "a.csv"
    with open(path, "w") as f:
        f.write("id,x,text\n")
        for i in range(ROWS):
            f.write("bad row\n" if i in (100, 60_000) else f"{i},{rng.random():.6f},row {i} {'w' * rng.randint(0, 20)}\n")
    return path


def _args(src: Path, out: Path) -> list[str]:
    return ["--input", str(src), "--output", str(out), *RUN_ARGS]


def _shard_bytes(out: Path) -> dict[str, bytes]:
    """Shard and dead-letter file contents by path without the run id."""
    m = manifest.load(str(out))
    paths = [s.path for split in m.splits.values() for s in split.shards] + list(m.rejected.paths)
    return {p.split("/", 1)[1]: (out / p).read_bytes() for p in paths}


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    return _write_input(tmp_path_factory.mktemp("crash") / "in")


@pytest.fixture(scope="module")
def reference(source, tmp_path_factory) -> dict[str, bytes]:
    out = tmp_path_factory.mktemp("ref") / "ds"
    run_cli("shardprep.run", *_args(source, out), check=True)
    return _shard_bytes(out)


def _popen(argv: list[str]) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _kill_when_logged(proc: subprocess.Popen, pattern: str, timeout: float = 300) -> list[str]:
    """SIGKILLs ``proc`` as soon as a stderr line holds ``pattern``; returns the lines read."""
    lines: list[str] = []
    seen = threading.Event()

    def pump() -> None:
        for line in proc.stderr:
            lines.append(line)
            if pattern in line:
                proc.send_signal(signal.SIGKILL)
                seen.set()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    proc.wait(timeout)
    reader.join(10)
    assert seen.is_set(), f"the run ended before {pattern!r} was logged:\n{''.join(lines)}"
    return lines


def _kill_when_file(proc: subprocess.Popen, out: Path, glob: str, timeout: float = 300) -> list[str]:
    """SIGKILLs ``proc`` as soon as a file matching ``glob`` exists under ``out``; returns what existed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        found = list(out.glob(glob))
        if found:
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
            return sorted(p.name for p in found)
        time.sleep(0.002)
    proc.kill()
    raise AssertionError(f"no {glob} appeared before the run ended (exit {proc.returncode})")


def crash(point: str, source: Path, out: Path) -> dict:
    """Runs the re-shard into ``out`` and SIGKILLs it at ``point``; returns what was on disk after."""
    args = _args(source, out)
    if point == "parsing":
        proc = _popen([sys.executable, "-m", "shardprep.run", *args])
        _kill_when_file(proc, out, "run-*/spill/parsed-*")
    elif point == "first_shard_file":
        proc = _popen([sys.executable, "-m", "shardprep.run", *args])
        _kill_when_file(proc, out, "run-*/train/*")
    else:  # mid_shard counts the shards one process writes: the pool's processes would each count their own
        proc = _popen([sys.executable, "-c", LAUNCHER, point, *args, *(["--local-workers", "1"] * (point == "mid_shard"))])
        lines = _kill_when_logged(proc, "KILL ")
        assert not any("committed" in line for line in lines)
    assert proc.returncode == -signal.SIGKILL
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()) if out.exists() else []
    return {
        "files": files,
        "shards": sum(1 for f in files if "/train/" in f and f.endswith(".tfrecord")),  # not their record indexes
        "tmp": sum(1 for f in files if ".tmp-" in f),
    }


def _trainer_refuses(data: Path, model_dir: Path) -> None:
    proc = run_cli("trainer.train", "--data", data, "--model", "mlp", "--label", "id", "--per-replica-batch", 8,
                   "--epochs", 1, "--model-dir", model_dir)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("trainer.train: error:")]
    assert len(errors) == 1 and "no manifest" in errors[0], proc.stderr
    assert not model_dir.exists() or not any(model_dir.rglob("*.index")), "the trainer wrote a checkpoint"


POINTS = ["parsing", "first_shard_file", "mid_shard", "before_manifest"]


@pytest.mark.parametrize("point", POINTS)
def test_sigkill_leaves_no_data_set_and_a_rerun_is_byte_identical(point, source, reference, tmp_path) -> None:
    out = tmp_path / "ds"
    state = crash(point, source, out)
    assert not (out / "manifest.json").exists()
    assert "manifest.json" not in state["files"]
    if point == "mid_shard":
        assert state["shards"] == 2 and state["tmp"] == 1, state
    if point == "before_manifest":
        assert state["shards"] == 8 and state["tmp"] == 0, state
    if point == "parsing":
        assert state["shards"] == 0, state

    proc = run_cli("shardprep.verify", out)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "no manifest" in proc.stderr, proc.stderr
    crashed_runs = {f.split("/", 1)[0] for f in state["files"] if "/" in f}  # not the TFDS files beside the manifest
    if point == "before_manifest":  # every shard is there, only the manifest is missing: the trainer refuses
        _trainer_refuses(out, tmp_path / "model")

    run_cli("shardprep.run", *_args(source, out), check=True)  # no --overwrite: nothing was committed
    assert _shard_bytes(out) == reference
    assert verify.verify(str(out))[0] == []
    assert not any((out / r).exists() for r in crashed_runs), "the crashed run's files were not removed"
    assert not list(out.rglob("*.tmp-*"))



def test_sigkill_during_overwrite_keeps_the_old_data_set(source, reference, tmp_path) -> None:
    """A killed --overwrite run leaves the committed data set exactly as it was, and verifiable."""
    out = tmp_path / "ds"
    run_cli("shardprep.run", *_args(source, out), check=True)
    before = (out / "manifest.json").read_bytes()
    proc = _popen([sys.executable, "-c", LAUNCHER, "before_manifest", *_args(source, out), "--overwrite"])
    _kill_when_logged(proc, "KILL ")
    assert (out / "manifest.json").read_bytes() == before
    assert verify.verify(str(out))[0] == [] and _shard_bytes(out) == reference
    assert len([p for p in out.iterdir() if p.name.startswith("run-")]) == 2  # the old run and the killed one
    old_runs = manifest.load(str(out)).run_ids
    run_cli("shardprep.run", *_args(source, out), "--overwrite", check=True)
    assert _shard_bytes(out) == reference
    # the new run, and the previous committed one kept for its readers (--keep-previous 1); the killed one is gone
    assert {p.name for p in out.iterdir() if p.name.startswith("run-")} == manifest.load(str(out)).run_ids | old_runs


def _committed_run(out: str, run_id: str, *, remove_second: bool = False) -> str:
    """Writes 2 real shards for ``run_id``, deletes the second if asked, then commits."""
    from shardprep import example, framing, naming, writer
    from shardprep.commit import commit
    from shardprep.config import ReshardConfig
    from shardprep.graph.elements import PlanFact, ShardFact, UnitFact
    from shardprep.schema import FeatureSpec

    config = ReshardConfig(output=out, run_id=run_id, features={"x": {"dtype": "int64", "shape": []}},
                           sources=(("in.csv", 40),), num_shards=2, overwrite=True)
    encode = example.example_encoder({"x": FeatureSpec("int64", ())})
    records = [framing.frame(encode({"x": i})) for i in range(4)]
    facts: list = [UnitFact((0, 0), 0, 4, 0, (4,), ()), PlanFact(0, 4, sum(map(len, records)), 2)]
    for shard in range(2):
        path = naming.shard_path(run_id, "train", shard, 2, gzip=False)
        facts.append(ShardFact(0, shard, 2, writer.write_shard(out, path, b"".join(records[shard::2]), 2, compress=False)))
    if remove_second:
        os.remove(os.path.join(out, naming.shard_path(run_id, "train", 1, 2, gzip=False)))
    return commit(config, facts)


def test_commit_never_names_shards_that_are_gone(tmp_path) -> None:
    """Two runs on one --output: the one that commits first removes the other's folder as stale;
    the other must then write a report, not a manifest over missing shards."""
    out = str(tmp_path / "ds")
    first = _committed_run(out, "run-20261129T000000Z-aaaaaaaa")
    assert first.endswith("manifest.json") and verify.verify(out)[0] == []
    url = _committed_run(out, "run-20261129T000100Z-bbbbbbbb", remove_second=True)
    assert url.endswith("report.json")
    report = Path(url).read_text()
    assert "train-00001-of-00002" in report and "missing at commit" in report
    shards = manifest.load(out).splits["train"].shards  # the first data set stands
    assert all(s.path.startswith("run-20261129T000000Z-aaaaaaaa/") for s in shards)
    assert verify.verify(out)[0] == []
