"""``formats.grouping``: runs of small files gathered into ``FileGroup`` units, pure planning."""
from __future__ import annotations

import pickle

import pytest

from shardprep import formats
from shardprep.formats import FileGroup, InputFile, WorkUnit, grouping
from shardprep.formats.cuts import NEWLINES

KB = 1 << 10


def _file(index: int, size: int, *, split: str = "", fmt: str = "csv") -> InputFile:
    return InputFile(index, f"/in/part-{index:05d}.{fmt}", size, fmt, False, f"v{index}", split=split)


def _whole(file: InputFile) -> list[WorkUnit]:
    return [WorkUnit(file, 0, 0, file.size, 1)]


def _shape(units: list[WorkUnit]) -> list[tuple[int, ...]]:
    """Each unit as the indexes of the files it reads."""
    return [tuple(m.file.index for m in u.members) for u in units]


def test_small_files_fill_groups_up_to_the_unit_size_in_order():
    planned = [_whole(_file(i, 10 * KB)) for i in range(10)]
    units = grouping.group_small(planned, 35 * KB)
    assert _shape(units) == [(0, 1, 2), (3, 4, 5), (6, 7, 8), (9,)]
    assert [type(u) for u in units] == [FileGroup] * 3 + [WorkUnit]  # a run of one file stays its own unit
    group = units[0]
    assert group.key == (0, 0) and group.file is planned[0][0].file and (group.start, group.end) == (0, 30 * KB)
    assert group.members == tuple(p[0] for p in planned[:3])  # the files' own units, unchanged
    assert units[3] is planned[9][0] and units[3].members == (units[3],)


def test_a_group_holds_at_most_files_per_group(monkeypatch):
    monkeypatch.setattr(grouping, "FILES_PER_GROUP", 4)
    units = grouping.group_small([_whole(_file(i, 0)) for i in range(10)], 64 << 20)  # empty files too
    assert _shape(units) == [(0, 1, 2, 3), (4, 5, 6, 7), (8, 9)]


def test_large_files_and_files_cut_in_several_units_stay_apart_and_close_the_run():
    big = _file(3, 3 << 20)
    cut = _file(5, 200 * KB, fmt="jsonl")
    planned = [_whole(_file(0, KB)), _whole(_file(1, KB)), _whole(_file(2, KB)),
               _whole(big),  # over SMALL_FILE_BYTES: its own unit even though it fits a unit
               _whole(_file(4, KB)),
               [WorkUnit(cut, k, k * 100 * KB, (k + 1) * 100 * KB, 1 if k == 0 else 0, nominal=NEWLINES)
                for k in range(2)],
               _whole(_file(6, KB)), _whole(_file(7, KB, fmt="parquet"))]  # formats may mix in a group
    units = grouping.group_small(planned, 64 << 20)
    assert _shape(units) == [(0, 1, 2), (3,), (4,), (5,), (5,), (6, 7)]
    assert units[1] is planned[3][0] and units[3:5] == planned[5]


def test_a_file_over_the_unit_size_is_never_gathered():
    planned = [_whole(_file(i, 40 * KB)) for i in range(3)]
    assert _shape(grouping.group_small(planned, 32 * KB)) == [(0,), (1,), (2,)]


def test_files_of_another_fixed_split_start_another_group():
    planned = [_whole(_file(i, KB, split=s)) for i, s in enumerate(["train", "train", "test", "test", "train"])]
    assert _shape(grouping.group_small(planned, 64 << 20)) == [(0, 1), (2, 3), (4,)]


def test_text_and_image_units_are_never_gathered():
    from shardprep.formats.images import ImageUnit

    text = _file(1, KB)
    text = InputFile(1, text.url, KB, "text", False, text=object())
    image = _file(2, KB)
    planned = [_whole(_file(0, KB)), _whole(text), [ImageUnit(image, 0, 0, 1, 1)], _whole(_file(3, KB))]
    assert _shape(grouping.group_small(planned, 64 << 20)) == [(0,), (1,), (2,), (3,)]


def test_plan_units_groups_real_small_files_and_keeps_their_own_units(tmp_path):
    for i in range(30):
        (tmp_path / f"p{i:03d}.csv").write_text(f"id,x\n{i},{i / 3}\n")
    (tmp_path / "p015.csv").write_text("id,x\n" + "".join(f"{i},{i}\n" for i in range(40_000)))  # ~500 KB: cut
    files = formats.prepare_inputs(formats.expand_inputs([str(tmp_path / "*.csv")]), formats.InputOptions())
    ungrouped = formats.plan_units(files, unit_bytes=100 * KB, group=False)
    grouped = formats.plan_units(files, unit_bytes=100 * KB)
    assert len(ungrouped) == 29 + 5
    assert _shape(grouped) == [tuple(range(15)), *[(15,)] * 5, tuple(range(16, 30))]
    assert [m for u in grouped for m in u.members] == ungrouped  # each file read as its own unit would be
    assert grouped[0].files[3].columns == ("id", "x")
    limited = formats.plan_units(files, unit_bytes=100 * KB, max_record_bytes=4096)
    assert all(m.max_record_bytes == 4096 for u in limited for m in u.members)
    assert pickle.loads(pickle.dumps(grouped)) == grouped  # staged for the workers as is


@pytest.mark.parametrize("unit_bytes", [0, -1])
def test_plan_units_refuses_a_unit_size_below_one(unit_bytes):
    with pytest.raises(ValueError):
        formats.plan_units([], unit_bytes=unit_bytes)
