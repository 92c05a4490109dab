"""``shardprep.capacity``: this machine's facts a run plans with. The memory room under the tightest
cgroup limit (v1 and v2 layouts, limits above the run's own group, no limit), whether a spill may
stay in the page cache, the spill's and the run's bytes from the input files, the free disk of a
local output's nearest existing folder, and a full disk recognised however it reaches the launcher.
(The disk space bound itself: test_space_bound.py.)"""
from __future__ import annotations

import errno
import gzip
import os

import pytest

from shardprep import capacity
from shardprep.formats.base import InputFile


def _group(folder, limit: str, used: int, inactive: int, *, names=("memory.max", "memory.current", "inactive_file")):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / names[0]).write_text(limit + "\n")
    (folder / names[1]).write_text(f"{used}\n")
    (folder / "memory.stat").write_text(f"anon 5\n{names[2]} {inactive}\n")


def test_the_room_is_the_tightest_limit_of_the_group_and_those_above_it(tmp_path):
    root = tmp_path / "v2"
    _group(root, "max", 10, 0)  # the root: no limit
    _group(root / "a", str(1000), 600, 100)  # room 500
    _group(root / "a" / "b", str(5000), 1000, 0)  # room 4000, but its parent's is less
    assert capacity._cgroup_room(str(root), "/a/b", "memory.max", "memory.current", "inactive_file") == 500
    assert capacity._cgroup_room(str(root), "/", "memory.max", "memory.current", "inactive_file") == 1 << 62
    assert capacity._cgroup_room(str(root), "/no/such", "memory.max", "memory.current", "inactive_file") == 1 << 62
    _group(root / "full", str(100), 400, 50)  # over its limit: no room, never negative
    assert capacity._cgroup_room(str(root), "/full", "memory.max", "memory.current", "inactive_file") == 0


def test_cgroup_v1_names_its_files_its_own_way(tmp_path):
    names = ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")
    _group(tmp_path / "v1" / "job", str(2000), 1500, 300, names=names)
    assert capacity._cgroup_room(str(tmp_path / "v1"), "/job", *names) == 800


def test_this_machine_has_cores_and_memory_room():
    assert capacity.machine_cores() >= 1
    memory = capacity.available_memory()
    assert memory is None or memory >= 0


@pytest.mark.parametrize("spill, memory, fits", [(10, None, True), (10, 20, True), (11, 20, False), (0, 0, True)])
def test_a_spill_fits_in_memory_in_half_of_it(spill, memory, fits):
    assert capacity.fits_in_memory(spill, memory) is fits


def test_spill_and_run_bytes_follow_each_files_format():
    files = [InputFile(0, "a.csv", 100, "csv", False), InputFile(1, "b.jsonl.gz", 10, "jsonl", True),
             InputFile(2, "c.tfrecord", 1000, "tfrecord", False), InputFile(3, "d.tfrecord.gz", 50, "tfrecord", True)]
    tabular = capacity.RUN_SPACE_FACTOR // 2
    expected = 100 * tabular + 10 * tabular * 4 + 1000 + 50 * 4
    assert capacity.spill_bytes(files) == expected
    assert capacity.run_space(files) == 2 * expected + (1 << 20)
    assert capacity.spill_bytes([]) == 0


def test_free_space_is_of_the_nearest_existing_folder_and_only_local(tmp_path):
    folder = tmp_path / "out"
    folder.mkdir()
    stat = os.statvfs(folder)
    free = capacity.free_space(str(folder / "not" / "yet" / "there"))
    assert free is not None and abs(free - stat.f_bavail * stat.f_frsize) < (64 << 20)  # others write meanwhile
    assert capacity.free_space("memory://somewhere") is None
    assert capacity.free_space("gs://bucket/ds") is None


def test_a_full_disk_is_recognised_however_it_arrives():
    full = OSError(errno.ENOSPC, "No space left on device")
    assert capacity.out_of_space(full)
    try:
        try:
            raise full
        except OSError as e:
            raise RuntimeError("the shard could not be written") from e
    except RuntimeError as wrapped:
        assert capacity.out_of_space(wrapped)
    assert capacity.out_of_space(RuntimeError(f"worker failed: OSError: [Errno {errno.ENOSPC}] No space left"))
    assert not capacity.out_of_space(OSError(errno.EACCES, "Permission denied"))
    assert not capacity.out_of_space(ValueError("bad row"))


def test_a_gzip_file_counts_as_its_decompressed_size(tmp_path):
    path = tmp_path / "a.csv.gz"
    path.write_bytes(gzip.compress(b"x,y\n" * 10_000))
    file = InputFile(0, str(path), path.stat().st_size, "csv", True)
    assert capacity._decompressed(file) == 40_000
    assert capacity._decompressed(InputFile(1, str(path), 10, "csv", True)) == 10  # too short to hold a trailer
