"""``python -m benchmarks.gpu_check OUTDIR [--cpu]``: the GPU readiness check of issue 18.

One prepared run, at most about five minutes on a GPU machine, that proves what CI cannot: the
trainer's NCCL path on a one-worker MWMS cluster, mixed precision (float16 with loss scaling,
bfloat16) and float32 in both loops, the input-wait fraction against a real GPU step, how many CPU
cores one GPU's input needs, and the cold start to the first step. Every part runs guarded (its
own subprocess and timeout), so one failure is reported and the rest still runs. ``--cpu`` runs the
same parts with ring all-reduce and small sizes, in CI, so the check cannot rot between GPU loans.
Writes ``OUTDIR/gpu_check.json`` (after every part) and ``OUTDIR/gpu_check.txt`` (the table).
"""
from __future__ import annotations

__all__: list[str] = []
