"""The manifest (version 1): the data set's commit marker and its complete accounting.

Key names are the contract of docs/design.md ("Manifest"). ``load`` refuses unknown versions, any
section of the wrong type (``manifest_schema``: "manifest is malformed: <field>: expected ...") and
paths that escape the data set folder; the files it names are opened only through
``shardprep.members``, so no reader ever follows a manifest outside it.
"""
from __future__ import annotations

import dataclasses
import datetime
import json
import sys
from typing import Any

from shardprep import __version__, fs, json_compact, manifest_schema, members, naming, schema
from shardprep.errors import ManifestError, SchemaError
from shardprep.manifest_checks import problems
from shardprep.manifest_generations import Generation, HashesInfo, SketchInfo, generation_from_json, sketch_from_json

__all__ = [
    "FORMAT",
    "VERSION",
    "Accounting",
    "Generation",
    "HashesInfo",
    "IndexInfo",
    "Manifest",
    "ManifestError",
    "RejectedInfo",
    "ShardInfo",
    "SketchInfo",
    "SourceInfo",
    "SplitInfo",
    "encode",
    "exists",
    "load",
    "now",
    "problems",
    "run_copy_path",
    "write",
    "write_run_copy",
]

FORMAT = naming.MANIFEST_FORMAT
VERSION = 1
TOOL_VERSION = __version__


@dataclasses.dataclass(frozen=True)
class IndexInfo:
    """A shard's record index file (``shardprep.record_index``): its path, size and crc32c."""

    path: str
    num_bytes: int
    crc32c: str


@dataclasses.dataclass(frozen=True)
class ShardInfo:
    path: str
    num_records: int
    num_bytes: int
    crc32c: str
    index: IndexInfo | None = None  # absent: older runs, gzip shards (no random access)

    def to_json(self) -> dict[str, Any]:
        """The shard's manifest entry; ``index`` only where the shard has one."""
        doc: dict[str, Any] = {"path": self.path, "num_records": self.num_records, "num_bytes": self.num_bytes,
                               "crc32c": self.crc32c}
        if self.index is not None:
            doc["index"] = dataclasses.asdict(self.index)
        return doc


@dataclasses.dataclass(frozen=True)
class SplitInfo:
    num_records: int
    num_bytes: int
    shards: tuple[ShardInfo, ...]


@dataclasses.dataclass(frozen=True)
class SourceInfo:
    uri: str
    num_bytes: int
    num_records: int
    num_rejected: int


@dataclasses.dataclass(frozen=True)
class RejectedInfo:
    num_records: int = 0
    paths: tuple[str, ...] = ()
    by_reason: dict[str, int] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Accounting:
    read: int
    written: int
    rejected: int


@dataclasses.dataclass(frozen=True)
class Manifest:
    features: dict[str, dict[str, Any]]
    splits: dict[str, SplitInfo]
    sources: tuple[SourceInfo, ...]
    rejected: RejectedInfo
    accounting: Accounting
    seed: int
    shuffled: bool
    compression: str = "none"
    statistics: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)  # split -> feature -> stats
    record_type: str = "tf.train.Example"
    text: dict[str, Any] | None = None  # a text run's task, vocabulary and BERT settings (text.spec.TextSpec)
    created: str = ""
    tool_version: str = TOOL_VERSION
    format: str = FORMAT
    version: int = VERSION
    data_version: int = 1  # this manifest's number among the data set's committed ones (1: the first run)
    parent: int | None = None  # the version it was made from (an append, a compaction, an --overwrite)
    generations: tuple[Generation, ...] = ()  # empty: one generation, the run of every file (a first run)
    sketches: dict[str, SketchInfo] = dataclasses.field(default_factory=dict)  # split -> its statistics' state

    @property
    def run_ids(self) -> set[str]:
        """Run folders the manifest's files live in."""
        paths = [s.path for split in self.splits.values() for s in split.shards]
        paths += [s.path for s in self.sketches.values()]
        return {p.split("/", 1)[0] for p in [*paths, *self.rejected.paths]}

    @property
    def head_run(self) -> str:
        """The run that committed this manifest (its copy is ``run_copy_path(head_run)``): the last
        generation's run, or a first run's only run."""
        if self.generations:
            return self.generations[-1].run_id
        runs = sorted(self.run_ids)
        return runs[-1] if runs else ""

    @property
    def identity(self) -> str:
        """``<data_version>:<head run>``: what a run planned against this manifest expects at its commit."""
        return f"{self.data_version}:{self.head_run}"

    def all_generations(self) -> tuple[Generation, ...]:
        """The generations, oldest first; a first run's manifest is one generation of its run."""
        if self.generations:
            return self.generations
        counts = {name: split.num_records for name, split in self.splits.items()}
        return (Generation(self.head_run, self.data_version, counts, self.accounting.read, self.accounting.rejected,
                           created=self.created),)

    def to_json(self) -> dict[str, Any]:
        created = self.created or now()
        return {
            "format": self.format,
            "version": self.version,
            "tool_version": self.tool_version,
            "created": created,
            "record_type": self.record_type,
            "compression": self.compression,
            "seed": self.seed,
            "shuffled": self.shuffled,
            "features": self.features,
            "splits": {
                name: {
                    "num_records": s.num_records,
                    "num_bytes": s.num_bytes,
                    "shards": [x.to_json() for x in s.shards],
                }
                for name, s in self.splits.items()
            },
            "sources": [{"uri": s.uri, "num_bytes": s.num_bytes, "num_records": s.num_records,
                         "num_rejected": s.num_rejected} for s in self.sources],  # asdict's dicts, without its walk
            "rejected": {
                "num_records": self.rejected.num_records,
                "paths": list(self.rejected.paths),
                "by_reason": dict(self.rejected.by_reason),
            },
            "accounting": dataclasses.asdict(self.accounting),
            **({"statistics": self.statistics} if self.statistics else {}),
            **({"text": self.text} if self.text is not None else {}),
            **({"sketches": {k: dataclasses.asdict(v) for k, v in self.sketches.items()}} if self.sketches else {}),
            **({"data_version": self.data_version} if self.data_version != 1 else {}),
            **({"parent": self.parent} if self.parent is not None else {}),
            **({"generations": [g.to_json() for g in self.generations]} if self.generations else {}),
        }

    @classmethod
    def from_json(cls, doc: Any) -> Manifest:
        """Parses and validates a manifest document; ``ManifestError`` names the first bad field."""
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise ManifestError(f"not a shardprep manifest (format is {doc.get('format') if isinstance(doc, dict) else None!r})")
        if type(doc.get("version")) is not int or doc["version"] != VERSION:  # JSON true == 1 in Python
            raise ManifestError(
                f"manifest version {doc.get('version')!r} is not supported (this tool reads version "
                f"{VERSION}): upgrade shardprep or re-create the data set"
            )
        try:
            features = schema.schema_to_json(schema.schema_from_json(doc.get("features")))
        except SchemaError as e:
            raise ManifestError(f"manifest features: {e}") from None
        splits_doc = _field(doc, "splits", dict)
        if not splits_doc:
            raise ManifestError("manifest splits is empty: a data set has at least one split")
        splits = {}
        for name, s in splits_doc.items():
            where = f"splits.{name}"
            try:
                naming.validate_split_name(name)
            except ValueError as e:
                raise ManifestError(f"manifest {where}: {e}") from None
            s = _field(splits_doc, name, dict, "splits")
            shards = tuple(_shard(x, f"{where}.shards[{i}]") for i, x in enumerate(_field(s, "shards", list, where)))
            splits[name] = SplitInfo(_count(s, "num_records", where), _count(s, "num_bytes", where), shards)
        rej = _field(doc, "rejected", dict) if "rejected" in doc else {}
        by_reason = _field(rej, "by_reason", dict, "rejected") if "by_reason" in rej else {}
        acc = _field(doc, "accounting", dict)
        manifest = cls(
            features=features,
            splits=splits,
            sources=tuple(_source(x, f"sources[{i}]") for i, x in enumerate(_field(doc, "sources", list) if "sources" in doc else [])),
            rejected=RejectedInfo(
                _count(rej, "num_records", "rejected") if "num_records" in rej else 0,
                tuple(_text(p, f"rejected.paths[{i}]") for i, p in enumerate(_field(rej, "paths", list, "rejected") if "paths" in rej else [])),
                {_text(k, "rejected.by_reason"): _count(by_reason, k, "rejected.by_reason") for k in by_reason},
            ),
            accounting=Accounting(*(_count(acc, k, "accounting") for k in ("read", "written", "rejected"))),
            seed=_field(doc, "seed", int),
            shuffled=_field(doc, "shuffled", bool),
            compression=_field(doc, "compression", str) if "compression" in doc else "none",
            record_type=_field(doc, "record_type", str) if "record_type" in doc else "tf.train.Example",
            created=_field(doc, "created", str) if "created" in doc else "",
            tool_version=_field(doc, "tool_version", str) if "tool_version" in doc else "",
            statistics=manifest_schema.statistics(doc["statistics"]) if "statistics" in doc else {},
            text=manifest_schema.text(doc["text"]) if "text" in doc else None,
            data_version=manifest_schema.positive(doc["data_version"], "data_version") if "data_version" in doc else 1,
            parent=manifest_schema.positive(doc["parent"], "parent") if "parent" in doc else None,
            generations=tuple(generation_from_json(x, f"generations[{i}]")
                              for i, x in enumerate(_field(doc, "generations", list) if "generations" in doc else [])),
            sketches={k: sketch_from_json(v, f"sketches.{k}") for k, v in (_field(doc, "sketches", dict) if "sketches" in doc else {}).items()},
        )
        for name, sketch in manifest.sketches.items():
            members.check_relative(sketch.path, field=f"sketches.{name}.path")
        for name, split in manifest.splits.items():  # each path named by its field (members.check_relative)
            for i, shard in enumerate(split.shards):
                members.check_relative(shard.path, field=f"splits.{name}.shards[{i}].path")
                if shard.index is not None:
                    members.check_relative(shard.index.path, field=f"splits.{name}.shards[{i}].index.path")
        for i, path in enumerate(manifest.rejected.paths):
            members.check_relative(path, field=f"rejected.paths[{i}]")
        for path in [s.path for split in manifest.splits.values() for s in split.shards] + list(manifest.rejected.paths):
            _check_relative(path)
        if manifest.compression not in naming.COMPRESSIONS:
            raise ManifestError(f"manifest compression {manifest.compression!r} is not none or gzip")
        return manifest


_field, _count, _text = manifest_schema.typed_key, manifest_schema.count_key, manifest_schema.string


def _shard(x: Any, where: str) -> ShardInfo:
    """A shard entry: path, counts, crc32c and ``index``; other keys a later tool adds are accepted."""
    manifest_schema.mapping(x, where)
    crc = _crc(x, where)
    index = None
    if "index" in x:
        doc = _field(x, "index", dict, where)
        index = IndexInfo(_field(doc, "path", str, f"{where}.index"), _count(doc, "num_bytes", f"{where}.index"),
                          _crc(doc, f"{where}.index"))
    return ShardInfo(_field(x, "path", str, where), _count(x, "num_records", where), _count(x, "num_bytes", where), crc,
                     index)


def _crc(x: dict, where: str) -> str:
    return manifest_schema.crc32c(_field(x, "crc32c", str, where), f"{where}.crc32c")


def _source(x: Any, where: str) -> SourceInfo:
    manifest_schema.mapping(x, where)
    return SourceInfo(_field(x, "uri", str, where), *(_count(x, k, where) for k in ("num_bytes", "num_records", "num_rejected")))


def _check_relative(path: str, field: str = "path") -> None:
    """Refuses a path that could leave the data set folder (``members.check_relative``)."""
    members.check_relative(path, field=field)


def exists(root: str) -> bool:
    return fs.exists(naming.join(root, naming.MANIFEST))


def now() -> str:
    """The ``created`` time stamp of a manifest written now."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def run_copy_path(run_id: str) -> str:
    """Where a committed run keeps a copy of its manifest, relative to the data set folder."""
    return f"{run_id}/{naming.MANIFEST}"


def load(root: str, *, run_id: str | None = None) -> Manifest:
    """Reads and validates ``root/manifest.json``, or with ``run_id`` the copy that run kept (a kept
    manifest version by its number: ``shardprep.versions.load``).

    A reader that must not switch data sets mid-way (a trainer resuming from a checkpoint) records
    the run that committed the manifest it started with (``Manifest.head_run``) and later loads that
    run's copy: its paths are relative to ``root`` like the current manifest's, and its files stay
    until ``--keep-previous`` later commits or ``python -m shardprep.clean`` remove them.
    """
    relative = run_copy_path(run_id) if run_id else naming.MANIFEST
    url = naming.join(root, relative)
    try:  # a regular file inside ``root`` (never a FIFO that blocks, nor a link out of the folder)
        raw = members.read_member(root, relative, field="", cap=sys.maxsize)
    except FileNotFoundError:
        if run_id:
            raise ManifestError(
                f"no manifest of run {run_id} at {url}: the run was removed by a later commit (see --keep-previous) "
                f"or by shardprep.clean, or never committed"
            ) from None
        raise ManifestError(
            f"no manifest at {url}: this folder holds no finished data set (a run that did not "
            f"finish writes none); run `python -m shardprep.run ... --output {root}` first"
        ) from None
    result = _encoded[1] if _encoded is not None and raw == _encoded[0] else _parsed(url, raw)
    if run_id and result.head_run != run_id:
        raise ManifestError(f"{url} is the manifest of run {result.head_run}, not of run {run_id}")
    return result


def _parsed(url: str, raw: bytes) -> Manifest:
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError) as e:
        raise ManifestError(f"{url} is not valid JSON: {type(e).__name__}: {str(e)[:200]}") from None
    return Manifest.from_json(doc)


# The last manifest this process encoded, with its bytes: ``load`` of a file holding exactly those
# bytes returns it unparsed (the launcher reading back what its in-process commit wrote: a wide
# table's features are not parsed and validated again).
_encoded: tuple[bytes, Manifest] | None = None

# Past this many features the manifest and features.json are written compact (no indentation):
# the same JSON, about half the bytes, and json's compiled encoder (indentation takes the pure-Python
# one).
INDENT_MAX_FEATURES = 1000


def json_bytes(doc: Any, *, features: int, indent: int, sort_keys: bool = False) -> bytes:
    """``doc`` as JSON: indented by ``indent`` for a data set of up to ``INDENT_MAX_FEATURES``
    ``features``, compact beyond."""
    if features > INDENT_MAX_FEATURES:
        return json_compact.dumps(doc, sort_keys=sort_keys).encode()
    return json_compact.indented(doc, indent=indent, sort_keys=sort_keys).encode()


def encode(manifest: Manifest) -> bytes:
    """The manifest file's bytes (``write`` and ``write_run_copy`` take them, so a commit encodes once)."""
    global _encoded
    data = json_bytes(manifest.to_json(), features=len(manifest.features), indent=2) + b"\n"
    if manifest.created:  # else to_json stamped the time now: the bytes do not describe ``manifest``
        _encoded = data, manifest
    return data


def write(root: str, manifest: Manifest, data: bytes | None = None) -> str:
    """Writes the manifest atomically (``data``: its ``encode``, if made): the commit point of a run. Returns its URL."""
    url = naming.join(root, naming.MANIFEST)
    with fs.write_atomic(url) as f:
        f.write(encode(manifest) if data is None else data)
    return url


def write_run_copy(root: str, run_id: str, manifest: Manifest, data: bytes | None = None) -> str:
    """Writes the run's own copy of its manifest (give ``manifest.created`` so both copies match)."""
    url = naming.join(root, run_copy_path(run_id))
    with fs.write_atomic(url) as f:
        f.write(encode(manifest) if data is None else data)
    return url
