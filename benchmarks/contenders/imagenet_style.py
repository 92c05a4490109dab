"""A contender written like tensorflow/models ``research/inception/inception/data/build_imagenet_data.py``.

Lists ``ROOT/<class>/*``, shuffles the file list with a fixed seed, splits it into contiguous ranges,
one per Python thread, each thread writing ``num_shards / threads`` shards of its range; every image
is read and decoded with TensorFlow (to check it and get its size), then written as a
tf.train.Example with the same fields as shardprep's.

``python -m benchmarks.contenders.imagenet_style --root ROOT --output DIR --num-shards 8 --threads 2``
"""
from __future__ import annotations

import argparse
import hashlib
import os
import random
import sys
import threading
from collections.abc import Sequence

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402


def _bytes(v: bytes) -> tf.train.Feature:
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[v]))


def _int(v: int) -> tf.train.Feature:
    return tf.train.Feature(int64_list=tf.train.Int64List(value=[v]))


def _process_range(thread: int, files: list[tuple[str, int, str]], root: str, output: str, shards: range,
                   total_shards: int) -> None:
    per = -(-len(files) // len(shards))
    for k, shard in enumerate(shards):
        path = os.path.join(output, f"train-{shard:05d}-of-{total_shards:05d}")
        with tf.io.TFRecordWriter(path) as writer:
            for rel, label, text in files[k * per:(k + 1) * per]:
                with open(os.path.join(root, rel), "rb") as f:
                    data = f.read()
                image = tf.io.decode_jpeg(data, channels=3)  # decodes every image, as the original does
                height, width, channels = (int(d) for d in image.shape)
                example = tf.train.Example(features=tf.train.Features(feature={
                    "image/encoded": _bytes(data), "image/format": _bytes(b"jpeg"), "image/height": _int(height),
                    "image/width": _int(width), "image/channels": _int(channels), "image/class/label": _int(label),
                    "image/class/text": _bytes(text.encode()), "image/filename": _bytes(rel.encode()),
                    "image/key/sha256": _bytes(hashlib.sha256(data).hexdigest().encode()),
                }))
                writer.write(example.SerializeToString())


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="imagenet_style")
    p.add_argument("--root", required=True)
    p.add_argument("--output", required=True)
    p.add_argument("--num-shards", type=int, default=8)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    if args.num_shards % args.threads:
        p.error("--num-shards must be a multiple of --threads (as in build_imagenet_data.py)")
    classes = sorted(d for d in os.listdir(args.root) if os.path.isdir(os.path.join(args.root, d)))
    files = [(f"{c}/{name}", label, c) for label, c in enumerate(classes)
             for name in sorted(os.listdir(os.path.join(args.root, c)))]
    random.Random(12345).shuffle(files)
    os.makedirs(args.output, exist_ok=True)
    per_thread = args.num_shards // args.threads
    bounds = [round(i * len(files) / args.threads) for i in range(args.threads + 1)]
    threads = [threading.Thread(target=_process_range, args=(t, files[bounds[t]:bounds[t + 1]], args.root, args.output,
                                                             range(t * per_thread, (t + 1) * per_thread), args.num_shards))
               for t in range(args.threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(f"wrote {len(files)} images to {args.num_shards} shards")
    return 0


if __name__ == "__main__":
    sys.exit(main())
