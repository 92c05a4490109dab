"""The ``images`` benchmark part: class folders of JPEGs to shards, shardprep vs a build_imagenet_data-style script.

Two image sizes side by side (``benchmarks.image_data``): the 40 px demo pictures (1-2 KB: per-file
overhead) and photo-like JPEGs of about 256 px (quality 90, ~26 KB: closer to what users train on).
For each, contenders alternated in one invocation, each its own process from imports to exit:
``shardprep.run --format images`` with header validation, with default flags (every core the
direct runner chooses to use) and with ``--local-workers 1`` (one process); the same with
``--check-images decode`` (default flags); and ``benchmarks.contenders.imagenet_style``
(TensorFlow decodes every image, one Python thread per core, contiguous ranges per thread). For
each: wall, CPU seconds (all its processes), the cores it was given and the cores it kept busy
(CPU / wall). Ratios are paired per round (runs of a round saw the same machine load), by wall
time (images/s) and by CPU time (images per CPU second). Then the image input pipeline's images/s
on one CPU thread (``trainer.image_rate``), and (``steps``) the CPU microseconds per image of each
step of shardprep's image reader in this process (listing, reading, header, hash, encoding and
framing). ``python -m benchmarks.images --count N --side S`` runs one size alone and prints the JSON.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from benchmarks import data
from benchmarks.harness import PYTHON, REPO, Contender, Run, alternate, load_average, paired_ratio, summarize
from benchmarks.image_data import SMALL_SIDE, image_set

__all__ = ["COUNTS", "SIDES", "image_set", "measure", "part_images", "section", "steps"]

COUNTS = {"quick": 2_000, "full": 20_000}  # images per profile
SIDES = (SMALL_SIDE, 256)  # image sizes measured side by side (px); the first is the headline case
SHARDS = 8
WORK = os.path.join(data.DATA_DIR, "work", "images")


def _warm(root: str) -> int:
    """Reads every file once (untimed), so every contender finds them in the page cache; returns the bytes."""
    total = 0
    for folder, _, names in os.walk(root):
        for name in names:
            with open(os.path.join(folder, name), "rb") as f:
                total += len(f.read())
    return total


def _fresh(path: str):
    return lambda: shutil.rmtree(path, ignore_errors=True)


def _check_records(folder: str, expected: int, pattern: str = "train-"):
    def check(run: Run) -> dict:
        from shardprep.framing import scan_records

        total = 0
        for root, _, names in os.walk(folder):
            for name in names:
                if name.startswith(pattern) and not name.endswith(".json"):
                    with open(os.path.join(root, name), "rb") as f:
                        total += sum(1 for _ in scan_records(f))
        if total != expected:
            raise AssertionError(f"{folder}: {total} records, expected {expected}")
        workers = re.search(r"direct runner: (\d+) worker processes", run.extra.get("output", ""))
        return {"records": total, "processes": int(workers.group(1)) if workers else 1}

    return check


def _shardprep(root: str, out: str, *extra: str) -> list[str]:
    return [PYTHON, "-m", "shardprep.run", "--input", root, "--format", "images", "--output", out,
            "--num-shards", str(SHARDS), *extra]


def _cores() -> int:
    from shardprep.capacity import machine_cores

    return machine_cores()


def measure(count: int, repeats: int, log=print, side: int = SMALL_SIDE) -> dict[str, Any]:
    root = image_set(count, side)
    count = sum(len(files) for _, _, files in os.walk(root)) - 1  # less the marker
    size = _warm(root)
    cores = _cores()
    threads = cores  # the contender: one Python thread per core, as build_imagenet_data.py's --num_threads
    outs = {n: os.path.join(WORK, n) for n in ("header", "header_1", "decode", "imagenet_style")}
    contenders = [
        Contender("shardprep_header", _shardprep(root, outs["header"]), prepare=_fresh(outs["header"]),
                  check=_check_records(outs["header"], count)),
        Contender("shardprep_header_1", _shardprep(root, outs["header_1"], "--local-workers", "1"),
                  prepare=_fresh(outs["header_1"]), check=_check_records(outs["header_1"], count)),
        Contender("shardprep_decode", _shardprep(root, outs["decode"], "--check-images", "decode"),
                  prepare=_fresh(outs["decode"]), check=_check_records(outs["decode"], count)),
        Contender("imagenet_style", [PYTHON, "-m", "benchmarks.contenders.imagenet_style", "--root", root, "--output",
                                     outs["imagenet_style"], "--num-shards", str(SHARDS), "--threads", str(threads)],
                  prepare=_fresh(outs["imagenet_style"]), check=_check_records(outs["imagenet_style"], count)),
    ]
    log(f"[images] {count} JPEGs of about {side} px ({size / 1e6:.0f} MB) in {root} -> {SHARDS} shards; {repeats} "
        f"rounds; {cores} cores")
    load_start = load_average()
    runs = alternate(contenders, repeats, log=log)
    load_end = load_average()
    summary = {}
    for name, rs in runs.items():
        s = summarize(rs)
        given = threads if name == "imagenet_style" else max(r.extra.get("processes", 1) for r in rs)
        summary[name] = {**s, "images_per_s": round(count / s["wall_s"], 1), "cores_given": given,
                         "cores_busy": round(s["cpu_s"] / s["wall_s"], 2),
                         "cpu_us_per_image": round(1e6 * s["cpu_s"] / count, 1)}
    contender = runs["imagenet_style"]
    ratios = {f"{name.removeprefix('shardprep_')}_vs_imagenet_style": round(1 / paired_ratio(runs[name], contender), 3)
              for name in ("shardprep_header", "shardprep_header_1", "shardprep_decode")}
    ratios.update({f"{name.removeprefix('shardprep_')}_cpu_vs_imagenet_style":
                   round(1 / paired_ratio(runs[name], contender, "cpu_s"), 3)
                   for name in ("shardprep_header", "shardprep_header_1", "shardprep_decode")})
    rate = _input_rate(outs["header"])
    shutil.rmtree(WORK, ignore_errors=True)
    return {"dataset": {"images": count, "side_px": side, "mb": round(size / 1e6, 2),
                        "kb_per_image": round(size / 1e3 / count, 1), "num_shards": SHARDS, "cores": cores,
                        "contender_threads": threads},
            "summary": summary, "ratios": ratios, "input_rate": rate,
            "load_average": {"start": load_start, "end": load_end},
            "goals": [_goal(f"header validation vs build_imagenet_data-style (images/s){_at(side)}",
                            ratios["header_vs_imagenet_style"], 5.0),
                      _goal(f"--check-images decode vs build_imagenet_data-style (images/s){_at(side)}",
                            ratios["decode_vs_imagenet_style"], 1.0)],
            "runs": {name: [r.to_json() for r in rs] for name, rs in runs.items()}}


def _at(side: int) -> str:
    return "" if side == SMALL_SIDE else f", {side} px photos"


def steps(count: int, side: int = SMALL_SIDE, rounds: int = 3) -> dict[str, Any]:
    """CPU microseconds per image of each step of shardprep's image reader, in this process (best of
    ``rounds``): what the pipeline's Parse step does per image, without Beam, start-up or the shards."""
    import hashlib
    import time

    from shardprep.formats import images as im
    from shardprep.formats.image_headers import sniff
    from shardprep.formats.image_listing import ImageOptions

    root = image_set(count, side)
    source = im.expand_images([root], ImageOptions())[0]
    fmt, schema, n = im.ImageFormat(), im.image_schema(source.classes), len(source.entries)
    units = fmt.plan(source, 64 << 20)
    files = [d for u in units for _, _, d in im._fetch(u.file, u.entries)]
    work = {
        "listing (scandir + stat)": lambda: im.expand_images([root], ImageOptions()),
        "read files (open, read, close)": lambda: [d for u in units for _, _, d in im._fetch(u.file, u.entries)],
        "header check": lambda: [sniff(d) for d in files],
        "sha256": lambda: [hashlib.sha256(d).digest() for d in files],
        "whole reader: read, check, hash, encode + frame": lambda: [b for u in units
                                                                    for b in fmt.framed_batches(u, schema, "reject")],
    }
    best = {name: float("inf") for name in work}
    for _ in range(rounds):
        for name, fn in work.items():
            start = time.process_time()
            fn()
            best[name] = min(best[name], time.process_time() - start)
    us = {name: round(1e6 * s / n, 2) for name, s in best.items()}
    us["encode + frame (whole reader less read, check, hash)"] = round(
        us["whole reader: read, check, hash, encode + frame"] - us["read files (open, read, close)"]
        - us["header check"] - us["sha256"], 2)
    return {"images": n, "side_px": side, "us_per_image": us}


def _goal(name: str, value: float, target: float) -> dict:
    return {"goal": name, "value": value, "target": target, "at_least": True, "unit": "x", "met": value >= target}


def _input_rate(dataset: str) -> dict | None:
    proc = subprocess.run([PYTHON, "-m", "trainer.image_rate", "--data", dataset, "--image-size", "32", "--seconds", "5",
                           "--threads", "1"], cwd=REPO, capture_output=True, text=True)
    if proc.returncode:
        return {"error": proc.stderr[-500:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def part_images(p, state: dict) -> dict:
    """The benchmark part (``benchmarks.run_all --only images``): every size of ``p.image_sides`` (default
    ``SIDES``), each with its reader steps; the first size is the result, the others its ``larger``
    list, and every size's goals are the part's goals."""
    count, sides = COUNTS.get(p.name, 2_000), tuple(getattr(p, "image_sides", ()) or SIDES)
    results = []
    for side in sides:
        result = measure(count, max(1, min(p.repeats, 3)), side=side,
                         log=lambda message: print(message, file=sys.stderr, flush=True))
        result["steps"] = steps(count, side)
        results.append(result)
    main, others = results[0], results[1:]
    if others:
        main["larger"] = others
        main["goals"] = [g for r in results for g in r["goals"]]
    return main


_NAMES = {"shardprep_header": "shardprep, header check", "shardprep_header_1": "shardprep, header check, 1 process",
          "shardprep_decode": "shardprep, `--check-images decode`", "imagenet_style": "build_imagenet_data-style"}


def _table(summary: dict) -> list[str]:
    lines = ["| contender | cores given | cores busy | wall s | CPU s | CPU us/image | images/s |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for name, v in summary.items():
        busy = v.get("cores_busy", round(v["cpu_s"] / v["wall_s"], 2))
        lines.append(f"| {_NAMES.get(name, name)} | {v.get('cores_given', '')} | {busy} | {v['wall_s']:.2f} | "
                     f"{v['cpu_s']:.2f} | {v.get('cpu_us_per_image', '')} | {v['images_per_s']:,.0f} |")
    return lines


def _ratios(r: dict) -> str:
    text = f"header check {r['header_vs_imagenet_style']}x"
    if "header_1_vs_imagenet_style" in r:
        text += f" (one process: {r['header_1_vs_imagenet_style']}x)"
    text += f", `--check-images decode` {r['decode_vs_imagenet_style']}x"
    if "header_cpu_vs_imagenet_style" in r:
        text += (f"; per CPU second: header check {r['header_cpu_vs_imagenet_style']}x (one process: "
                 f"{r['header_1_cpu_vs_imagenet_style']}x), decode {r['decode_cpu_vs_imagenet_style']}x")
    return text


def _conditions(part: dict) -> list[str]:
    load = part.get("load_average")
    text = part.get("note") or ""
    if load:
        text = (text + "; " if text else "") + (f"load average {load['start'][0]} at the start, {load['end'][0]} at "
                                                f"the end (1 min)")
    return ["", f"Conditions: {text}."] if text else []


def _kind(ds: dict) -> str:
    side = ds.get("side_px", SMALL_SIDE)
    size = f"{ds['kb_per_image']} KB each, " if "kb_per_image" in ds else ""
    what, quality = ("demo pictures", "") if side == SMALL_SIDE else ("photo-like JPEGs", "quality 90, ")
    return f"{ds['images']:,} generated {what} of about {side}x{side} px ({quality}{size}{ds['mb']} MB)"


def _case(part: dict) -> list[str]:
    """One image size: the contenders' table, the paired ratios, the reader's steps and the input rate."""
    lines = [*_table(part["summary"]), *_conditions(part), "",
             f"Paired speed-up over the contender (images/s): {_ratios(part['ratios'])}."]
    per_step = part.get("steps")
    if per_step:
        lines += ["", f"Where one process's CPU goes per image in shardprep's image reader (`python -m benchmarks.images "
                  f"--steps --side {part['dataset'].get('side_px', SMALL_SIDE)}`, {per_step['images']:,} images, best of "
                  "3, in process):", "", "| step | CPU us/image |", "|---|---:|"]
        lines += [f"| {name} | {us} |" for name, us in per_step["us_per_image"].items()]
    rate = part.get("input_rate") or {}
    if "images_per_second_per_core" in rate:
        lines += ["", f"Training input on these shards (`python -m trainer.image_rate`: read, parse, decode, resize to "
                  f"{rate['image_size']} px, crop, flip) on one CPU thread: {rate['images_per_second_per_core']:,.0f} "
                  "images/s per core; divide a GPU's images/s by this for the cores that keep it fed."]
    return lines


def section(results: dict) -> list[str]:
    """BENCHMARKS.md's image section: the headline size, then each larger one."""
    part = results.get("images")
    if not part:
        return []
    ds = part["dataset"]
    lines = ["## 6. Images: class folders to shards", "",
             f"{_kind(ds)} in 3 class folders -> {ds['num_shards']} shards. Contender: a script written like "
             "tensorflow/models `build_imagenet_data.py` (TensorFlow decodes every image, "
             f"{ds['contender_threads']} Python threads). Each run is its own process, imports to exit; medians of "
             "alternated runs; cores busy = CPU s / wall s.", "", *_case(part)]
    larger = part.get("larger") or []
    for other in [larger] if isinstance(larger, dict) else larger:
        lines += ["", f"Larger images, same contenders: {_kind(other['dataset'])}.", "", *_case(other)]
    return lines + [""]


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.images", description=__doc__.splitlines()[0])
    p.add_argument("--count", type=int, default=2_000)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--side", type=int, default=SMALL_SIDE, help=f"image side in pixels ({SMALL_SIDE}: the demo "
                   "pictures; others: photo-like JPEGs) (default: %(default)s)")
    p.add_argument("--steps", action="store_true", help="only the in-process CPU us/image of each reader step")
    p.add_argument("--json", help="also write the full result here")
    args = p.parse_args(argv)
    result = steps(args.count, args.side) if args.steps else measure(args.count, args.repeats, side=args.side)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
