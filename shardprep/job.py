"""The re-shard, defined once: its stages, what each one reads, and how its input is grouped.

Every engine runs this one description (``pipelines.engines``): the local engine and the Dask
engine stage by stage on worker processes (``pipelines.driver``), the Beam engine as a graph it
builds from it (``pipelines.beam_graph``: Dataflow, the portable runners, Beam's DirectRunner)::

    chunks -> ExpandUnits -> CountRanges ------------------.(side input)
                   '-> Parse --records--> Count ----------------.(side input)
                         |       '-------> Assign --pieces--> [by key] WriteShards ------------+
                         |                                                   '--stats--.      |
                         |--stats--> [by key, merged] Stats <---------------------------'------+
                         |--rejected--> [all] WriteRejected -----------------------------------+
                         '--facts (and Assign's) ----------------------------------------------+-> [all] Commit

The statistics are counted in Parse, from the columns the records were encoded from, or, where the
input's records are Examples (TFRecord, TFDS), in WriteShards while the disk stores the shards
(``ReshardConfig.statistics_in_parse``); with ``--dedup exact`` WriteShards also counts them where the
run dropped records Parse counted, and its counts replace Parse's (``graph.stages.MergeStats``).

A stage's work is plain Python over the named element types (``graph.elements``), Beam-free:
``process(element, *side)`` gives its outputs, ``graph.elements.Tagged`` for a side output, with
optional ``setup``, ``flush`` (at the end of a task or bundle: what it left to finish, and outputs
it held back) and ``teardown``. A grouped stage gets ``(key, values)``, the values
in one order whatever the engine (``group_values``); a merged stage (``merge``) is a grouped one
whose values an engine may combine as they come (Beam's combiner lifting). Where the outputs go,
and what runs where, is the engines' business; what the output bytes are depends only on this.

The launcher builds the job and stages what its first stage reads (``shardprep.submit``); an engine
only runs it (``pipelines.engines.Engine.run``). A run whose units are known only once a first
heavy step has run (a text run's document store: ``text.store_stages``) declares that step as
stages before the re-shard's (``planned_job``): the last of them stages the units and gives their
chunk numbers to ExpandUnits. What a stage counts goes to the engine's sink (``graph.counting``).
"""
from __future__ import annotations

import pickle
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

from shardprep.config import ReshardConfig
from shardprep.graph.elements import FACTS, REJECTED, STATS
from shardprep.graph.parse import Parse
from shardprep.graph.ranges import CountRanges
from shardprep.graph.spill import count
from shardprep.graph.stages import Assign, Commit, MergeStats, WriteRejected, WriteShards
from shardprep.graph.units import ExpandUnits, num_chunks, slim, units_url

__all__ = ["BY_KEY", "ONE_GROUP", "Job", "Map", "Stage", "group_values", "groups", "planned_job", "reshard_job"]

BY_KEY, ONE_GROUP = "key", "all"  # a stage's grouping: (key, value) outputs by key; every output in one group


class Map:
    """A stage's work that applies ``fn`` to each element (one output each)."""

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self._fn = fn
        self.__name__ = fn.__name__

    def process(self, element: Any) -> Iterable[Any]:
        return (self._fn(element),)


class Stage(NamedTuple):
    """One step of the job.

    ``over``: the outputs it takes, each ``"Stage"`` (its main output) or ``"Stage.tag"`` (a side
    output), several flattened into one input; ``side``: stages whose main outputs it takes whole,
    as lists (Beam's ``AsList``); ``group``: None (element by element), ``BY_KEY`` or ``ONE_GROUP``;
    ``tags``: its side outputs; ``heavy``: the work that reads or writes the data (run on the
    engine's workers; the others are a few elements, run where the engine finds it cheapest);
    ``labels``: the names of the Beam steps that group its input (``pipelines.beam_graph``), so
    the Beam graph keeps the step names a Dataflow job has always shown; ``spread``: its outputs are
    the elements of the heavy stages after it, many more than its inputs: a distributed engine
    spreads them over its workers, in a step of this name (Beam: a Reshuffle).
    """

    name: str
    work: Any
    over: tuple[str, ...]
    side: tuple[str, ...] = ()
    group: str | None = None
    tags: tuple[str, ...] = ()
    heavy: bool = False
    labels: tuple[str, ...] = ()
    spread: str = ""


class Job(NamedTuple):
    """A run's stages in an order that puts each after everything it reads; ``inputs`` are the
    first stage's elements (chunk numbers of a staged file: ``graph.units``), ``staged`` the file of
    the units, which the launcher writes before the job runs (``graph.units.stage``), or the job's
    first stages do (``planned_job``). ``config``: the run's (its output, run id and input list, for
    the engine's checks and messages); ``num_units``: its work units, where known before it runs."""

    stages: tuple[Stage, ...]
    inputs: tuple[Any, ...]
    staged: str
    result: str  # the stage whose one output is the URL of the manifest or of the failure report
    config: ReshardConfig | None = None
    num_units: int | None = None


def reshard_job(config: ReshardConfig, num_units: int) -> Job:
    """The re-shard of ``config``'s work units (``num_units`` of them, staged in chunks)."""
    stages = _reshard(config, over="")
    return Job(stages, tuple(range(num_chunks(num_units))), units_url(config), "Commit", config, num_units)


def planned_job(config: ReshardConfig, first: Sequence[Stage], inputs: Sequence[Any]) -> Job:
    """A run whose units its ``first`` stages plan, over ``inputs``: the last of them stages the
    units (``graph.units.stage``) and gives their chunk numbers; then the re-shard of those units."""
    return Job((*first, *_reshard(config, over=first[-1].name)), tuple(inputs), units_url(config), "Commit", config)


def _reshard(config: ReshardConfig, *, over: str) -> tuple[Stage, ...]:
    """The re-shard's stages, the first over ``over``'s chunk numbers of the staged units."""
    staged = units_url(config)
    cfg = slim(config)  # every stage carries the config without the input list
    facts = ("Parse." + FACTS, "Assign." + FACTS, "WriteShards", "WriteRejected")
    stages = [
        Stage("ExpandUnits", ExpandUnits(staged), over=(over,), spread="Distribute"),
        # nominal units' quote and newline counts: their cuts and first lines (formats.cuts)
        Stage("CountRanges", CountRanges(), over=("ExpandUnits",), heavy=True),
        Stage("Parse", Parse(cfg), over=("ExpandUnits",), side=("CountRanges",), tags=(REJECTED, FACTS, STATS),
              heavy=True),
        Stage("Count", Map(count), over=("Parse",)),
        Stage("Assign", Assign(cfg), over=("Parse",), side=("Count",), tags=(FACTS,), heavy=True),
        Stage("WriteShards", WriteShards(cfg), over=("Assign",), group=BY_KEY, heavy=True, labels=("GroupByShard",),
              tags=(STATS,)),
        Stage("WriteRejected", WriteRejected(cfg), over=("Parse." + REJECTED,), group=ONE_GROUP,
              labels=("KeyRejected", "GroupRejected")),
    ]
    if cfg.statistics:  # partial statistics only then, from one of the two (``statistics_in_parse``)
        counted_in = "Parse" if cfg.statistics_in_parse else "WriteShards"
        # --dedup exact: the written shards' too, which replace Parse's where records were dropped
        both = cfg.statistics_in_parse and cfg.dedup == "exact"
        stages.append(Stage("Stats", MergeStats(cfg), over=(f"{counted_in}.{STATS}",) + (("WriteShards." + STATS,) if both else ()),
                            group=BY_KEY, labels=(("FlattenStats",) if both else ()) + ("MergeStats",)))
        facts += ("Stats",)
    stages.append(Stage("Commit", Commit(cfg, staged), over=facts, group=ONE_GROUP,
                        labels=("AllFacts", "KeyFacts", "Gather")))
    return tuple(stages)


def group_values(values: Iterable[Any]) -> list:
    """A group's values in one order whatever the engine's: sorted by their pickles."""
    return [value for _, value in sorted(((_pickled(v), v) for v in values), key=lambda pair: pair[0])]


def groups(pairs: Sequence[tuple[Any, Any]]) -> list[tuple[Any, list]]:
    """``(key, value)`` pairs as a group-by-key gives them: each key once, in the order of their
    pickles, its values in ``group_values`` order."""
    by_key: dict[bytes, tuple[Any, list]] = {}
    for key, value in pairs:
        by_key.setdefault(_pickled(key), (key, []))[1].append(value)
    return [(key, group_values(values)) for _, (key, values) in sorted(by_key.items(), key=lambda item: item[0])]


def _pickled(value: Any) -> bytes:
    return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
