"""Every file name of a data set, formatted and parsed in one place.

Writers, the manifest and readers never build names by hand (as TFDS ``naming.py``).
Layout (docs/design.md, "Output layout and commit protocol")::

    DIR/manifest.json
    DIR/<run-id>/<split>/<split>-00000-of-00064.tfrecord[.gz]
    DIR/<run-id>/<split>/<split>-00000-of-00064.index      (where each record starts: shardprep.record_index)
    DIR/<run-id>/rejected/rejected-00000-of-00001.jsonl
    DIR/<run-id>/statistics/<split>.sketch (the statistics' mergeable state: shardprep.stats.state)
    DIR/<run-id>/vocab.txt                (a text run's vocabulary, named by the manifest's ``text.vocab``)
    DIR/<run-id>/report.json              (only when a run refused to commit)
    DIR/<run-id>/units.bin                (the run's work units and input list, staged by the launcher)
    DIR/<run-id>/_outcome                 ("commit" or "discard": who claimed the run's fate first)
    DIR/<run-id>/spill/parsed-<split>-<file>-<unit>-<part>.bin, sorted-..., batches-<split>.bin
                                          (records between stages, removed at commit: graph.spill)

A name with fields is a ``Template``: formatted and parsed from one pattern, as TFDS's
``ShardedFileTemplate`` does, so the two cannot drift apart.
"""
from __future__ import annotations

import dataclasses
import datetime
import re
import secrets

from shardprep.errors import PlanError

__all__ = [
    "COMPRESSIONS",
    "MANIFEST",
    "MANIFEST_FORMAT",
    "OUTCOME",
    "REJECTED",
    "TFDS_FEATURES",
    "TFDS_INFO",
    "TFDS_LABELS_SUFFIX",
    "SPILL_FILES",
    "ShardName",
    "Template",
    "is_run_id",
    "dali_index_path",
    "duplicates_path",
    "hashes_path",
    "index_path",
    "join",
    "new_run_id",
    "outcome_path",
    "parse_shard_name",
    "rejected_path",
    "report_path",
    "shard_path",
    "sketch_path",
    "spill_folder",
    "spill_path",
    "split_of",
    "tfds_shard_template",
    "units_path",
    "validate_split_name",
    "vocab_path",
]

MANIFEST = "manifest.json"
MANIFEST_FORMAT = "shardprep.manifest"  # the manifest's "format" key: what tells it from any other JSON
COMPRESSIONS = ("none", "gzip")  # shard compressions; "gzip" adds the ".gz" suffix
REJECTED = "rejected"
REPORT = "report.json"
OUTCOME = "_outcome"  # created once: the commit step or the launcher's clean-up, whichever comes first
UNITS = "units.bin"  # the work units and input list, read by the workers and the commit (graph.units)
TFDS_INFO = "dataset_info.json"  # TFDS metadata beside the manifest (shardprep.tfds_metadata)
TFDS_FEATURES = "features.json"
TFDS_LABELS_SUFFIX = ".labels.txt"  # a ClassLabel's names: DIR/<feature file name>.labels.txt
_SPLIT_RE = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
_RUN_RE = re.compile(r"^run-\d{8}T\d{6}Z-[0-9a-f]{8}$")


class Template:
    """A file name pattern in ``str.format`` syntax whose every field has a regular expression:
    ``format`` fills it, ``parse`` reads the fields back (as strings) from a name it made, or None."""

    def __init__(self, pattern: str, **fields: str) -> None:
        self.pattern = pattern
        parts = re.split(r"\{(\w+)(?::[^}]*)?\}", pattern)  # literal, field, literal, field, ...
        self._regex = re.compile("^" + "".join(re.escape(part) if i % 2 == 0 else f"(?P<{part}>{fields[part]})"
                                               for i, part in enumerate(parts)) + "$")

    def format(self, **values: object) -> str:
        return self.pattern.format(**values)

    def parse(self, name: str) -> dict[str, str] | None:
        m = self._regex.match(name)
        return m.groupdict() if m else None


_SHARD = Template("{prefix}-{index:05d}-of-{count:05d}.{ext}{gz}", prefix=r"[a-z][a-z0-9_]*", index=r"\d{5,}",
                  count=r"\d{5,}", ext="tfrecord|jsonl", gz=r"(?:\.gz)?")
_NUMBER = r"\d+"
SPILL_FILES = {  # the spill's files (``graph.spill``), by kind
    "parsed": Template("parsed-{split}-{file}-{unit}-{part}.bin", split=_NUMBER, file=_NUMBER, unit=_NUMBER, part=_NUMBER),
    "sorted": Template("sorted-{split}-{file}-{unit}-{part}.bin", split=_NUMBER, file=_NUMBER, unit=_NUMBER, part=_NUMBER),
    "batches": Template("batches-{split}.bin", split=_NUMBER),
    "hashes": Template("hashes-{file}-{unit}.bin", file=_NUMBER, unit=_NUMBER),  # --dedup exact (graph.duplicates)
    "duplicates": Template("duplicates.bin"),  # --dedup exact: the run's decision, made once (graph.once)
}


@dataclasses.dataclass(frozen=True)
class ShardName:
    """A parsed shard file name."""

    prefix: str
    index: int
    count: int
    extension: str
    gzip: bool


def validate_split_name(name: str) -> str:
    """Returns ``name`` if it can be a split name (lower case, digits, underscore); else PlanError."""
    if not _SPLIT_RE.match(name) or name == REJECTED:
        raise PlanError(
            f"split name {name!r} is not valid: use lower-case letters, digits and '_', "
            f"starting with a letter (and not {REJECTED!r}), e.g. train=0.9,eval=0.1"
        )
    return name


def new_run_id(now: datetime.datetime | None = None) -> str:
    """A fresh run folder name, sortable by time: ``run-20261129T153000Z-1a2b3c4d``."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    return f"run-{now.strftime('%Y%m%dT%H%M%SZ')}-{secrets.token_hex(4)}"


def is_run_id(name: str) -> bool:
    return bool(_RUN_RE.match(name))


def _file_name(prefix: str, index: int, count: int, ext: str, gzip: bool) -> str:
    if not 0 <= index < count:
        raise ValueError(f"shard index {index} is outside [0, {count})")
    return _SHARD.format(prefix=prefix, index=index, count=count, ext=ext, gz=".gz" if gzip else "")


def shard_path(run_id: str, split: str, index: int, count: int, *, gzip: bool = False) -> str:
    """Path of a shard relative to the data set folder."""
    return f"{run_id}/{split}/{_file_name(split, index, count, 'tfrecord', gzip)}"


def index_path(shard: str) -> str:
    """The record index beside an uncompressed shard (``shard``: its path, relative or not):
    ``train-00000-of-00064.tfrecord`` -> ``train-00000-of-00064.index`` (another tool's shard name
    gains ``.index``). Never ``*.tfrecord*``, so a glob for the shards never takes it for one."""
    if shard.endswith(".gz"):
        raise ValueError(f"{shard!r}: a gzip shard cannot be read at random and has no record index")
    return (shard[: -len(".tfrecord")] if shard.endswith(".tfrecord") else shard) + ".index"


def dali_index_path(shard: str) -> str:
    """Where ``python -m shardprep.index --dali OUT`` writes a shard's DALI ``tfrecord2idx`` text
    index, relative to OUT: the shard's own path with ``.idx`` for ``.tfrecord``."""
    return index_path(shard)[: -len(".index")] + ".idx"


def tfds_shard_template(run_id: str) -> str:
    """TFDS's ``filepathTemplate`` for this run's shards: TFDS formats it to ``shard_path`` exactly
    (``SHARD_X_OF_Y`` pads to 5 digits or the count's width, as ``_file_name`` does)."""
    return f"{run_id}/{{SPLIT}}/{{SPLIT}}-{{SHARD_X_OF_Y}}.tfrecord"


def sketch_path(run_id: str, split: str) -> str:
    """Where a run keeps a split's statistics state (``shardprep.stats.state``): the data set's whole
    state at the version the run committed."""
    return f"{run_id}/statistics/{validate_split_name(split)}.sketch"


def rejected_path(run_id: str, index: int, count: int) -> str:
    """Path of a dead-letter file relative to the data set folder."""
    return f"{run_id}/{REJECTED}/{_file_name(REJECTED, index, count, 'jsonl', False)}"


def duplicates_path(run_id: str, split: int, file: int, unit: int, part: int) -> str:
    """The dead letters ``duplicate`` of one spilled batch (``--dedup exact``: ``shardprep.graph.duplicates``)."""
    return f"{run_id}/{REJECTED}/duplicates-{split:05d}-{file:05d}-{unit:05d}-{part:05d}.jsonl"


def hashes_path(run_id: str) -> str:
    """A generation's sorted record hashes (``--dedup exact``: ``shardprep.record_hashes``)."""
    return f"{run_id}/dedup/hashes.bin"


def vocab_path(run_id: str) -> str:
    """A text run's vocabulary, in its own run folder: a run that fails or is interrupted leaves the
    committed data set's vocabulary as it was (older data sets hold it at ``DIR/vocab.txt``)."""
    return f"{run_id}/vocab.txt"


def report_path(run_id: str) -> str:
    return f"{run_id}/{REPORT}"


def outcome_path(run_id: str) -> str:
    return f"{run_id}/{OUTCOME}"


def units_path(run_id: str) -> str:
    return f"{run_id}/{UNITS}"


def spill_folder(run_id: str) -> str:
    return f"{run_id}/spill"


def spill_path(run_id: str, kind: str, **fields: int) -> str:
    """Path of a spill file (``SPILL_FILES[kind]``) relative to the data set folder."""
    return f"{spill_folder(run_id)}/{SPILL_FILES[kind].format(**fields)}"


def parse_shard_name(path: str) -> ShardName:
    """Parses the last component of a shard or dead-letter path; ValueError if it is not one."""
    base = path.rstrip("/").rsplit("/", 1)[-1]
    m = _SHARD.parse(base)
    if m is None:
        raise ValueError(f"{path!r} is not a shard file name (expected e.g. train-00000-of-00064.tfrecord)")
    index, count = int(m["index"]), int(m["count"])
    if index >= count:
        raise ValueError(f"{path!r}: shard index {index} is not below the count {count}")
    return ShardName(m["prefix"], index, count, m["ext"], bool(m["gz"]))


def split_of(path: str) -> str:
    return parse_shard_name(path).prefix


def join(root: str, relative: str) -> str:
    """Joins a data set folder (local path or URL) and a relative path with '/'."""
    return root.rstrip("/") + "/" + relative.lstrip("/")
