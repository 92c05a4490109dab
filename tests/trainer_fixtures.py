"""Test data sets and helpers for the trainer: real TFRecord shards of tf.train.Example plus a real manifest.

``make_dataset`` is the one function to switch to the re-shard CLI (``python -m shardprep.run``)
once it exists; everything else in the trainer tests goes through it or ``write_dataset``.
"""
from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import google_crc32c

from shardprep import manifest, naming, planning
from shardprep.schema import FeatureSpec, Schema, schema_to_json
from trainer import demo

FEATURES: Schema = {
    **{name: FeatureSpec("float32") for name in demo.FEATURES},
    "label": FeatureSpec("int64"),
    "text": FeatureSpec("string"),
}
RUN_ID = "run-20260101T000000Z-0badcafe"
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _example(row: Mapping[str, Any], features: Mapping[str, FeatureSpec]) -> bytes:
    import tensorflow as tf
    out = {}
    for name, info in features.items():
        value = row[name]
        values = list(value) if isinstance(value, (list, tuple)) else [value]
        if info.dtype == "float32":
            out[name] = tf.train.Feature(float_list=tf.train.FloatList(value=values))
        elif info.dtype == "int64":
            out[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=values))
        else:
            out[name] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[str(v).encode() for v in values]))
    return tf.train.Example(features=tf.train.Features(feature=out)).SerializeToString()


def write_shards(
    root: str,
    split: str,
    shard_rows: Sequence[Sequence[Mapping[str, Any]]],
    *,
    features: Mapping[str, FeatureSpec] = FEATURES,
    gzip: bool = False,
    run_id: str = RUN_ID,
) -> manifest.SplitInfo:
    """Writes one TFRecord file per entry of ``shard_rows`` (any sizes); returns the split's info."""
    import tensorflow as tf

    infos = []
    for i, rows in enumerate(shard_rows):
        rel = naming.shard_path(run_id, split, i, len(shard_rows), gzip=gzip)
        path = naming.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with tf.io.TFRecordWriter(path, options="GZIP" if gzip else None) as writer:
            for row in rows:
                writer.write(_example(row, features))
        with open(path, "rb") as f:
            data = f.read()
        infos.append(manifest.ShardInfo(rel, len(rows), len(data), google_crc32c.Checksum(data).hexdigest().decode()))
    return manifest.SplitInfo(sum(s.num_records for s in infos), sum(s.num_bytes for s in infos), tuple(infos))


def write_dataset(
    root: str,
    splits: Mapping[str, Sequence[Sequence[Mapping[str, Any]]]],
    *,
    features: Mapping[str, FeatureSpec] = FEATURES,
    gzip: bool = False,
    run_id: str = RUN_ID,
) -> manifest.Manifest:
    """Writes shards (exactly as given, balanced or not) and the manifest, last."""
    infos = {name: write_shards(root, name, shards, features=features, gzip=gzip, run_id=run_id) for name, shards in splits.items()}
    total = sum(s.num_records for s in infos.values())
    m = manifest.Manifest(
        features=schema_to_json(dict(features)),
        splits=infos,
        sources=(manifest.SourceInfo("fixture://rows", 0, total, 0),),
        rejected=manifest.RejectedInfo(),
        accounting=manifest.Accounting(total, total, 0),
        seed=0,
        shuffled=False,
        compression="gzip" if gzip else "none",
    )
    manifest.write(root, m)
    return m


def deal(rows: Sequence[Mapping[str, Any]], num_shards: int) -> list[list[Mapping[str, Any]]]:
    """Rows dealt round-robin into ``num_shards`` balanced shards (as shardprep deals positions)."""
    shards: list[list[Mapping[str, Any]]] = [[] for _ in range(num_shards)]
    for i, row in enumerate(rows):
        shards[planning.shard_of(i, num_shards)[0]].append(row)
    return shards


def make_dataset(
    root: str, *, rows: int, num_shards: int, eval_fraction: float = 0.1, gzip: bool = False, seed: int = 0,
    run_id: str = RUN_ID,
) -> manifest.Manifest:
    """A learnable data set of ``rows`` demo rows, ``num_shards`` balanced train shards.

    The one place to swap for the real CLI (write ``demo.write_raw`` CSVs, run ``reshard_with_cli``).
    """
    data = demo.sample_rows(rows, seed=seed)
    cut = int(rows * (1 - eval_fraction))
    splits = {"train": deal(data[:cut], num_shards)}
    if cut < rows:
        splits["eval"] = deal(data[cut:], 1)
    return write_dataset(root, splits, gzip=gzip, run_id=run_id)


def reshard_with_cli(raw_glob: str, out: str, *, workers: int) -> None:
    """The real re-shard CLI, for when it exists."""
    subprocess.run(
        [sys.executable, "-m", "shardprep.run", "--input", raw_glob, "--output", out, "--workers", str(workers),
         "--split", "train=0.9,eval=0.1"],
        check=True, cwd=REPO,
    )


def worker_env(**extra: str) -> dict[str, str]:
    """Environment for trainer subprocesses: quiet TF logs, the repo importable, no stray TF_CONFIG."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    path = os.pathsep.join([REPO, os.path.join(REPO, "tests"), env.get("PYTHONPATH", "")])
    env.update(TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=path, PYTHONUNBUFFERED="1")
    env.update(extra)
    return env


def small_model(*, features: Mapping[str, Mapping[str, Any]], label: str, num_classes: int | None) -> Any:
    """A user model for ``--model tests.trainer_fixtures:small_model``: numeric inputs, one hidden layer."""
    import keras

    inputs = {name: keras.Input(shape=tuple(info["shape"]), dtype=info["dtype"], name=name) for name, info in features.items()}
    x = keras.layers.Concatenate()([keras.layers.Reshape((1,))(t) for t in inputs.values()])
    x = keras.layers.Dense(8, activation="relu")(x)
    return keras.Model(inputs, keras.layers.Dense(num_classes or 1, dtype="float32")(x))


def _fake_worker(argv: Sequence[str]) -> int:
    """A TF-free stand-in for trainer.train under the launcher: ``fail INDEX CODE`` makes worker
    INDEX print two lines and exit CODE after a moment; every other worker sleeps."""
    import json
    import time

    index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    print(f"fake worker {index} up", flush=True)
    if argv[0] == "fail" and index == int(argv[1]):
        time.sleep(0.5)
        print(f"fake worker {index}: about to fail", flush=True)
        return int(argv[2])
    time.sleep(60)
    return 0


if __name__ == "__main__":
    sys.exit(_fake_worker(sys.argv[1:]))
