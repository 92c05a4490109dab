"""The Beam engine: the job (``shardprep.job``) as a Beam graph, for Dataflow and the portable
runners, and on Beam's in-process FnApiRunner for checking it (``--runner beam``).

Each stage becomes one step under the stage's name, a ``ParDo`` of ``StageFn`` over its input with
its side inputs as ``AsList`` and its side outputs tagged; a stage over several outputs reads their
``Flatten``; a grouped stage reads a ``GroupByKey`` (or a ``CombinePerKey`` where its work
merges), under the labels the job gives, so a Dataflow job shows the steps it always has::

    Units -> ExpandUnits -> Distribute -> CountRanges, Parse -> Count, Assign -> GroupByShard -> WriteShards
          Parse.rejected -> KeyRejected -> GroupRejected -> WriteRejected
          Parse.stats (or WriteShards.stats) -> MergeStats -> Stats
          facts -> AllFacts -> KeyFacts -> Gather -> Commit

``Distribute`` (a Reshuffle, after a stage the job marks ``spread``) spreads the units over a
distributed runner's workers. The graph holds only chunk numbers of the units, staged by the
launcher before it runs (``shardprep.submit``; not for a dry run): building it writes nothing. The
stages count into Beam counters (``BeamCounters``, the engine's ``graph.counting.Sink``): the only
place Beam's metrics are used.
"""
from __future__ import annotations

import functools
import logging
import time
from collections.abc import Iterator, Sequence
from typing import Any

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.options.pipeline_options import PipelineOptions, TestOptions
from apache_beam.pvalue import TaggedOutput
from apache_beam.runners.runner import PipelineResult
from apache_beam.transforms.window import GlobalWindows
from apache_beam.typehints.decorators import no_annotations

from pipelines.dataflow_flags import check_locations, dataflow_args
from pipelines.driver import summarize
from pipelines.engines import RunOptions
from shardprep import malloc, retention, run_checks
from shardprep.config import ReshardConfig
from shardprep.graph import counting
from shardprep.graph.tasks import split_output
from shardprep.job import BY_KEY, ONE_GROUP, Job, Stage, group_values, reshard_job

__all__ = ["BeamCounters", "BeamEngine", "Reshard", "StageFn", "build"]

log = logging.getLogger("shardprep")


class BeamCounters:
    """The Beam engine's counting sink (``graph.counting.Sink``): Beam counters of the product's
    namespace, summed by the runner over its workers."""

    def inc(self, name: str, n: int) -> None:
        Metrics.counter(counting.NAMESPACE, name).inc(n)


@beam.typehints.with_output_types(Any)  # declared: Beam would otherwise infer it from process's bytecode
class StageFn(beam.DoFn):
    """A stage's work as a DoFn, element by element; a grouped stage's values in ``group_values`` order."""

    def __init__(self, work: Any, grouped: bool = False) -> None:
        self._work = work
        self._grouped = grouped

    def default_label(self) -> str:
        return type(self._work).__name__

    def setup(self) -> None:
        malloc.keep_freed_memory()  # this process runs the steps (the launcher, a Dataflow worker)
        counting.install(BeamCounters())
        getattr(self._work, "setup", lambda: None)()

    @no_annotations  # Beam would read ``*side: Any`` as a type hint on the side inputs
    def process(self, element: Any, *side: Any) -> Iterator[Any]:
        if self._grouped:
            element = (element[0], group_values(element[1]))
        side = tuple(list(s) for s in side)
        for out in self._work.process(element, *side) or ():
            tag, value = split_output(out)
            yield value if tag is None else TaggedOutput(tag, value)

    def finish_bundle(self) -> Iterator[Any]:  # what the work left to finish (WriteShards's last shard, its statistics)
        for out in getattr(self._work, "flush", lambda: None)() or ():
            tag, value = split_output(out)
            windowed = GlobalWindows.windowed_value(value)
            yield windowed if tag is None else TaggedOutput(tag, windowed)

    def teardown(self) -> None:
        getattr(self._work, "teardown", lambda: None)()


class Reshard(beam.PTransform):
    """The job's stages as Beam steps; its output: the result stage's (the manifest's or report's URL)."""

    def __init__(self, job: Job, distribute: bool = True) -> None:
        super().__init__()
        self._job = job
        self._distribute = distribute

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.PCollection:
        outputs: dict[str, beam.PCollection] = {"": pbegin | "Units" >> beam.Create(list(self._job.inputs))}
        for stage in self._job.stages:
            result = self._step(stage, outputs)
            if self._distribute and stage.spread:
                result = result | stage.spread >> beam.Reshuffle()
            outputs[stage.name] = result if not stage.tags else result.main
            for tag in stage.tags:
                outputs[f"{stage.name}.{tag}"] = result[tag]
        return outputs[self._job.result]

    @staticmethod
    def _step(stage: Stage, outputs: dict[str, beam.PCollection]) -> Any:
        labels = iter(stage.labels)
        inputs = [outputs[name] for name in stage.over]
        pcoll = inputs[0] if len(inputs) == 1 else tuple(inputs) | next(labels) >> beam.Flatten()
        if stage.group == ONE_GROUP:
            pcoll = pcoll | next(labels) >> beam.Map(lambda value: (0, value))
        if stage.group is not None and hasattr(stage.work, "merge"):  # values combined as they come, from {}
            merge = stage.work.merge
            merged = pcoll | next(labels) >> beam.CombinePerKey(lambda values: functools.reduce(merge, values, {}))
            return merged | stage.name >> beam.MapTuple(stage.work.finish)
        if stage.group in (BY_KEY, ONE_GROUP):
            pcoll = pcoll | next(labels) >> beam.GroupByKey()
        side = [beam.pvalue.AsList(outputs[name]) for name in stage.side]
        step = beam.ParDo(StageFn(stage.work, grouped=stage.group is not None), *side)
        return pcoll | stage.name >> (step.with_outputs(*stage.tags, main="main") if stage.tags else step)


def build(pipeline: beam.Pipeline, config: ReshardConfig, num_units: int, *, distribute: bool = True) -> beam.PCollection:
    """Adds the re-shard of ``config`` to ``pipeline`` (tests pass a TestPipeline). Writes nothing:
    its units are staged by the launcher (``shardprep.submit``)."""
    return pipeline | "Reshard" >> Reshard(reshard_job(config, num_units), distribute)


class BeamEngine:
    """The graph on Beam's runner ``runner``, one of Beam's known runner names, passed as its
    ``--runner`` flag (``pipelines.engines.Engine``); ``in_process``: the runner runs the job in this
    process (``FnApiRunner``); ``dataflow``: with Dataflow's flags and checks."""

    def __init__(self, runner: str, *, in_process: bool = False, dataflow: bool = False) -> None:
        self._runner, self._in_process, self._dataflow = runner, in_process, dataflow

    def checked(self, options: RunOptions) -> RunOptions:
        run_checks.refuse_unknown_args(options.beam_args)
        return options

    def on_this_machine(self, options: RunOptions) -> bool:
        return self._in_process

    def options(self, beam_args: Sequence[str]) -> PipelineOptions:
        if self._dataflow:
            beam_args = dataflow_args(beam_args)
        return PipelineOptions([f"--runner={self._runner}", *beam_args])

    def runs(self, options: RunOptions) -> bool:
        return not self.options(options.beam_args).view_as(TestOptions).dry_run

    def run(self, job: Job, options: RunOptions) -> bool:
        beam_options = self.options(options.beam_args)
        config, here = job.config, self._in_process
        if self._dataflow:
            check_locations(config.output, sorted({url for url, _ in config.sources}))
        pipeline = beam.Pipeline(options=beam_options)
        _ = pipeline | "Reshard" >> Reshard(job, distribute=not here)
        started = time.monotonic()
        result = pipeline.run()
        if beam_options.view_as(TestOptions).dry_run:
            retention.discard_run(config.output, config.run_id, whole=True)
            log.info("dry run: the Dataflow job graph of run %s was built and not submitted", config.run_id)
            return False
        _wait(result, cancel=not here)
        if here:
            counters = {c.key.metric.name: c.committed for c in result.metrics().query()["counters"]}
            summarize(counters, workers=1, seconds=time.monotonic() - started)
        return True


def _wait(result: PipelineResult, *, cancel: bool) -> None:
    """Waits for the job; on an interrupt, a job of a service (``cancel``), which runs on without this
    process, is cancelled first."""
    try:
        result.wait_until_finish()
    except KeyboardInterrupt:
        if cancel:
            job = getattr(result, "job_id", lambda: "")()
            try:
                result.cancel()
                log.warning("cancelled job %s: the run was interrupted", job)
            except Exception as e:  # noqa: BLE001 - the interrupt stands; the user is told what to do
                log.warning("could not cancel job %s (%s): cancel it in its runner's console; it commits nothing, "
                            "since this run's folder is claimed for removal", job, e)
        raise

