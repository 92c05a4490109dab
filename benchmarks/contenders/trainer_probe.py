"""``trainer.train`` with a per-step timeline, for ``python -m trainer.launch --module`` this module.

Records, for every step the loop measures, when it ended, its input wait, its duration and the
examples each local replica got, and writes ``MODEL_DIR/timeline/worker-<i>.json`` at exit. With
``BENCH_ALLOW_UNEVEN=1`` the manifest's balance check lets an uneven data set through, so the
per-file naive baseline (``--naive-files``: ``benchmarks.naive_trainer`` instead of
``trainer.train``) can be fed the raw, uneven files (the baseline being measured). Everything else
is the trainer, unchanged.
"""
from __future__ import annotations

import atexit
import json
import os
import sys
import time

from shardprep import manifest as _manifest
from trainer import metrics as _metrics

_steps: list[list] = []


def _allow_uneven() -> None:
    original = _manifest.problems

    def problems(m: _manifest.Manifest) -> list[str]:
        return [p for p in original(m) if "unbalanced" not in p]

    _manifest.problems = problems


def _record_steps() -> None:
    original = _metrics.Meter.record

    def record(self, *, wait_s, step_s, replica_examples, **kwargs):  # noqa: ANN001, ANN202
        _steps.append([round(time.time(), 4), None if wait_s is None else round(wait_s, 6), round(step_s, 6),
                       list(replica_examples) if replica_examples is not None else None])
        return original(self, wait_s=wait_s, step_s=step_s, replica_examples=replica_examples, **kwargs)

    _metrics.Meter.record = record


def _dump(model_dir: str) -> None:
    worker = json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {}).get("index", 0)
    folder = os.path.join(model_dir, "timeline")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, f"worker-{worker}.json"), "w") as f:
        json.dump({"worker": worker, "fields": ["end_unix_s", "wait_s", "step_s", "replica_examples"], "steps": _steps}, f)


def main() -> int:
    argv = sys.argv[1:]
    if os.environ.get("BENCH_ALLOW_UNEVEN") == "1":
        _allow_uneven()
    _record_steps()
    model_dir = argv[argv.index("--model-dir") + 1]
    atexit.register(_dump, model_dir)
    if "--naive-files" in argv:
        argv.remove("--naive-files")
        from benchmarks.naive_trainer import main as naive_main

        return naive_main(argv)
    from trainer.train import main as train_main

    return train_main(argv)


if __name__ == "__main__":
    sys.exit(main())
