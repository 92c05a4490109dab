"""The trainer's parts of the check: ``python -m trainer.train`` on a one-worker MWMS cluster.

Only the trainer's command line and its documented outputs are used (``model_dir/summary/
worker-0.json`` and its log lines), never its internals. ``cores_per_gpu`` sets the fastest step
beside the input pipeline alone: how many cores feed one GPU without waiting.
"""
from __future__ import annotations

import json
import os
import re
import shutil
from typing import Any

from benchmarks.gpu_check.procs import PYTHON, ProcResult, first_event, one_worker_tf_config, run_logged
from benchmarks.gpu_check.settings import LABEL, CheckSettings
from shardprep.errors import RunError

__all__ = ["cold_start", "cores_per_gpu", "train_run"]

SUMMARY_FIELDS = (
    "steps", "examples", "global_batch", "precision", "step_time_mean_s", "examples_per_second", "input_wait_fraction",
    "input_wait_floor_fraction", "first_step_s", "first_loss", "final_loss", "allreduce_s", "allreduce_fraction",
    "empty_replica_steps", "accuracy",
)
_STRATEGY = re.compile(r"strategy ready: (\d+) replica\S* in sync, (\w+) all-reduce")


def _train(s: CheckSettings, *, out: str, data: str, name: str, loop: str, precision: str,
           extra: list[str], env: dict[str, str]) -> tuple[ProcResult, dict[str, Any]]:
    """Runs trainer.train once into ``out/runs/<name>``; returns its process and its summary."""
    model_dir = os.path.join(out, "runs", name)
    shutil.rmtree(model_dir, ignore_errors=True)  # a fresh run, not a resume of an earlier check's
    os.makedirs(os.path.join(out, "logs"), exist_ok=True)
    cmd = [PYTHON, "-m", "trainer.train", "--data", data, "--model", s.model, "--label", LABEL,
           "--per-replica-batch", str(s.per_replica_batch), "--epochs", str(s.epochs), "--model-dir", model_dir,
           "--loop", loop, "--communication", s.communication, "--learning-rate", str(s.learning_rate),
           "--export", "none", *extra]
    if precision != "float32":
        cmd += ["--mixed-precision", precision]
    res = run_logged(cmd, log_path=os.path.join(out, "logs", f"{name}.log"), timeout_s=s.train_timeout_s,
                     env={"TF_CONFIG": one_worker_tf_config(), **env})
    if not res.ok:
        raise RunError(res.failure())
    with open(os.path.join(model_dir, "summary", "worker-0.json")) as f:
        return res, json.load(f)


def _checks(s: CheckSettings, *, precision: str, summary: dict[str, Any], text: str) -> dict[str, Any]:
    """The figures every run reports, and ``error`` when the loss, precision or all-reduce is wrong."""
    doc: dict[str, Any] = {k: summary.get(k) for k in SUMMARY_FIELDS}
    mean = summary.get("step_time_mean_s")
    doc["steps_per_second"] = round(1 / mean, 2) if mean else None
    m = _STRATEGY.search(text)
    doc["replicas"], doc["all_reduce"] = (int(m.group(1)), m.group(2)) if m else (summary.get("replicas"), None)
    problems = []
    first, final = summary.get("first_loss"), summary.get("final_loss")
    doc["loss_fell"] = first is not None and final is not None and final < first
    if not doc["loss_fell"]:
        problems.append(f"the loss did not fall ({first} -> {final})")
    policy = "float32" if precision == "float32" else f"mixed_{precision}"
    if summary.get("precision") != policy:
        problems.append(f"ran as {summary.get('precision')}, not {policy}")
    if s.mode == "gpu" and doc["all_reduce"] != "nccl":
        problems.append(f"all-reduce was {doc['all_reduce'] or 'not logged'}, not nccl (does TensorFlow see the GPU?)")
    if problems:
        doc["error"] = "; ".join(problems)
    return doc


def train_run(s: CheckSettings, *, out: str, data: str, loop: str, precision: str) -> dict[str, Any]:
    """One measured run: steps/s, examples/s, input wait, the loss falling."""
    res, summary = _train(s, out=out, data=data, name=f"{loop}-{precision}", loop=loop, precision=precision,
                          extra=[], env={})
    doc = _checks(s, precision=precision, summary=summary, text=res.text())
    doc["process_s"] = round(res.wall_s, 2)
    doc["strategy_ready_s"] = first_event(res.text(), r"^strategy ready", since=res.started)
    return doc


def cold_start(s: CheckSettings, *, out: str, data: str) -> dict[str, Any]:
    """Seconds from the process's spawn to: its first log line (imports done), the strategy ready
    (workers connected, first collective, NCCL communicator), the first step done. NCCL_DEBUG=INFO
    (unless set already) shows whether NCCL itself was initialised."""
    env = {"NCCL_DEBUG": os.environ.get("NCCL_DEBUG", "INFO")}
    res, summary = _train(s, out=out, data=data, name="cold-start", loop="custom", precision="float32",
                          extra=["--steps-per-epoch", str(s.cold_start_steps), "--log-every", "1"], env=env)
    text = res.text()
    nccl = [line for line in text.splitlines() if "NCCL INFO" in line]
    version = next((m.group(1) for line in nccl if (m := re.search(r"NCCL version (\S+)", line))), None)
    doc: dict[str, Any] = {
        "first_log_s": first_event(text, r".", since=res.started),
        "strategy_ready_s": first_event(text, r"^strategy ready", since=res.started),
        "first_step_done_s": first_event(text, r"^step 1/", since=res.started),
        "first_step_s": summary.get("first_step_s"),
        "process_s": round(res.wall_s, 2),
        "all_reduce": m.group(2) if (m := _STRATEGY.search(text)) else None,
        "nccl_info_lines": len(nccl),
        "nccl_version": version,
    }
    if doc["first_step_done_s"] is None:
        doc["error"] = "no 'step 1/' line in the trainer's log (progress format changed?)"
    elif s.mode == "gpu" and doc["all_reduce"] != "nccl":
        doc["error"] = f"all-reduce was {doc['all_reduce'] or 'not logged'}, not nccl"
    return doc


def _demand(run: dict[str, Any]) -> float:
    """Examples/s the run's step could take if input cost nothing: batch / (step time less the wait)."""
    busy = run["step_time_mean_s"] * (1 - (run.get("input_wait_fraction") or 0.0))
    return run["global_batch"] / busy


def cores_per_gpu(train: dict[str, dict[str, Any]], inputs: dict[str, Any]) -> dict[str, Any]:
    """The fastest training step beside the input pipeline's rate on 1, 4 and all cores."""
    runs = {name: r for name, r in train.items() if r.get("step_time_mean_s") and r.get("global_batch")}
    if not runs:
        raise RunError("no training run with a step time to compare with")
    rows = inputs.get("by_cores") or []
    if not rows:
        raise RunError("no input pipeline measurement to compare with")
    fastest = max(runs, key=lambda name: _demand(runs[name]))
    need = _demand(runs[fastest])
    doc: dict[str, Any] = {"fastest_run": fastest, "gpu_wants_examples_per_second": round(need, 1)}
    for variant in ("in_turn", "parallel_read"):
        rates = {row["cores"]: row[variant]["examples_per_second"] for row in rows if variant in row}
        enough = [k for k in sorted(rates) if rates[k] >= need]
        doc[variant] = {
            "examples_per_second": [{"cores": k, "rate": v} for k, v in sorted(rates.items())],
            "cores_enough": enough[0] if enough else None,  # None: even all measured cores fall short
            "cores_linear_estimate": round(need / rates[1], 2) if rates.get(1) else None,
        }
    return doc
