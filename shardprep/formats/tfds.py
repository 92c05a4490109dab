"""A prepared TensorFlow Datasets folder as input: ``--format tfds --input DIR``.

DIR is what TFDS writes (``.../name/version/`` with ``dataset_info.json`` and ``features.json``).
Its ``features.json`` gives the schema without sampling: ``Image`` stays its encoded bytes (string),
``ClassLabel`` stays int64 and brings its names (``<feature>.labels.txt``), ``Text`` is a string,
``Tensor``/``Scalar`` keep their dtype (ints and bools -> int64, floats -> float32) and shape (more
than one dimension -> flat ``[n]`` or ``[-1]``), nested dicts become ``a/b`` names (TFDS's own
Example keys). The shards named by each split's ``filepathTemplate`` and shard lengths are read
as TFRecord input by ``formats.tfrecord`` (this format is that one under another name); each file
carries its split, so the TFDS splits are kept unless ``--split`` asks to merge and re-split.

No tensorflow-datasets import: the two JSON files are read as documents.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import re
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from shardprep import fs, members, naming, planning
from shardprep.errors import PlanError
from shardprep.formats.base import InputError, InputFile
from shardprep.formats.tfrecord import TFRecordFormat
from shardprep.schema import FeatureSpec, Schema

__all__ = ["TfdsFormat", "TfdsShard", "expand_tfds", "features_doc", "output_features", "read_schema", "schema_from_features",
           "shard_paths", "splits_of"]

DEFAULT_TEMPLATE = "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}"  # TFDS's naming.DEFAULT_FILENAME_TEMPLATE
_INTS = {"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"}
_FLOATS = {"float16", "bfloat16", "float32", "float64"}
METADATA_CAP = 256 << 20  # the most bytes of dataset_info.json, features.json or a .labels.txt


class TfdsFormat(TFRecordFormat):
    """TFDS shards: TFRecord files of tf.train.Example, planned and read exactly as ``tfrecord``."""

    name = "tfds"
    extensions = ()  # never chosen by extension: --format tfds names a folder

    def own_schema(self, files: Sequence[InputFile], schema_given: bool) -> Schema | None:
        return None if schema_given else read_schema(files)  # from its features.json, no sampling

    def own_splits(self, files: Sequence[InputFile], spec: str | None) -> tuple[Sequence[InputFile], tuple] | None:
        return splits_of(files, spec)


@dataclasses.dataclass(frozen=True)
class TfdsShard(InputFile):
    """One shard of a TFDS data set: ``root`` is the data set folder, ``num_records`` its shard length."""

    root: str = ""
    num_records: int = 0


# --- the folder's two documents ----------------------------------------------------------------------


@contextlib.contextmanager
def _member_of(root: str) -> Iterator[None]:
    """Around a read of a file of the TFDS folder through ``shardprep.members``: a file that is not a
    regular one inside the folder (a FIFO, a link out, a path with ``..``) is an ``InputError``."""
    try:
        yield
    except members.MemberError as e:
        raise InputError(f"--input {root}: {e}") from None


def _read_json(root: str, name: str) -> dict[str, Any]:
    url = naming.join(root, name)
    try:
        with _member_of(root):
            doc = json.loads(members.read_member(root, name, field="", cap=METADATA_CAP))
    except FileNotFoundError:
        raise InputError(f"--input {root!r} is not a prepared TFDS data set: {name} is missing (give the folder "
                         "that holds dataset_info.json and features.json, e.g. ~/tensorflow_datasets/mnist/3.0.1)") from None
    except (OSError, ValueError) as e:
        raise InputError(f"{url} cannot be read as JSON: {e}") from None
    if not isinstance(doc, dict):
        raise InputError(f"{url} is not a JSON object")
    return doc


def features_doc(root: str) -> dict[str, Any]:
    """The folder's ``features.json`` as written by TFDS (kept as the output's when the schema is unchanged)."""
    return _read_json(root, naming.TFDS_FEATURES)


def _labels(root: str) -> Callable[[str], tuple[str, ...]]:
    def read(file_name: str) -> tuple[str, ...]:
        name = file_name + naming.TFDS_LABELS_SUFFIX
        try:
            with _member_of(root):
                text = members.read_member(root, name, field=f"features {file_name!r}", cap=METADATA_CAP,
                                           document="features.json").decode("utf-8")
        except FileNotFoundError:
            return ()
        return tuple(line.strip() for line in text.split("\n") if line.strip())  # as TFDS reads them
    return read


def _leaf(name: str, kind: str, content: Mapping[str, Any], labels: Callable[[str], tuple[str, ...]]) -> FeatureSpec:
    if kind in ("image", "labeledImage", "text"):
        return FeatureSpec("string", ())  # images stay their encoded bytes
    if kind == "classLabel":
        return FeatureSpec("int64", (), labels("-".join(name.split("/"))))
    if kind in ("tensor", "boundingBox"):
        dtype, encoding = content.get("dtype", ""), content.get("encoding", "none")
        if encoding not in ("none", "", None) or dtype == "string":
            return FeatureSpec("string", _flat(name, content) if dtype == "string" else ())
        if dtype in _INTS or dtype in _FLOATS:
            return FeatureSpec("int64" if dtype in _INTS else "float32", _flat(name, content))
        raise InputError(f"TFDS feature {name!r} has dtype {dtype!r}: expected ints, floats, bool or string")
    raise InputError(f"TFDS feature {name!r} ({kind}) is not supported: expected Tensor, Scalar, Image, ClassLabel, "
                     "Text, BBoxFeature, nested FeaturesDicts or one Sequence level")


def _flat(name: str, content: Mapping[str, Any]) -> tuple[int, ...]:
    dims = [int(d) for d in (content.get("shape") or {}).get("dimensions", [])]
    if not dims:
        return ()
    if any(d < 0 for d in dims):
        return (-1,)
    n = math.prod(dims)
    return (n,) if n else (-1,)


def _in_sequence(name: str, spec: FeatureSpec, length: int) -> FeatureSpec:
    """A leaf inside a ``Sequence``: its values for every step as one flat list."""
    if spec.shape == (-1,):
        raise InputError(f"TFDS feature {name!r} is a Sequence of variable-length values (ragged): not supported")
    n = spec.shape[0] if spec.shape else 1
    shape = (n * length,) if length > 0 else (-1,)
    return dataclasses.replace(spec, shape=shape)


def schema_from_features(doc: Mapping[str, Any], labels: Callable[[str], tuple[str, ...]] = lambda _: ()) -> Schema:
    """Our schema for a TFDS ``features.json`` document; ``labels(file name)`` gives a ClassLabel's names."""
    schema: Schema = {}

    def walk(node: Mapping[str, Any], prefix: str, length: int | None) -> None:
        kinds = [k for k in node if k not in ("pythonClassName", "description", "valueRange")]
        if kinds == ["featuresDict"]:
            for key, child in node["featuresDict"].get("features", {}).items():
                walk(child, f"{prefix}/{key}" if prefix else key, length)
        elif not prefix:
            raise InputError(f"features.json holds a {kinds} at the top: expected a FeaturesDict")
        elif kinds == ["sequence"] and length is None:  # its values are flat lists under the same keys
            walk(node["sequence"]["feature"], prefix, int(node["sequence"].get("length", -1)))
        elif len(kinds) != 1 or kinds == ["sequence"]:
            raise InputError(f"TFDS feature {prefix!r} ({', '.join(kinds)}) is not supported: expected Tensor, "
                             "Scalar, Image, ClassLabel, Text, BBoxFeature, nested FeaturesDicts or one Sequence level")
        else:
            spec = _leaf(prefix, kinds[0], node[kinds[0]] or {}, labels)
            schema[prefix] = spec if length is None else _in_sequence(prefix, spec, length)

    walk(doc, "", None)
    if not schema:
        raise InputError("features.json defines no features")
    return dict(sorted(schema.items()))


def shard_paths(info: Mapping[str, Any]) -> list[tuple[str, str, int]]:
    """(split, path relative to the folder, shard length) of every shard, formatted as TFDS formats them."""
    formats = [info.get("fileFormat") or "tfrecord", *info.get("alternativeFileFormats", [])]
    if "tfrecord" not in formats:
        raise InputError(f"the TFDS data set is stored as {formats[0]!r}: only tfrecord can be read; "
                         "prepare it with file_format='tfrecord'")
    out = []
    for split in info.get("splits", []):
        lengths = [int(n) for n in split.get("shardLengths", [])]
        template = re.sub(r"%.*$", "", split.get("filepathTemplate") or DEFAULT_TEMPLATE)  # TFDS strips '%...'
        width = max(len(str(len(lengths))), 5)
        for i, n in enumerate(lengths):
            values = {"DATASET": info.get("name", ""), "SPLIT": split["name"], "FILEFORMAT": "tfrecord",
                      "SHARD_INDEX": f"{i:0{width}d}", "NUM_SHARDS": f"{len(lengths):0{width}d}"}
            values["SHARD_X_OF_Y"] = f"{values['SHARD_INDEX']}-of-{values['NUM_SHARDS']}"
            out.append((split["name"], template.format(**values), n))
    return out


def expand_tfds(patterns: Sequence[str] | str, normal: Callable[[str], str] = str) -> list[InputFile]:
    """The shards of the one TFDS folder in ``patterns``, split by split, in shard order."""
    patterns = [patterns] if isinstance(patterns, str) else list(patterns)
    if len(patterns) != 1:
        raise InputError(f"--format tfds takes one --input (a TFDS data set folder), got {len(patterns)}")
    root = normal(patterns[0].rstrip("/"))
    info = _read_json(root, naming.TFDS_INFO)
    files: list[InputFile] = []
    for i, (split, path, n) in enumerate(shard_paths(info)):
        if n == 0:
            continue
        try:
            naming.validate_split_name(split)
        except PlanError as e:
            raise InputError(f"TFDS split {split!r}: {e}; or pass --split to re-split all records by hash") from None
        url = naming.join(root, path)
        try:
            with _member_of(root):
                size = members.resolve_member(root, path, field=f"splits {split!r} shard {i}", cap=sys.maxsize,
                                              document="dataset_info.json").size
            version = fs.version(url)
        except (OSError, ValueError) as e:
            raise InputError(f"TFDS shard {url} (split {split!r}, {n} records in dataset_info.json) cannot be read: {e}") from None
        files.append(TfdsShard(len(files), url, size, "tfds", False, version, split=split, root=root,
                               num_records=n))
    if not files:
        raise InputError(f"the TFDS data set {root} lists no records in dataset_info.json")
    return files


def splits_of(files: Sequence[InputFile], spec: str | None) -> tuple[Sequence[InputFile], tuple[planning.Split, ...]]:
    """The TFDS splits kept (``spec`` None: each file keeps its split), or ``--split SPEC`` over all records."""
    if spec is not None:
        return [dataclasses.replace(f, split="") for f in files], planning.parse_splits(spec)
    counts: dict[str, int] = {}
    for f in files:
        counts[f.split] = counts.get(f.split, 0) + getattr(f, "num_records", 1)
    total = sum(counts.values())
    return files, tuple(planning.Split(name, n / total) for name, n in counts.items())


def read_schema(files: Sequence[InputFile]) -> Schema:
    """The schema of the TFDS folder the ``TfdsShard`` files come from."""
    root = files[0].root  # type: ignore[attr-defined]
    return schema_from_features(features_doc(root), _labels(root))


def output_features(files: Sequence[InputFile], schema_file: str | None) -> dict[str, Any] | None:
    """The input's ``features.json`` to keep for the output (``tfds_metadata``), unless ``--schema`` changed it."""
    if schema_file or not files or not isinstance(files[0], TfdsShard):
        return None
    return features_doc(files[0].root)
