"""Held-out accuracy of ``--model image`` against scikit-learn on the same split of small real image sets.

For each set of ``benchmarks.image_sets`` (``digits``, ``patches``; ``faces`` on request): its class
folders are written once under ``benchmarks/data/image-accuracy/<set>`` (git-ignored) and re-sharded
by ``shardprep.run --format images --split train=0.8,eval=0.2 --workers 2``. The baselines read both
splits back from the shards (the very records the trainer reads) and fit on the flat 0-1 pixels:
``LogisticRegression`` and an RBF ``SVC`` whose ``C`` and ``gamma`` are chosen together by 5-fold
stratified cross-validation on the training split only (``SVC_GRID``), as a careful scikit-learn user would. The trainer runs on 2 local workers
(``trainer.launch``) with the README's command (every setting left to the trainer) and with the
issue's explicit flags (``EXPLICIT``), each once per ``--augment`` value asked for; its eval
accuracy is every eval record scored once.

``python -m benchmarks.image_accuracy [--sets digits,patches] [--augment crop] [--runs readme,explicit]``
prints one JSON line per run and a Markdown table (BENCHMARKS.md, section 7).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from benchmarks import data
from benchmarks.image_sets import SETS, SIDE, write_set

__all__ = ["EXPLICIT", "README", "baselines", "data_set", "main", "split_pixels", "train"]

ROOT = os.path.join(data.DATA_DIR, "image-accuracy")
LABEL = "image/class/label"
README = ("--image-size", str(SIDE))  # the README's / docs/trainer.md's command: everything else left to the trainer
EXPLICIT = ("--model", "image", "--image-size", str(SIDE), "--per-replica-batch", "32", "--epochs", "15",
            "--learning-rate", "0.003")  # issue 60's command
RUNS = {"readme": README, "explicit": EXPLICIT}
# the SVC's grid: C, and gamma as a multiple of scikit-learn's "scale" (1 / (pixels * their variance))
SVC_GRID = {"C": (0.3, 1, 3, 10, 30, 100), "gamma_x_scale": (0.1, 0.3, 1, 3, 10)}
WORKERS = 2


def data_set(name: str) -> str:
    """The shardprep data set of image set ``name``, made once (class folders, then an 80/20 split)."""
    folder = os.path.join(ROOT, name)
    ds, marker = os.path.join(folder, "ds"), os.path.join(folder, ".done")
    if not os.path.exists(marker):
        shutil.rmtree(folder, ignore_errors=True)
        write_set(name, os.path.join(folder, "raw"))
        subprocess.run([sys.executable, "-m", "shardprep.run", "--input", os.path.join(folder, "raw"), "--format", "images",
                        "--output", ds, "--workers", str(WORKERS), "--split", "train=0.8,eval=0.2"],
                       check=True, stdout=subprocess.DEVNULL)
        open(marker, "w").close()
    return ds


def split_pixels(ds: str, split: str) -> tuple[np.ndarray, np.ndarray]:
    """Every record of ``split`` as (0-1 pixels ``[n, SIDE * SIDE * 3]``, label ids), in shard order."""
    import io

    import tensorflow as tf
    from PIL import Image

    from shardprep import manifest

    m = manifest.load(ds)
    paths = [os.path.join(ds, s.path) for s in m.splits[split].shards]
    spec = {"image/encoded": tf.io.FixedLenFeature([], tf.string), LABEL: tf.io.FixedLenFeature([], tf.int64)}
    xs, ys = [], []
    for record in tf.data.TFRecordDataset(paths).map(lambda r: tf.io.parse_single_example(r, spec)).as_numpy_iterator():
        with Image.open(io.BytesIO(record["image/encoded"])) as image:
            xs.append(np.asarray(image.convert("RGB").resize((SIDE, SIDE)), np.float32).ravel() / 255)
        ys.append(int(record[LABEL]))
    return np.stack(xs), np.array(ys)


def baselines(ds: str) -> dict[str, Any]:
    """Eval accuracy of scikit-learn models fitted on the training split's pixels (module docstring)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GridSearchCV, StratifiedKFold
    from sklearn.svm import SVC

    (xtr, ytr), (xev, yev) = split_pixels(ds, "train"), split_pixels(ds, "eval")
    out: dict[str, Any] = {"train": len(ytr), "eval": len(yev), "classes": int(max(ytr.max(), yev.max()) + 1)}
    logistic = LogisticRegression(C=0.1, max_iter=2000).fit(xtr, ytr)
    out["logistic"] = round(float(logistic.score(xev, yev)), 4)
    scale = 1 / (xtr.shape[1] * float(xtr.var()))
    grid = {"C": list(SVC_GRID["C"]), "gamma": [x * scale for x in SVC_GRID["gamma_x_scale"]]}
    svc = GridSearchCV(SVC(kernel="rbf"), grid, cv=StratifiedKFold(5, shuffle=True, random_state=0)).fit(xtr, ytr)
    out["svc"] = round(float(svc.score(xev, yev)), 4)
    out["svc_C"] = svc.best_params_["C"]
    out["svc_gamma_x_scale"] = round(svc.best_params_["gamma"] / scale, 2)
    return out


def train(ds: str, model_dir: str, flags: Sequence[str]) -> dict[str, Any]:
    """One ``trainer.launch`` run on ``WORKERS`` local workers; worker 0's summary figures."""
    from trainer.metrics import summary_url

    shutil.rmtree(model_dir, ignore_errors=True)
    cmd = [sys.executable, "-m", "trainer.launch", "--workers", str(WORKERS), "--", "--data", ds, "--label", LABEL,
           "--eval-split", "eval", "--model-dir", model_dir, *flags]
    start = time.monotonic()
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode:
        raise RuntimeError(f"{' '.join(cmd)} exited with {done.returncode}:\n{done.stdout[-2000:]}")
    with open(summary_url(model_dir, 0)) as f:
        summary = json.load(f)
    return {"eval_accuracy": summary["eval_accuracy"], "train_accuracy": summary["accuracy"],
            "steps": summary["global_step"], "global_batch": summary["global_batch"],
            "learning_rate": summary["learning_rate"], "wall_s": round(time.monotonic() - start, 1)}


def _table(rows: list[dict[str, Any]]) -> str:
    lines = ["| set | train / eval | run | --augment | steps | image model | logistic | SVC | model - best baseline |",
             "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        best = max(r["logistic"], r["svc"])
        lines.append(f"| {r['set']} | {r['train']} / {r['eval']} | {r['run']} | {r['augment']} | {r['steps']} | "
                     f"{r['eval_accuracy']:.3f} | {r['logistic']:.3f} | {r['svc']:.3f} | {r['eval_accuracy'] - best:+.3f} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="benchmarks.image_accuracy", description=__doc__.splitlines()[0])
    p.add_argument("--sets", default="digits,patches", help=f"comma-separated, of {', '.join(SETS)}")
    p.add_argument("--runs", default="readme,explicit", help=f"comma-separated, of {', '.join(RUNS)}")
    p.add_argument("--augment", default="crop", help="comma-separated --augment values, separated by ';' (e.g. 'none;crop')")
    args = p.parse_args(argv)
    rows = []
    for name in args.sets.split(","):
        ds = data_set(name)
        base = baselines(ds)
        print(json.dumps({"set": name, **base}), flush=True)
        for run in args.runs.split(","):
            for augment in args.augment.split(";"):
                figures = train(ds, os.path.join(ROOT, name, f"run-{run}-{augment}"), [*RUNS[run], "--augment", augment])
                rows.append({"set": name, "run": run, "augment": augment, **base, **figures})
                print(json.dumps(rows[-1]), flush=True)
    print(_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
