"""The end of a run as people read it: one row per worker, then the eval metrics (``trainer.launch``, ``trainer.demo``).

TF-free: it reads the summaries the workers wrote (``model_dir/summary/worker-<i>.json``).
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from shardprep import fs
from shardprep.display import shown
from trainer import defaults
from trainer.metrics import summary_url

__all__ = ["eval_line", "model_dir_of", "print_report", "print_table", "read_summaries"]

_COLUMNS = (
    ("first_loss", "first_loss"), ("final_loss", "final_loss"), ("accuracy", "accuracy"),
    ("input_wait", "input_wait_fraction"), ("wait_floor", "input_wait_floor_fraction"), ("allreduce", "allreduce_fraction"),
)

_BERT_COLUMNS = (("mlm_accuracy", "masked_lm_accuracy"), ("nsp_accuracy", "next_sentence_accuracy"))


def read_summaries(model_dir: str, workers: int) -> list[dict[str, Any]]:
    """Every worker's summary, in worker order."""
    out = []
    for w in range(workers):
        with fs.open_file(summary_url(model_dir, w)) as f:
            out.append(json.load(f))
    return out


def print_table(summaries: Sequence[dict[str, Any]]) -> None:
    columns = [c for c in _COLUMNS if c[0] != "accuracy" or not any(k in s for s in summaries for _, k in _BERT_COLUMNS)]
    at = [name for name, _ in columns].index("final_loss") + 1  # BERT pre-training: its two accuracies instead
    columns[at:at] = [c for c in _BERT_COLUMNS if any(c[1] in s for s in summaries)]
    head = ["worker", "mode", "steps", "examples", "empty_replica_steps", *(name for name, _ in columns)]
    rows = [head]
    for s in summaries:
        rows.append([str(s["worker"]), s["data_mode"], str(s["steps"]), str(s["examples"]), str(s["empty_replica_steps"])]
                    + [_fmt(s.get(key)) for _, key in columns])
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    for r in rows:
        print(shown("  ".join(c.rjust(w) for c, w in zip(r, widths))))


def eval_line(summary: dict[str, Any]) -> str | None:
    """The chief's eval metrics in one line (None without ``--eval-split``)."""
    if summary.get("eval_split") is None:
        return None
    line = f"eval split {summary['eval_split']!r}: {summary['eval_examples']} examples, loss {summary['eval_loss']:.4f}"
    if summary.get("eval_accuracy") is not None:
        line += f", accuracy {summary['eval_accuracy']:.4f}"
        if summary.get("eval_unseen_labels"):
            line += f" ({summary['eval_unseen_labels']} records with labels unseen in training, not scored)"
    for key in ("eval_masked_lm_accuracy", "eval_next_sentence_accuracy"):  # BERT pre-training
        if summary.get(key) is not None:
            line += f", {key[5:].replace('_', ' ').replace('masked lm', 'masked-LM').replace('next sentence', 'next-sentence')} {summary[key]:.4f}"
    if summary.get("eval_mse") is not None:
        line += f", mse {summary['eval_mse']:.6g} (baseline predicting the mean: {summary['eval_baseline_mse']:.6g})"
    return line


def print_report(summaries: Sequence[dict[str, Any]]) -> None:
    """The per-worker table, then the eval line."""
    print_table(summaries)
    line = eval_line(summaries[0])
    if line:
        print(shown(line))  # the split's name comes from the data set's manifest


def model_dir_of(args: Sequence[str]) -> str | None:
    """``--model-dir`` among a trainer's arguments, or the default the trainer takes for its ``--data``."""
    for i, a in enumerate(args):
        if a == "--model-dir" and i + 1 < len(args):
            return args[i + 1]
        if a.startswith("--model-dir="):
            return a.split("=", 1)[1]
    data = next((args[i + 1] for i, a in enumerate(args[:-1]) if a == "--data"), None)
    data = data or next((a.split("=", 1)[1] for a in args if a.startswith("--data=")), None)
    return defaults.default_model_dir(data) if data else None  # the trainer's default


def _fmt(value: Any) -> str:
    return "-" if value is None else f"{value:.4f}" if isinstance(value, float) else str(value)
