"""TensorFlow Datasets metadata for a data set, so ``tfds.builder_from_directory(DIR)`` reads it.

Beside ``manifest.json`` the commit writes ``dataset_info.json`` (splits, exact shard lengths and
bytes, and a file template that names our own shard paths), ``features.json`` (the features as
TFDS's ``FeaturesDict`` serialises them) and ``<feature>.labels.txt`` for class names. The files
are plain JSON and text, written without importing tensorflow-datasets (the core and Dataflow
workers stay free of it); tests prove them right against the real library.

Feature mapping (manifest -> TFDS): names with ``/`` become nested ``FeaturesDict``s (TFDS
flattens them back to the same Example keys); a scalar string ``.../image/encoded`` -> ``Image``
(decoded to uint8 RGB by ``tf.image.decode_image``: JPEG, PNG, BMP; GIF comes as frames and WebP
does not decode there); a scalar int64 with class names -> ``ClassLabel``; everything else ->
``Tensor`` of the same dtype and shape (``[-1]`` -> ``None``). Class names of any int64 feature are
written as TFDS names them (a kept TFDS ``features.json`` may hold a ``Sequence`` of ClassLabels).
A nullable feature (some records leave it out) of fixed shape ``S`` -> ``Tensor`` of shape
``[None, *S]``: TFDS requires a fixed-shape feature in every record ("is required but could not be
found") but reads a variable-length one as ``[]`` where it is missing and ``[value]`` where present
(an image or class label that may be missing is such a ``Tensor`` of its bytes or ids). The commit
logs one line naming the features declared so.

TFDS reads TFRecord without compression only, so a gzip data set gets no TFDS files (a log line
says so) and stale ones from an earlier run are removed. The manifest stays the commit marker:
these files are written before it, and a folder without a manifest is still no data set; if the
manifest is not written after them, ``restored_on_failure`` puts back the files of the data set
the manifest still names.
"""
from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator, Mapping
from typing import Any

from shardprep import fs, manifest, members, naming

__all__ = ["VERSION", "Untranslatable", "dataset_info_json", "features_json", "label_files", "restored_on_failure", "write"]

log = logging.getLogger("shardprep")

METADATA_CAP = 256 << 20  # the most bytes of a TFDS file kept to restore (``shardprep.members``: regular files only)
VERSION = "1.0.0"  # the TFDS version we declare; TFDS needs one, our run ids do the versioning
_PY = "tensorflow_datasets.core.features."
_DICT, _TENSOR = _PY + "features_dict.FeaturesDict", _PY + "tensor_feature.Tensor"
_IMAGE, _CLASS_LABEL = _PY + "image_feature.Image", _PY + "class_label_feature.ClassLabel"
IMAGE_SUFFIX = ("image", "encoded")  # name ends with image/encoded: the field name image scripts use


class Untranslatable(ValueError):
    """The features cannot be expressed as a TFDS ``FeaturesDict`` (e.g. both ``a`` and ``a/b``)."""


def _shape(dims: tuple[int, ...] | list[int]) -> dict[str, Any]:
    """TFDS's Shape proto as JSON: int64 as strings, unknown as -1, scalars as ``{}``."""
    return {"dimensions": [str(d) for d in dims]} if dims else {}


def _leaf(name: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    dtype, shape, names = spec["dtype"], list(spec["shape"]), spec.get("names") or []
    if _varies(spec):  # may be missing: TFDS reads only a variable-length leading dimension as optional
        return {"pythonClassName": _TENSOR, "tensor": {"shape": _shape([-1, *shape]), "dtype": dtype, "encoding": "none"}}
    if dtype == "string" and not shape and tuple(name.split("/")[-2:]) == IMAGE_SUFFIX:
        return {"pythonClassName": _IMAGE,
                "image": {"shape": _shape([-1, -1, 3]), "dtype": "uint8"}}
    if dtype == "int64" and not shape and names:
        return {"pythonClassName": _CLASS_LABEL, "classLabel": {"numClasses": str(len(names))}}
    return {"pythonClassName": _TENSOR, "tensor": {"shape": _shape(shape), "dtype": dtype, "encoding": "none"}}


def _varies(spec: Mapping[str, Any]) -> bool:
    """A nullable feature of fixed shape: declared to TFDS with a leading variable-length dimension."""
    return bool(spec.get("nullable")) and -1 not in spec["shape"]


def _tree(features: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Feature names split at ``/`` into nested dicts of leaf specs; ``Untranslatable`` on a clash."""
    root: dict[str, Any] = {}
    for name in sorted(features):
        parts = name.split("/")
        if not all(parts):
            raise Untranslatable(f"feature {name!r} has an empty part between '/'")
        node = root
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict) or "__leaf__" in node:
                raise Untranslatable(f"feature {name!r} lies below another feature of that name")
        if parts[-1] in node:
            raise Untranslatable(f"feature {name!r} is also the parent of other features")
        node[parts[-1]] = {"__leaf__": (name, features[name])}
    return root


def _dict_json(tree: dict[str, Any], leaves: dict[tuple[str, bool], dict] | None = None) -> dict[str, Any]:
    """The FeaturesDict of ``tree``; ``leaves``: the leaf of each distinct spec, made once (a wide
    table's 50,000 specs are a few distinct ones) and shared, as json writes each one in full."""
    leaves = {} if leaves is None else leaves
    out = {}
    for key, node in tree.items():
        if "__leaf__" not in node:
            out[key] = _dict_json(node, leaves)
            continue
        name, spec = node["__leaf__"]
        memo = (repr(spec), tuple(name.split("/")[-2:]) == IMAGE_SUFFIX)  # what _leaf reads of the name
        if memo not in leaves:
            leaves[memo] = _leaf(name, spec)
        out[key] = leaves[memo]
    return {"pythonClassName": _DICT, "featuresDict": {"features": out}}


def features_json(features: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """``features.json`` for the manifest's features, as TFDS writes it for the same ``FeaturesDict``."""
    if any("/" in name for name in features):
        return _dict_json(_tree(features))
    leaves: dict[str, dict] = {}  # flat names (a wide table's): ``_dict_json`` of one level, no tree built
    by_id: dict[int, dict] = {}  # the leaf of a spec object (features of one spec share it: schema_to_json)
    out = {}
    for name in sorted(features):
        spec = features[name]
        leaf = by_id.get(id(spec))
        if leaf is None:
            memo = repr(spec)
            leaf = by_id[id(spec)] = leaves[memo] if memo in leaves else leaves.setdefault(memo, _leaf(name, spec))
        out[name] = leaf
    return {"pythonClassName": _DICT, "featuresDict": {"features": out}}


def label_files(features: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """``{file name: text}`` of every class-named feature (TFDS's ``<a>-<b>.labels.txt`` naming)."""
    files = {}
    for name, spec in features.items():
        if spec["dtype"] == "int64" and spec.get("names") and not _varies(spec):
            file = "-".join(name.split("/"))  # TFDS: parents joined by '-'
            files[file + naming.TFDS_LABELS_SUFFIX] = "\n".join(spec["names"]) + "\n"
    return files


def _dataset_name(root: str) -> str:
    """A TFDS name (snake_case) from the folder name: ``gs://b/My-Data`` -> ``my_data``."""
    base = re.sub(r"[^a-z0-9_]+", "_", root.rstrip("/").rsplit("/", 1)[-1].lower()).strip("_")
    return base if base[:1].isalpha() else f"ds_{base}" if base else "shardprep"


def dataset_info_json(result: manifest.Manifest, *, name: str) -> dict[str, Any]:
    """``dataset_info.json``: every split with its shard lengths, bytes and file template.

    ``Untranslatable`` when a split's shard paths are not what the template names (shards of
    several runs, or names from another tool), since TFDS would open other files."""
    splits = []
    for split, info in result.splits.items():
        run_id = info.shards[0].path.split("/", 1)[0]
        expected = [naming.shard_path(run_id, split, i, len(info.shards)) for i in range(len(info.shards))]
        if [s.path for s in info.shards] != expected:
            raise Untranslatable(f"split {split!r}: the shard paths do not follow one run's TFDS file template")
        splits.append({
            "name": split,
            "numBytes": str(info.num_bytes),
            "shardLengths": [str(s.num_records) for s in info.shards],
            "filepathTemplate": naming.tfds_shard_template(run_id),
        })
    return {
        "name": name,
        "version": VERSION,
        "description": "Exactly balanced TFRecord shards written by shardprep; manifest.json is the commit marker.",
        "fileFormat": "tfrecord",
        "splits": splits,
    }


def _dump(doc: dict[str, Any], features: int) -> bytes:
    # byte for byte as TFDS writes its own; compact for a wide table (manifest.INDENT_MAX_FEATURES)
    return manifest.json_bytes(doc, features=features, indent=4, sort_keys=True)


def write(root: str, result: manifest.Manifest, *, features: Mapping[str, Any] | None = None) -> bool:
    """Writes the TFDS files of ``result`` into ``root`` (atomically each); returns whether it did.

    ``features``: a TFDS input's own ``features.json``, kept (its Image shapes, ClassLabels and
    tensor shapes say more than the manifest). Called before the manifest. A data set TFDS cannot read (gzip shards, features without a
    ``FeaturesDict`` form) gets none, and those of an earlier run are removed so none is stale."""
    try:
        if result.compression != "none":
            raise Untranslatable(f"its shards are {result.compression}-compressed and TFDS reads only uncompressed "
                                 "TFRecord; re-shard with --compression none for TFDS")
        width = len(result.features)
        files = {naming.TFDS_FEATURES: _dump(dict(features) if features else features_json(result.features), width),
                 **{k: v.encode() for k, v in label_files(result.features).items()},
                 naming.TFDS_INFO: _dump(dataset_info_json(result, name=_dataset_name(root)), 0)}
    except Untranslatable as e:
        log.info("no TFDS metadata for %s: %s", root, e)
        for stale in (naming.TFDS_INFO, naming.TFDS_FEATURES):
            fs.remove(naming.join(root, stale))
        return False
    optional = sorted(n for n, spec in result.features.items() if _varies(spec)) if not features else []
    if optional:
        log.info("TFDS metadata for %s: %s may be missing in a record, so TFDS reads %s as variable-length "
                 "([] where missing, [value] where present)", root, ", ".join(optional),
                 "it" if len(optional) == 1 else "them")
    for name, data in files.items():  # dataset_info.json last: it is what TFDS opens first
        with fs.write_atomic(naming.join(root, name)) as f:
            f.write(data)
    return True


def _present(root: str) -> set[str]:
    return {n for n in fs.listdir(root) if n in (naming.TFDS_INFO, naming.TFDS_FEATURES)
            or n.endswith(naming.TFDS_LABELS_SUFFIX)}


@contextlib.contextmanager
def restored_on_failure(root: str) -> Iterator[None]:
    """Puts the TFDS files of ``root`` back as they were if the body fails (the commit wrote new
    ones, then could not write the manifest): they keep describing the committed data set."""
    before = {name: members.read_member(root, name, field="", cap=METADATA_CAP) for name in _present(root)}
    try:
        yield
    except BaseException:
        try:
            for name in _present(root) - before.keys():
                fs.remove(naming.join(root, name))
            for name, data in before.items():
                with fs.write_atomic(naming.join(root, name)) as f:
                    f.write(data)
        except OSError as e:
            log.warning("could not restore the TFDS files of %s after a failed commit (%s): re-shard again", root, e)
        raise
