"""``examples/``: the programs the docs show, run as a user runs them (issue 54 item 3).

``examples/custom_loop.py`` (the MWMS field guide's custom loop on ``trainer.input``) on 3 local
workers of ``trainer.launch`` over a 2-shard data set made by ``shardprep.run``: every worker takes
the same number of steps and ends on the same global loss."""
from __future__ import annotations

import csv
import random
import re
import subprocess
import sys
from pathlib import Path

from shardprep import manifest, run
from tests import trainer_fixtures as fx

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))


def test_examples_are_short_and_documented() -> None:
    docs = (ROOT / "docs" / "trainer.md").read_text()
    assert EXAMPLES
    for path in EXAMPLES:
        assert len(path.read_text().splitlines()) <= 80, path
        assert f"examples/{path.name}" in docs, f"docs/trainer.md does not show {path.name}"


def test_custom_loop_on_three_workers_over_two_shards(tmp_path: Path) -> None:
    rng = random.Random(0)
    with open(tmp_path / "t.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["x0", "x1", "x2", "label"])
        for _ in range(300):
            x = [round(rng.uniform(-1, 1), 4) for _ in range(3)]
            w.writerow([*x, int(x[0] + x[1] > 0)])
    data = tmp_path / "ds"
    assert run.main(["--input", str(tmp_path / "t.csv"), "--output", str(data), "--num-shards", "2"]) == 0
    assert len(manifest.load(str(data)).splits["train"].shards) == 2
    proc = subprocess.run([sys.executable, "-m", "trainer.launch", "--workers", "3", "--", "python",
                           "examples/custom_loop.py", "--data", str(data)], env=fx.worker_env(), capture_output=True,
                          text=True, timeout=600, cwd=ROOT, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    found = {int(m[0]): (int(m[1]), int(m[2]), float(m[3])) for m in re.findall(
        r"^\[worker (\d)\] worker \d: (\d+) steps \((\d+) per epoch x 2\), final loss ([\d.]+)$", proc.stdout, re.M)}
    assert sorted(found) == [0, 1, 2], proc.stdout[-4000:]
    steps = {v[0] for v in found.values()}
    assert steps == {24} and {v[1] for v in found.values()} == {12}  # 300 records // 24 a step, 2 epochs, on every worker
    assert len({v[2] for v in found.values()}) == 1  # the loss is reduced over the global batch: one value everywhere
