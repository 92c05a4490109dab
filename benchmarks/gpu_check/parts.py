"""The machine-side parts of the check: environment, data set, input pipeline alone, image model.

Each part returns a dict of figures (with ``error`` set when it ran but found a problem) or raises
``RunError`` with one line; ``cli`` guards every call. Everything a part writes lives under the
output folder's ``data/`` and ``logs/``.
"""
from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
from typing import Any

import numpy as np

from benchmarks.gpu_check.procs import PYTHON, ProcResult, run_logged
from benchmarks.gpu_check.settings import LABEL, NUM_FEATURES, CheckSettings, core_counts
from shardprep.errors import RunError

__all__ = ["dataset", "environment", "image_model", "input_pipeline"]

_CSV_SHARES = (0.6, 0.3, 0.1)  # uneven files, as raw data comes: the re-shard evens them out


def _log(out: str, name: str) -> str:
    os.makedirs(os.path.join(out, "logs"), exist_ok=True)
    return os.path.join(out, "logs", f"{name}.log")


def _checked(res: ProcResult) -> ProcResult:
    if not res.ok:
        raise RunError(res.failure())
    return res


def _nvidia_smi() -> dict[str, Any]:
    """GPU name, driver and the driver's CUDA version from ``nvidia-smi`` (absent: said so)."""
    if shutil.which("nvidia-smi") is None:
        return {"nvidia_smi": "not found"}
    try:
        query = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30,
        )
        plain = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"nvidia_smi": f"failed: {e}"}
    gpus = [dict(zip(("name", "driver", "memory"), (x.strip() for x in line.split(","))))
            for line in query.stdout.splitlines() if line.strip()]
    cuda = re.search(r"CUDA Version:\s*([\d.]+)", plain.stdout)
    return {"nvidia_smi": "ok" if query.returncode == 0 else query.stderr.strip()[:200],
            "smi_gpus": gpus, "driver_cuda_version": cuda.group(1) if cuda else None}


def environment(s: CheckSettings, *, out: str) -> dict[str, Any]:
    """What TensorFlow and the driver see, the CPU cores and /dev/shm (NCCL's shared memory)."""
    path = os.path.join(out, "logs", "environment.json")
    res = _checked(run_logged([PYTHON, "-m", "benchmarks.gpu_check.env_probe", "--out", path],
                              log_path=_log(out, "environment"), timeout_s=s.step_timeout_s))
    with open(path) as f:
        doc: dict[str, Any] = json.load(f)
    shm = os.statvfs("/dev/shm") if os.path.isdir("/dev/shm") else None
    doc.update(_nvidia_smi())
    doc.update({
        "cpu_count": os.cpu_count(), "cpus_usable": len(os.sched_getaffinity(0)),
        "dev_shm_gib": round(shm.f_frsize * shm.f_blocks / 2**30, 2) if shm else None,
        "python": platform.python_version(), "probe_s": round(res.wall_s, 2),
    })
    if s.mode == "gpu" and not doc["tf_gpus"]:
        seen = ", ".join(g["name"] for g in doc.get("smi_gpus", [])) or doc["nvidia_smi"]
        doc["error"] = (f"TensorFlow sees no GPU (nvidia-smi: {seen}; TF built with CUDA "
                        f"{doc['build_cuda_version']}): install tensorflow[and-cuda] matching the pinned version")
    return doc


def _write_csv(folder: str, rows: int, seed: int = 18) -> None:
    """``rows`` rows of NUM_FEATURES normal floats and a 0/1 label that a linear rule decides."""
    rng = np.random.default_rng(seed)
    weights = rng.standard_normal(NUM_FEATURES)
    header = ",".join([*(f"f{j}" for j in range(NUM_FEATURES)), LABEL])
    fmt = ["%.5f"] * NUM_FEATURES + ["%d"]
    start = 0
    for k, share in enumerate(_CSV_SHARES):
        n = rows - start if k == len(_CSV_SHARES) - 1 else int(rows * share)
        x = rng.standard_normal((n, NUM_FEATURES))
        y = (x @ weights > 0).astype(np.int64)
        np.savetxt(os.path.join(folder, f"part-{k}.csv"), np.column_stack([x, y]), fmt=fmt, delimiter=",",
                   header=header, comments="")
        start += n


def dataset(s: CheckSettings, *, out: str) -> dict[str, Any]:
    """Generates the CSV files and re-shards them with ``python -m shardprep.run`` (CPU)."""
    root = os.path.join(out, "data")
    shutil.rmtree(root, ignore_errors=True)  # this check's own folder, from an earlier run
    raw, ds = os.path.join(root, "raw"), os.path.join(root, "ds")
    os.makedirs(raw)
    _write_csv(raw, s.rows)
    schema = {**{f"f{j}": {"dtype": "float32", "shape": []} for j in range(NUM_FEATURES)},
              LABEL: {"dtype": "int64", "shape": []}}
    with open(os.path.join(root, "schema.json"), "w") as f:
        json.dump(schema, f)
    cmd = [PYTHON, "-m", "shardprep.run", "--input", os.path.join(raw, "*.csv"), "--output", ds,
           "--num-shards", str(s.num_shards), "--schema", os.path.join(root, "schema.json")]
    res = _checked(run_logged(cmd, log_path=_log(out, "dataset"), timeout_s=s.step_timeout_s))
    with open(os.path.join(ds, "manifest.json")) as f:
        counts = [sh["num_records"] for sh in json.load(f)["splits"]["train"]["shards"]]
    doc: dict[str, Any] = {
        "path": ds, "rows": s.rows, "shards": len(counts), "records_min": min(counts), "records_max": max(counts),
        "csv_mb": round(sum(os.path.getsize(os.path.join(raw, n)) for n in os.listdir(raw)) / 1e6, 1),
        "reshard_s": round(res.wall_s, 2),
    }
    if sum(counts) != s.rows or max(counts) - min(counts) > 1:
        doc["error"] = f"shards not exactly balanced over {s.rows} rows: {counts}"
    return doc


def input_pipeline(s: CheckSettings, *, out: str, data: str) -> dict[str, Any]:
    """Parsed examples/s of the input pipeline alone, pinned to 1, 4 and all cores."""
    usable = sorted(os.sched_getaffinity(0))
    rows, failures = [], []
    for k in core_counts():
        path = os.path.join(out, "logs", f"input-{k}cores.json")
        cmd = [PYTHON, "-m", "benchmarks.gpu_check.input_probe", "--data", data, "--label", LABEL,
               "--batch", str(s.per_replica_batch), "--cpus", ",".join(map(str, usable[:k])),
               "--seconds", str(s.input_seconds), "--out", path]
        # No GPU in the probe: it measures the CPU side alone and starts without a CUDA context.
        res = run_logged(cmd, log_path=_log(out, f"input-{k}cores"), timeout_s=s.step_timeout_s,
                         env={"CUDA_VISIBLE_DEVICES": ""})
        if not res.ok:
            failures.append(f"{k} cores: {res.failure()}")
            continue
        with open(path) as f:
            rows.append(json.load(f))
    doc: dict[str, Any] = {"batch": s.per_replica_batch, "by_cores": rows}
    if failures:
        doc["error"] = "; ".join(failures)
    return doc


def image_model(s: CheckSettings, *, out: str) -> dict[str, Any]:
    """Images/s needs ``--model image`` (issue 12): reported as not available until the trainer has it."""
    res = _checked(run_logged([PYTHON, "-m", "trainer.train", "--help"], log_path=_log(out, "image-model"),
                              timeout_s=s.step_timeout_s))
    if re.search(r"\bimage\b", res.text().split("\n", 1)[-1]):
        return {"status": "trainer.train offers an image model; this version of the check does not measure it yet"}
    return {"status": "not available: trainer.train has no --model image yet (issue 12)"}
