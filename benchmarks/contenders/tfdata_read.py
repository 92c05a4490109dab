"""tf.data input throughput of one worker, parse included.

``--mode shards``: the trainer's own input pipeline (``trainer.data.worker_batches``) for worker
``--worker`` of ``--workers``, one epoch, from a shardprep data set. ``--mode csv``: what a user
would write instead, ``tf.data.experimental.CsvDataset`` over the raw CSV files, batched, columns
to a feature dict. Prints one JSON line: examples, seconds (iteration only, after set-up), rate.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

COLUMNS = ("id", *(f"f{j}" for j in range(8)), "label", "text")


def shard_batches(data: str, *, workers: int, worker: int, batch: int) -> tf.data.Dataset:
    from shardprep import manifest
    from trainer import data as tdata
    from trainer import preflight

    m = manifest.load(data)
    inputs = [name for name in sorted(m.features) if name != "label"]
    plan = preflight.plan_input(root=data, split="train", label="label", inputs=inputs, num_workers=workers,
                                per_worker_batch=batch, data_manifest=m)
    ds = tdata.worker_batches(plan, worker=worker, batch_size=batch, batches_per_epoch=plan.steps_per_epoch)
    return ds.take(plan.steps_per_epoch)


def csv_batches(files: Sequence[str], *, batch: int) -> tf.data.Dataset:
    defaults = [tf.int64, *([tf.float32] * 8), tf.int64, tf.string]
    ds = tf.data.experimental.CsvDataset(list(files), record_defaults=defaults, header=True)
    ds = ds.batch(batch, drop_remainder=True)

    def to_dict(*cols: tf.Tensor) -> tuple[dict[str, tf.Tensor], tf.Tensor]:
        features = dict(zip(COLUMNS, cols))
        return features, features.pop("label")

    return ds.map(to_dict, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="tfdata_read")
    p.add_argument("--mode", choices=("shards", "csv"), required=True)
    p.add_argument("--data", help="shardprep data set (shards mode)")
    p.add_argument("--input", action="append", default=[], help="CSV files (csv mode)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--worker", type=int, default=0)
    p.add_argument("--batch", type=int, default=64)
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    if args.mode == "shards":
        ds = shard_batches(args.data, workers=args.workers, worker=args.worker, batch=args.batch)
    else:
        ds = csv_batches(args.input, batch=args.batch)
    t1 = time.perf_counter()
    examples = batches = 0
    for _, label in ds:
        examples += int(label.shape[0])
        batches += 1
    t2 = time.perf_counter()
    print(json.dumps({"mode": args.mode, "examples": examples, "batches": batches, "setup_s": round(t1 - t0, 3),
                      "seconds": round(t2 - t1, 3), "examples_per_s": round(examples / (t2 - t1), 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
