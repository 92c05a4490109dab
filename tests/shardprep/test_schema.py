"""Schemas: validation, the manifest's JSON format, --schema files, and inference from sample rows
(a text column's dtype decided at once: test_schema_text.py)."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardprep.schema import FeatureSpec, SchemaError, infer_schema, load_schema, schema_from_json, schema_to_json

I64, F, S = "int64", "float32", "string"


@pytest.mark.parametrize("dtype, shape", [(I64, ()), (F, (3,)), (S, (-1,)), (I64, (1,))])
def test_valid_specs_round_trip_through_json(dtype, shape):
    spec = FeatureSpec(dtype, shape)
    assert spec.to_json() == {"dtype": dtype, "shape": list(shape)}
    assert FeatureSpec.from_json(json.loads(json.dumps(spec.to_json()))) == spec


@pytest.mark.parametrize(
    "doc, message",
    [
        ({"dtype": "int32", "shape": []}, "dtype 'int32' is not supported: expected one of int64, float32, string"),
        ({"dtype": "int64", "shape": [0]}, "shape [0] is not supported"),
        ({"dtype": "int64", "shape": [-2]}, "shape [-2] is not supported"),
        ({"dtype": "int64", "shape": [2, 3]}, "shape [2, 3] is not supported"),
        ({"dtype": "int64", "shape": [1.5]}, "shape [1.5] is not supported"),
        ({"dtype": "int64", "shape": [True]}, "shape [True] is not supported"),
        ({"dtype": "int64", "shape": 3}, "shape 3 is not a list"),
        ({"dtype": "int64"}, "missing key(s) shape"),
        ({"dtype": "int64", "shape": [], "dtpye": 1}, "unknown key(s) dtpye"),
        (["int64"], "is not an object"),
    ],
)
def test_bad_specs_are_refused_with_what_was_expected(doc, message):
    with pytest.raises(SchemaError) as e:
        FeatureSpec.from_json(doc)
    assert message in str(e.value)


def test_schema_json_is_sorted_and_errors_name_the_feature():
    schema = schema_from_json({"b": {"dtype": S, "shape": []}, "a": {"dtype": F, "shape": [-1]}})
    assert list(schema) == ["a", "b"] and schema["a"] == FeatureSpec(F, (-1,))
    assert schema_to_json(schema) == {"a": {"dtype": F, "shape": [-1]}, "b": {"dtype": S, "shape": []}}
    with pytest.raises(SchemaError, match=r"feature 'x': dtype 'float' is not supported"):
        schema_from_json({"x": {"dtype": "float", "shape": []}})
    with pytest.raises(SchemaError, match="feature name '' is not valid"):
        schema_from_json({"": {"dtype": S, "shape": []}})
    with pytest.raises(SchemaError, match=r"feature name 'a\\ud83d' is not valid: .* UTF-8"):  # no Example key can hold it
        schema_from_json(json.loads('{"a\\ud83d": {"dtype": "string", "shape": []}}'))
    with pytest.raises(SchemaError, match="defines no features"):
        schema_from_json({})
    with pytest.raises(SchemaError, match="must be a JSON object"):
        schema_from_json([1])


def test_load_schema_reads_the_features_format_or_a_whole_manifest(tmp_path):
    path = tmp_path / "schema.json"
    path.write_text(json.dumps({"y": {"dtype": I64, "shape": []}, "x": {"dtype": F, "shape": [4]}}))
    assert load_schema(str(path)) == {"x": FeatureSpec(F, (4,)), "y": FeatureSpec(I64, ())}
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"format": "shardprep.manifest", "version": 1, "features": {"y": {"dtype": I64,
                                                                                                    "shape": []}}}))
    assert load_schema(str(manifest)) == {"y": FeatureSpec(I64, ())}


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "does not exist: give --schema the path of a JSON file"),
        ("{not json", "is not valid JSON: Expecting property name"),
        ('{"x": {"dtype": "int64", "shape": [0]}}', "feature 'x': shape [0] is not supported"),
        ('{"x": "int64"}', "feature 'x': feature spec 'int64' is not an object"),
        ("[]", "must be a JSON object"),
    ],
)
def test_load_schema_errors_name_the_file(tmp_path, content, message):
    path = tmp_path / "schema.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(SchemaError) as e:
        load_schema(str(path))
    assert repr(str(path)) in str(e.value) and message in str(e.value)


@pytest.mark.parametrize(
    "values, expected",
    [
        (["1", " -2 ", "", "300"], FeatureSpec(I64, ())),
        (["1", "2.5", "1e3", ""], FeatureSpec(F, ())),
        (["1", "nan", "inf"], FeatureSpec(F, ())),
        (["1", "x"], FeatureSpec(S, ())),
        (["", "  "], FeatureSpec(S, ())),
        (["9223372036854775807", "-9223372036854775808"], FeatureSpec(I64, ())),
        (["12345678901234567890123", "1"], FeatureSpec(S, ())),  # ids too long for int64: keep every digit
        (["12345678901234567890123", "0.5"], FeatureSpec(F, ())),
        (["true", "false"], FeatureSpec(S, ())),
    ],
)
def test_text_rows_are_parsed_by_the_csv_rules(values, expected):
    assert infer_schema([{"c": v} for v in values]) == {"c": expected}


@pytest.mark.parametrize(
    "values, expected",
    [
        ([1, 2, None], FeatureSpec(I64, ())),
        ([True, False], FeatureSpec(I64, ())),
        ([1, 2.5], FeatureSpec(F, ())),
        ([True, 0.5], FeatureSpec(F, ())),
        (["a", b"b"], FeatureSpec(S, ())),
        (["1", 2], FeatureSpec(S, ())),  # a string in some rows and a number in others
        ([[1, 2], [3, 4]], FeatureSpec(I64, (2,))),
        ([[1.5, 2], [3, 4, 5]], FeatureSpec(F, (-1,))),
        ([[1], [2], None], FeatureSpec(I64, ())),  # 1-lists everywhere: how a tf.train.Example holds a scalar
        ([[b"x"], [b"y"]], FeatureSpec(S, ())),
        ([1, [2, 3]], FeatureSpec(I64, (-1,))),  # scalar in some rows, list in others
        ([1, [2]], FeatureSpec(I64, (-1,))),
        ([[], []], FeatureSpec(S, (-1,))),
        ([[], [1]], FeatureSpec(I64, (-1,))),
        ([None, None], FeatureSpec(S, (-1,))),
        ([["a", None], ["b", "c"]], FeatureSpec(S, (2,))),
        ([2**64 - 1, 1], FeatureSpec(S, ())),  # uint64 ids past int64: keep every digit, as CSV does
        ([-(2**63) - 1], FeatureSpec(S, ())),
        ([2**63 - 1, -(2**63)], FeatureSpec(I64, ())),
        ([2**64, 0.5], FeatureSpec(F, ())),  # with floats: float32, as CSV does
        ([[1, 2**63], [3, 4]], FeatureSpec(S, (2,))),
    ],
)
def test_typed_rows_follow_the_python_types(values, expected):
    rows = [{"c": v, "other": "text"} for v in values]
    assert infer_schema(rows)["c"] == expected


def test_fields_missing_from_some_rows_are_kept_and_the_result_is_sorted():
    schema = infer_schema([{"b": 1}, {"a": 2.5}, {"b": 3, "c": "x"}])
    assert list(schema) == ["a", "b", "c"]
    assert schema == {"a": FeatureSpec(F, ()), "b": FeatureSpec(I64, ()), "c": FeatureSpec(S, ())}


def test_text_can_be_forced_either_way():
    rows = [{"zip": "02139"}, {"zip": "10001"}]
    assert infer_schema(rows)["zip"] == FeatureSpec(I64, ())  # all strings: read as CSV text
    assert infer_schema(rows, text=False)["zip"] == FeatureSpec(S, ())
    assert infer_schema([{"x": "1"}, {"x": None}], text=True)["x"] == FeatureSpec(I64, ())


@pytest.mark.parametrize(
    "rows, message",
    [
        ([{"x": {"a": 1}}], "field 'x' holds nested objects: flatten it, or give --schema without it"),
        ([{"x": [{"a": 1}]}], "field 'x' holds nested objects"),
        ([{"x": [[1], [2]]}], "field 'x' holds nested lists"),
        ([{"x": object()}], "of type object: expected numbers, strings, bytes or flat lists"),
        ([], "nothing to infer a schema from (0 sample rows"),
        ([{}, {}], "nothing to infer a schema from (2 sample rows"),
        ([{"": 1}], "field name '' is not valid"),
    ],
)
def test_inference_errors_say_what_to_do(rows, message):
    with pytest.raises(SchemaError) as e:
        infer_schema(rows)
    assert message in str(e.value)


_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(1 << 70), max_value=1 << 70),
                     st.floats(allow_nan=True), st.text(max_size=3), st.binary(max_size=3))


@given(st.lists(_SCALARS, max_size=12))
@settings(max_examples=400, deadline=None)
def test_the_plain_scalar_shortcut_infers_what_the_value_by_value_rules_do(values):
    """A wide table's inference takes the shortcut for every column: it must never answer otherwise."""
    from shardprep.schema import _infer_plain, _infer_values

    plain = _infer_plain(values)
    if any(v is not None for v in values):
        assert plain == _infer_values("x", values)
    else:
        assert plain is None


@given(st.lists(st.one_of(st.lists(_SCALARS, max_size=4), st.lists(st.lists(st.integers(), max_size=1), max_size=2)),
                min_size=1, max_size=12))
@settings(max_examples=400, deadline=None)
def test_the_list_shortcut_infers_what_the_value_by_value_rules_do(values):
    """A decoded tf.train.Example's feature is a list a row: the shortcut for lists answers as the rules
    do, or leaves the column to them (None in a list, nested lists)."""
    from shardprep.schema import _infer_plain, _infer_values

    plain = _infer_plain(values)
    try:
        slow = _infer_values("x", values)
    except SchemaError:
        assert plain is None
        return
    assert plain is None or plain == slow
    if not any(v is None or isinstance(v, list) for row in values for v in row):
        assert plain == slow
