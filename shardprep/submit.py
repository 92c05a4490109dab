"""The launcher's last step: build the run's job, stage what it reads first, run it on the chosen engine.

``run`` builds the job once for every engine (``shardprep.job``: a re-shard of the planned units,
or a text run's, whose first stages build its document store: ``text.store_stages``), stages it
(the units and the input list, or the store's parts and a given vocabulary: ``graph.units.stage``)
unless the engine only builds its graph (a Dataflow dry run: ``Engine.runs``), and hands it to
``options.runner``'s engine (``pipelines.engines``), which only runs it. A full disk, wherever in
the run it came, is one line that says how much room the run needs.
"""
from __future__ import annotations

from collections.abc import Sequence

from pipelines import engines
from shardprep import capacity, fs
from shardprep.config import ReshardConfig
from shardprep.errors import RunError
from shardprep.formats import WorkUnit
from shardprep.graph import units as staged_units
from shardprep.job import Job, reshard_job
from shardprep.text.store_stages import TextRun, stage_text, text_job

__all__ = ["run"]


def run(config: ReshardConfig, units: Sequence[WorkUnit], options: engines.RunOptions, *,
        text: TextRun | None = None) -> bool:
    """Runs the re-shard of ``config``'s ``units`` (``text``: a text run, its units cut from its
    document store once the job has built it) on ``options.runner``'s engine; False when nothing
    ran (a Dataflow ``--dry_run=True``). The caller holds the run's lease and removes its folder on
    a failure (``shardprep.interrupts``)."""
    engine = engines.engine(options.runner)
    free = capacity.free_space(config.output)
    try:
        return engine.run(_staged(config, units, text, stage=engine.runs(options)), options)
    except BaseException as e:
        if not capacity.out_of_space(e):
            raise
        raise RunError(_full_disk(config, units, free, text=text is not None)) from e


def _staged(config: ReshardConfig, units: Sequence[WorkUnit], text: TextRun | None, *, stage: bool) -> Job:
    """The run's job, and what it reads first written where ``stage``."""
    if text is not None:
        job, parts = text_job(config, text)
        if stage:
            stage_text(config, text, parts)
        return job
    if stage:
        staged_units.stage(config, units)
    capacity.log_bound(config, units)
    return reshard_job(config, len(units))


def _full_disk(config: ReshardConfig, units: Sequence[WorkUnit], free: int | None, *, text: bool) -> str:
    """The one line of a full disk: at most how much room the run needs (``capacity.space_bound``, an
    upper bound of what it holds at once under its output), and how much was free when it started.
    A text run whose units are not staged yet filled the disk with its document store: its instances
    are bounded once the store is built."""
    input_bytes = sum(size for _, size in config.sources)
    staged = staged_units.units_url(config)
    if text and not fs.exists(staged):
        need = f"its document store alone needs at most {capacity.text_store_bound(config, units) / 1e6:,.1f} MB"
    else:
        if text:  # its units and text entry, as the job staged them
            config, units = staged_units.with_sources(config, staged), staged_units.read_all(staged)
        need = f"this run needs at most {capacity.space_needed(config, units) / 1e6:,.1f} MB"
    had = f"; {free / 1e6:,.1f} MB were free when it started" if free is not None else ""
    return (f"no space left on the device of {config.output}: {need} free there (spill, shards, indexes and dead "
            f"letters at once, for {input_bytes / 1e6:,.1f} MB of input){had}; its files were removed; free space or "
            f"choose another --output and rerun")
