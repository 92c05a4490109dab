"""Scale on paper: the pure planning and commit code of a run far larger than this machine holds.

No data is read or written: synthetic facts stand in for what the pipeline's workers report, and
the same functions the pipeline calls (``graph.stages.plan_splits``, ``CountTable.first_position``,
``commit.assemble``) run over them. Each part runs in a fresh process and reports its wall time and
the growth of its peak resident memory over the process after imports.

    python -m benchmarks.scale_on_paper --units 1000000 --shards 100000
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

__all__ = ["measure", "simulate"]

FILES_PER_UNIT = 10  # synthetic input: ``units / 10`` files of 10 units each
RECORDS_PER_UNIT = 1000
UNIT_BYTES = 64 << 20


def _config(units: int, shards: int):
    from shardprep import config, naming

    files = max(1, units // FILES_PER_UNIT)
    return config.ReshardConfig(
        output="memory://scale/ds", run_id=naming.new_run_id(), features={"x": {"dtype": "int64", "shape": []}},
        sources=tuple((f"gs://bucket/in/part-{i:07d}.csv", FILES_PER_UNIT * UNIT_BYTES) for i in range(files)),
        num_shards=shards,
    )


def _unit(i: int) -> tuple[int, int]:
    return divmod(i, FILES_PER_UNIT)


def _plan(units: int, shards: int) -> dict:
    """Assign's per-worker plan: the counts side input -> CountTable, shard count, permutation, and
    the first position of every batch."""
    from shardprep.graph.elements import BatchCount
    from shardprep.graph.stages import plan_splits

    cfg = _config(units, shards)
    counts = [BatchCount(0, _unit(i), 0, RECORDS_PER_UNIT, UNIT_BYTES) for i in range(units)]  # the runner's list
    side_input_rss = _rss_mb()
    started = time.perf_counter()
    plans = plan_splits(cfg, counts)
    table = plans[0].counts
    first = [table.first_position(0, _unit(i), 0) for i in range(0, units, max(1, units // 10_000))]
    seconds = time.perf_counter() - started
    assert plans[0].num_shards == shards and first[1] > first[0] and plans[0].fact.num_records == units * RECORDS_PER_UNIT
    return {"seconds": seconds, "table_mb": table.nbytes / 2**20, "side_input_rss_mb": side_input_rss,
            "lookups": len(first)}


def _commit(units: int, shards: int) -> dict:
    """The Commit step's pure part: every worker's facts -> checked manifest."""
    from shardprep import commit, manifest, naming, planning
    from shardprep.graph import elements

    cfg = _config(units, shards)
    total = units * RECORDS_PER_UNIT
    facts: list = [elements.UnitFact(_unit(i), _unit(i)[0], RECORDS_PER_UNIT, 0, (RECORDS_PER_UNIT,), ())
                   for i in range(units)]
    facts.append(elements.PlanFact(0, total, units * UNIT_BYTES, shards))
    for k, n in enumerate(planning.shard_sizes(total, shards)):
        path = naming.shard_path(cfg.run_id, "train", k, shards)
        facts.append(elements.ShardFact(0, k, shards, manifest.ShardInfo(path, n, n * 100, f"{k:08x}")))
    facts_rss = _rss_mb()
    started = time.perf_counter()
    result, errors, _ = commit.assemble(cfg, facts)
    seconds = time.perf_counter() - started
    assert result is not None and not errors, errors[:3]
    assert len(result.splits["train"].shards) == shards
    return {"seconds": seconds, "facts_rss_mb": facts_rss}


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _child(part: str, units: int, shards: int) -> None:
    import shardprep.commit  # noqa: F401 - imports are not the plan's memory
    import shardprep.graph.stages  # noqa: F401

    base = _rss_mb()
    out = {"plan": _plan, "commit": _commit}[part](units, shards)
    out["peak_mb"] = _rss_mb() - base
    for key in ("side_input_rss_mb", "facts_rss_mb"):
        if key in out:
            out[key] -= base
    print(json.dumps(out))


def measure(part: str, *, units: int, shards: int) -> dict:
    """Runs one part ("plan" or "commit") in a fresh process; its seconds and peak memory (MB over imports)."""
    proc = subprocess.run([sys.executable, "-m", "benchmarks.scale_on_paper", "--child", part, "--units", str(units),
                           "--shards", str(shards)], capture_output=True, text=True, timeout=600, check=False)
    if proc.returncode:
        raise RuntimeError(f"scale_on_paper {part} failed: {proc.stderr[-2000:]}")
    return {"part": part, "units": units, "shards": shards, **json.loads(proc.stdout.strip().splitlines()[-1])}


def simulate(*, units: int = 1_000_000, shards: int = 100_000) -> list[dict]:
    """Both parts at this scale."""
    return [measure(part, units=units, shards=shards) for part in ("plan", "commit")]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", type=int, default=1_000_000)
    parser.add_argument("--shards", type=int, default=100_000)
    parser.add_argument("--child", choices=("plan", "commit"))
    args = parser.parse_args(argv)
    if args.child:
        _child(args.child, args.units, args.shards)
        return
    for row in simulate(units=args.units, shards=args.shards):
        print(json.dumps(row))


if __name__ == "__main__":
    main()
