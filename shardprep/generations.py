"""Appends: a data set that grows by generations, each exactly balanced, under versioned manifests.

``python -m shardprep.run --append`` reads only the new input and writes only new shards, in its own
run folder: a *generation*. Its commit writes manifest version N+1 (``Manifest.data_version``,
``parent`` N) naming every generation's shards, oldest first, and its ``generations`` entry; the
shards of earlier generations are never rewritten. This module holds the pure parts: the schema
check an append passes before any record is read (``check_schema``), the warning for a small
generation (``small_generation``; its shard count: ``config.ReshardConfig.num_shards_for``), and the merge of the data set's manifest with the generation's
(``merge``: accounting, sources, dead letters, nullable features; the statistics from both sides'
stored states, ``shardprep.stats.state``, so they are exactly those of one run over every record).
"""
from __future__ import annotations

import collections
import dataclasses
import logging
from collections.abc import Mapping

from shardprep import manifest
from shardprep.errors import SchemaError
from shardprep.schema import FeatureSpec, Schema, schema_from_json, schema_to_json
from shardprep.stats import feature_stats
from shardprep.stats import state as stats_state

__all__ = ["SMALL_SHARD_RATIO", "check_schema", "merge", "small_generation"]

log = logging.getLogger("shardprep")
SMALL_SHARD_RATIO = 0.01  # a generation whose shards hold under 1% of the data set's median shard: warned


def check_schema(data_set: Mapping[str, dict], given: Schema, *, root: str, text_input: bool) -> Schema:
    """The schema an append to ``root`` runs with (the data set's, its ``nullable`` marks left to the
    commit), or one ``SchemaError`` line naming the first feature that differs from ``given`` (the new
    input's, inferred or ``--schema``).

    Allowed: an int64 column into a float32 feature; with CSV input (text) any column into a string
    feature; a feature the new input lacks if the data set marks it nullable (its records leave it
    out). Refused: a feature the data set lacks (no feature is added by an append), another dtype or
    shape, a non-nullable feature the input lacks."""
    ours = schema_from_json(dict(data_set))
    extra = sorted(set(given) - set(ours))
    if extra:
        raise SchemaError(f"--append: the input has feature {extra[0]!r}, which the data set at {root} lacks (its "
                          f"features: {', '.join(sorted(ours)[:10])}): an append adds records of the data set's "
                          f"schema; drop the field, or re-shard everything with --overwrite")
    for name, spec in sorted(ours.items()):
        new = given.get(name)
        if new is None:
            if not spec.nullable:
                raise SchemaError(f"--append: feature {name!r} ({_shown(spec)}) of the data set at {root} is absent from "
                                  "the input, and no record of the data set lacks it")
            continue
        widening = (new.dtype == "int64" and spec.dtype == "float32") or (text_input and spec.dtype == "string")
        same_shape = new.shape == spec.shape or spec.shape == (-1,) or (widening and text_input and spec.shape == ())
        if (new.dtype != spec.dtype and not widening) or not same_shape:
            raise SchemaError(f"--append: feature {name!r} is {_shown(new)} in the input, {_shown(spec)} in the data set "
                              f"at {root}: give the input the data set's dtype and shape (or --schema), or re-shard "
                              "everything with --overwrite")
    return {name: dataclasses.replace(spec, nullable=False, missing=0) for name, spec in ours.items()}


def _shown(spec: FeatureSpec) -> str:
    return f"{spec.dtype} {list(spec.shape)}"


def small_generation(parent: manifest.Manifest, new: manifest.Manifest) -> list[str]:
    """One line per split whose new shards hold under ``SMALL_SHARD_RATIO`` of the data set's median
    shard: logged as a warning, naming ``shardprep.compact`` (the trainer stays exactly balanced by
    records, but such a shard costs a file open for little)."""
    out = []
    for name, split in new.splits.items():
        old = sorted(s.num_records for s in parent.splits.get(name, manifest.SplitInfo(0, 0, ())).shards)
        if not old or not split.shards:
            continue
        median, mine = old[len(old) // 2], max(s.num_records for s in split.shards)
        if mine < SMALL_SHARD_RATIO * median:
            out.append(f"split {name!r}: the appended shards hold {mine:,} records or fewer, the data set's shards "
                       f"about {median:,}: python -m shardprep.compact DIR rewrites every generation into one")
    return out


def merge(root: str, parent: manifest.Manifest, new: manifest.Manifest, *, run_id: str, top_k: int,
          duplicates: int = 0, hashes: manifest.HashesInfo | None = None) -> manifest.Manifest:
    """The manifest version after ``parent`` that adds ``new`` (one run's generation, committed by
    ``run_id``; ``hashes``: its records' hashes, ``--dedup exact``) to it. The statistics are merged
    from the stored states of both (``stats.state``) and the merged state is stored in ``run_id``'s
    folder; a side without a state (a data set made before appends, ``--statistics off``) leaves the
    merged manifest without statistics, said in a warning."""
    splits = {}
    for name in parent.splits:
        old, add = parent.splits[name], new.splits.get(name, manifest.SplitInfo(0, 0, ()))
        splits[name] = manifest.SplitInfo(old.num_records + add.num_records, old.num_bytes + add.num_bytes,
                                          old.shards + add.shards)
    by_reason = collections.Counter(parent.rejected.by_reason)
    by_reason.update(new.rejected.by_reason)
    features = _merged_features(parent.features, new.features)
    statistics, sketches = _merged_statistics(root, parent, new, run_id=run_id, features=features, top_k=top_k)
    version = parent.data_version + 1
    generation = manifest.Generation(run_id, version, {n: s.num_records for n, s in new.splits.items()},
                                     new.accounting.read, new.accounting.rejected, duplicates, new.created, hashes)
    return dataclasses.replace(
        parent,
        features=features,
        splits=splits,
        sources=parent.sources + new.sources,
        rejected=manifest.RejectedInfo(parent.rejected.num_records + new.rejected.num_records,
                                       parent.rejected.paths + new.rejected.paths, dict(sorted(by_reason.items()))),
        accounting=manifest.Accounting(*(getattr(parent.accounting, k) + getattr(new.accounting, k)
                                         for k in ("read", "written", "rejected"))),
        statistics=statistics,
        sketches=sketches,
        created=new.created,
        tool_version=new.tool_version,
        data_version=version,
        parent=parent.data_version,
        generations=(*parent.all_generations(), generation),
    )


def _merged_features(old: Mapping[str, dict], new: Mapping[str, dict]) -> dict[str, dict]:
    """The data set's features, ``nullable`` where either side left a feature out, ``missing`` summed."""
    ours, theirs = schema_from_json(dict(old)), schema_from_json(dict(new))
    out = {}
    for name, spec in ours.items():
        other = theirs.get(name)
        missing = spec.missing + (other.missing if other is not None else 0)
        nullable = spec.nullable or (other is not None and other.nullable)
        out[name] = dataclasses.replace(spec, nullable=nullable, missing=missing if nullable else 0)
    return schema_to_json(out)


def _merged_statistics(root: str, parent: manifest.Manifest, new: manifest.Manifest, *, run_id: str,
                       features: Mapping[str, dict], top_k: int) -> tuple[dict, dict]:
    if not parent.statistics and not new.statistics:
        return {}, {}
    lacking = [n for n in parent.splits if n not in parent.sketches or (n in new.splits and n not in new.sketches)]
    if lacking:
        log.warning("the statistics of split %r cannot be merged (the data set keeps no mergeable state of them: made "
                    "before appends or with --statistics off, or this append ran with --statistics off): the new "
                    "manifest has none; python -m shardprep.compact %s computes them over every record", lacking[0], root)
        return {}, {}
    schema = schema_from_json(dict(features))
    statistics, sketches = {}, {}
    for name in parent.splits:
        merged = stats_state.read(root, parent.sketches[name], field=f"sketches.{name}")
        if name in new.sketches:
            merged = feature_stats.merge(merged, stats_state.read(root, new.sketches[name], field=f"sketches.{name}"))
        sketches[name] = stats_state.write(root, run_id, name, merged)
        statistics[name] = feature_stats.to_json(merged, schema, top_k=top_k)
    return statistics, sketches
