"""The sizes and choices of the two modes: a GPU machine (about five minutes) and ``--cpu`` (CI)."""
from __future__ import annotations

import dataclasses
import os

__all__ = ["CheckSettings", "core_counts", "settings_for"]

LABEL = "label"
NUM_FEATURES = 16


@dataclasses.dataclass(frozen=True)
class CheckSettings:
    """Everything the parts read; validated so a bad override fails before the first subprocess."""

    mode: str  # "gpu" or "cpu"
    model: str  # trainer.train --model: mlp, or module:function to time your own
    rows: int
    num_shards: int
    per_replica_batch: int
    epochs: int
    learning_rate: float
    communication: str  # what trainer.train is asked for: nccl (GPU) or ring (CPU)
    precisions: tuple[str, ...]  # float32 = --mixed-precision off
    loops: tuple[str, ...]
    cold_start_steps: int
    input_seconds: float  # measuring time per input-pipeline variant and core count
    budget_s: float  # parts not started by then are reported as skipped
    train_timeout_s: float
    step_timeout_s: float  # every other subprocess

    def __post_init__(self) -> None:
        if self.mode not in ("gpu", "cpu"):
            raise ValueError(f"mode {self.mode!r}: expected gpu or cpu")
        if self.rows < self.num_shards * self.per_replica_batch:
            raise ValueError(
                f"--rows {self.rows}: need at least {self.num_shards * self.per_replica_batch} "
                f"({self.num_shards} shards x batch {self.per_replica_batch}) for every step to be full"
            )
        if self.budget_s <= 0:
            raise ValueError(f"--budget-s {self.budget_s}: expected a positive number of seconds")


def settings_for(
    *, cpu: bool, rows: int | None = None, budget_s: float | None = None, model: str | None = None
) -> CheckSettings:
    """The mode's defaults, with the command line's overrides."""
    if cpu:
        base = CheckSettings(
            mode="cpu", model="mlp", rows=16_384, num_shards=4, per_replica_batch=128, epochs=1, learning_rate=3e-3,
            communication="ring", precisions=("float32", "bfloat16"), loops=("custom", "fit"), cold_start_steps=3,
            input_seconds=2.0, budget_s=420.0, train_timeout_s=180.0, step_timeout_s=180.0,
        )
    else:
        base = CheckSettings(
            mode="gpu", model="mlp", rows=262_144, num_shards=16, per_replica_batch=512, epochs=1, learning_rate=3e-3,
            communication="nccl", precisions=("float32", "float16", "bfloat16"), loops=("custom", "fit"),
            cold_start_steps=3, input_seconds=4.0, budget_s=300.0, train_timeout_s=150.0, step_timeout_s=120.0,
        )
    return dataclasses.replace(base, rows=rows or base.rows, budget_s=budget_s or base.budget_s, model=model or base.model)


def core_counts() -> list[int]:
    """1, 4 and all of the cores this process may run on (fewer entries on a small machine)."""
    n = len(os.sched_getaffinity(0))
    return sorted({1, min(4, n), n})
