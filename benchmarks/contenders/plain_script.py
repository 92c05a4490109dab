"""The plain single-process script: csv module, tf.train.Example, N TFRecordWriters round-robin.

``python -m benchmarks.contenders.plain_script --input FILE [--input FILE ...] --output DIR --num-shards 64``
"""
from __future__ import annotations

import argparse
import csv
import os
import sys
from collections.abc import Sequence

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="plain_script")
    p.add_argument("--input", action="append", required=True)
    p.add_argument("--output", required=True)
    p.add_argument("--num-shards", type=int, default=64)
    args = p.parse_args(argv)
    os.makedirs(args.output, exist_ok=True)
    n = args.num_shards
    writers = [tf.io.TFRecordWriter(os.path.join(args.output, f"part-{i:05d}-of-{n:05d}.tfrecord")) for i in range(n)]
    Feature, Int64List, FloatList, BytesList = tf.train.Feature, tf.train.Int64List, tf.train.FloatList, tf.train.BytesList
    i = 0
    for path in args.input:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.reader(f)
            next(reader)  # header
            for row in reader:
                feature = {
                    "id": Feature(int64_list=Int64List(value=[int(row[0])])),
                    "label": Feature(int64_list=Int64List(value=[int(row[9])])),
                    "text": Feature(bytes_list=BytesList(value=[row[10].encode("utf-8")])),
                }
                for j in range(8):
                    feature[f"f{j}"] = Feature(float_list=FloatList(value=[float(row[1 + j])]))
                example = tf.train.Example(features=tf.train.Features(feature=feature))
                writers[i % n].write(example.SerializeToString())
                i += 1
    for w in writers:
        w.close()
    print(f"wrote {i} records to {n} files", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
