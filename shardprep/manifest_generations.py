"""The manifest's entries of an appended data set: its generations and its statistics' stored state.

``Generation``: the records one run added (``shardprep.generations``); ``SketchInfo``: a split's
mergeable statistics state (``shardprep.stats.state``). Parsed and checked as ``manifest_schema`` says.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from shardprep import manifest_schema, members, naming

__all__ = ["Generation", "HashesInfo", "SketchInfo", "generation_from_json", "sketch_from_json"]


@dataclasses.dataclass(frozen=True)
class HashesInfo:
    """A generation's kept records' 128-bit hashes, sorted (``shardprep.record_hashes``): what a later
    ``--append --dedup exact`` checks its records against, without reading the shards. ``key``: the
    ``--dedup-key`` feature hashed ("": the whole Example bytes)."""

    path: str
    num_records: int
    num_bytes: int
    crc32c: str
    key: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "num_records": self.num_records, "num_bytes": self.num_bytes,
                "crc32c": self.crc32c, "key": self.key}


@dataclasses.dataclass(frozen=True)
class Generation:
    """The records one run added to the data set (``shardprep.generations``): its run folder, the
    manifest version that added them, and their count per split."""

    run_id: str
    data_version: int
    num_records: dict[str, int]
    read: int = 0
    rejected: int = 0
    duplicates: int = 0
    created: str = ""
    hashes: HashesInfo | None = None  # --dedup exact: its records' hashes

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"run_id": self.run_id, "data_version": self.data_version,
                               "num_records": dict(self.num_records), "read": self.read, "rejected": self.rejected}
        if self.duplicates:
            doc["duplicates"] = self.duplicates
        if self.created:
            doc["created"] = self.created
        if self.hashes is not None:
            doc["hashes"] = self.hashes.to_json()
        return doc


@dataclasses.dataclass(frozen=True)
class SketchInfo:
    """A split's mergeable statistics state (``shardprep.stats.state``), beside the shards."""

    path: str
    num_bytes: int
    crc32c: str


def generation_from_json(x: Any, where: str) -> Generation:
    manifest_schema.mapping(x, where)
    run_id = manifest_schema.typed_key(x, "run_id", str, where)
    if not naming.is_run_id(run_id):
        raise manifest_schema.malformed(f"{where}.run_id", "a run folder name", run_id)
    counts = manifest_schema.typed_key(x, "num_records", dict, where)
    return Generation(run_id, manifest_schema.positive(x.get("data_version"), f"{where}.data_version"),
                      {manifest_schema.string(k, f"{where}.num_records"): manifest_schema.count_key(counts, k, f"{where}.num_records") for k in counts},
                      *(manifest_schema.count_key(x, k, where) if k in x else 0 for k in ("read", "rejected", "duplicates")),
                      created=manifest_schema.typed_key(x, "created", str, where) if "created" in x else "",
                      hashes=_hashes(x["hashes"], f"{where}.hashes") if "hashes" in x else None)


def _hashes(x: Any, where: str) -> HashesInfo:
    manifest_schema.mapping(x, where)
    path = manifest_schema.typed_key(x, "path", str, where)
    members.check_relative(path, field=f"{where}.path")
    return HashesInfo(path, manifest_schema.count_key(x, "num_records", where), manifest_schema.count_key(x, "num_bytes", where),
                      manifest_schema.crc32c(manifest_schema.typed_key(x, "crc32c", str, where), f"{where}.crc32c"),
                      manifest_schema.typed_key(x, "key", str, where) if "key" in x else "")


def sketch_from_json(x: Any, where: str) -> SketchInfo:
    manifest_schema.mapping(x, where)
    return SketchInfo(manifest_schema.typed_key(x, "path", str, where), manifest_schema.count_key(x, "num_bytes", where), manifest_schema.crc32c(manifest_schema.typed_key(x, "crc32c", str, where), f"{where}.crc32c"))
