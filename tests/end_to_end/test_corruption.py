"""Corruption and tampered manifests: ``verify`` names the shard and the problem; the trainer refuses early.

The trainer's pre-flight (``trainer.preflight.plan_input``) is O(shards): it checks the manifest's
invariants and that every shard is present at its recorded size, from one listing per folder. It
leaves content (crc32c of every byte, every record's CRC and the record counts) to
``python -m shardprep.verify``, which reads every byte; a flipped byte that keeps the size passes
the pre-flight and is stopped by TensorFlow's own record CRC check at the step that reads it.
"""
from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from shardprep import manifest, run, verify
from tests.conftest import run_cli, write_csv
from trainer import preflight

# --- a small real data set ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("corrupt")
    rows = [{"x0": i / 7, "x1": -i / 3, "label": i % 2, "text": f"row {i}"} for i in range(2000)]
    src = write_csv(tmp / "in" / "a.csv", rows)
    out = tmp / "ds"
    assert run.main(["--input", str(src), "--output", str(out), "--num-shards", "4"]) == 0
    return out


@pytest.fixture
def copy(dataset, tmp_path) -> Path:
    target = tmp_path / "ds"
    shutil.copytree(dataset, target)
    return target


def _doc(root: Path) -> dict:
    return json.loads((root / "manifest.json").read_text())


def _save(root: Path, doc: dict) -> None:
    (root / "manifest.json").write_text(json.dumps(doc, indent=2))


def _shard(root: Path, k: int = 1) -> tuple[str, Path]:
    rel = _doc(root)["splits"]["train"]["shards"][k]["path"]
    return rel, root / rel


def _preflight(root: Path) -> None:
    preflight.plan_input(root=str(root), split="train", label="label", inputs=("x0", "x1"), num_workers=2,
                         per_worker_batch=8)


# --- the damage ------------------------------------------------------------------------------------


def flip_byte(root: Path) -> str:
    rel, path = _shard(root)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    return rel


def truncate(root: Path) -> str:
    rel, path = _shard(root)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 100])
    return rel


def delete(root: Path) -> str:
    rel, path = _shard(root)
    path.unlink()
    return rel


def swap_two_shards(root: Path) -> str:
    """Two shards of equal size trade places: sizes match, content does not."""
    shards = _doc(root)["splits"]["train"]["shards"]
    a, b = root / shards[0]["path"], root / shards[1]["path"]
    data_a = a.read_bytes()
    a.write_bytes(b.read_bytes()[: len(data_a)].ljust(len(data_a), b"\0"))
    return shards[0]["path"]


def flip_byte_and_fix_file_crc(root: Path) -> str:
    """A damaged record whose manifest crc32c was recomputed (a buggy copy tool): the record CRC finds it."""
    import google_crc32c

    rel, path = _shard(root)
    data = bytearray(path.read_bytes())
    data[20] ^= 0x01  # inside the first record's data (its 12-byte header comes first)
    path.write_bytes(bytes(data))
    doc = _doc(root)
    doc["splits"]["train"]["shards"][1]["crc32c"] = f"{google_crc32c.value(bytes(data)):08x}"
    _save(root, doc)
    return rel


def edit_shard_count(root: Path) -> str:
    """One shard's num_records + 1 (the split total no longer adds up)."""
    doc = _doc(root)
    doc["splits"]["train"]["shards"][1]["num_records"] += 1
    _save(root, doc)
    return doc["splits"]["train"]["shards"][1]["path"]


def edit_counts_consistently(root: Path) -> str:
    """Shard, split and accounting all + 1, so the manifest's own sums agree: only counting records shows it."""
    doc = _doc(root)
    doc["splits"]["train"]["shards"][1]["num_records"] += 1
    doc["splits"]["train"]["num_records"] += 1
    doc["accounting"]["written"] += 1
    doc["accounting"]["read"] += 1
    _save(root, doc)
    return doc["splits"]["train"]["shards"][1]["path"]


@dataclasses.dataclass(frozen=True)
class Damage:
    name: str
    what: str
    apply: Callable[[Path], str]  # returns the shard path it damaged
    verify_says: str  # what verify's FAIL line for that shard holds
    preflight_says: str | None  # what the trainer's pre-flight refusal holds; None: it passes (left to verify)


DAMAGE = [
    Damage("flip_byte", "one byte of a shard flipped", flip_byte, "(the file is corrupt)", None),
    Damage("truncate", "a shard cut 100 bytes short", truncate, "(truncated or replaced)", "the manifest says"),
    Damage("delete", "a shard deleted", delete, ": missing", "listed in the manifest is missing"),
    Damage("swap", "a shard's bytes replaced by another shard's (same size)", swap_two_shards,
           "(the file is corrupt)", None),
    Damage("flip_byte_fixed_crc", "a flipped byte with the manifest's file crc32c recomputed",
           flip_byte_and_fix_file_crc, "fail their CRC", None),
    Damage("edit_count", "a shard's num_records in the manifest + 1", edit_shard_count,
           "records, the manifest says", "is unsound"),
    Damage("edit_counts_consistently", "shard, split and accounting counts all + 1", edit_counts_consistently,
           "records, the manifest says", None),
]


@pytest.mark.parametrize("damage", DAMAGE, ids=[d.name for d in DAMAGE])
def test_verify_names_the_shard_and_the_problem(damage, copy, capsys) -> None:
    shard = damage.apply(copy)
    code = verify.main([str(copy)])
    out, err = capsys.readouterr()
    fails = [line for line in out.splitlines() if line.startswith("FAIL ")]
    assert code == 1 and "Traceback" not in err
    assert any(shard in line and damage.verify_says in line for line in fails), out
    assert err.strip() == f"shardprep.verify: {len(fails)} problem(s) in {copy}"


@pytest.mark.parametrize("damage", DAMAGE, ids=[d.name for d in DAMAGE])
def test_trainer_preflight(damage, copy) -> None:
    shard = damage.apply(copy)
    if damage.preflight_says is None:
        _preflight(copy)  # documented: content is verify's job (see the module docstring)
        return
    with pytest.raises(preflight.DataSetError) as e:
        _preflight(copy)
    assert damage.preflight_says in str(e.value)
    assert shard in str(e.value) or "manifest" in str(e.value)


@pytest.mark.slow
@pytest.mark.parametrize("damage", [d for d in DAMAGE if d.name in ("truncate", "delete")], ids=lambda d: d.name)
def test_trainer_cli_refuses_before_any_step(damage, copy, tmp_path) -> None:
    shard = damage.apply(copy)
    proc = run_cli("trainer.train", "--data", copy, "--model", "mlp", "--label", "label", "--per-replica-batch", 8,
                   "--epochs", 1, "--model-dir", tmp_path / "model")
    errors = [line for line in proc.stderr.splitlines() if line.startswith("trainer.train: error:")]
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert len(errors) == 1 and shard in errors[0] and damage.preflight_says in errors[0], proc.stderr
    assert "step" not in proc.stdout.lower() or "steps per epoch" in proc.stdout.lower()


def test_verify_cli_process_names_a_truncated_shard(copy) -> None:
    shard = truncate(copy)
    proc = run_cli("shardprep.verify", copy)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert f"FAIL {shard}: " in proc.stdout and "truncated" in proc.stdout


# --- manifest safety: refused on load, by every reader ---------------------------------------------

ESCAPES = [
    "../evil.tfrecord",
    "run-20260101T000000Z-00000000/../../evil.tfrecord",
    "/etc/passwd",
    "file:///etc/passwd",
    "gs://other-bucket/train-00000-of-00004.tfrecord",
    "s3://bucket/x.tfrecord",
    "\\\\server\\share\\x.tfrecord",
    "C:/x.tfrecord",
    "./run/x.tfrecord",
    "",
]


@pytest.mark.parametrize("path", ESCAPES)
@pytest.mark.parametrize("where", ["shard", "dead_letters"])
def test_paths_that_leave_the_folder_are_refused_on_load(copy, path, where, capsys) -> None:
    doc = _doc(copy)
    if where == "shard":
        doc["splits"]["train"]["shards"][0]["path"] = path
    else:
        doc["rejected"]["paths"] = [path]
    _save(copy, doc)
    with pytest.raises(manifest.ManifestError, match="not a plain path inside the data set folder"):
        manifest.load(str(copy))
    assert verify.main([str(copy)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "refusing to follow it" in err
    with pytest.raises(manifest.ManifestError):
        _preflight(copy)


@pytest.mark.parametrize("version", [2, 0, "1", None, 1.5, True])
def test_unknown_manifest_versions_are_refused(copy, version, capsys) -> None:
    doc = _doc(copy)
    if version is None:
        del doc["version"]
    else:
        doc["version"] = version
    _save(copy, doc)
    assert verify.main([str(copy)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not supported" in err and "upgrade shardprep" in err


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.update(format="something.else"), "not a shardprep manifest"),
    (lambda d: d.pop("splits"), "manifest is malformed"),
    (lambda d: d["splits"]["train"]["shards"][0].pop("crc32c"), "manifest is malformed"),
    (lambda d: d.update(compression="zstd"), "compression 'zstd'"),
])
def test_malformed_manifests_are_refused(copy, edit, message, capsys) -> None:
    doc = _doc(copy)
    edit(doc)
    _save(copy, doc)
    assert verify.main([str(copy)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


def test_a_manifest_that_is_not_json_is_refused(copy, capsys) -> None:
    (copy / "manifest.json").write_text('{"format": "shardprep.manifest", "version": 1, ')
    assert verify.main([str(copy)]) == 2
    assert "is not valid JSON" in capsys.readouterr().err


@pytest.mark.slow
def test_trainer_cli_refuses_an_escaping_manifest(copy, tmp_path) -> None:
    doc = _doc(copy)
    doc["splits"]["train"]["shards"][0]["path"] = "gs://other-bucket/train-00000-of-00004.tfrecord"
    _save(copy, doc)
    proc = run_cli("trainer.train", "--data", copy, "--model", "mlp", "--label", "label", "--per-replica-batch", 8,
                   "--epochs", 1, "--model-dir", tmp_path / "model")
    errors = [line for line in proc.stderr.splitlines() if line.startswith("trainer.train: error:")]
    assert proc.returncode == 2 and len(errors) == 1 and "refusing to follow it" in errors[0], proc.stderr

