"""Feature schemas: the dtype and shape of every tf.train.Example feature, in the manifest's format.

A schema is a ``dict`` of feature name -> ``FeatureSpec``, sorted by name, written as the manifest's
``"features"`` object (``{"x": {"dtype": "float32", "shape": []}}``). It comes from ``--schema FILE``
or from ``infer_schema`` over a sample of rows. Inference rules:

- Text rows (CSV: every value is a ``str``): a column is ``int64`` if every non-empty value parses as
  an int within int64; ``string`` if they all parse as ints but some do not fit int64 (ids: keep
  every digit); else ``float32`` if every non-empty value parses as a float; else ``string``. An
  all-empty column is ``string``. Text columns are always scalars.
- Typed rows (JSON, Parquet, TFRecord): bool/int -> ``int64``, float -> ``float32`` (int mixed with
  float -> ``float32``), str/bytes -> ``string``; a field that is a string in some rows and a number
  in others -> ``string``; ints some of which do not fit int64 (uint64 ids) -> ``string``, as for
  text. Lists take the element dtype by the same rule and shape ``(n,)`` when
  every sampled list has length ``n``, else ``(-1,)``. Lists that all have length 1 are scalars,
  since a tf.train.Example holds every value as a list. A field that is a scalar in some rows and a
  list in others -> ``(-1,)``. ``None`` is ignored; a field that is only ever ``None`` or empty lists
  is ``string`` of shape ``(-1,)``. A field present in only some rows is still in the schema.
- Nested objects and lists of lists raise ``SchemaError``: tf.train.Example features are flat.
- Rows are text rows when every value of every row is a ``str``; pass ``text=`` to say so instead.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import numbers
from collections.abc import Iterable, Mapping, Sequence
from itertools import chain
from typing import Any

from shardprep import fs, schema_text
from shardprep.errors import SchemaError
from shardprep.naming import MANIFEST_FORMAT
from shardprep.schema_text import INT64_MAX, INT64_MIN

__all__ = ["DTYPES", "EXTRA_FIELDS", "INT64_MAX", "INT64_MIN", "ON_MISSING", "FeatureSpec", "Schema", "SchemaError",
           "infer_schema", "load_schema", "schema_from_json", "schema_to_json"]

DTYPES = ("int64", "float32", "string")
EXTRA_FIELDS = ("reject", "ignore")  # what a field outside the schema does to its row: --extra-fields
ON_MISSING = ("omit", "reject")  # what a missing value does: left out of the Example, or a dead letter (--on-missing)
_MANIFEST_FORMAT = MANIFEST_FORMAT


@dataclasses.dataclass(frozen=True)
class FeatureSpec:
    """One feature: its dtype and shape (``()`` scalar, ``(n,)`` fixed length, ``(-1,)`` any length)."""

    dtype: str
    shape: tuple[int, ...] = ()
    names: tuple[str, ...] = ()  # class names in label order (an int64 label; e.g. image/class/label)
    nullable: bool = False  # some rows leave it out (a missing value); ``missing`` of them in the run
    missing: int = 0
    unit: str = ""  # what an int64 time column's integers count (Parquet dates, times, timestamps, durations)

    def __post_init__(self) -> None:
        if isinstance(self.names, list):
            object.__setattr__(self, "names", tuple(self.names))
        if not isinstance(self.names, tuple) or not all(isinstance(n, str) for n in self.names):
            raise SchemaError(f"names {self.names!r}: expected a list of class names (strings)")
        if self.names and self.dtype != "int64":
            raise SchemaError(f"names go with an int64 label, not dtype {self.dtype!r}")
        if self.dtype not in DTYPES:
            raise SchemaError(f"dtype {self.dtype!r} is not supported: expected one of {', '.join(DTYPES)}")
        if not isinstance(self.unit, str) or (self.unit and self.dtype != "int64"):
            raise SchemaError(f"unit {self.unit!r}: expected a string, on an int64 feature (a time column's integers)")
        shape = self.shape
        if isinstance(shape, list):
            shape = tuple(shape)
            object.__setattr__(self, "shape", shape)
        valid = isinstance(shape, tuple) and all(type(d) is int for d in shape) and (
            shape == () or (len(shape) == 1 and (shape[0] >= 1 or shape[0] == -1))
        )
        if not valid:
            raise SchemaError(
                f"shape {list(shape) if isinstance(shape, tuple) else shape!r} is not supported: expected [] (scalar), "
                "[n] with n >= 1 (fixed length) or [-1] (any length)"
            )

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"dtype": self.dtype, "shape": list(self.shape)}
        if self.names:
            doc["names"] = list(self.names)
        if self.nullable:
            doc.update(nullable=True, missing=self.missing)
        if self.unit:
            doc["unit"] = self.unit
        return doc

    @classmethod
    def from_json(cls, doc: Any) -> FeatureSpec:
        """Parses ``{"dtype": ..., "shape": [...]}``; unknown keys are refused so typos do not pass."""
        if not isinstance(doc, Mapping):
            raise SchemaError(f'feature spec {doc!r} is not an object: expected {{"dtype": "int64", "shape": []}}')
        missing = [k for k in ("dtype", "shape") if k not in doc]
        unknown = sorted(set(doc) - {"dtype", "shape", "names", "nullable", "missing", "unit"})
        if missing or unknown:
            raise SchemaError(
                f"feature spec {dict(doc)!r} has {'missing key(s) ' + ', '.join(missing) if missing else ''}"
                f"{' and ' if missing and unknown else ''}{'unknown key(s) ' + ', '.join(unknown) if unknown else ''}: "
                'expected exactly {"dtype": "int64"|"float32"|"string", "shape": [] | [n] | [-1]}'
            )
        shape = doc["shape"]
        if not isinstance(shape, (list, tuple)):
            raise SchemaError(f"shape {shape!r} is not a list: expected [] (scalar), [n] or [-1]")
        names = doc.get("names", [])
        if not isinstance(names, (list, tuple)):
            raise SchemaError(f"names {names!r} is not a list: expected the class names in label order")
        nullable, missing = doc.get("nullable", False), doc.get("missing", 0)
        if not isinstance(nullable, bool) or type(missing) is not int or missing < 0:
            raise SchemaError(f"nullable {nullable!r} / missing {missing!r}: expected true/false and a count")
        return cls(doc["dtype"], tuple(shape), tuple(names), nullable, missing, doc.get("unit", ""))


Schema = dict[str, FeatureSpec]
_SCALAR_SPECS = {dtype: FeatureSpec(dtype, ()) for dtype in DTYPES}  # one each: a wide table's columns share them


def schema_to_json(schema: Schema) -> dict[str, dict]:
    """The manifest's ``"features"`` object, sorted by name; features of one spec object share one
    (read-only) document, as a wide table's 50,000 features share a few specs."""
    docs: dict[int, dict] = {}
    out = {}
    for name in sorted(schema):
        spec = schema[name]
        doc = docs.get(id(spec))
        out[name] = doc if doc is not None else docs.setdefault(id(spec), spec.to_json())
    return out


def schema_from_json(doc: Any) -> Schema:
    """Parses and validates a ``"features"`` object; the result is sorted by feature name."""
    if not isinstance(doc, Mapping):
        raise SchemaError(f"a schema must be a JSON object of feature name -> spec, got {type(doc).__name__}")
    if not doc:
        raise SchemaError("the schema defines no features: expected at least one feature")
    schema: Schema = {}
    parsed: dict[str, FeatureSpec] = {}  # by the spec's repr: a wide table's 50,000 specs are a few distinct ones
    for name in sorted(doc, key=str):
        if not isinstance(name, str) or not name or not _is_utf8(name):
            raise SchemaError(f"feature name {name!r} is not valid: expected a non-empty string (of UTF-8 text)")
        spec = doc[name]
        plain = _plain_spec(spec)
        if plain is not None:
            schema[name] = plain
            continue
        key = repr(spec)  # equal reprs of JSON values: equal values of equal types, so one FeatureSpec serves
        if key not in parsed:
            try:
                parsed[key] = FeatureSpec.from_json(spec)
            except SchemaError as e:
                raise SchemaError(f"feature {name!r}: {e}") from None
        schema[name] = parsed[key]
    return schema


def _plain_spec(doc: Any) -> FeatureSpec | None:
    """``FeatureSpec.from_json(doc)`` for ``{"dtype": "<a dtype>", "shape": []}`` (most features), else None."""
    if type(doc) is dict and len(doc) == 2:
        dtype, shape = doc.get("dtype"), doc.get("shape")
        if type(shape) is list and not shape and type(dtype) is str:
            return _SCALAR_SPECS.get(dtype)
    return None


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def load_schema(url: str) -> Schema:
    """Reads ``--schema FILE.json``: a ``"features"`` object, or a whole manifest whose features to reuse."""
    try:
        with fs.open_file(url, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise SchemaError(f"schema file {url!r} does not exist: give --schema the path of a JSON file") from None
    except (OSError, ValueError) as e:
        raise SchemaError(f"schema file {url!r} cannot be read: {e}") from None
    try:
        doc = json.loads(data.decode("utf-8-sig"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SchemaError(f"schema file {url!r} is not valid JSON: {e}") from None
    if isinstance(doc, dict) and doc.get("format") == _MANIFEST_FORMAT:
        doc = doc.get("features")
    try:
        return schema_from_json(doc)
    except SchemaError as e:
        raise SchemaError(
            f'schema file {url!r}: {e} (the format is {{"name": {{"dtype": "int64", "shape": []}}, ...}})'
        ) from None


# --- inference -------------------------------------------------------------------------------------


def _infer_text(name: str, values: Sequence[Any]) -> FeatureSpec:
    return _SCALAR_SPECS[schema_text.text_dtype(values)]


def _value_kind(name: str, value: Any) -> str:
    """``"int"``, ``"bigint"``, ``"float"`` or ``"string"`` for one typed, non-list value."""
    if isinstance(value, (str, bytes)):
        return "string"
    if isinstance(value, numbers.Integral):
        return "int" if INT64_MIN <= value <= INT64_MAX else "bigint"
    if isinstance(value, numbers.Real):
        return "float"
    if isinstance(value, Mapping):
        raise SchemaError(f"field {name!r} holds nested objects: flatten it, or give --schema without it")
    text = repr(value)
    raise SchemaError(
        f"field {name!r} holds {text[:60]} of type {type(value).__name__}: expected numbers, strings, bytes or flat "
        "lists of them; convert it, or give --schema without it"
    )


_SCALAR_KINDS = {str: "string", bytes: "string", float: "float", int: "int", bool: "int"}


def _infer_plain(values: Sequence[Any]) -> FeatureSpec | None:
    """``_infer_typed``'s answer without a check per value, for the common column of plain scalars
    (None, bool, int, float, str, bytes: a Parquet or JSON column) and the column of lists of them
    (no None in a list: a decoded tf.train.Example's feature); None for any other column."""
    types = set(map(type, values))
    if types == {list}:
        return _infer_plain_lists(values)
    nulls = type(None) in types
    types.discard(type(None))
    dtype = _plain_dtype(types, [v for v in values if v is not None] if nulls else values)
    return None if dtype is None else _SCALAR_SPECS[dtype]


def _infer_plain_lists(values: Sequence[list]) -> FeatureSpec | None:
    items = list(chain.from_iterable(values))
    dtype = _plain_dtype(set(map(type, items)), items) if items else "string"
    if dtype is None:
        return None
    shape = _shape(0, set(map(len, values)))
    return _SCALAR_SPECS[dtype] if shape == () else FeatureSpec(dtype, shape)  # scalars share a spec, as plain columns do


def _plain_dtype(types: set[type], values: Sequence[Any]) -> str | None:
    """The dtype of non-None ``values`` of ``types`` when all are plain scalars, else None."""
    if not types or not types <= _SCALAR_KINDS.keys():
        return None
    kinds = {_SCALAR_KINDS[t] for t in types}
    if "string" in kinds:
        return "string"
    if "float" in kinds:
        return "float32"
    # only integers (and bools): their range in C, min and max
    return "string" if min(values) < INT64_MIN or max(values) > INT64_MAX else "int64"


def _alone_key(values: Sequence[Any]) -> Any:
    """What ``_infer_typed`` makes of a column of one value depends only on this (None: it may not)."""
    kind = type(values[0])
    if kind is int:
        return kind, INT64_MIN <= values[0] <= INT64_MAX
    return kind if kind in _SCALAR_KINDS or values[0] is None else None


def _infer_typed(name: str, values: Sequence[Any]) -> FeatureSpec:
    plain = _infer_plain(values)
    return plain if plain is not None else _infer_values(name, values)


def _infer_values(name: str, values: Sequence[Any]) -> FeatureSpec:
    """The rules of the module docstring, value by value (lists, nesting, other types)."""
    kinds: set[str] = set()
    lengths: set[int] = set()
    scalars = 0
    for value in values:
        if value is None:
            continue
        if isinstance(value, (list, tuple)):
            lengths.add(len(value))
            for item in value:
                if item is None:
                    continue
                if isinstance(item, (list, tuple)):
                    raise SchemaError(
                        f"field {name!r} holds nested lists: tf.train.Example features are flat lists; "
                        "flatten it, or give --schema without it"
                    )
                kinds.add(_value_kind(name, item))
        else:
            scalars += 1
            kinds.add(_value_kind(name, value))
    if "string" in kinds or not kinds:
        dtype = "string"
    elif "float" in kinds:
        dtype = "float32"
    else:
        dtype = "string" if "bigint" in kinds else "int64"
    return FeatureSpec(dtype, _shape(scalars, lengths))


def _shape(scalars: int, lengths: set[int]) -> tuple[int, ...]:
    """A column's shape from its count of scalar values and the lengths of its lists."""
    if not lengths:
        return () if scalars else (-1,)  # no scalar either: only ever None
    if scalars or len(lengths) > 1 or lengths == {0}:
        return (-1,)
    (n,) = lengths
    return () if n == 1 else (n,)


def infer_schema(rows: Iterable[Mapping[str, Any]], *, text: bool | None = None) -> Schema:
    """Infers a schema from sample rows by the rules in the module docstring.

    ``text``: True for CSV rows (values are strings to parse), False for typed rows; None decides by
    the values (text when every value is a ``str``).
    """
    rows = list(rows)
    columns = _columns(rows)
    count = len(rows)
    if not columns:
        raise SchemaError(
            f"nothing to infer a schema from ({count} sample rows, no fields): the input has no valid records "
            "at its start; check the input, or give --schema FILE.json"
        )
    for name in columns:
        if not isinstance(name, str) or not name:
            raise SchemaError(f"field name {name!r} is not valid: feature names must be non-empty strings")
    if text is None:
        text = all(isinstance(v, str) for values in columns.values() for v in values)
    uniform = schema_text.uniform_dtype(columns, text)
    if uniform is not None:  # no float32 column to warn of: typed floats are no integers
        return dict.fromkeys(sorted(columns), _SCALAR_SPECS[uniform])
    infer = _infer_text if text else _infer_typed
    alone: dict[Any, FeatureSpec] = {}  # a column of one plain value (a Parquet sample's decided column), by its kind
    schema = {}
    for name in sorted(columns):
        values = columns[name]
        key = _alone_key(values) if not text and len(values) == 1 else None
        if key is None:
            schema[name] = infer(name, values)
        else:
            schema[name] = alone[key] if key in alone else alone.setdefault(key, infer(name, values))
    for name, spec in schema.items():
        if spec.dtype == "float32":
            _warn_lost_integers(name, columns[name])
    return schema


def _columns(rows: list[Any]) -> dict[str, Sequence[Any]]:
    """Each field's values in row order, fields in order of first appearance."""
    keys = tuple(rows[0]) if rows and type(rows[0]) is dict else None
    if keys is not None and all(type(row) is dict and len(row) == len(keys) for row in rows) and all(
            tuple(row) == keys for row in rows):  # the same fields in every row (CSV rows): transposed at once
        return dict(zip(keys, zip(*map(dict.values, rows)))) if keys else {}
    columns: dict[str, list[Any]] = {}
    for row in rows:
        if not isinstance(row, Mapping):
            raise SchemaError(f"cannot infer a schema from a {type(row).__name__} row: expected a mapping")
        for name, value in row.items():
            columns.setdefault(name, []).append(value)
    return columns


FLOAT32_EXACT_INT = 2**24  # float32 holds every integer up to this; 16777217 is stored as 16777216


def _warn_lost_integers(name: str, values: Sequence[Any]) -> None:
    """Says so when a column inferred float32 holds integers float32 cannot hold exactly (ids, counts)."""
    def big(v: Any) -> bool:
        if isinstance(v, (list, tuple)):
            return any(big(x) for x in v)
        if isinstance(v, str):
            try:
                v = int(v.strip())
            except ValueError:
                return False
        return isinstance(v, numbers.Integral) and not isinstance(v, bool) and abs(int(v)) > FLOAT32_EXACT_INT
    example = next(filter(big, schema_text.big_int_candidates(values)), None)
    if example is not None:
        logging.getLogger("shardprep").warning(
            "column %r mixes integers and floats, so it is float32, which rounds integers above 2**24 (%r is "
            "stored as %r): give --schema with %r as string (or int64 if its floats are whole) to keep them exact",
            name, example,
            _float32(example), name)


def _float32(v: Any) -> Any:
    import struct

    v = v[0] if isinstance(v, (list, tuple)) else v
    try:
        return int(struct.unpack("<f", struct.pack("<f", float(v)))[0])
    except (ValueError, OverflowError, struct.error):
        return v
