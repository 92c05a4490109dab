"""``local_files``: a file's facts from one open, versions from one stat each, reads by pread."""
from __future__ import annotations

import os

import pytest

from shardprep import fs, local_files


def test_opened_facts_are_the_files_own_and_a_fifo_never_waits(tmp_path):
    path = tmp_path / "a.csv"
    path.write_bytes(b"id\n1\n")
    facts = local_files.opened_facts(str(path))
    st = os.stat(path)
    assert facts == (5, fs.version(str(path)), (st.st_dev, st.st_ino), None, None)
    os.mkfifo(tmp_path / "pipe.csv")
    assert local_files.opened_facts(str(tmp_path / "pipe.csv")).kind == "a FIFO (named pipe)"  # no writer: no wait
    assert local_files.opened_facts(str(tmp_path)).kind == "a folder"
    with pytest.raises(FileNotFoundError):
        local_files.opened_facts(str(tmp_path / "gone.csv"))


def test_versions_change_with_the_file_and_a_missing_one_has_none(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_bytes(b"12345")
    b.write_bytes(b"x")
    before = local_files.local_versions([str(a), str(b), str(tmp_path / "gone")])
    assert before == [fs.version(str(a)), fs.version(str(b)), None]
    a.write_bytes(b"123456")
    assert local_files.local_versions([str(a)]) != before[:1]


def test_reads_by_pread_give_what_a_file_object_reads(tmp_path):
    data = os.urandom(3 << 20)
    path = tmp_path / "big"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert local_files.read_range(fd, 100, 5) == data[5:105]
        assert local_files.read_range(fd, 10 << 20, 7) == data[7:]  # fewer only at the end
        assert local_files.read_to_end(fd, 11) == data[11:]
        assert local_files.read_to_end(fd, len(data) + 5) == b""
    finally:
        os.close(fd)
    assert fs.read_bytes(str(path)) == data and fs.read_bytes(str(path), 9, 20) == data[9:20]
    assert fs.read_bytes(str(path), 9) == data[9:]


def test_a_small_regular_file_is_read_whole_in_the_same_open(tmp_path):
    path = tmp_path / "a.csv"
    path.write_bytes(b"id\n1\n")
    assert local_files.opened_facts(str(path), whole=5).data == b"id\n1\n"
    assert local_files.opened_facts(str(path), whole=4).data is None  # larger than asked: not read
    assert local_files.opened_facts(str(tmp_path), whole=1 << 20).data is None  # not a regular file
