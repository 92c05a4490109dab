"""The Beam job a user would write: ``ReadFromText -> Map(build tf.train.Example) -> WriteToTFRecord``.

``python -m benchmarks.contenders.naive_beam --input GLOB --output PREFIX --num-shards 64
[--runner direct|dask] [--dask-workers N] [--bundles N]``. The Dask runner (Beam's, with this
project's fixes, on a local cluster) processes many bundles, as a distributed runner does.
"""
from __future__ import annotations

import argparse
import csv
import os
import sys
from collections.abc import Sequence

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import apache_beam as beam  # noqa: E402
import tensorflow as tf  # noqa: E402
from apache_beam.options.pipeline_options import PipelineOptions  # noqa: E402

FLOATS = tuple(f"f{j}" for j in range(8))


def build_example(line: str) -> bytes:
    """One CSV line -> serialized tf.train.Example (the header is skipped by ReadFromText)."""
    row = next(csv.reader([line]))
    feature = {
        "id": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(row[0])])),
        "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(row[9])])),
        "text": tf.train.Feature(bytes_list=tf.train.BytesList(value=[row[10].encode("utf-8")])),
    }
    for j, name in enumerate(FLOATS):
        feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=[float(row[1 + j])]))
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="naive_beam")
    p.add_argument("--input", required=True)
    p.add_argument("--output", required=True, help="output prefix")
    p.add_argument("--num-shards", type=int, default=64)
    p.add_argument("--runner", choices=("direct", "dask"), default="direct")
    p.add_argument("--dask-workers", type=int, default=2)
    p.add_argument("--bundles", type=int, default=64, help="Dask partitions (bundles)")
    p.add_argument("--split-mb", type=int, default=1, help="Dask: input split size")
    args, beam_args = p.parse_known_args(argv)
    if args.runner == "direct":
        with beam.Pipeline(options=PipelineOptions(["--runner=DirectRunner", *beam_args])) as pipeline:
            _graph(pipeline, args)
        return 0
    from apache_beam.runners.dask.dask_runner import DaskRunner  # Beam's own, as a user would run it
    from distributed import LocalCluster

    with LocalCluster(n_workers=args.dask_workers, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster:
        options = PipelineOptions([f"--dask_client_address={cluster.scheduler_address}",
                                   f"--dask_npartitions={args.bundles}", *beam_args])
        pipeline = beam.Pipeline(runner=DaskRunner(), options=options)
        _dask_graph(pipeline, args)
        result = pipeline.run()
        result.wait_until_finish()
        result.client.close()
    return 0


def _ranges(pattern: str, chunk: int) -> list[tuple[str, int, int]]:
    """Byte ranges of about ``chunk`` bytes of every file: the splits a file source would make."""
    import glob

    out = []
    for path in sorted(glob.glob(pattern)):
        size = os.path.getsize(path)
        out.extend((path, lo, min(lo + chunk, size)) for lo in range(0, size, chunk))
    return out


def read_range(split: tuple[str, int, int]):  # noqa: ANN201
    """The lines that start in [start, end) of a file, header skipped (what ReadFromText's splits do)."""
    path, start, end = split
    with open(path, "rb") as f:
        if start:
            f.seek(start - 1)
            f.readline()  # finish the line that started before this range
        else:
            f.readline()  # header
        while f.tell() < end:
            line = f.readline()
            if not line:
                break
            yield line.decode("utf-8").rstrip("\n")


def _dask_graph(pipeline: beam.Pipeline, args: argparse.Namespace) -> None:
    # Beam 2.77's Dask runner cannot run ReadFromText (an Impulse-based splittable read), so the
    # read is spelled out as byte-range splits; each Dask partition is one bundle of the write.
    (
        pipeline
        | "Splits" >> beam.Create(_ranges(args.input, args.split_mb << 20))
        | "Read" >> beam.FlatMap(read_range)
        | "Build" >> beam.Map(build_example)
        | "Write" >> beam.io.WriteToTFRecord(args.output, num_shards=args.num_shards)
    )


def _graph(pipeline: beam.Pipeline, args: argparse.Namespace) -> None:
    (
        pipeline
        | "Read" >> beam.io.ReadFromText(args.input, skip_header_lines=1)
        | "Build" >> beam.Map(build_example)
        | "Write" >> beam.io.WriteToTFRecord(args.output, num_shards=args.num_shards)
    )


if __name__ == "__main__":
    sys.exit(main())
