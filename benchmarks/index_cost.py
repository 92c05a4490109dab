"""What the record index costs a run (issue 55: <= +2% wall time), the same re-shard with and without it.

    python -m benchmarks.index_cost --rounds 5 --cold

Inputs (``benchmarks.data``, generated once): ``tfrecord_set(500_000)``, ~298 MB of tf.Examples
written by TensorFlow, passed through; and ``csv_set(1_300_000)``, ~620 MB of CSV. Each run is
``shardprep.run.main`` in this process (its worker processes are forked from it) to a fresh output
folder, 64 shards, every other flag the default. There is no flag that turns the index off, so the
run "without" is the same code with the index step taken out for that run only: the benchmark
wraps ``shardprep.writer._stored_form`` to pass no record ends, so no index is encoded, hashed,
written, checked at commit or named in the manifest. The two alternate within each round (the
machine is shared); ``--cold`` empties the page cache before every run (root only). Prints each
input's median wall and CPU seconds (this process and its ended children) with and without, and
the difference.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from shardprep import manifest, run, writer

__all__ = ["main"]


@contextlib.contextmanager
def _without_index() -> Iterator[None]:
    stored_form = writer._stored_form
    writer._stored_form = lambda path, framed, n, compress, ends: stored_form(path, framed, n, compress, None)
    try:
        yield
    finally:
        writer._stored_form = stored_form


def _cpu() -> float:
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


def _reshard(inputs: list[str], out: Path, index: bool) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one run, after checking that it wrote indexes exactly when asked."""
    argv = [arg for path in inputs for arg in ("--input", path)] + ["--output", str(out), "--num-shards", "64"]
    with contextlib.nullcontext() if index else _without_index(), contextlib.redirect_stdout(io.StringIO()):
        start, cpu = time.perf_counter(), _cpu()
        assert run.main(argv) == 0
        wall, cpu = time.perf_counter() - start, _cpu() - cpu
    shards = [s for split in manifest.load(str(out)).splits.values() for s in split.shards]
    assert all((s.index is not None) == index for s in shards) and len(shards) == 64
    return wall, cpu


def main(argv: list[str] | None = None) -> int:
    from benchmarks import data
    from benchmarks.index_reader import drop_caches

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--cold", action="store_true", help="drop the page cache before every run (root only)")
    p.add_argument("--tfrecord-rows", type=int, default=500_000)
    p.add_argument("--csv-rows", type=int, default=1_300_000)
    args = p.parse_args(argv)
    if args.cold and not drop_caches():
        print("--cold: cannot drop the page cache (not root?)")
        return 2
    inputs = {"TFRecord pass-through": data.tfrecord_files(data.tfrecord_set(args.tfrecord_rows)),
              "CSV": data.csv_files(data.csv_set(args.csv_rows))}
    times: dict[tuple[str, bool], list[tuple[float, float]]] = {(k, i): [] for k in inputs for i in (True, False)}
    with tempfile.TemporaryDirectory(prefix="index-cost-") as tmp:
        for r in range(args.rounds):
            for name, files in inputs.items():
                for index in (r % 2 == 0, r % 2 == 1):  # who goes first alternates
                    out = Path(tmp) / "out"
                    if args.cold:
                        drop_caches()
                    times[(name, index)].append(_reshard(files, out, index))
                    shutil.rmtree(out)
    print(f"{args.rounds} rounds{', page cache dropped before each run' if args.cold else ''}; "
          "median wall s (CPU s) with and without the record index:")
    for name, files in inputs.items():
        mb = sum(os.path.getsize(f) for f in files) / 1e6
        (w1, c1), (w0, c0) = [(statistics.median(t[0] for t in times[(name, i)]),
                               statistics.median(t[1] for t in times[(name, i)])) for i in (True, False)]
        print(f"  {name} ({mb:,.0f} MB): with {w1:.2f} s ({c1:.2f}), without {w0:.2f} s ({c0:.2f}): "
              f"wall {100 * (w1 / w0 - 1):+.1f}%, CPU {100 * (c1 / c0 - 1):+.1f}%")
        print(f"    with:    {' '.join(f'{t[0]:.2f}' for t in times[(name, True)])}")
        print(f"    without: {' '.join(f'{t[0]:.2f}' for t in times[(name, False)])}")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
