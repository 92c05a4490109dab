"""The manifest (version 1): the data set's commit marker and its complete accounting.

Key names are the contract of DESIGN.md section 5. ``load`` refuses unknown versions and shard
paths that escape the data set folder, so no reader ever follows a manifest outside it.
"""
from __future__ import annotations

import dataclasses
import datetime
import json
import posixpath
from typing import Any

from shardprep import fs, naming

__all__ = [
    "FORMAT",
    "VERSION",
    "Accounting",
    "Manifest",
    "ManifestError",
    "RejectedInfo",
    "ShardInfo",
    "SourceInfo",
    "SplitInfo",
    "exists",
    "load",
    "problems",
    "write",
]

FORMAT = "shardprep.manifest"
VERSION = 1
TOOL_VERSION = "0.1.0"


class ManifestError(ValueError):
    """A manifest that is missing, unreadable or unsafe to follow."""


@dataclasses.dataclass(frozen=True)
class ShardInfo:
    path: str
    num_records: int
    num_bytes: int
    crc32c: str


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
    record_type: str = "tf.train.Example"
    created: str = ""
    tool_version: str = TOOL_VERSION
    format: str = FORMAT
    version: int = VERSION

    @property
    def run_ids(self) -> set[str]:
        """Run folders the manifest's files live in."""
        paths = [s.path for split in self.splits.values() for s in split.shards]
        return {p.split("/", 1)[0] for p in [*paths, *self.rejected.paths]}

    def to_json(self) -> dict[str, Any]:
        created = self.created or datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
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
                    "shards": [dataclasses.asdict(x) for x in s.shards],
                }
                for name, s in self.splits.items()
            },
            "sources": [dataclasses.asdict(s) for s in self.sources],
            "rejected": {
                "num_records": self.rejected.num_records,
                "paths": list(self.rejected.paths),
                "by_reason": dict(self.rejected.by_reason),
            },
            "accounting": dataclasses.asdict(self.accounting),
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Manifest:
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise ManifestError(f"not a shardprep manifest (format is {doc.get('format') if isinstance(doc, dict) else None!r})")
        if type(doc.get("version")) is not int or doc["version"] != VERSION:  # JSON true == 1 in Python
            raise ManifestError(
                f"manifest version {doc.get('version')!r} is not supported (this tool reads version "
                f"{VERSION}): upgrade shardprep or re-create the data set"
            )
        try:
            splits = {
                name: SplitInfo(
                    int(s["num_records"]),
                    int(s["num_bytes"]),
                    tuple(ShardInfo(str(x["path"]), int(x["num_records"]), int(x["num_bytes"]), str(x["crc32c"])) for x in s["shards"]),
                )
                for name, s in doc["splits"].items()
            }
            rej = doc.get("rejected") or {}
            acc = doc["accounting"]
            manifest = cls(
                features=dict(doc["features"]),
                splits=splits,
                sources=tuple(SourceInfo(**s) for s in doc.get("sources", [])),
                rejected=RejectedInfo(int(rej.get("num_records", 0)), tuple(rej.get("paths", ())), dict(rej.get("by_reason", {}))),
                accounting=Accounting(int(acc["read"]), int(acc["written"]), int(acc["rejected"])),
                seed=int(doc["seed"]),
                shuffled=bool(doc["shuffled"]),
                compression=str(doc.get("compression", "none")),
                record_type=str(doc.get("record_type", "tf.train.Example")),
                created=str(doc.get("created", "")),
                tool_version=str(doc.get("tool_version", "")),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise ManifestError(f"manifest is malformed: {type(e).__name__}: {e}") from None
        for path in [s.path for split in manifest.splits.values() for s in split.shards] + list(manifest.rejected.paths):
            _check_relative(path)
        if manifest.compression not in ("none", "gzip"):
            raise ManifestError(f"manifest compression {manifest.compression!r} is not none or gzip")
        return manifest


def _check_relative(path: str) -> None:
    """Refuses a path that could leave the data set folder."""
    norm = posixpath.normpath(path)
    if (
        not path
        or "://" in path
        or path.startswith(("/", "\\"))
        or (len(path) > 1 and path[1] == ":")
        or norm.startswith("..")
        or norm != path
    ):
        raise ManifestError(
            f"manifest shard path {path!r} is not a plain path inside the data set folder: refusing to follow it"
        )


def exists(root: str) -> bool:
    return fs.exists(naming.join(root, naming.MANIFEST))


def load(root: str) -> Manifest:
    """Reads and validates ``root/manifest.json``."""
    url = naming.join(root, naming.MANIFEST)
    try:
        raw = fs.read_bytes(url)
    except FileNotFoundError:
        raise ManifestError(
            f"no manifest at {url}: this folder holds no finished data set (a run that did not "
            f"finish writes none); run `python -m shardprep.run ... --output {root}` first"
        ) from None
    try:
        doc = json.loads(raw)
    except ValueError as e:
        raise ManifestError(f"{url} is not valid JSON: {e}") from None
    return Manifest.from_json(doc)


def write(root: str, manifest: Manifest) -> str:
    """Writes the manifest atomically: the commit point of a run. Returns its URL."""
    url = naming.join(root, naming.MANIFEST)
    data = json.dumps(manifest.to_json(), indent=2, sort_keys=False).encode() + b"\n"
    with fs.write_atomic(url) as f:
        f.write(data)
    return url


def problems(manifest: Manifest) -> list[str]:
    """Invariant violations (DESIGN.md section 5), one readable line each; empty when sound."""
    out = []
    acc = manifest.accounting
    if acc.read != acc.written + acc.rejected:
        out.append(f"accounting: read {acc.read} != written {acc.written} + rejected {acc.rejected}")
    written = sum(s.num_records for s in manifest.splits.values())
    if written != acc.written:
        out.append(f"accounting: written {acc.written} but the splits hold {written} records")
    if manifest.rejected.num_records != acc.rejected:
        out.append(f"accounting: rejected {acc.rejected} but the dead letters hold {manifest.rejected.num_records}")
    for name, split in manifest.splits.items():
        counts = [s.num_records for s in split.shards]
        if not counts:
            out.append(f"split {name!r} has no shards")
            continue
        if max(counts) - min(counts) > 1:
            out.append(f"split {name!r} is unbalanced: shards hold {min(counts)} to {max(counts)} records")
        if sum(counts) != split.num_records:
            out.append(f"split {name!r}: shards hold {sum(counts)} records, the split says {split.num_records}")
        if sum(s.num_bytes for s in split.shards) != split.num_bytes:
            out.append(f"split {name!r}: shard bytes do not add up to the split's num_bytes")
    return out
