"""Issue 35: a JSON object holding a key twice is dead letter ``duplicate_key`` on every path (the
per-line parse, the orjson bulk parse, the compiled block reader; ``--format json``'s: test_json_array.py), at
any depth; objects without one read exactly as before."""
from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardprep import formats
from shardprep.formats import jsonl
from shardprep.formats.base import Bad, WorkUnit
from shardprep.schema import FeatureSpec
from tests.shardprep.formats.csv.test_arrow import _config, _outcome, _reference, _through_parse
from tests.shardprep.formats.test_jsonl import _units

_KEYS = st.text(st.sampled_from("abé:\"\\ \n"), min_size=0, max_size=4)
_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False, allow_infinity=False),
                     st.text(st.sampled_from("xé:\"\\{}, \u2028"), max_size=6))
_VALUES = st.recursive(_SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                          st.dictionaries(_KEYS, inner, max_size=3)), max_leaves=8)
_OBJECTS = st.dictionaries(_KEYS, _VALUES, max_size=5)
_settings = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _objects(value, found):
    if isinstance(value, dict):
        if value:
            found.append(value)
        for item in value.values():
            _objects(item, found)
    elif isinstance(value, list):
        for item in value:
            _objects(item, found)
    return found


def _dump(value, ascii_, target=None, extra=None) -> str:
    """``value`` as JSON text; the object ``target`` (by identity) with ``extra`` = (place, key, value) added."""
    if isinstance(value, dict):
        items = [f"{json.dumps(k, ensure_ascii=ascii_)}:{_dump(v, ascii_, target, extra)}" for k, v in value.items()]
        if value is target:
            place, key, again = extra
            items.insert(place % (len(items) + 1), f"{json.dumps(key, ensure_ascii=ascii_)}: {json.dumps(again)}")
        return "{" + ", ".join(items) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_dump(v, ascii_, target, extra) for v in value) + "]"
    return json.dumps(value, ensure_ascii=ascii_)


@st.composite
def _with_duplicate(draw, top=None):
    obj = draw(_OBJECTS.filter(bool)) if top is None else top
    target = draw(st.sampled_from(_objects(obj, [])))
    key = draw(st.sampled_from(sorted(target)))
    extra = (draw(st.integers(0, 10)), key, draw(_SCALARS))
    return obj, _dump(obj, draw(st.booleans()), target, extra)


def _bulk(lines):
    """As ``jsonl._line_by_line`` parses a block: one orjson map where no line needs json."""
    return jsonl._parsed(lines, not jsonl.json_only(b"".join(lines)))


@_settings
@given(_with_duplicate())
def test_a_repeated_key_at_any_depth_is_a_dead_letter_line_by_line(case):
    _, text = case
    got = jsonl._json_row(text.encode(), 3)
    assert isinstance(got, Bad) and got.reason == "duplicate_key" and got.position == 3
    lines = [text.encode() + b"\n", b'{"a": 1}\n']
    assert _bulk(lines)[0].reason == "duplicate_key"


@settings(_settings, max_examples=50)
@given(_with_duplicate())
def test_without_orjson_json_finds_it_too(case):
    _, text = case
    old, jsonl.orjson = jsonl.orjson, None
    try:
        assert jsonl._json_row(text.encode(), 2).reason == "duplicate_key"
    finally:
        jsonl.orjson = old


@_settings
@given(_OBJECTS, st.booleans())
def test_objects_without_a_repeated_key_read_as_before(obj, ascii_):
    raw = _dump(obj, ascii_).encode()
    assert jsonl._json_row(raw, 1) == json.loads(raw) == obj
    assert _bulk([raw + b"\n"] * 3) == [obj] * 3


@_settings
@given(st.data(), st.sampled_from(["ignore", "reject"]), st.integers(0, 6))
def test_the_compiled_block_reader_and_the_pipeline_agree(tmp_path_factory, data, extra_fields, where):
    """Rows the compiled reader takes (a scalar schema, extra keys ignored), one with a key twice."""
    tmp_path = tmp_path_factory.mktemp("dup")
    schema = {"a": FeatureSpec("int64", ()), "s": FeatureSpec("string", ())}
    rows = [{"a": i, "s": f"r{i}"} for i in range(7)]
    if extra_fields == "ignore":
        rows = [{**row, **data.draw(st.dictionaries(st.sampled_from(["x", "y", "z"]), _VALUES, max_size=2))}
                for row in rows]
    lines = [_dump(row, True) for row in rows]
    clean = ("\n".join(lines) + "\n").encode()
    _, lines[where] = data.draw(_with_duplicate(rows[where]))
    dirty = ("\n".join(lines) + "\n").encode()
    config = _config(tmp_path, schema, extra_fields, batch_records=3)
    (unit,) = _units(tmp_path / "t.jsonl", clean, 1 << 30, False)
    good, bad = _outcome(_through_parse, config, unit)
    assert (good, bad) == _outcome(_reference, unit, schema, extra_fields) and len(good) == 7 and not bad
    (unit,) = _units(tmp_path / "t.jsonl", dirty, 1 << 30, False)
    records, dead = _outcome(_through_parse, config, unit)
    assert [(p, r) for p, r, _ in dead] == [(where + 1, "duplicate_key")]
    assert records == good[:where] + good[where + 1:]  # the other rows byte for byte
    assert (records, dead) == _outcome(_reference, unit, schema, extra_fields)


def test_the_issue_example_is_never_x_3(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'{"x":1,"y":2,"x":3}\n{"x":1,"y":2}\n')
    file = formats.InputFile(0, str(path), path.stat().st_size, "jsonl", False)
    got = list(formats.read_unit(WorkUnit(file, 0, 0, file.size, 1)))
    assert got[0][1].reason == "duplicate_key" and "'x'" in got[0][1].detail and got[1] == (2, {"x": 1, "y": 2})
