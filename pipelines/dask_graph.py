"""A Beam batch pipeline as one Dask task graph (the translation behind ``pipelines.dask_runner``).

Every leaf transform becomes a ``dask.bag`` of partitions: a ParDo's partition holds ``(tag,
element)`` pairs of all its outputs, and each consumer selects its own tag inside its own task (no
task per selection); a side input is one task that concatenates its source, a key of the same
graph; a Flatten puts partition i of every input into its partition i; a GroupByKey is one
all-to-all exchange of hashed buckets (n + m tasks). Linear chains are then fused into one task each
(``fused``). Every task costs the scheduler and a worker ~3 ms of CPU on top of its work
(distributed's bookkeeping and messages), so the count matters: 12 work units gave 2,176 tasks
with Beam's translation (Dask's ``concat`` and ``groupby`` shuffles) and 110 here (2 worker threads).
"""
from __future__ import annotations

import dataclasses
import re
import threading
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from apache_beam import DoFn, TaggedOutput, pvalue
from apache_beam.pipeline import AppliedPTransform, PipelineVisitor
from apache_beam.runners.common import DoFnContext, DoFnInvoker, DoFnSignature, _OutputHandler
from apache_beam.runners.dask import transform_evaluator as beam_ops
from apache_beam.transforms.sideinputs import SideInputMap
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.windowed_value import WindowedValue

__all__ = ["Visitor", "fused"]

_GLOBAL = (GlobalWindow(),)


@dataclasses.dataclass(frozen=True)
class _Pick:
    """Which elements of a producer's partition a consumer reads: all of them, or one tag of a
    ParDo's ``(tag, element)`` pairs. An object, so Dask never mistakes it for a task or a key."""

    pairs: bool = False
    tag: str | None = None

    def of(self, partition: Iterable[Any]) -> list:
        if self.pairs:
            return [element for t, element in partition if t == self.tag]
        return partition if isinstance(partition, list) else list(partition)


@dataclasses.dataclass(frozen=True)
class _Input:
    """A PCollection as Dask sees it: its producer's bag and what to pick from it."""

    bag: Any
    pick: _Pick


@dataclasses.dataclass(frozen=True)
class _Picks:
    """A pick per part of a list of partitions (a plain tuple in a Dask task could be taken for a task)."""

    picks: tuple[_Pick, ...]


def _concat(picks: _Picks, parts: Sequence[list]) -> list:
    return [x for pick, part in zip(picks.picks, parts) for x in pick.of(part)]


_PRIME = 1_000_003  # the integer keys' hash multiplier: prime, so prime to any count of buckets


def _bucket(key: Any, buckets: int) -> int:
    """The output partition of a key: a hash that is the same in every process (unlike ``hash``).
    An integer, or a tuple of them (a shard's key), by arithmetic: keys one apart take the buckets
    in turn, so 64 shards in 4 buckets are 16 each (a digest put 13 to 18 there, 8 shards 1 to 4,
    and the largest bucket's WriteShards task holds up the run's end)."""
    if isinstance(key, int) or (isinstance(key, tuple) and all(isinstance(k, int) for k in key)):
        digest = 0
        for k in key if isinstance(key, tuple) else (key,):
            digest = digest * _PRIME + k
        return digest % buckets
    from dask.base import tokenize

    return int(tokenize(key), 16) % buckets


def _split_by_key(pick: _Pick, partition: Iterable[tuple], buckets: int) -> list[list]:
    """A partition of ``(key, value)`` pairs cut into ``buckets`` lists by key."""
    out: list[list] = [[] for _ in range(buckets)]
    for item in pick.of(partition):
        out[_bucket(item[0], buckets)].append(item)
    return out


def _group(pick: _Pick, parts: Iterable[list]) -> list[tuple]:
    """``(key, windowed value)`` pairs (what Beam's ReifyWindows emits) into ``(key, [values])``, as
    Beam's Dask translation groups them (the window is the global one)."""
    groups: dict = {}
    for part in parts:
        for key, windowed in pick.of(part):
            groups.setdefault(key, []).append(windowed.value if isinstance(windowed, WindowedValue) else windowed)
    return list(groups.items())


def _group_bucket(j: int, splits: Sequence[list[list]]) -> list[tuple]:
    """Output partition ``j`` of an exchange: bucket ``j`` of every input partition, grouped."""
    return _group(_Pick(), [split[j] for split in splits])


def _name(label: str) -> str:
    """A Beam step label as a Dask key prefix (the dashboard and distributed's metrics group by it)."""
    return re.sub(r"[^0-9A-Za-z]+", "_", label).strip("_") or "step"


_SET_UP: dict[tuple[str, int], DoFnSignature] = {}  # ("run token/full label", thread) -> a set-up DoFn


def _signature(step: str, fn: Any) -> tuple[DoFnSignature, bool]:
    """The DoFn of ``step`` (run token/full label) in this worker thread (DoFns need not be thread
    safe), and whether it is new (to set up). Beam's runners keep a set-up DoFn for many bundles;
    building the signature (``inspect`` of every method) and ``setup`` per partition cost more than
    a small partition's work."""
    key = (step, threading.get_ident())
    if key in _SET_UP:
        return _SET_UP[key], False
    token = step.split("/", 1)[0]
    for old in [k for k in _SET_UP if not k[0].startswith(token + "/")]:  # a later run on a long-lived cluster
        del _SET_UP[old]
    _SET_UP[key] = DoFnSignature(fn)
    return _SET_UP[key], True


@dataclasses.dataclass(frozen=True)
class _Step:
    """What a ParDo's tasks share: one object in the graph, opaque to Dask (never taken for a task
    or a key, whatever the DoFn's own arguments hold)."""

    step: str  # run token/full label
    fn: Any
    window_fn: Any
    label: str
    args: list
    kwargs: dict
    pick: _Pick
    side_specs: Sequence[tuple]  # (view class, view options) per side input


def _run_dofn(step: _Step, partition: Iterable[Any], *side_values: list) -> list[tuple[str | None, Any]]:
    """One Dask partition through a DoFn, as one bundle; returns ``(tag, element)`` pairs."""
    signature, new = _signature(step.step, step.fn)
    window_fn = step.window_fn
    receivers = beam_ops.OneReceiver()
    side_inputs = [
        SideInputMap(view_class, view_options, [WindowedValue(v, 0, _GLOBAL) for v in values])
        for (view_class, view_options), values in zip(step.side_specs, side_values)
    ]
    handler = _OutputHandler(
        window_fn=window_fn,
        main_receivers=receivers[None],
        tagged_receivers=receivers,
        per_element_output_counter=None,
        output_batch_converter=None,
        process_yields_batches=False,
        process_batch_yields_elements=False,
    )
    invoker = DoFnInvoker.create_invoker(
        signature,
        handler,
        context=DoFnContext(step.label, state=None),
        side_inputs=side_inputs,
        input_args=step.args,
        input_kwargs=step.kwargs,
        user_state_context=None,
        bundle_finalizer_param=DoFn.BundleFinalizerParam(),
    )
    if new:
        invoker.invoke_setup()
    invoker.invoke_start_bundle()
    for item in step.pick.of(partition):
        invoker.invoke_process(beam_ops.get_windowed_value(item, window_fn))
    invoker.invoke_finish_bundle()
    out = []
    for value in receivers.values:  # TaggedOutput(tag, windowed) or, for the main output, windowed
        tag, windowed = (value.tag, value.value) if isinstance(value, TaggedOutput) else (None, value)
        out.append((tag, windowed.value))
    return out


def _bag(name: str, graph: dict, dependencies: Sequence[Any], npartitions: int) -> Any:
    from dask.bag import Bag
    from dask.highlevelgraph import HighLevelGraph

    return Bag(HighLevelGraph.from_collections(name, graph, dependencies=list(dependencies)), name, npartitions)


@dataclasses.dataclass
class Visitor(PipelineVisitor):
    """Builds one bag per leaf transform (``outputs``); ``sinks()`` are those nobody consumes.

    ``buckets``: the most output partitions of a GroupByKey (its input's partitions at most).
    """

    bag_kwargs: dict
    buckets: int = 4
    token: str = dataclasses.field(default_factory=lambda: uuid.uuid4().hex)  # this run, for ``_SET_UP``
    outputs: dict = dataclasses.field(default_factory=dict)  # node -> _Input of its main output, pick ignored
    consumed: set = dataclasses.field(default_factory=set)

    def input_of(self, pcoll: pvalue.PValue) -> _Input:
        producer = pcoll.producer
        self.consumed.add(producer)
        out = self.outputs[producer]
        return _Input(out.bag, _Pick(True, pcoll.tag) if out.pick.pairs else out.pick)

    def visit_transform(self, node: AppliedPTransform) -> None:
        inputs = [self.input_of(p) for p in node.inputs if not isinstance(p, pvalue.PBegin)]
        op_class = beam_ops.TRANSLATIONS.get(node.transform.__class__, beam_ops.NoOp)
        label = _name(node.full_label)
        if op_class is beam_ops.ParDo:
            self.outputs[node] = _Input(self._pardo(node, label, inputs[0]), _Pick(pairs=True))
        elif op_class is beam_ops.Flatten:
            self.outputs[node] = _Input(_flatten(label, inputs), _Pick())
        elif op_class is beam_ops.GroupByKey:
            self.outputs[node] = _Input(_group_by_key(label, inputs[0], self.buckets), _Pick())
        elif op_class is beam_ops.Create:
            self.outputs[node] = _Input(op_class(node, bag_kwargs=self.bag_kwargs).apply(None), _Pick())
        elif inputs:  # NoOp (Reshuffle, ...): the input itself, picked by the consumers
            self.outputs[node] = inputs[0]
        else:
            raise NotImplementedError(f"{node.full_label}: {type(node.transform).__name__} without an input is not "
                                      "supported by this Dask runner (use beam.Create)")

    def _pardo(self, node: AppliedPTransform, label: str, main: _Input) -> Any:
        """One task per partition. Each side input is one task that gathers its source's partitions,
        a key of this graph. (Handed to ``map_partitions`` as a Dask ``Item``, a side input was
        optimised as a graph of its own and everything upstream of it, Parse included, ran twice.)"""
        from dask.base import tokenize

        transform = node.transform  # args and kwargs hold placeholders where the side inputs go
        pcoll = next(iter(node.main_inputs.values()))
        token = tokenize(self.token, node.full_label, main.bag.name)
        name = f"{label}-{token}"
        graph: dict = {}
        sources, side_keys = [main.bag], []
        for k, si in enumerate(node.side_inputs):
            side = self.input_of(si.pvalue)
            key = f"{label}_side{k}-{token}"
            n = side.bag.npartitions
            graph[key] = (_concat, _Picks((side.pick,) * n), [(side.bag.name, i) for i in range(n)])
            sources.append(side.bag)
            side_keys.append(key)
        step = _Step(f"{self.token}/{node.full_label}", transform.fn,
                     pcoll.windowing.windowfn if hasattr(pcoll, "windowing") else None, transform.label,
                     list(transform.args), dict(transform.kwargs), main.pick,
                     [(type(si), si._view_options()) for si in node.side_inputs])
        for i in range(main.bag.npartitions):
            graph[(name, i)] = (_run_dofn, step, (main.bag.name, i), *side_keys)
        return _bag(name, graph, sources, main.bag.npartitions)

    def sinks(self) -> list:
        return [out.bag for node, out in self.outputs.items() if node not in self.consumed]


def _flatten(label: str, inputs: Sequence[_Input]) -> Any:
    """Partition i of every input into partition i of the output: as many partitions as the widest
    input (Dask's ``concat`` adds the counts up, and every later exchange grows with them)."""
    from dask.base import tokenize

    if not inputs:
        import dask.bag

        return dask.bag.from_sequence([], npartitions=1)
    n = max(x.bag.npartitions for x in inputs)
    name = f"{label}-{tokenize(*(x.bag.name for x in inputs), *(x.pick for x in inputs))}"
    graph = {}
    for i in range(n):
        some = [x for x in inputs if i < x.bag.npartitions]
        graph[(name, i)] = (_concat, _Picks(tuple(x.pick for x in some)), [(x.bag.name, i) for x in some])
    return _bag(name, graph, [x.bag for x in inputs], n)


def _group_by_key(label: str, source: _Input, buckets: int) -> Any:
    """Beam's GroupByKey as one all-to-all exchange: each input partition is cut by key hash into
    m buckets, and output partition j takes every input's buckets and groups bucket j (n + m tasks).

    Each output task receives all the buckets, m times the data a task per bucket would move, and
    n*m tasks fewer: this product's GroupByKeys carry references to spilled records, never the
    records (kilobytes a work unit), while each task costs ~3 ms of CPU and, on a worker thread busy
    with a long task, a wait (a task per bucket made 17 input partitions and 4 buckets 89 tasks, and
    two of the four WriteShards tasks waited 0.6 s for theirs). Dask's ``groupby`` shuffle made ~170
    tasks of 12 partitions, ~1,300 of 60."""
    from dask.base import tokenize

    bag = source.bag
    n, m = bag.npartitions, max(1, min(bag.npartitions, buckets))
    token = tokenize(bag.name, source.pick, m)
    name, split = f"{label}-{token}", f"{label}_split-{token}"
    if m == 1:
        return _bag(name, {(name, 0): (_group, source.pick, [(bag.name, i) for i in range(n)])}, [bag], 1)
    graph: dict = {(split, i): (_split_by_key, source.pick, (bag.name, i), m) for i in range(n)}
    for j in range(m):
        graph[(name, j)] = (_group_bucket, j, [(split, i) for i in range(n)])
    return _bag(name, graph, [bag], m)


def fused(sinks: Sequence[Any]) -> tuple[dict, list]:
    """The graph of every sink with its linear chains fused into one task each, and the sinks' keys.

    A task with one dependent that has no other dependency runs inside that dependent's task. (Dask's
    own fusion depends on the graph's dict order, stops a chain at an exchange's buckets, and keeps
    each fused key as an ``Alias`` task that costs as much to schedule as real work.)
    """
    from dask._task_spec import Task, convert_legacy_graph

    graph: dict = {}
    keys: list = []
    for bag in sinks:
        graph.update(bag.__dask_graph__())
        keys.extend(bag.__dask_keys__())
    graph = convert_legacy_graph(graph)
    outputs = set(keys)
    deps = {key: [d for d in node.dependencies if d in graph] for key, node in graph.items()}
    dependents: dict = {key: [] for key in graph}
    for key, ds in deps.items():
        for d in ds:
            dependents[d].append(key)

    def inner(key: Any) -> bool:  # runs inside its only dependent's task
        return key not in outputs and len(dependents[key]) == 1 and len(deps[dependents[key][0]]) == 1

    out = {}
    for key, node in graph.items():
        if inner(key):
            continue
        chain = [key]
        while len(deps[chain[0]]) == 1 and inner(deps[chain[0]][0]):
            chain.insert(0, deps[chain[0]][0])
        out[key] = node if len(chain) == 1 else Task.fuse(*(graph[k] for k in chain), key=key)
    return out, keys
