"""Child process: the input pipeline alone on K pinned cores, in parsed examples per second.

The process pins itself with ``os.sched_setaffinity`` before TensorFlow is imported: TF sizes its
thread pools (tf.data's included) from the affinity mask, so the pipeline really has K cores. Two
variants are timed over the data set's shards (paths from ``manifest.json``, the data contract):

- ``in_turn``: the trainer's shape for local shards (``trainer/data.py``): records read in turn,
  batched, one vectorized ``parse_example`` per batch in a parallel map, prefetched;
- ``parallel_read``: the same with the shards read in parallel (``num_parallel_reads``), the
  trainer's choice for remote shards, and the ceiling when reading is the bottleneck.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Sequence
from typing import Any

__all__ = ["main"]

_DTYPES = ("int64", "float32", "string")


def _dataset(tf: Any, files: list[str], *, spec: dict[str, Any], batch: int, compression: str,
             parallel: bool, threads: int) -> Any:
    if parallel:
        records = tf.data.TFRecordDataset(files, compression_type=compression, num_parallel_reads=tf.data.AUTOTUNE)
    else:
        records = tf.data.Dataset.from_tensor_slices(files).interleave(
            lambda f: tf.data.TFRecordDataset(f, compression_type=compression), cycle_length=min(len(files), 8)
        )
    ds = records.repeat().batch(batch, drop_remainder=True)
    ds = ds.map(lambda s: tf.io.parse_example(s, spec), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    ds = ds.prefetch(tf.data.AUTOTUNE)
    options = tf.data.Options()
    options.threading.private_threadpool_size = threads
    return ds.with_options(options)


def _rate(iterator: Any, *, batch: int, seconds: float) -> dict[str, float]:
    """Examples per second over ``seconds`` after a warm-up, and the CPU it took (cores busy)."""
    warm = time.perf_counter() + min(1.0, seconds / 2)
    while time.perf_counter() < warm:
        next(iterator)
    batches, cpu0, t0 = 0, time.process_time(), time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        next(iterator)
        batches += 1
    elapsed = time.perf_counter() - t0
    return {"examples_per_second": round(batches * batch / elapsed, 1), "batches": batches,
            "cores_busy": round((time.process_time() - cpu0) / elapsed, 2)}


def measure(*, data: str, split: str, label: str, batch: int, cpus: list[int], seconds: float) -> dict[str, Any]:
    os.sched_setaffinity(0, cpus)  # before TensorFlow sizes its thread pools
    import tensorflow as tf

    with open(os.path.join(data, "manifest.json")) as f:
        manifest = json.load(f)
    files = [os.path.join(data, s["path"]) for s in manifest["splits"][split]["shards"]]
    spec = {}
    for name, info in manifest["features"].items():
        if info["dtype"] in _DTYPES and info["shape"] != [-1]:
            spec[name] = tf.io.FixedLenFeature(info["shape"], getattr(tf, info["dtype"]))
    if label not in spec:
        raise SystemExit(f"label {label!r} is not a fixed-shape feature of {data}")
    compression = "GZIP" if manifest.get("compression") == "gzip" else ""
    out: dict[str, Any] = {"cores": len(cpus), "cpus": sorted(os.sched_getaffinity(0)), "shards": len(files)}
    for variant, parallel in (("in_turn", False), ("parallel_read", True)):
        ds = _dataset(tf, files, spec=spec, batch=batch, compression=compression, parallel=parallel, threads=len(cpus))
        out[variant] = _rate(iter(ds), batch=batch, seconds=seconds)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.gpu_check.input_probe")
    p.add_argument("--data", required=True)
    p.add_argument("--split", default="train")
    p.add_argument("--label", required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--cpus", required=True, help="comma-separated CPU ids to pin this process to")
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--out", required=True, help="JSON file to write")
    args = p.parse_args(argv)
    doc = measure(data=args.data, split=args.split, label=args.label, batch=args.batch,
                  cpus=[int(c) for c in args.cpus.split(",")], seconds=args.seconds)
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
