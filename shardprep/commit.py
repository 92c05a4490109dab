"""The last step of a run: check every fact the pipeline reported, then commit or refuse.

Facts are small records emitted by every branch (units parsed, shard plans, shards and dead
letters written). Assembling them is pure; only ``commit`` touches storage. The manifest is
written last, and only when every count agrees: what was read equals what was written plus
what was rejected, the side input the shuffle used agrees with what the write path saw, and
every planned shard is present with its exact record count.
"""
from __future__ import annotations

import collections
import dataclasses
import json
import logging
import posixpath
from collections.abc import Iterable

from shardprep import faults, fs, generations, lease, local_files, manifest, naming, planning, retention, tfds_metadata
from shardprep.config import ReshardConfig
from shardprep.errors import ManifestError, RunError
from shardprep.graph.elements import (
    DuplicateFact,
    ErrorFact,
    HashesFact,
    PlanFact,
    RejectFact,
    ShardFact,
    StatsFact,
    UnitFact,
)

__all__ = ["assemble", "changed_inputs", "commit", "commit_manifest"]

log = logging.getLogger("shardprep")


REMOVED_ON_PURPOSE = ("duplicate", "near_duplicate")  # dead letters of --dedup: asked for, not bad records


def _dedupe_units(units: list[UnitFact], errors: list[str]) -> dict[tuple[int, int], UnitFact]:
    by_key: dict[tuple[int, int], UnitFact] = {}
    for u in units:
        if u.unit in by_key and by_key[u.unit] != u:
            errors.append(f"work unit {u.unit} reported two different results ({by_key[u.unit]} and {u}): the runner re-ran it inconsistently")
        by_key[u.unit] = u
    return by_key


def assemble(config: ReshardConfig, facts: Iterable[tuple]) -> tuple[manifest.Manifest | None, list[str], dict]:
    """Checks the facts and builds the manifest; returns (manifest or None, errors, report)."""
    groups: dict[type, list] = collections.defaultdict(list)
    for fact in facts:
        groups[type(fact)].append(fact)
    errors = sorted({f.message for f in groups[ErrorFact]})
    units = _dedupe_units(groups[UnitFact], errors)
    names = [s.name for s in config.splits]

    read = sum(u.read for u in units.values())
    rejected_by_units = sum(u.rejected for u in units.values())
    by_reason: collections.Counter[str] = collections.Counter()
    for u in units.values():
        if u.by_reason:  # most units have none: skip Counter.update's fixed cost per call
            by_reason.update(dict(u.by_reason))
    duplicates = list({d.batch: d for d in groups[DuplicateFact]}.values())  # --dedup exact's, a batch's once
    if duplicates:
        by_reason["duplicate"] += sum(d.count for d in duplicates)
        rejected_by_units += sum(d.count for d in duplicates)
    rejected_paths = sorted({r.path for r in groups[RejectFact]})
    rejected_written = sum({r.path: r.num_records for r in groups[RejectFact]}.values())
    if rejected_written != rejected_by_units:
        errors.append(f"dead letters: parsing rejected {rejected_by_units} records but {rejected_written} were written")

    plans = {p.split: p for p in groups[PlanFact]}
    if len({p for p in groups[PlanFact]}) != len(plans):
        errors.append(f"the shard plan differs between workers: {sorted(set(groups[PlanFact]))}")
    shards: dict[int, dict[int, manifest.ShardInfo]] = collections.defaultdict(dict)
    for s in groups[ShardFact]:
        shards[s.split][s.index] = s.info

    splits = {}
    for i, name in enumerate(names):
        kept = sum(u.kept[i] for u in units.values()) - sum(d.count for d in duplicates if d.split == i)
        plan = plans.get(i)
        if plan is None and config.append and not kept:  # an append may add no records to a split
            continue
        if plan is None:
            if not errors:
                errors.append(
                    f"split {name!r} received no records: give it a larger share in --split, or check the input"
                    if not kept else f"split {name!r}: no shard plan was made for its {kept} records"
                )
            continue
        if plan.num_records != kept:
            errors.append(
                f"split {name!r}: the side input counted {plan.num_records} records but parsing kept {kept}: "
                f"the runner delivered an inconsistent side input; nothing was committed"
            )
        expected = planning.shard_sizes(plan.num_records, plan.num_shards)
        got = shards.get(i, {})
        missing = [k for k in range(plan.num_shards) if k not in got]
        if missing and not errors:
            errors.append(f"split {name!r}: shards {missing[:5]} of {plan.num_shards} were not written")
        wrong = [k for k, info in got.items() if k < len(expected) and info.num_records != expected[k]]
        if wrong:
            k = wrong[0]
            errors.append(f"split {name!r}: shard {k} holds {got[k].num_records} records, the plan says {expected[k]}")
        infos = tuple(got[k] for k in sorted(got))
        splits[name] = manifest.SplitInfo(sum(x.num_records for x in infos), sum(x.num_bytes for x in infos), infos)

    if config.append and not splits and not errors:
        errors.append(f"the input adds no records to {config.output}: nothing to append")
    written = sum(s.num_records for s in splits.values())
    accounting = manifest.Accounting(read=read, written=written, rejected=rejected_written)
    if not errors and read != written + rejected_written:
        errors.append(f"accounting: read {read} != written {written} + rejected {rejected_written}")

    bad = rejected_by_units - sum(by_reason.get(r, 0) for r in REMOVED_ON_PURPOSE)
    if bad > config.max_bad_records:
        where = naming.join(config.output, f"{config.run_id}/{naming.REJECTED}/")
        errors.insert(
            0,
            f"{bad} bad records (more than --max-bad-records {config.max_bad_records}); "
            f"they are in {where} with their source, position and reason; fix the input or pass "
            f"--max-bad-records {bad} to accept them",
        )

    per_file = collections.defaultdict(lambda: [0, 0])
    for u in units.values():
        for index, read_, rejected_ in u.files or ((u.file_index, u.read, u.rejected),):
            per_file[index][0] += read_ - rejected_
            per_file[index][1] += rejected_
    for d in duplicates:
        for index, count in d.files:
            per_file[index][0] -= count
            per_file[index][1] += count
    sources = tuple(
        manifest.SourceInfo(url, size, per_file[i][0], per_file[i][1]) for i, (url, size) in enumerate(config.sources)
    )
    rejected = manifest.RejectedInfo(rejected_written, tuple(rejected_paths), dict(sorted(by_reason.items())))
    report = {
        "status": "failed" if errors else "ok",
        "run_id": config.run_id,
        "errors": errors,
        "accounting": {"read": read, "written": written, "rejected": rejected_written},
        "rejected": {"num_records": rejected_written, "paths": list(rejected_paths), "by_reason": dict(by_reason)},
    }
    if errors:
        return None, errors, report
    # a split's statistics: None where --dedup exact's recount of its written shards replaced Parse's
    counted = [f for f in sorted(groups[StatsFact], key=lambda f: f.split) if f.statistics is not None]
    result = manifest.Manifest(
        features=_nullable(config.features, units.values()),
        splits=splits,
        sources=sources,
        rejected=rejected,
        accounting=accounting,
        seed=config.seed,
        shuffled=config.shuffle,
        compression=config.compression,
        text=config.text,
        statistics={names[f.split]: f.statistics for f in counted if names[f.split] in splits},
        sketches={names[f.split]: f.sketch for f in counted if names[f.split] in splits and f.sketch is not None},
    )
    hashes = {f.info for f in groups[HashesFact]}
    if len(hashes) > 1:
        errors.append(f"--dedup exact: the run's record hashes were reported differently by two workers: {sorted(hashes)}")
    elif hashes:  # the run's generation names its records' hashes, which the next append checks against
        result = dataclasses.replace(result, generations=(manifest.Generation(
            config.run_id, 1, {n: s.num_records for n, s in splits.items()}, read, rejected_written,
            by_reason.get("duplicate", 0), hashes=hashes.pop()),))
    errors.extend(manifest.problems(result))
    return (None if errors else result), errors, report


def _nullable(features: dict[str, dict], units: Iterable[UnitFact]) -> dict[str, dict]:
    """The schema with ``"nullable": true`` and the ``"missing"`` count on features some rows left out."""
    missing: collections.Counter[str] = collections.Counter()
    for u in units:
        if u.missing:
            missing.update(dict(u.missing))
    if not missing:
        return dict(features)
    return {name: {**spec, "nullable": True, "missing": missing[name]} if missing.get(name) else spec
            for name, spec in features.items()}


def commit(config: ReshardConfig, facts: Iterable[tuple]) -> str:
    """Writes the manifest (the commit point) or, when any check failed, a report. Returns the URL.

    Everything from the last checks to the end of the clean-up happens under the output's lease
    (``shardprep.lease``): taken here unless the launcher already holds it for this run.
    """
    result, errors, report = assemble(config, facts)
    faults.pause("commit.assembled")
    if changed := changed_inputs(config):  # the shards may hold a mix of old and new content: never commit them
        result, errors = None, changed + errors
    fs.remove(naming.join(config.output, naming.spill_folder(config.run_id)), recursive=True)  # batches between stages
    try:
        with lease.hold(config.output, config.run_id):
            return _commit_leased(config, result, errors, report)
    except RunError as e:
        return _refuse(config, report, [str(e)])


def commit_manifest(config: ReshardConfig, result: manifest.Manifest) -> str:
    """Commits a manifest made outside the pipeline (``shardprep.compact``) as ``commit`` commits its own:
    under the lease, refused if another run committed after ``config.base``. Returns the URL."""
    report = {"status": "ok", "run_id": config.run_id, "errors": []}
    try:
        with lease.hold(config.output, config.run_id):
            return _commit_leased(config, result, [], report)
    except RunError as e:
        return _refuse(config, report, [str(e)])


def changed_inputs(config: ReshardConfig) -> list[str]:
    """One line per input file that is gone or not the file planned (size, mtime; GCS: generation)."""
    from concurrent.futures import ThreadPoolExecutor

    def problem(i: int) -> str | None:
        url, size = config.sources[i]
        try:
            now = fs.version(url)
        except FileNotFoundError:
            return f"input file {url} was removed during the run: nothing committed; rerun when the input is complete"
        except OSError as e:
            return f"input file {url} cannot be checked at commit ({e}): nothing committed"
        if now != config.versions[i]:
            return (f"input file {url} changed during the run (planned: {size} bytes, version {config.versions[i]}; "
                    f"now {now}): nothing committed; rerun when the input no longer changes")
        return None

    if not config.versions:
        return []
    if all(fs.is_local(url) for url, _ in config.sources):  # a stat each: a pool's task would cost more
        now = local_files.local_versions(url.removeprefix("file://") for url, _ in config.sources)
        return [p for i, (found, planned) in enumerate(zip(now, config.versions)) if found != planned and (p := problem(i))]
    with ThreadPoolExecutor(16) as pool:
        return [p for p in pool.map(problem, range(len(config.sources))) if p]


def _refuse(config: ReshardConfig, report: dict, errors: list[str]) -> str:
    """Writes the run's report instead of a manifest; returns its URL."""
    report.update(status="failed", errors=errors)
    url = naming.join(config.output, naming.report_path(config.run_id))
    try:
        with fs.write_atomic(url) as f:
            f.write(json.dumps(report, indent=2).encode() + b"\n")
    except OSError as e:  # the run that owns the folder removed this run's folder meanwhile
        log.warning("the report of run %s could not be written (%s)", config.run_id, e)
    log.error("run %s not committed: %s", config.run_id, errors[0])
    return url


def _commit_leased(config: ReshardConfig, result: manifest.Manifest | None, errors: list[str], report: dict) -> str:
    faults.pause("commit.leased")
    if result is None:
        return _refuse(config, report, errors)
    try:
        current = manifest.load(config.output) if manifest.exists(config.output) else None
    except ManifestError as e:
        return _refuse(config, report, [f"the data set's manifest cannot be read at commit ({e}): nothing committed"])
    if raced := _raced(config, current):
        report["raced"] = True  # the launcher removes this run's folder: a rerun is all it takes
        return _refuse(config, report, [raced])
    if not config.overwrite and not config.append and current is not None:
        return _refuse(config, report, [f"{naming.join(config.output, naming.MANIFEST)} appeared while this run was "
                                        "working; pass --overwrite to replace it"])
    if retention.claim(config.output, config.run_id, retention.COMMIT) != retention.COMMIT:
        return _refuse(config, report, [f"run {config.run_id} was interrupted before its commit: nothing committed"])
    committed = False
    try:  # the shards are checked under the claim: an interrupted launcher removes them only without it
        try:
            result = _versioned(config, current, dataclasses.replace(result, created=result.created or manifest.now()))
        except (ManifestError, OSError) as e:
            return _refuse(config, report, [f"the append could not be merged with {config.output} ({e}): nothing committed"])
        if absent := _absent_shards(config.output, result):
            return _refuse(config, report, absent)
        before = retention.committed_runs(config.output)  # what readers may hold now, kept as the previous data set
        faults.pause("commit.checked")
        with tfds_metadata.restored_on_failure(config.output):  # TFDS readers see the old data set until the commit
            tfds_metadata.write(config.output, result, features=config.tfds_features)
            lease.check(config.output, config.run_id)
            data = manifest.encode(result)  # once for the manifest and the run's copy
            url = manifest.write(config.output, result, data)
        committed = True
    finally:
        if not committed:
            retention.withdraw(config.output, config.run_id)
    log.info("committed %s", url)
    faults.pause("commit.written")
    try:  # the data set is committed: what follows is tidying, and its failure must not fail the run
        manifest.write_run_copy(config.output, config.run_id, result, data)
        faults.pause("commit.copied")
        lease.check(config.output, config.run_id)
        retention.remove_stale_runs(config.output, current=result.run_ids, committed=before, keep_previous=config.keep_previous)
    except (OSError, RunError) as e:
        log.warning("run %s is committed (%s), but tidying after it failed (%s): python -m shardprep.clean %s "
                    "removes what it left", config.run_id, url, e, config.output)
    return url


def _raced(config: ReshardConfig, current: manifest.Manifest | None) -> str | None:
    """Why the run must not commit over ``current`` (another run committed after this one read the data
    set: ``config.base``), or None. Runs on one folder hold its lease in turn, so this is the one way two
    of them (two appends, an append and an --overwrite) could both have read one version."""
    found = current.identity if current is not None else ""
    if config.base is None or found == config.base:
        return None
    if not config.base and not config.overwrite:
        return None  # a first run: the check after this names the manifest that appeared
    seen = f"read version {config.base.split(':', 1)[0]}" if config.base else "found no data set"
    now = (f"version {current.data_version} (run {current.head_run}) was committed" if current is not None
           else "the data set was removed")
    return (f"{config.output} changed while run {config.run_id} was working: it {seen}, and meanwhile {now}; "
            f"nothing was committed and nothing is lost: rerun the command")


def _versioned(config: ReshardConfig, current: manifest.Manifest | None, result: manifest.Manifest) -> manifest.Manifest:
    """The manifest to commit: the data set's next version. An append adds ``result`` (its run's
    generation) to ``current`` (``generations.merge``); an --overwrite replaces ``current`` with a
    version of one generation; a first run is version 1."""
    duplicates = result.rejected.by_reason.get("duplicate", 0)
    hashes = result.generations[0].hashes if result.generations else None  # --dedup exact
    if config.append:
        merged = generations.merge(config.output, current, result, run_id=config.run_id, top_k=config.stats_top_k,
                                   duplicates=duplicates, hashes=hashes)
        if unsound := manifest.problems(merged):  # e.g. an input appended twice: the same shards again
            raise ManifestError(f"{unsound[0]} (was this input appended before?)")
        for line in generations.small_generation(current, result):
            log.warning("%s", line.replace("DIR", config.output))
        return merged
    if current is None:  # a first run's generation (--dedup exact keeps its hashes there) committed now
        return dataclasses.replace(result, generations=tuple(dataclasses.replace(g, created=g.created or result.created)
                                                             for g in result.generations))
    version = current.data_version + 1
    own = manifest.Generation(config.run_id, version, {n: s.num_records for n, s in result.splits.items()},
                              result.accounting.read, result.accounting.rejected, duplicates, result.created, hashes)
    return dataclasses.replace(result, data_version=version, parent=current.data_version, generations=(own,))


def _absent_shards(root: str, result: manifest.Manifest) -> list[str]:
    """Shards (and their record indexes) the manifest would name that are not in place at their size (a
    lost write, or another run's clean-up of this run's folder): the manifest is never written over them."""
    listings: dict[str, dict[str, int]] = {}
    problems = []
    for split in result.splits.values():
        for shard in split.shards:
            for path, expected in [(shard.path, shard.num_bytes),
                                   *([(shard.index.path, shard.index.num_bytes)] if shard.index else [])]:
                folder, name = posixpath.split(path)
                if folder not in listings:
                    listings[folder] = fs.sizes(naming.join(root, folder))
                size = listings[folder].get(name)
                if size != expected:
                    found = "missing" if size is None else f"{size} bytes"
                    problems.append(f"{path} is {found} at commit, expected {expected} bytes: was the run folder "
                                    "removed by another run on the same --output? Run one re-shard per output at a time")
    return problems
