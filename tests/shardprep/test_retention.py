"""``shardprep.retention``: a commit keeps the previous committed runs (``--keep-previous``) for readers
that still hold their manifests and removes older ones; a stale folder's removal outlasts a refused
run still writing in it."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from shardprep import manifest, naming, retention
from shardprep.errors import ManifestError
from tests.commit_fixtures import committed, numbered_run_id


def test_overwrite_keeps_the_previous_run_for_its_readers(tmp_path) -> None:
    out = str(tmp_path / "ds")
    runs = [numbered_run_id(i) for i in (1, 2, 3)]
    for run in runs:
        assert committed(out, run).endswith("manifest.json")
    folders = sorted(p.name for p in Path(out).iterdir() if naming.is_run_id(p.name))
    assert folders == runs[1:]  # the current run and the previous one (--keep-previous 1)
    pinned = manifest.load(out, run_id=runs[1])  # a trainer that started on the previous data set
    assert pinned.run_ids == {runs[1]} and all(Path(out, s.path).exists() for sp in pinned.splits.values() for s in sp.shards)
    assert manifest.load(out, run_id=runs[2]).to_json() == manifest.load(out).to_json()
    with pytest.raises(ManifestError, match="removed by a later commit"):
        manifest.load(out, run_id=runs[0])
    assert committed(out, numbered_run_id(4), keep_previous=2).endswith("manifest.json")
    assert sorted(p.name for p in Path(out).iterdir() if naming.is_run_id(p.name)) == [*runs[1:], numbered_run_id(4)]


def test_stale_folder_removal_outlasts_a_refused_run_still_writing(tmp_path) -> None:
    """The winner's clean-up meets files a refused run is still writing in its folder (its report):
    it retries, and never fails the committed run (CI once saw "Directory not empty" there)."""
    import threading

    folder = tmp_path / "run-20261201T000000Z-00000001"
    (folder / "train").mkdir(parents=True)
    for i in range(300):
        (folder / "train" / f"part-{i}").write_bytes(b"x" * 100)
    stop = time.monotonic() + 0.3

    def refused_run_writing() -> None:
        i = 0
        while time.monotonic() < stop:
            try:
                (folder / f"report.json.tmp-{i}").write_bytes(b"{}")
            except OSError:
                pass
            i += 1

    writer = threading.Thread(target=refused_run_writing)
    writer.start()
    retention._remove_folder(str(folder))  # must not raise, whatever the interleaving
    writer.join()
    retention._remove_folder(str(folder))
    assert not folder.exists()
