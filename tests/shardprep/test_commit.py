"""``commit``: who decides a run's fate, its commit or the launcher's clean-up, never both
(``retention.claim``); once the manifest is written a full disk does not turn a committed run into
a failure; the TFDS files are put back when the manifest write after them fails."""
from __future__ import annotations

import errno
import threading
import time

import pytest

from shardprep import fs, manifest, naming, retention, verify
from shardprep.commit import commit
from tests.commit_fixtures import prepare

RUN = "run-20261203T090000Z-0000000a"


NEXT = "run-20261203T090100Z-0000000b"


def _is_report(url: str) -> bool:
    return url.endswith(naming.REPORT)


def test_a_run_the_clean_up_claimed_is_never_committed(tmp_path) -> None:
    out = str(tmp_path / "ds")
    config, facts = prepare(out, RUN)
    assert retention.claim(out, RUN, retention.DISCARD) == retention.DISCARD
    assert _is_report(commit(config, facts))
    assert not manifest.exists(out)


def test_the_clean_up_waits_for_a_claimed_commit_and_leaves_a_stuck_one(tmp_path) -> None:
    out = str(tmp_path / "ds")
    prepare(out, RUN)
    assert retention.claim(out, RUN, retention.COMMIT) == retention.COMMIT  # a commit under way, never ending
    started = time.monotonic()
    assert retention.discard_run(out, RUN, whole=True, wait_s=0.6) is False
    assert time.monotonic() - started >= 0.6
    assert (tmp_path / "ds" / RUN / "train").is_dir(), "the shards of a commit under way were removed"
    retention.withdraw(out, RUN)  # that commit failed: now the clean-up goes ahead
    assert retention.discard_run(out, RUN, whole=True, wait_s=0.6) is False
    assert not (tmp_path / "ds" / RUN).exists()


@pytest.mark.parametrize("first", ["commit", "discard"])
def test_commit_and_clean_up_racing_leave_a_sound_folder(first, tmp_path, monkeypatch) -> None:
    """The commit in a thread pauses after its checks; the clean-up starts before or after its claim."""
    out = str(tmp_path / "ds")
    config, facts = prepare(out, RUN)
    monkeypatch.setenv("SHARDPREP_TEST_DELAYS", "commit.checked=0.8")
    if first == "discard":
        assert retention.discard_run(out, RUN, whole=True) is False
    got: list[str] = []
    worker = threading.Thread(target=lambda: got.append(commit(config, facts)))
    worker.start()
    if first == "commit":
        deadline = time.monotonic() + 30
        while not fs.exists(naming.join(out, naming.outcome_path(RUN))) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert retention.discard_run(out, RUN, whole=True) is True  # it waited for the commit
    worker.join()
    if first == "commit":
        assert not _is_report(got[0]) and verify.verify(out)[0] == []
    else:
        assert _is_report(got[0]) and not manifest.exists(out)


def test_a_full_disk_after_the_manifest_leaves_the_run_committed(tmp_path, monkeypatch) -> None:
    out = str(tmp_path / "ds")
    config, facts = prepare(out, RUN)

    def full(*_args, **_kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(manifest, "write_run_copy", full)
    assert commit(config, facts) == naming.join(out, naming.MANIFEST)
    assert manifest.load(out).run_ids == {RUN} and verify.verify(out)[0] == []


def test_tfds_files_are_put_back_when_the_manifest_write_fails(tmp_path, monkeypatch) -> None:
    out = str(tmp_path / "ds")
    assert not _is_report(commit(*prepare(out, RUN)))
    before = {p.name: p.read_bytes() for p in (tmp_path / "ds").iterdir() if p.is_file() and p.name != "_lease.json"}
    assert naming.TFDS_INFO in before
    config, facts = prepare(out, NEXT, splits=("train", "test"), records=6)  # other splits: other TFDS files

    def fails(*_args, **_kwargs):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(manifest, "write", fails)
    with pytest.raises(OSError):
        commit(config, facts)
    after = {p.name: p.read_bytes() for p in (tmp_path / "ds").iterdir() if p.is_file() and p.name != "_lease.json"}
    assert after == before
    assert not fs.exists(naming.join(out, naming.outcome_path(NEXT))), "the failed commit kept its claim"
