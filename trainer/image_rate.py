"""``python -m trainer.image_rate --data DIR``: images/s of the image input pipeline per CPU core.

Reads, parses, decodes, resizes, crops and flips a split's images exactly as training does with
``--augment crop,flip``, the costliest setting (``data.worker_batches`` with an ``image_size``), on
a tf.data thread pool of ``--threads`` threads, with no model: the rate one core sustains tells how many cores keep one GPU fed.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from shardprep import manifest
from trainer import data as data_lib
from trainer.image_input import ENCODED
from trainer.preflight import plan_input

__all__ = ["input_rate", "main"]


def input_rate(data: str, *, split: str = "train", size: int = 64, batch: int = 64, seconds: float = 10.0,
               threads: int = 1) -> dict[str, Any]:
    """Images/s of the training input (read, parse, decode, crop, flip) on ``threads`` CPU threads."""
    m = manifest.load(data)
    plan = plan_input(root=data, split=split, label="image/class/label", inputs=(ENCODED,), num_workers=1,
                      per_worker_batch=batch, steps_cap=None, data_manifest=m)
    plan = dataclasses.replace(plan, image_size=size, augment="crop,flip")
    ds = data_lib.worker_batches(plan, worker=0, batch_size=batch, batches_per_epoch=plan.steps_per_epoch)
    options = tf.data.Options()
    options.threading.private_threadpool_size = threads
    options.threading.max_intra_op_parallelism = 1
    it = iter(ds.with_options(options))
    next(it)  # start-up outside the timing
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        next(it)
        n += batch
    elapsed = time.perf_counter() - start
    return {"threads": threads, "image_size": size, "images": n, "seconds": round(elapsed, 3),
            "images_per_second": round(n / elapsed, 1), "images_per_second_per_core": round(n / elapsed / threads, 1)}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m trainer.image_rate", description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="data set folder written by shardprep.run --format images")
    p.add_argument("--split", default="train")
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--threads", type=int, default=1, help="CPU threads tf.data may use (default: 1: per core)")
    args = p.parse_args(argv)
    print(json.dumps(input_rate(args.data, split=args.split, size=args.image_size, batch=args.batch,
                                seconds=args.seconds, threads=args.threads)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
