"""CPU time per call of the compiled Example walks (``native.example_columns``, its values and its
number sums, and ``native.decode_example``), two builds of the extension side by side (issue 59: one
wire-format reader, ``wire.h``, shared by ``columns.c`` and ``example.c``; no slower).

    git worktree add ../base <commit> && (cd ../base && python setup.py build_ext --inplace)
    python setup.py build_ext --inplace
    python -m benchmarks.native_walk --base ../base --rounds 5

Each round measures the base tree's build, then this tree's, each in a fresh process that imports
``shardprep`` from its tree; the alternation keeps a shared machine's drift out of the ratio. A
measure is the best of 5 batches (process CPU time): ``example_columns`` over 8,192 framed records
of six features (scalar and list floats and ints, a string, a label) and ``decode_example`` of
2,000 of them one by one. Prints each figure's median per tree and this tree's ratio to the base.
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["main", "measure"]

RECORDS = 8192
DECODED = 2000


def _cpu(call: Callable[[], object], reps: int) -> float:
    best = float("inf")
    for _ in range(5):
        start = time.process_time()
        for _ in range(reps):
            call()
        best = min(best, (time.process_time() - start) / reps)
    return best


def measure() -> dict[str, float]:
    """This process's ``shardprep`` build: ms per ``example_columns`` call (values, sums), us per decode."""
    import numpy as np

    from shardprep import example, framing, native
    from shardprep.schema import FeatureSpec
    from shardprep.stats import columns

    if not native.__file__.startswith(sys.path[0]):
        raise SystemExit(f"shardprep came from {native.__file__}, not {sys.path[0]}")

    if not native.NATIVE:
        raise SystemExit("the compiled module is not built in this tree (python setup.py build_ext --inplace)")
    features = {"f": FeatureSpec("float32"), "fl": FeatureSpec("float32", (-1,)), "i": FeatureSpec("int64"),
                "il": FeatureSpec("int64", (-1,)), "s": FeatureSpec("string"), "label": FeatureSpec("int64")}
    rng = random.Random(1)
    encode = example.example_encoder(features, on_missing="omit")
    records = [encode({"f": rng.gauss(0, 1), "fl": [rng.gauss(0, 9) for _ in range(rng.randrange(12))],
                       "i": rng.randrange(-10**9, 10**9),
                       "il": [rng.randrange(-(1 << 40), 1 << 40) for _ in range(rng.randrange(12))],
                       "s": f"s{rng.randrange(10**6)}", "label": rng.randrange(10)}) for _ in range(RECORDS)]
    blob = framing.frame_all(records)
    ends = np.cumsum([len(r) + 16 for r in records]).astype(np.uint64)
    names = tuple(sorted(name.encode() for name in features))
    kinds = bytes(native.kind_of(features[name.decode()].dtype) for name in names)
    return {"values_ms": 1e3 * _cpu(lambda: native.example_columns(blob, ends, names, kinds), 20),
            "sums_ms": 1e3 * _cpu(lambda: native.example_columns(blob, ends, names, kinds, *columns.BUCKET_TABLE), 20),
            "decode_us": 1e6 * _cpu(lambda: [native.decode_example(r) for r in records[:DECODED]], 3) / DECODED}


def _measured(root: Path) -> dict[str, float]:
    """``measure`` in a fresh process whose ``shardprep`` is ``root``'s (this file runs there as it is:
    the base tree need not hold it)."""
    code = (f"import json, runpy, sys; sys.path.insert(0, {str(root)!r}); "
            f"print(json.dumps(runpy.run_path({__file__!r})['measure']()))")
    out = subprocess.run([sys.executable, "-c", code], cwd=root, check=True, capture_output=True, text=True).stdout
    return json.loads(out.splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.native_walk", description=__doc__.split("\n\n")[0])
    p.add_argument("--base", type=Path, required=True, help="the tree to compare with, its extension built in place")
    p.add_argument("--code-root", type=Path, default=Path("."), help="this tree (default: .)")
    p.add_argument("--rounds", type=int, default=5, help="alternations of the two (default: 5)")
    args = p.parse_args(argv)
    runs: dict[str, list[dict[str, float]]] = {"base": [], "this": []}
    for _ in range(args.rounds):
        runs["base"].append(_measured(args.base.resolve()))
        runs["this"].append(_measured(args.code_root.resolve()))
    for figure in runs["base"][0]:
        base, this = (statistics.median(r[figure] for r in runs[k]) for k in ("base", "this"))
        print(f"{figure:10s} base {base:8.3f}  this {this:8.3f}  ratio {this / base:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
