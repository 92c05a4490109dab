"""``gs://`` end to end on a real GCS emulator (fake-gcs-server on loopback): re-shard, verify, Dask
workers, transient errors through a fault-injecting proxy, and two trainer workers staging their
own shards. Every shard written to ``gs://`` must be byte-identical to a local run."""
from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import pytest

from shardprep import manifest, run, verify
from tests import trainer_fixtures as fx
from tests.conftest import run_cli
from tests.gcs_emulator import gcs, gcs_emulator, proxied  # noqa: F401 - fixtures
from trainer import demo
from trainer.metrics import summary_url

pytestmark = pytest.mark.slow

ARGS = ["--workers", "2", "--split", "train=0.9,eval=0.1", "--unit-mb", "0.05"]


def crcs(root: str) -> dict[str, str]:
    """Shard path below the run folder -> crc32c, for every shard of every split."""
    m = manifest.load(root)
    return {s.path.split("/", 1)[1]: s.crc32c for split in m.splits.values() for s in split.shards}


@pytest.fixture(scope="module")
def raw(tmp_path_factory) -> Path:
    """2 000 learnable rows in three CSV files of 70/25/5 % (about 7 work units at --unit-mb 0.05)."""
    folder = tmp_path_factory.mktemp("raw")
    demo.write_raw(str(folder), rows=2000)
    return folder


@pytest.fixture(scope="module")
def local(raw, tmp_path_factory) -> dict[str, str]:
    out = tmp_path_factory.mktemp("local") / "ds"
    assert run.main(["--input", f"{raw}/*.csv", "--output", str(out), *ARGS]) == 0
    return crcs(str(out))


def upload_raw(gcs, raw: Path) -> str:  # noqa: F811
    for path in sorted(raw.glob("*.csv")):
        gcs.upload(path, f"raw/{path.name}")
    return gcs.url("raw/*.csv")


def reshard_to_gcs(gcs, raw: Path, *extra: str) -> str:  # noqa: F811
    out = gcs.url("ds")
    assert run.main(["--input", upload_raw(gcs, raw), "--output", out, *ARGS, *extra]) == 0
    return out


def test_reshard_to_gcs_is_byte_identical_to_local_and_verifies(gcs, raw, local):  # noqa: F811
    out = reshard_to_gcs(gcs, raw)
    assert crcs(out) == local and len(local) == 4
    m = manifest.load(out)
    bucket = gcs.client().bucket(gcs.bucket)
    for shard in (s for split in m.splits.values() for s in split.shards):  # the CRC32C GCS keeps per object
        blob = bucket.get_blob(f"ds/{shard.path}")
        assert base64.b64decode(blob.crc32c).hex() == shard.crc32c and blob.size == shard.num_bytes
    names = [b.name for b in bucket.list_blobs(prefix="ds/")]
    assert not [n for n in names if ".tmp" in n] and "ds/manifest.json" in names
    for deep in ([], ["--deep"]):
        proc = run_cli("shardprep.verify", out, *deep)
        assert proc.returncode == 0 and proc.stdout.startswith(f"OK {out}: 4 shards, 2,000 records"), proc.stderr


def test_verify_on_gcs_compares_stored_crc32c_and_downloads_only_with_deep(gcs, raw):  # noqa: F811
    out = reshard_to_gcs(gcs, raw)
    m = manifest.load(out)
    shards = [s for split in m.splits.values() for s in split.shards]
    (run_id,) = m.run_ids
    with proxied(gcs) as proxy:
        assert verify.verify(out) == ([], 4, 2000)
        assert proxy.media_downloads(run_id) == []  # metadata only
        before = len(proxy.log)
        assert verify.verify(out, deep=True)[0] == []
        deep = {p for m_, p, s in proxy.log[before:] if "alt=media" in p and run_id in p}
        named = [s.path for s in shards] + [s.index.path for s in shards] + [i.path for i in m.sketches.values()]
        assert {p.split("/o/", 1)[1].split("?")[0].replace("%2F", "/") for p in deep} == {f"ds/{p}" for p in named}

        fs = gcs.filesystem()
        target, gone = shards[1], shards[2]
        data = bytearray(fs.cat_file(f"{gcs.bucket}/ds/{target.path}"))
        data[len(data) // 2] ^= 0xFF  # same size, other bytes: only a checksum can tell
        fs.pipe_file(f"{gcs.bucket}/ds/{target.path}", bytes(data))
        fs.rm_file(f"{gcs.bucket}/ds/{gone.path}")
        before = len(proxy.log)
        problems, _, _ = verify.verify(out)
        assert [p for m_, p, s in proxy.log[before:] if "alt=media" in p and run_id in p] == []
    assert len(problems) == 2
    assert problems[0].startswith(f"{target.path}: crc32c ") and "(stored), the manifest says" in problems[0]
    assert problems[1] == f"{gone.path}: missing"


def test_transient_storage_errors_are_retried_and_the_output_is_identical(gcs, raw, local, capsys):  # noqa: F811
    source = upload_raw(gcs, raw)
    with proxied(gcs, every={"GET": 12, "POST": 2}) as proxy:
        assert run.main(["--input", source, "--output", gcs.url("ds"), *ARGS]) == 0
    assert crcs(gcs.url("ds")) == local
    assert verify.verify(gcs.url("ds"))[0] == []
    assert set(proxy.faults) == {"503", "429", "drop", "drop-after"}
    hit = {(method, status) for method, _, status in proxy.log}
    assert {("GET", "503"), ("POST", "429"), ("POST", "drop"), ("POST", "drop-after")} <= hit, hit  # an upload
    # whose answer was lost is sent again: the same bytes, one object
    with capsys.disabled():
        print(f"\n[fault injection] {proxy.requests} requests, {sum(proxy.faults.values())} failed and retried: "
              f"{dict(proxy.faults)}, by method {dict(proxy.faults_by_method)}")


def test_dask_worker_processes_write_to_gcs(gcs, raw, local):  # noqa: F811
    source = upload_raw(gcs, raw)
    proc = run_cli("shardprep.run", "--input", source, "--output", gcs.url("ds"), *ARGS,
                   "--runner", "dask", "--dask-workers", "2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert crcs(gcs.url("ds")) == local


def test_two_trainer_workers_stage_only_their_own_shards_from_gcs(gcs, raw, tmp_path):  # noqa: F811
    out = reshard_to_gcs(gcs, raw)
    m = manifest.load(out)
    train = [s.path for s in m.splits["train"].shards]
    assert len(train) == 2  # file mode: worker w reads shard w
    stage, model_dir = tmp_path / "stage", tmp_path / "run"
    with proxied(gcs) as proxy:
        proc = subprocess.run(
            [sys.executable, "-m", "trainer.launch", "--workers", "2", "--", "--data", out, "--model", "mlp",
             "--label", "label", "--per-replica-batch", "32", "--epochs", "1", "--model-dir", str(model_dir),
             "--stage-dir", str(stage)],
            env=fx.worker_env(), capture_output=True, text=True, timeout=300, cwd=fx.REPO,
        )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    (run_id,) = m.run_ids
    downloads = proxy.media_downloads(run_id)
    for path in train:  # each shard fetched once, by the one worker that reads it
        assert sum(path.replace("/", "%2F") in p for p in downloads) == 1, downloads
    assert not [p for p in downloads if "eval" in p]
    assert sorted(p.name for p in (stage / "train").iterdir()) == sorted(p.rsplit("/", 1)[1] for p in train)
    for w in (0, 1):
        line = next(x for x in proc.stdout.splitlines() if x.startswith(f"[worker {w}]") and "staged" in x)
        assert "staged 1 shard(s)" in line and "(1 copied, 0 already there" in line, line
    a, b = (json.loads(Path(summary_url(str(model_dir), w)).read_text()) for w in (0, 1))
    assert a["data_mode"] == b["data_mode"] == "file"
    assert a["steps"] == b["steps"] > 0 and a["empty_replica_steps"] == b["empty_replica_steps"] == 0
