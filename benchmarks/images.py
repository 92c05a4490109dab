"""The ``images`` benchmark part: class folders of small JPEGs to shards, shardprep vs a build_imagenet_data-style script.

Contenders, alternated in one invocation, each its own process from imports to exit:
``shardprep.run --format images`` with header validation, with default flags (every core: the
direct runner's process pool) and with ``--local-workers 1`` (one process); the same with
``--check-images decode`` (default flags); and ``benchmarks.contenders.imagenet_style``
(TensorFlow decodes every image, one Python thread per core, contiguous ranges per thread). For
each: wall, CPU seconds (all its processes), the cores it was given and the cores it kept busy
(CPU / wall). Ratios are paired per round (runs of a round saw the same machine load), by wall
time (images/s) and by CPU time (images per CPU second). Then the image input pipeline's images/s
on one CPU thread (``trainer.image_rate``). ``--steps`` measures instead, in this process, the CPU
microseconds per image of each step of shardprep's image reader (listing, reading, header, hash,
encoding and framing). ``python -m benchmarks.images --count N`` runs it alone and prints the JSON.
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

__all__ = ["COUNTS", "image_set", "measure", "part_images", "section", "steps"]

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
        workers = re.search(r"direct runner: (\d+) worker processes", run.extra.get("output", ""))
        return {"records": total, "processes": int(workers.group(1)) if workers else 1}

    return check


def _shardprep(root: str, out: str, *extra: str) -> list[str]:
    return [PYTHON, "-m", "shardprep.run", "--input", root, "--format", "images", "--output", out,
            "--num-shards", str(SHARDS), *extra]


def _cores() -> int:
    from pipelines.local import machine_cores

    return machine_cores()


def measure(count: int, repeats: int, log=print, side: int = 40) -> dict[str, Any]:
    root = image_set(count, side)
    count = sum(len(files) for _, _, files in os.walk(root)) - 1  # less the marker
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
    log(f"[images] {count} JPEGs in {root} -> {SHARDS} shards; {repeats} rounds; {cores} cores")
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
    return {"dataset": {"images": count, "side_px": side, "mb": round(sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root)
                                                            for f in fs) / 1e6, 2), "num_shards": SHARDS,
                        "cores": cores, "contender_threads": threads},
            "summary": summary, "ratios": ratios, "input_rate": rate,
            "load_average": {"start": load_start, "end": load_end},
            "goals": [_goal("header validation vs build_imagenet_data-style (images/s)", ratios["header_vs_imagenet_style"], 5.0),
                      _goal("--check-images decode vs build_imagenet_data-style (images/s)",
                            ratios["decode_vs_imagenet_style"], 1.0)],
            "runs": {name: [r.to_json() for r in rs] for name, rs in runs.items()}}


def steps(count: int, side: int = 40, rounds: int = 3) -> dict[str, Any]:
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
    return {"images": n, "us_per_image": us}


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


def section(results: dict) -> list[str]:
    """BENCHMARKS.md's image section."""
    part = results.get("images")
    if not part:
        return []
    ds, s = part["dataset"], part["summary"]
    lines = ["## 6. Images: class folders to shards", "",
             f"{ds['images']:,} generated JPEGs (about 40x40 px, {ds['mb']} MB) in 3 class folders -> {ds['num_shards']} "
             "shards. Contender: a script written like tensorflow/models `build_imagenet_data.py` (TensorFlow decodes "
             f"every image, {ds['contender_threads']} Python threads). Each run is its own process, imports to exit; "
             "medians of alternated runs; cores busy = CPU s / wall s.", "", *_table(s), *_conditions(part),
             "", f"Paired speed-up over the contender (images/s): {_ratios(part['ratios'])}."]
    per_step = part.get("steps")
    if per_step:
        lines += ["", f"Where one process's CPU goes per image in shardprep's image reader (`python -m benchmarks.images "
                  f"--steps`, {per_step['images']:,} images, best of 3, in process):", "",
                  "| step | CPU us/image |", "|---|---:|"]
        lines += [f"| {name} | {us} |" for name, us in per_step["us_per_image"].items()]
    larger = part.get("larger")
    if larger:
        ld = larger["dataset"]
        lines += ["", f"Larger images, same contenders: {ld['images']:,} JPEGs of about {ld['side_px']}x{ld['side_px']} px "
                  f"({ld['mb']} MB).", "", *_table(larger["summary"]), *_conditions(larger), "",
                  f"Paired speed-up: {_ratios(larger['ratios'])}."]
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
