"""``shardprep.formats.json_array``: a file holding one JSON array is read as records, one per
element (an element not an object, or one holding a key twice at any depth, a dead letter)."""
from __future__ import annotations

import gzip

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shardprep import formats
from shardprep.formats import json_array
from shardprep.formats.base import WorkUnit
from tests.shardprep.formats.test_duplicate_keys import _OBJECTS, _dump, _settings, _with_duplicate
from tests.shardprep.formats.test_sources import read, write


@_settings
@given(st.lists(_OBJECTS, min_size=1, max_size=4), st.data())
def test_a_json_array_element_with_a_repeated_key_is_a_dead_letter(tmp_path_factory, items, data):
    path = tmp_path_factory.mktemp("arr") / "a.json"
    where = data.draw(st.integers(0, len(items) - 1))
    texts = [_dump(item, True) for item in items]
    dup = bool(items[where])
    if dup:
        _, texts[where] = data.draw(_with_duplicate(items[where]))
    path.write_text("[" + ",\n".join(texts) + "]")
    file = formats.InputFile(0, str(path), path.stat().st_size, "json", False)
    got = list(json_array.read_json_array(WorkUnit(file, 0, 0, file.size, 1)))
    expected = [(i + 1, item) for i, item in enumerate(items)]
    if dup:
        assert got[where][0] == where + 1 and got[where][1].reason == "duplicate_key"
        del got[where], expected[where]
    assert got == expected


@pytest.mark.parametrize("name, data", [("a.json", '\ufeff [{"a": 1},\n {"a": 2}, 3]'),
                                        ("a.json.gz", gzip.compress(b'[{"a": 1}, {"a": 2}, 3]'))])
def test_a_json_array_file_is_read_as_records(tmp_path, name, data):
    rows = read(write(tmp_path / name, data))
    assert [r for _, r in rows[:2]] == [{"a": 1}, {"a": 2}] and rows[2][1].reason == "json_not_object"
