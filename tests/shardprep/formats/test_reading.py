"""``formats.reading``: a head read at planning is the file's, whether the launch kept the file or not."""
from __future__ import annotations

import os

from shardprep import formats
from shardprep.formats import reading


def _listed(path) -> formats.InputFile:
    """The input file as the launcher lists it (a small CSV file: kept whole, ``reading.keep_whole``)."""
    (file,) = formats.expand_inputs([str(path)])
    return file


def test_a_file_kept_at_listing_gives_its_head_without_a_read_and_a_rewritten_one_is_read(tmp_path, monkeypatch):
    path = tmp_path / "a.csv"
    path.write_bytes(b"id,x\n1,2\n")
    file = _listed(path)
    assert reading._kept == {(file.url, file.version): b"id,x\n1,2\n"}

    def no_read(*args, **kwargs):
        raise AssertionError("read again")

    with monkeypatch.context() as m:
        m.setattr(reading.fs, "read_bytes", no_read)
        assert reading.read_head(file, 4) == (b"id,x", False)
        assert reading.read_head(file, 1 << 10) == (b"id,x\n1,2\n", True)
    path.write_bytes(b"id,y\n3,4\n")  # the same size, rewritten
    os.utime(path, ns=(1, 1))  # and another mtime: another version
    again = _listed(path)
    assert again.version != file.version and reading.read_head(again, 4) == (b"id,y", False)
    reading.forget_kept()
    assert reading._kept == {} and reading.read_head(again, 4) == (b"id,y", False)


def test_files_are_kept_up_to_the_bytes_allowed_and_plan_units_forgets_them(tmp_path, monkeypatch):
    for i in range(4):
        (tmp_path / f"p{i}.jsonl").write_bytes(b'{"a": 1}\n' * (i + 1))
    monkeypatch.setattr(reading, "KEPT_BYTES", 30)
    files = formats.expand_inputs([str(tmp_path / "*.jsonl")])
    assert sorted(len(data) for data in reading._kept.values()) == [9, 18]  # 9 + 18 fit, then 27 would not
    formats.plan_units(files)
    assert reading._kept == {}
