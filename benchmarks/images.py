"""The ``images`` benchmark part: class folders of small JPEGs to shards, shardprep vs a build_imagenet_data-style script.

Contenders, alternated in one invocation: ``shardprep.run --format images`` with header validation,
the same with ``--check-images decode``, and ``benchmarks.contenders.imagenet_style`` (TensorFlow
decodes every image, Python threads, contiguous ranges per thread). Then the image input pipeline's
images/s on one CPU thread (``trainer.image_rate``). ``python -m benchmarks.images --count N``
runs it alone and prints the JSON.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from benchmarks import data
from benchmarks.harness import PYTHON, REPO, Contender, Run, alternate, paired_ratio, summarize

__all__ = ["COUNTS", "image_set", "part_images", "section"]

COUNTS = {"quick": 2_000, "full": 20_000}  # images per profile
SHARDS = 8
WORK = os.path.join(data.DATA_DIR, "work", "images")


def image_set(count: int, side: int = 40) -> str:
    """A cached folder of ``count`` JPEGs of about ``side`` x ``side`` px (40: 1-2 KB each) in 3 class folders."""
    from trainer.demo_images import CLASSES, write_images

    folder = os.path.join(data.DATA_DIR, f"images-{count}" + (f"-{side}px" if side != 40 else ""))
    marker = os.path.join(folder, ".done")
    if not os.path.exists(marker):
        shutil.rmtree(folder, ignore_errors=True)
        write_images(folder, per_class=-(-count // len(CLASSES)), formats=("jpeg",), seed=7, size=side)
        open(marker, "w").close()
    return folder


def _fresh(path: str):
    return lambda: shutil.rmtree(path, ignore_errors=True)


def _check_records(folder: str, expected: int, pattern: str = "train-"):
    def check(run: Run) -> dict:
        from shardprep.tfrecord import scan_records

        total = 0
        for root, _, names in os.walk(folder):
            for name in names:
                if name.startswith(pattern) and not name.endswith(".json"):
                    with open(os.path.join(root, name), "rb") as f:
                        total += sum(1 for _ in scan_records(f))
        if total != expected:
            raise AssertionError(f"{folder}: {total} records, expected {expected}")
        return {"records": total}

    return check


def _shardprep(root: str, out: str, *extra: str) -> list[str]:
    return [PYTHON, "-m", "shardprep.run", "--input", root, "--format", "images", "--output", out,
            "--num-shards", str(SHARDS), *extra]


def measure(count: int, repeats: int, log=print, side: int = 40) -> dict[str, Any]:
    root = image_set(count, side)
    count = sum(len(files) for _, _, files in os.walk(root)) - 1  # less the marker
    threads = os.cpu_count() or 2
    outs = {n: os.path.join(WORK, n) for n in ("header", "decode", "imagenet_style")}
    contenders = [
        Contender("shardprep_header", _shardprep(root, outs["header"]), prepare=_fresh(outs["header"]),
                  check=_check_records(outs["header"], count)),
        Contender("shardprep_decode", _shardprep(root, outs["decode"], "--check-images", "decode"),
                  prepare=_fresh(outs["decode"]), check=_check_records(outs["decode"], count)),
        Contender("imagenet_style", [PYTHON, "-m", "benchmarks.contenders.imagenet_style", "--root", root, "--output",
                                     outs["imagenet_style"], "--num-shards", str(SHARDS), "--threads", str(threads)],
                  prepare=_fresh(outs["imagenet_style"]), check=_check_records(outs["imagenet_style"], count)),
    ]
    log(f"[images] {count} JPEGs in {root} -> {SHARDS} shards; {repeats} rounds")
    runs = alternate(contenders, repeats, log=log)
    summary = {}
    for name, rs in runs.items():
        s = summarize(rs)
        summary[name] = {**s, "images_per_s": round(count / s["wall_s"], 1)}
    ratios = {
        "header_vs_imagenet_style": round(1 / paired_ratio(runs["shardprep_header"], runs["imagenet_style"]), 3),
        "decode_vs_imagenet_style": round(1 / paired_ratio(runs["shardprep_decode"], runs["imagenet_style"]), 3),
    }
    rate = _input_rate(outs["header"])
    shutil.rmtree(WORK, ignore_errors=True)
    return {"dataset": {"images": count, "side_px": side, "mb": round(sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root)
                                                            for f in fs) / 1e6, 2), "num_shards": SHARDS,
                        "contender_threads": threads},
            "summary": summary, "ratios": ratios, "input_rate": rate,
            "goals": [_goal("header validation vs build_imagenet_data-style (images/s)", ratios["header_vs_imagenet_style"], 5.0),
                      _goal("--check-images decode vs build_imagenet_data-style (images/s)",
                            ratios["decode_vs_imagenet_style"], 1.0)],
            "runs": {name: [r.to_json() for r in rs] for name, rs in runs.items()}}


def _goal(name: str, value: float, target: float) -> dict:
    return {"goal": name, "value": value, "target": target, "at_least": True, "unit": "x", "met": value >= target}


def _input_rate(dataset: str) -> dict | None:
    proc = subprocess.run([PYTHON, "-m", "trainer.image_rate", "--data", dataset, "--image-size", "32", "--seconds", "5",
                           "--threads", "1"], cwd=REPO, capture_output=True, text=True)
    if proc.returncode:
        return {"error": proc.stderr[-500:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def part_images(p, state: dict) -> dict:
    """The benchmark part (``benchmarks.run --only images``)."""
    return measure(COUNTS.get(p.name, 2_000), max(1, min(p.repeats, 3)),
                   log=lambda message: print(message, file=sys.stderr, flush=True))


def section(results: dict) -> list[str]:
    """BENCHMARKS.md's image section."""
    part = results.get("images")
    if not part:
        return []
    ds, s = part["dataset"], part["summary"]
    lines = ["## 6. Images: class folders to shards", "",
             f"{ds['images']:,} generated JPEGs (about 40x40 px, {ds['mb']} MB) in 3 class folders -> {ds['num_shards']} "
             "shards. Contender: a script written like tensorflow/models `build_imagenet_data.py` (TensorFlow decodes "
             f"every image, {ds['contender_threads']} Python threads). Medians of alternated runs, each its own process.",
             "", "| contender | wall s | CPU s | images/s |", "|---|---:|---:|---:|"]
    for name, v in s.items():
        lines.append(f"| {name} | {v['wall_s']:.2f} | {v['cpu_s']:.2f} | {v['images_per_s']:,.0f} |")
    if part.get("note"):
        lines += ["", f"Conditions: {part['note']}."]
    r = part["ratios"]
    lines += ["", f"Paired speed-up over the contender: header validation {r['header_vs_imagenet_style']}x, "
              f"`--check-images decode` {r['decode_vs_imagenet_style']}x."]
    larger = part.get("larger")
    if larger:
        ld, lr = larger["dataset"], larger["ratios"]
        lines += ["", f"Larger images, same contenders: {ld['images']:,} JPEGs of about {ld['side_px']}x{ld['side_px']} px "
                  f"({ld['mb']} MB), {larger.get('note', '')}", "", "| contender | wall s | CPU s | images/s |",
                  "|---|---:|---:|---:|"]
        lines += [f"| {name} | {v['wall_s']:.2f} | {v['cpu_s']:.2f} | {v['images_per_s']:,.0f} |"
                  for name, v in larger["summary"].items()]
        lines += ["", f"Paired speed-up: header validation {lr['header_vs_imagenet_style']}x, `--check-images decode` "
                  f"{lr['decode_vs_imagenet_style']}x."]
    rate = part.get("input_rate") or {}
    if "images_per_second_per_core" in rate:
        lines += ["", f"Training input (`python -m trainer.image_rate`: read, parse, decode, resize to "
                  f"{rate['image_size']} px, crop, flip) on one CPU thread: {rate['images_per_second_per_core']:,.0f} "
                  "images/s per core; divide a GPU's images/s by this for the cores that keep it fed."]
    return lines + [""]


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.images", description=__doc__.splitlines()[0])
    p.add_argument("--count", type=int, default=2_000)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--side", type=int, default=40, help="image side in pixels (default: %(default)s)")
    p.add_argument("--json", help="also write the full result here")
    args = p.parse_args(argv)
    result = measure(args.count, args.repeats, side=args.side)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
