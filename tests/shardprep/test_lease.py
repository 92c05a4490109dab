"""Issue 13 items 1 and 2: one run owns an output folder at a time (the lease); what a commit keeps
for readers that still hold an earlier manifest is test_retention.py's.

Races: many trials of two processes committing into one folder at once, with a delay injected at a
different step of commit and clean-up each trial (``SHARDPREP_TEST_DELAYS``, read by
``faults.pause``), locally and on the GCS emulator. Every trial: exactly one commits, the other exits
non-zero naming the lease, and ``verify`` passes (nothing the manifest names was removed). And runs
breaking one stale lease on GCS at once: a late breaker's delete of the stale version must not remove
the fresh lease another took meanwhile (the emulator answers GCS's 412 through its proxy).
"""
from __future__ import annotations

import concurrent.futures
import json
import os
import random
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from shardprep import fs, lease, manifest, naming, verify, versioned
from shardprep.errors import RunError
from tests.commit_fixtures import committed, numbered_run_id
from tests.conftest import ROOT, run_cli
from tests.gcs_emulator import gcs, gcs_emulator  # noqa: F401 - fixtures

STEPS = ["lease.create", "lease.read", "lease.break", "commit.assembled", "commit.leased", "commit.checked",
         "commit.written", "commit.copied", "clean.remove"]


def _race(out: str, trial: int, rng: random.Random, barrier: Path) -> None:
    barrier = barrier / f"trial-{trial}"  # both processes write their shards, then start committing together
    barrier.mkdir(parents=True)
    procs = []
    for k in range(2):
        delays = f"{STEPS[(trial + 4 * k) % len(STEPS)]}={rng.uniform(0.05, 0.6):.2f}"
        env = {**os.environ, "PYTHONPATH": str(ROOT), "SHARDPREP_TEST_DELAYS": delays}
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "tests.commit_fixtures", out, numbered_run_id(2 * trial + k + 1), str(barrier)],
            env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    results = [(p.wait(360), *p.communicate()) for p in procs]
    assert not any("barrier:" in r[2] for r in results), results
    codes = sorted(r[0] for r in results)
    assert codes == [0, 1], results
    loser = next(r for r in results if r[0] == 1)
    # refused by the lease, or (when it took the lease after the winner's clean-up) by its shards' absence
    assert any(why in loser[2] for why in ("another run owns", "lost the lease", "removed by another run")), loser
    problems, shards, _ = verify.verify(out)
    assert problems == [] and shards == 4, problems
    assert not fs.exists(naming.join(out, lease.LEASE)), "the winner did not release the lease"


@pytest.mark.slow
def test_two_commits_race_locally_exactly_one_wins(tmp_path) -> None:
    rng = random.Random(13)
    out = str(tmp_path / "ds")
    for trial in range(20):
        _race(out, trial, rng, tmp_path / "barrier")


@pytest.mark.slow
def test_two_commits_race_on_gcs_exactly_one_wins(gcs, tmp_path) -> None:  # noqa: F811
    rng = random.Random(31)
    for trial in range(9):
        _race(gcs.url("ds"), trial, rng, tmp_path / "barrier")


def test_runs_breaking_one_stale_lease_on_gcs_at_once_exactly_one_wins(gcs) -> None:  # noqa: F811
    """Without the stale-version guard (the binary alone ignores ``ifGenerationMatch`` on DELETE), a
    late breaker deletes the winner's fresh lease and two runs win in about a trial of four."""
    stale = {"run_id": numbered_run_id(99), "host": "elsewhere", "pid": 1, "renewed": time.time() - 3600, "ttl_s": 600.0}
    breakers = 8
    for trial in range(10):
        root = gcs.url(f"ds-{trial}")
        assert versioned.create_exclusive(naming.join(root, lease.LEASE), json.dumps(stale).encode())
        barrier = threading.Barrier(breakers)

        def take(run: int, root: str = root, barrier: threading.Barrier = barrier) -> bool | str:
            barrier.wait()
            try:
                return lease.acquire(root, numbered_run_id(run))
            except RunError as e:
                return str(e)

        with concurrent.futures.ThreadPoolExecutor(breakers) as pool:
            outcomes = list(pool.map(take, range(1, breakers + 1)))
        assert outcomes.count(True) == 1, (trial, outcomes)
        assert all("another run owns" in o for o in outcomes if o is not True), outcomes
        lease.check(root, numbered_run_id(outcomes.index(True) + 1))


def test_two_cli_runs_on_one_output_the_second_is_refused(tmp_path) -> None:
    """End to end: while one run holds the folder (slowed at commit), another exits 1 naming it."""
    src = tmp_path / "in.csv"
    src.write_text("x,y\n" + "".join(f"{i},{i / 3:.3f}\n" for i in range(200)))
    out = tmp_path / "ds"
    args = [sys.executable, "-m", "shardprep.run", "--input", str(src), "--output", str(out), "--num-shards", "2"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SHARDPREP_TEST_DELAYS": "commit.leased=8"}
    first = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not (out / lease.LEASE).exists() and time.time() < deadline and first.poll() is None:
        time.sleep(0.1)
    second = run_cli("shardprep.run", *args[3:], "--overwrite")
    assert second.returncode == 1 and "another run owns" in second.stderr and "Traceback" not in second.stderr, second.stderr
    assert first.wait(180) == 0, first.communicate()
    assert verify.verify(str(out))[0] == [] and not (out / lease.LEASE).exists()


def _write_lease(out: Path, **fields) -> None:
    doc = {"run_id": numbered_run_id(99), "host": socket.gethostname(), "pid": os.getpid(), "renewed": time.time(),
           "ttl_s": 600.0}
    doc.update(fields)
    out.mkdir(parents=True, exist_ok=True)
    (out / lease.LEASE).write_text(json.dumps(doc))


def test_a_live_lease_refuses_and_a_stale_one_is_broken(tmp_path) -> None:
    out = tmp_path / "ds"
    _write_lease(out)  # this very process: alive
    with pytest.raises(RunError, match="another run owns .* run-20261201T000139Z-00000063 .*pid"):
        lease.acquire(str(out), numbered_run_id(1))
    url = committed(str(out), numbered_run_id(1))
    assert url.endswith("report.json") and "another run owns" in Path(url).read_text()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    _write_lease(out, pid=int(dead.stdout))  # a crashed run on this host
    assert committed(str(out), numbered_run_id(2)).endswith("manifest.json")
    _write_lease(out, host="elsewhere", renewed=time.time() - 601)  # another host, not renewed within its TTL
    assert committed(str(out), numbered_run_id(3)).endswith("manifest.json")
    (out / lease.LEASE).write_text("{not json")  # damaged
    assert committed(str(out), numbered_run_id(4)).endswith("manifest.json")
    _write_lease(out, host="elsewhere", renewed=time.time() - 30)  # another host, fresh: refused
    assert committed(str(out), numbered_run_id(5)).endswith("report.json")
    assert verify.verify(str(out))[0] == [] and manifest.load(str(out)).run_ids == {numbered_run_id(4)}


ABSURD_LEASES = {  # issue 57 item 6: each parses as JSON, yet no live run could have written it
    "renewed NaN": {"renewed": float("nan")},
    "renewed infinite": {"renewed": float("inf")},
    "renewed in the year 3000": {"renewed": 32503680000.0},
    "renewed before 1970": {"renewed": -1e12},
    "renewed a string": {"renewed": "now"},
    "ttl NaN": {"ttl_s": float("nan")},
    "ttl infinite": {"ttl_s": float("inf")},
    "ttl negative": {"ttl_s": -600.0},
    "ttl of centuries": {"ttl_s": 1e10},
    "ttl true": {"ttl_s": True},
    "pid huge": {"pid": 10 ** 30},
    "pid negative": {"pid": -1},
    "pid zero": {"pid": 0},
    "pid a float": {"pid": 123.0},
    "pid a string": {"pid": str(os.getpid())},
    "run id a number": {"run_id": 7},
    "host null": {"host": None},
}


@pytest.mark.parametrize("fields", ABSURD_LEASES.values(), ids=ABSURD_LEASES)
@pytest.mark.parametrize("host", ["this", "elsewhere"])
def test_a_lease_of_absurd_numbers_or_types_is_damaged_and_broken(tmp_path, caplog, fields, host) -> None:
    out = tmp_path / "ds"
    _write_lease(out, **{**({} if host == "this" else {"host": "elsewhere"}), **fields})  # else alive and fresh
    data = (out / lease.LEASE).read_bytes()
    assert lease.Lease.parse(data) is None and lease.Lease.damage(data)
    assert lease.acquire(str(out), numbered_run_id(1)) is True  # the next run takes the folder, not fail forever
    assert "broke the stale lease" in caplog.text and "it is damaged" in caplog.text
    lease.check(str(out), numbered_run_id(1))


def test_a_lease_at_the_edges_of_its_ranges_is_not_damaged(tmp_path) -> None:
    out = tmp_path / "ds"
    _write_lease(out, host="elsewhere", renewed=time.time() + 3600, ttl_s=lease.MAX_TTL_S, pid=lease.MAX_PID)
    assert lease.Lease.damage((out / lease.LEASE).read_bytes()) is None  # a clock an hour ahead: still a lease
    with pytest.raises(RunError, match="another run owns"):
        lease.acquire(str(out), numbered_run_id(1))


def test_lease_is_reentrant_renewed_and_released_only_by_its_owner(tmp_path) -> None:
    root = str(tmp_path / "ds")
    assert lease.acquire(root, numbered_run_id(1)) is True
    assert lease.acquire(root, numbered_run_id(1)) is False  # the commit step inside a run that holds it
    assert lease.renew(root, numbered_run_id(1)) and not lease.renew(root, numbered_run_id(2))
    lease.release(root, numbered_run_id(2))
    lease.check(root, numbered_run_id(1))
    lease.release(root, numbered_run_id(1))
    with pytest.raises(RunError, match="lost the lease"):
        lease.check(root, numbered_run_id(1))


def test_lease_on_gcs_is_create_only(gcs) -> None:  # noqa: F811
    root = gcs.url("ds")
    assert lease.acquire(root, numbered_run_id(1)) is True
    with pytest.raises(RunError, match="another run owns"):
        lease.acquire(root, numbered_run_id(2))
    assert lease.renew(root, numbered_run_id(1))
    lease.release(root, numbered_run_id(1))
    assert lease.acquire(root, numbered_run_id(2)) is True
    data, version = versioned.read_versioned(naming.join(root, lease.LEASE))
    assert versioned.remove_if_version(naming.join(root, lease.LEASE), version)
    assert not versioned.remove_if_version(naming.join(root, lease.LEASE), version)
