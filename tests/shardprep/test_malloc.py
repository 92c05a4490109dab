"""``shardprep.malloc``: a process that runs the steps reuses the memory it frees, even where its
environment pinned glibc's thresholds (a Dask Nanny sets ``MALLOC_TRIM_THRESHOLD_=65536``).

Each case runs in a fresh interpreter: malloc's settings last for the process.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

PROBE = textwrap.dedent("""
    import json, resource, sys
    import numpy as np
    from shardprep import malloc

    def faults():  # of allocating, filling and freeing a 1 MB block 64 times
        before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
        for _ in range(64):
            block = np.ones(1 << 17)
            del block
        return resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before

    before = faults()
    kept = malloc.keep_freed_memory()
    print(json.dumps({"before": before, "kept": kept, "after": faults(), "again": malloc.keep_freed_memory()}))
""")


def _probe(env: dict[str, str]) -> dict:
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def test_a_pinned_threshold_gives_fresh_pages_for_every_block_until_the_steps_set_glibcs_limits():
    got = _probe({"MALLOC_TRIM_THRESHOLD_": "65536"})  # as a Dask Nanny starts its worker
    assert got["before"] > 64 * 128, got  # each 1 MB block: 256 fresh pages
    assert got["kept"] is True and got["again"] is True, got
    assert got["after"] < 64 * 16, got


def test_a_plain_process_keeps_its_blocks_too():
    got = _probe({})
    assert got["after"] < 64 * 16, got


FORK_PROBE = textwrap.dedent("""
    import gc, json, multiprocessing, os
    from concurrent.futures import ProcessPoolExecutor
    from shardprep import malloc

    pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork"))
    malloc.freeze_for_fork(lambda: pool.submit(os.getpid))
    child = pool.submit(gc.get_freeze_count).result()
    here = gc.get_freeze_count()
    malloc.freeze_startup_objects()  # a process that froze its objects before keeps them frozen
    frozen = gc.get_freeze_count()
    malloc.freeze_for_fork(lambda: None)
    print(json.dumps({"child": child, "here": here, "frozen": frozen, "kept": gc.get_freeze_count()}))
    pool.shutdown()
""")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork: POSIX only")
def test_a_forked_pool_starts_with_the_launchers_objects_frozen() -> None:
    out = subprocess.run([sys.executable, "-c", FORK_PROBE], capture_output=True, text=True, check=True)
    got = json.loads(out.stdout)
    assert got["child"] > 1000, got  # the imports' objects, out of the child's collections
    assert got["here"] == 0, got  # collected again in the launcher
    assert got["frozen"] > 0 and got["kept"] >= got["frozen"], got


PLAN_PROBE = textwrap.dedent("""
    import gc, json
    from shardprep import malloc
    seen = {}
    malloc.pause_collections()
    plan = [{"file": [i]} for i in range(50_000)]  # a plan's objects, made with no collection
    seen["paused"] = not gc.isenabled()
    malloc.freeze_plan()
    seen["frozen"], seen["on"] = gc.get_freeze_count() >= 50_000, gc.isenabled()
    malloc.unfreeze_plan()
    seen["after"], seen["on_after"] = gc.get_freeze_count(), gc.isenabled()
    malloc.pause_collections()  # a launch that fails before its plan is made
    malloc.unfreeze_plan()
    seen["on_after_failure"] = gc.isenabled()
    gc.freeze()  # a process that froze objects before: freeze_plan leaves its freeze as it is
    before = gc.get_freeze_count()
    malloc.freeze_plan()
    malloc.unfreeze_plan()
    seen["others_kept"] = gc.get_freeze_count() == before
    print(json.dumps(seen))
""")


def test_a_plan_is_made_with_no_collection_and_left_out_of_its_runs_collections() -> None:
    out = subprocess.run([sys.executable, "-c", PLAN_PROBE], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == {"paused": True, "frozen": True, "on": True, "after": 0, "on_after": True,
                                      "on_after_failure": True, "others_kept": True}
