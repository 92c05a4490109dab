"""The script users write instead of shardprep for TFRecord -> TFRecord (issue 11's yardstick).

``tf.data.TFRecordDataset(files).batch(4096).as_numpy_iterator()`` and 64 ``tf.io.TFRecordWriter``s
round-robin, TensorFlow's import included in the timing. It checks nothing, shuffles nothing and
writes no manifest. ``--one-at-a-time`` is the unbatched version (``for rec in ds``).

``python -m benchmarks.contenders.tfdata_reshard --input FILE [--input FILE ...] --output DIR --num-shards 64``
"""
from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="tfdata_reshard")
    p.add_argument("--input", action="append", required=True)
    p.add_argument("--output", required=True)
    p.add_argument("--num-shards", type=int, default=64)
    p.add_argument("--one-at-a-time", action="store_true")
    args = p.parse_args(argv)
    os.makedirs(args.output, exist_ok=True)
    n = args.num_shards
    writers = [tf.io.TFRecordWriter(os.path.join(args.output, f"part-{i:05d}-of-{n:05d}.tfrecord")) for i in range(n)]
    ds = tf.data.TFRecordDataset(args.input)
    i = 0
    if args.one_at_a_time:
        for rec in ds:
            writers[i % n].write(rec.numpy())
            i += 1
    else:
        for batch in ds.batch(4096).as_numpy_iterator():
            for rec in batch:
                writers[i % n].write(rec)
                i += 1
    for w in writers:
        w.close()
    print(f"wrote {i} records to {n} files", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
