"""``formats.base``: a ``FileGroup`` pickled as columns comes back as the group it was."""
from __future__ import annotations

import copy
import dataclasses
import pickle

from shardprep.formats import FileGroup, InputFile, WorkUnit
from shardprep.formats.csv.dialect import CsvDialect
from shardprep.formats.cuts import NEWLINES


def _group(units: list[WorkUnit]) -> FileGroup:
    return FileGroup(units[0].file, 0, 0, sum(u.file.size for u in units), 1, files=tuple(units))


def _whole(index: int, size: int = 40, **fields) -> WorkUnit:
    file = InputFile(index, f"/in/w{index % 3}/part-{index:05d}.csv", size, "csv", False, f"{size}:{index}:7",
                     dialect=CsvDialect(delimiter=";"), **fields)
    return WorkUnit(file, 0, 0, size, 1, ("id", "x"))


def _same(a: WorkUnit, b: WorkUnit) -> None:
    """Equal, of the same types, with the same fields in the same order, members and files alike."""
    assert a == b and type(a) is type(b) and hash(a) == hash(b) and repr(a) == repr(b)
    assert [type(m) for m in a.members] == [type(m) for m in b.members]
    for x, y in zip(a.members, b.members):
        assert list(x.__dict__.items()) == list(y.__dict__.items())
        assert list(x.file.__dict__.items()) == list(y.file.__dict__.items())


def test_a_group_of_whole_small_files_pickles_as_columns_and_comes_back_the_same():
    group = _group([_whole(i, 40 + i) for i in range(600)])
    blob = pickle.dumps(group, protocol=pickle.HIGHEST_PROTOCOL)
    assert len(blob) < len(pickle.dumps(group.files, protocol=pickle.HIGHEST_PROTOCOL)) / 2  # columns, not fields
    back = pickle.loads(blob)
    assert "files" not in back.__dict__  # made on first read
    again = pickle.loads(pickle.dumps(back))  # a stage passes on a group it did not read
    _same(back, group)
    _same(again, group)
    assert back.members[0].file is back.file and back.files is back.members  # made once, kept
    _same(copy.deepcopy(again), group)
    _same(dataclasses.replace(pickle.loads(blob)), group)


def test_a_group_whose_members_differ_otherwise_pickles_field_by_field():
    units = [_whole(i) for i in range(4)]
    for odd in (WorkUnit(units[1].file, 0, 0, 20, 1, ("id", "x")),  # a part of its file
                WorkUnit(units[1].file, 0, 0, 40, 1, ("id",)),  # other columns
                dataclasses.replace(units[1], nominal=NEWLINES),
                _whole(1, split="eval")):  # another fixed split
        group = _group([units[0], odd, *units[2:]])
        back = pickle.loads(pickle.dumps(group))
        assert "files" in back.__dict__
        _same(back, group)


def test_the_field_keeps_its_default():
    assert FileGroup.files == () and [f.default for f in dataclasses.fields(FileGroup) if f.name == "files"] == [()]
    unit = _whole(0)
    assert FileGroup(unit.file, 0, 0, 40, 1).files == ()


def test_with_dialect_is_replace():
    file = _whole(3).file
    dialect = CsvDialect(delimiter="\t", header=False)
    new = file.with_dialect(dialect)
    assert new == dataclasses.replace(file, dialect=dialect) and type(new) is InputFile
    assert list(new.__dict__.items()) == list(dataclasses.replace(file, dialect=dialect).__dict__.items())
    assert file.dialect == CsvDialect(delimiter=";")  # the file itself unchanged
