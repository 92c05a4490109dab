"""Beam's Dask runner (``apache_beam.runners.dask``, Beam 2.77) with the fixes this product needs.

Beam's translation turns each leaf transform into one ``dask.bag`` and, as shipped:

1. gives every consumer of a multi-output ``ParDo`` the bag of *all* its outputs, so the main
   output, the dead letters and the facts arrive mixed at every branch (seen: ``WriteRejected``
   received record batches and the run failed);
2. collects a ParDo's outputs in one receiver list that is part of the task graph, so every
   partition a process runs returns the outputs of the partitions it ran before as well (seen:
   a Flatten of 4 elements gave 8 with Dask's synchronous scheduler and 56 with its threads; the
   "every chunk's count three times" side input);
3. feeds each ParDo a lazy ``map`` over its input partition under a key that every consumer of the
   same PCollection shares, so the first consumer in a process can drain the iterator the next one
   reads (seen: a side input built from a Flatten lost a partition);
4. materialises a side input with ``list(bag)`` *inside* each consuming task, a nested compute
   from within a worker that recomputes the side input's upstream once per partition;
5. computes only the bag of the last transform visited, so a branch that does not lead into it
   never runs.

Here every ``ParDo`` call collects into a fresh list of ``(tag, element)`` pairs and each consumer
selects its own tag into a list of its own; every partition handed on is a list, never a one-shot
iterator; a side input becomes one graph dependency (computed once, handed to every task as a
list); and every sink (a bag nobody consumes) is computed. Elements keep Beam's global window
only: this runner is for batch pipelines. Like Beam's, it reports no metrics.

Cost (py-spy of 2 workers on 48 MB of CSV): the DoFn work is the DirectRunner's; the rest is fixed
per worker process (importing Beam and shardprep, distributed's event loop, the nanny) plus, as
shipped, a DoFn signature (``inspect``) and ``setup`` per partition, which ``_signature`` now does
once per step and worker thread. Size a cluster for the DoFn work (``BENCHMARKS.md``: CPU s per
GB) and give it inputs large enough (several 64 MB units per worker) to amortise the start-up.
"""
from __future__ import annotations

import dataclasses
import logging
import threading
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from apache_beam import DoFn, TaggedOutput, pvalue
from apache_beam.pipeline import AppliedPTransform, PipelineVisitor
from apache_beam.runners.common import DoFnContext, DoFnInvoker, DoFnSignature, _OutputHandler
from apache_beam.runners.dask import dask_runner as beam_dask
from apache_beam.runners.dask import transform_evaluator as beam_ops
from apache_beam.runners.dask.overrides import dask_overrides
from apache_beam.transforms.sideinputs import SideInputMap
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.windowed_value import WindowedValue

__all__ = ["DaskRunner"]

log = logging.getLogger("shardprep")
_GLOBAL = (GlobalWindow(),)


def _select(partition: Iterable[tuple], tag: str | None) -> list:
    """One output of a ParDo's partition of ``(tag, element)`` pairs, as a list."""
    return [element for t, element in partition if t == tag]


def _materialize(partition: Iterable[Any]) -> list:
    return list(partition)


def _concat(parts: Iterable[list]) -> list:
    return [x for part in parts for x in part]


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


def _run_dofn(partition: Iterable[Any], step: str, signature_fn: Any, window_fn: Any, label: str, args: list,
              kwargs: dict, side_specs: Sequence[tuple], *side_values: list) -> list[tuple[str | None, Any]]:
    """One Dask partition through a DoFn, as one bundle; returns ``(tag, element)`` pairs."""
    signature, new = _signature(step, signature_fn)
    receivers = beam_ops.OneReceiver()
    side_inputs = [
        SideInputMap(view_class, view_options, [WindowedValue(v, 0, _GLOBAL) for v in values])
        for (view_class, view_options), values in zip(side_specs, side_values)
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
        context=DoFnContext(label, state=None),
        side_inputs=side_inputs,
        input_args=args,
        input_kwargs=kwargs,
        user_state_context=None,
        bundle_finalizer_param=DoFn.BundleFinalizerParam(),
    )
    if new:
        invoker.invoke_setup()
    invoker.invoke_start_bundle()
    for item in partition:
        invoker.invoke_process(beam_ops.get_windowed_value(item, window_fn))
    invoker.invoke_finish_bundle()
    out = []
    for value in receivers.values:  # TaggedOutput(tag, windowed) or, for the main output, windowed
        tag, windowed = (value.tag, value.value) if isinstance(value, TaggedOutput) else (None, value)
        out.append((tag, windowed.value))
    return out


@dataclasses.dataclass
class _Visitor(PipelineVisitor):
    """Builds one bag per leaf transform; ParDo bags hold ``(tag, element)`` pairs."""

    bag_kwargs: dict
    token: str = dataclasses.field(default_factory=lambda: uuid.uuid4().hex)  # this run, for ``_SET_UP``
    bags: dict = dataclasses.field(default_factory=dict)
    tagged: set = dataclasses.field(default_factory=set)
    consumed: set = dataclasses.field(default_factory=set)

    def bag_of(self, pcoll: pvalue.PValue) -> Any:
        producer = pcoll.producer
        self.consumed.add(producer)
        bag = self.bags[producer]
        if producer in self.tagged:
            bag = bag.map_partitions(_select, pcoll.tag)
        return bag

    def visit_transform(self, node: AppliedPTransform) -> None:
        inputs = [self.bag_of(p) for p in node.inputs if not isinstance(p, pvalue.PBegin)]
        op_class = beam_ops.TRANSLATIONS.get(node.transform.__class__, beam_ops.NoOp)
        if op_class is beam_ops.ParDo:
            self.bags[node] = self._pardo(node, inputs[0])
            self.tagged.add(node)
            return
        op = op_class(node, bag_kwargs=self.bag_kwargs)
        if op_class is beam_ops.Flatten:
            self.bags[node] = op.apply(inputs).map_partitions(_materialize)
        elif op_class is beam_ops.GroupByKey:
            self.bags[node] = op.apply(inputs[0]).map_partitions(_materialize)
        else:  # Create (lists), NoOp (the input itself)
            self.bags[node] = op.apply(inputs[0] if inputs else None)

    def _pardo(self, node: AppliedPTransform, bag: Any) -> Any:
        transform = node.transform  # args and kwargs hold placeholders where the side inputs go
        main = next(iter(node.main_inputs.values()))
        window_fn = main.windowing.windowfn if hasattr(main, "windowing") else None
        specs, values = [], []
        for si in node.side_inputs:
            specs.append((type(si), si._view_options()))
            values.append(self.bag_of(si.pvalue).reduction(list, _concat))  # one dependency, computed once
        return bag.map_partitions(
            _run_dofn, f"{self.token}/{node.full_label}", transform.fn, window_fn, transform.label,
            list(transform.args), dict(transform.kwargs), specs,
            *values,
        )

    def sinks(self) -> list:
        return [bag for node, bag in self.bags.items() if node not in self.consumed]


class DaskRunner(beam_dask.DaskRunner):
    """Runs a batch pipeline on a ``dask.distributed`` cluster (``--dask_client_address``).

    The result's ``client`` is open until the caller closes it.
    """

    def run_pipeline(self, pipeline: Any, options: Any) -> beam_dask.DaskRunnerResult:
        import dask
        import dask.distributed as ddist

        dask_options = options.view_as(beam_dask.DaskOptions).get_all_options(drop_default=True, current_only=True)
        bag_kwargs = beam_dask.DaskOptions._extract_bag_kwargs(dask_options)
        client = ddist.Client(**dask_options)
        pipeline.replace_all(dask_overrides())
        visitor = _Visitor(bag_kwargs)
        pipeline.visit(visitor)
        sinks = visitor.sinks()
        log.info("Dask: computing %d sink(s) of %d steps on %s", len(sinks), len(visitor.bags), client.scheduler.address)
        futures = client.compute(list(dask.optimize(*sinks)))
        return beam_dask.DaskRunnerResult(client, futures)
