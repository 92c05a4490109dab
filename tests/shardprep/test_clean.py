"""``python -m shardprep.clean``: removes older and crashed runs' folders under the lease (a dry run
names them and removes nothing; another run's live lease refuses it), and keeps the current run, the
manifest and the TFDS metadata; the data set still verifies."""
from __future__ import annotations

from shardprep import lease, naming, verify
from tests.commit_fixtures import committed, numbered_run_id
from tests.conftest import run_cli


def test_clean_command_removes_old_and_crashed_runs_under_the_lease(tmp_path) -> None:
    out = tmp_path / "ds"
    old, current, crashed, other = (numbered_run_id(i) for i in (1, 2, 3, 9))
    committed(str(out), old)
    committed(str(out), current)
    (out / crashed / "train").mkdir(parents=True)
    dry = run_cli("shardprep.clean", out, "--dry-run")
    assert dry.returncode == 0 and old in dry.stdout and crashed in dry.stdout and (out / old).exists()
    assert lease.acquire(str(out), other)  # another run's live lease
    busy = run_cli("shardprep.clean", out)
    assert busy.returncode == 1 and "another run owns" in busy.stderr and (out / old).exists(), busy.stderr
    (out / lease.LEASE).unlink()
    done = run_cli("shardprep.clean", out)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted([naming.MANIFEST, naming.TFDS_INFO, naming.TFDS_FEATURES,
                                                           current])  # with the TFDS metadata (tfds_metadata)
    assert verify.verify(str(out))[0] == []
