"""Command line of the GPU check: runs every part guarded, in order of what a short GPU loan must
prove first, writes the JSON after each part (a loan that ends mid-check still leaves the figures),
and prints the table. Exit 0: every part ok; 1: some part failed or was skipped; 2: bad usage;
130: interrupted.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import functools
import json
import os
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from benchmarks.gpu_check import parts, report, training
from benchmarks.gpu_check.settings import CheckSettings, settings_for
from shardprep.errors import RunError

__all__ = ["main", "run_check"]

PROG = "benchmarks.gpu_check"
JSON_NAME, TABLE_NAME = "gpu_check.json", "gpu_check.txt"

Part = Callable[[], dict[str, Any]]


def _guarded(fn: Part) -> dict[str, Any]:
    """Runs one part; any failure becomes ``ok: false`` and its reason, never the end of the check."""
    start = time.perf_counter()
    try:
        out = fn()
        out = {"ok": "error" not in out, **out}
    except RunError as e:
        out = {"ok": False, "error": str(e)}
    except Exception as e:  # a bug or a surprise in one part: report it, run the rest
        out = {"ok": False, "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc(limit=6)}
    out["seconds"] = round(time.perf_counter() - start, 2)
    return out


def _plan(s: CheckSettings, out: str, doc: dict[str, Any]) -> list[tuple[str, Part]]:
    """(name, part) in running order; later parts read earlier ones' results from ``doc``."""
    results: dict[str, dict[str, Any]] = doc["parts"]

    def data() -> str:
        ds = results.get("dataset", {})
        if not ds.get("path"):
            raise RunError("no data set: the dataset part failed")
        return str(ds["path"])

    def train(loop: str, precision: str) -> dict[str, Any]:
        return training.train_run(s, out=out, data=data(), loop=loop, precision=precision)

    def cores() -> dict[str, Any]:
        runs = {n: r for n, r in results.items() if n.startswith("train_") and r.get("ok")}
        return training.cores_per_gpu(runs, results.get("input_pipeline", {}))

    plan: list[tuple[str, Part]] = [
        ("environment", functools.partial(parts.environment, s, out=out)),
        ("dataset", functools.partial(parts.dataset, s, out=out)),
        ("cold_start", lambda: training.cold_start(s, out=out, data=data())),
    ]
    plan += [(f"train_custom_{p}", functools.partial(train, "custom", p)) for p in s.precisions]
    plan.append(("input_pipeline", lambda: parts.input_pipeline(s, out=out, data=data())))
    plan += [(f"train_{loop}_{p}", functools.partial(train, loop, p)) for loop in s.loops if loop != "custom"
             for p in s.precisions]
    plan += [("image_model", functools.partial(parts.image_model, s, out=out)), ("cores_per_gpu", cores)]
    return plan


def _write(out: str, doc: dict[str, Any]) -> None:
    path = os.path.join(out, JSON_NAME)
    with open(path + ".tmp", "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(path + ".tmp", path)


def run_check(s: CheckSettings, out: str, *, echo: Callable[[str], None] = print) -> dict[str, Any]:
    """Runs every part; returns the document written to ``out/gpu_check.json``."""
    start = time.monotonic()
    doc: dict[str, Any] = {
        "check": "gpu_check", "version": 1, "mode": s.mode,
        "started": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "settings": dataclasses.asdict(s), "parts": {},
    }
    for name, fn in _plan(s, out, doc):
        if time.monotonic() - start > s.budget_s:
            result = {"ok": False, "skipped": True, "error": f"skipped: the {s.budget_s:.0f} s budget ran out"}
        else:
            result = _guarded(fn)
        doc["parts"][name] = result
        doc["wall_s"] = round(time.monotonic() - start, 1)
        _write(out, doc)
        echo(f"[gpu_check] {name}: {'ok' if result['ok'] else 'FAILED: ' + result['error'][:200]} "
             f"({result.get('seconds', 0):.1f} s)")
    return doc


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog=f"python -m {PROG}", description=__doc__.splitlines()[0])
    p.add_argument("outdir", help="folder for gpu_check.json, gpu_check.txt, logs/, data/ and runs/")
    p.add_argument("--cpu", action="store_true", help="CPU mode: ring all-reduce, float32 and bfloat16, small sizes")
    p.add_argument("--rows", type=int, help="rows of the generated data set (default: by mode)")
    p.add_argument("--model", help="trainer.train --model for the training parts (default: mlp)")
    p.add_argument("--budget-s", type=float, help="start no part after this many seconds (default: by mode)")
    args = p.parse_args(argv)
    try:
        settings = settings_for(cpu=args.cpu, rows=args.rows, budget_s=args.budget_s, model=args.model)
        os.makedirs(args.outdir, exist_ok=True)
    except (ValueError, OSError) as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    try:
        doc = run_check(settings, args.outdir, echo=lambda line: print(line, flush=True))
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted (figures so far in {os.path.join(args.outdir, JSON_NAME)})", file=sys.stderr)
        return 130
    table = report.render(doc)
    with open(os.path.join(args.outdir, TABLE_NAME), "w") as f:
        f.write(table + "\n")
    print(table)
    return 0 if all(part["ok"] for part in doc["parts"].values()) else 1
