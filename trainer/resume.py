"""Resume safety: a checkpoint's step is a data position only under the input plan it was saved with.

The loop maps global step S to epoch S // steps_per_epoch and that many batches into it, from the
records the plan gives each worker, in an order set by the shuffle buffer and seed. A restart with
another data set, split, global batch, steps per epoch, shuffle buffer or seed would resume at the
wrong records (some seen twice, some never). So the chief writes the plan's identity to
``model_dir/checkpoints/input_plan.json`` before its first checkpoint, and every worker refuses,
before any collective, to resume from a checkpoint whose plan differs. Another worker count is not
a change of identity: ``trainer.elastic`` finishes the epoch exactly, from the epoch order kept in
``checkpoints/epoch_order.json`` (which worker count started which epoch). TF-free.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from shardprep import fs, manifest, naming
from trainer.elastic import ElasticError, EpochOrder
from trainer.preflight import InputPlan
from trainer.refusals import TrainerError

__all__ = [
    "ResumeError", "check_resume", "epoch_order", "pinned_run", "plan_changes", "plan_identity", "plan_url", "saved_identity",
    "write_epoch_order",
]
_FREE = ("num_workers", "per_worker_batch")  # recorded, not compared: a resume may change the worker count

log = logging.getLogger(__name__)

# What each identity field is called in a message, and the setting that changes it.
_NAMES = {
    "data": "data set (--data)",
    "split": "split (--split)",
    "split_records": "records in the split",
    "global_batch": "global batch (--per-replica-batch x replicas / --global-batch)",
    "steps_per_epoch": "steps per epoch (--steps-per-epoch)",
    "shuffle_buffer": "--shuffle-buffer",
    "seed": "--seed",
}


class ResumeError(TrainerError):
    """A checkpoint that this job's input plan cannot resume from."""


def plan_identity(plan: InputPlan, *, data_manifest: manifest.Manifest, shuffle_buffer: int, seed: int) -> dict[str, Any]:
    """What fixes the records behind every global step: a flat dict of plain values."""
    runs = ",".join(sorted(data_manifest.run_ids))
    return {
        "data": f"created {data_manifest.created or '?'} run {runs}",
        "split": plan.split,
        "split_records": plan.num_records,
        "global_batch": plan.global_batch,
        "num_workers": plan.num_workers,
        "per_worker_batch": plan.per_worker_batch,
        "steps_per_epoch": plan.steps_per_epoch,
        "shuffle_buffer": shuffle_buffer,
        "seed": seed,
    }


def plan_changes(saved: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """``name saved -> current`` for every compared field that differs (a field missing on one side counts)."""
    saved, current = _compared(saved), _compared(current)
    return [
        f"{_NAMES.get(key, key)} {saved.get(key, '?')} -> {current.get(key, '?')}"
        for key in sorted(set(saved) | set(current), key=lambda k: list(_NAMES).index(k) if k in _NAMES else len(_NAMES))
        if saved.get(key) != current.get(key)
    ]


def _compared(identity: Mapping[str, Any]) -> dict[str, Any]:
    """The fields a resume must keep: the global batch (derived for an older trainer's file), not the worker count."""
    out = dict(identity)
    if "global_batch" not in out and "per_worker_batch" in out and "num_workers" in out:
        out["global_batch"] = out["per_worker_batch"] * out["num_workers"]
    return {k: v for k, v in out.items() if k not in _FREE}


def plan_url(model_dir: str) -> str:
    return naming.join(model_dir, "checkpoints/input_plan.json")


def _order_url(model_dir: str) -> str:
    return naming.join(model_dir, "checkpoints/epoch_order.json")


def saved_identity(model_dir: str) -> dict[str, Any] | None:
    """The identity the checkpoints in ``model_dir`` were saved under; None without checkpoints or file."""
    url = plan_url(model_dir)
    if not fs.exists(naming.join(model_dir, "checkpoints/checkpoint")) or not fs.exists(url):
        return None
    try:
        saved = json.loads(fs.read_bytes(url))
    except (ValueError, RecursionError) as e:
        raise ResumeError(f"{url} is damaged ({type(e).__name__}): remove it, or use a new --model-dir") from None
    return saved if isinstance(saved, dict) else None


def epoch_order(model_dir: str, saved: Mapping[str, Any] | None) -> EpochOrder | None:
    """Which worker count started which epoch of the checkpointed run (``trainer.elastic``); None without
    checkpoints. A run without the file (an older trainer) ran every epoch on its saved worker count."""
    if saved is None:
        return None
    url = _order_url(model_dir)
    if fs.exists(url):
        try:
            return EpochOrder.from_json(fs.read_bytes(url))
        except ElasticError as e:
            raise ResumeError(f"{url}: {e}; remove it only if every epoch ran on one worker count") from None
    workers = saved.get("num_workers")
    return EpochOrder.start(int(workers)) if isinstance(workers, int) and workers > 0 else None


def write_epoch_order(model_dir: str, order: EpochOrder) -> None:
    """The chief records the epoch order before this run's first checkpoint."""
    with fs.write_atomic(_order_url(model_dir)) as f:
        f.write(order.to_json().encode() + b"\n")


def _pin_url(model_dir: str) -> str:
    return naming.join(model_dir, "checkpoints/data_run.json")


def pinned_run(model_dir: str, data: str) -> str | None:
    """The run of data set ``data`` the checkpoints in ``model_dir`` were trained on; None without
    checkpoints, or when they were trained on another data set folder (the plan check names it).

    A resume reads that run's manifest (``manifest.load(root, run_id=...)``), not the newest one, so
    a re-shard committed with ``--overwrite`` meanwhile does not switch the data under it.
    """
    url = _pin_url(model_dir)
    if not fs.exists(naming.join(model_dir, "checkpoints/checkpoint")) or not fs.exists(url):
        return None
    try:
        doc = json.loads(fs.read_bytes(url))
        run_id, pinned_data = doc.get("run_id"), doc.get("data")
    except (ValueError, AttributeError, RecursionError):
        raise ResumeError(f"{url} is damaged: remove it to resume on the data set's current run") from None
    if pinned_data is not None and str(pinned_data).rstrip("/") != data.rstrip("/"):
        return None
    return run_id if isinstance(run_id, str) and naming.is_run_id(run_id) else None


def check_resume(model_dir: str, identity: Mapping[str, Any], *, is_chief: bool, run_id: str | None = None,
                 data: str | None = None) -> None:
    """Refuses a resume under another plan; without a checkpoint, the chief records ``identity``.

    Runs on every worker before the strategy connects them, so all of them refuse alike.
    """
    url = plan_url(model_dir)
    has_checkpoint = fs.exists(naming.join(model_dir, "checkpoints/checkpoint"))
    try:
        saved = json.loads(fs.read_bytes(url)) if fs.exists(url) else None
    except (ValueError, RecursionError) as e:
        raise ResumeError(f"{url} is damaged ({type(e).__name__}): remove it, or use a new --model-dir") from None
    if saved is not None and not isinstance(saved, dict):
        raise ResumeError(f"{url} is not a JSON object: remove it, or use a new --model-dir")
    if has_checkpoint and saved is not None:
        changes = plan_changes(saved, identity)
        if changes:
            raise ResumeError(
                f"--model-dir {model_dir} holds checkpoints of another input plan ({'; '.join(changes)}): "
                f"resuming would map the saved step to the wrong records; use a new --model-dir, or the "
                f"settings the checkpoints were saved with"
            )
        return
    if has_checkpoint:
        log.warning("the checkpoints in %s record no input plan (an older trainer): resuming unchecked", model_dir)
    if is_chief:
        with fs.write_atomic(url) as f:
            f.write(json.dumps(dict(identity), indent=2, sort_keys=True).encode() + b"\n")
        if run_id:  # the data run later resumes pin (``pinned_run``)
            with fs.write_atomic(_pin_url(model_dir)) as f:
                f.write(json.dumps({"data": data, "run_id": run_id}).encode() + b"\n")
