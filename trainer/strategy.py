"""MultiWorkerMirroredStrategy from a validated cluster, with a heartbeat while workers connect.

Connecting the workers and setting up the first collectives can take minutes of silence (every
worker waits for the slowest to start); the heartbeat says so in the log, so it is not taken for a
hang. ``time_allreduce`` measures what one all-reduce of the model's gradients costs on this cluster.
"""
from __future__ import annotations

import contextlib
import logging
import statistics
import threading
import time
from collections.abc import Iterator, Sequence

import keras
import tensorflow as tf

from trainer.cluster import ClusterInfo

__all__ = ["configure_coordination", "heartbeat", "local_gpus", "make_strategy", "resolve_communication", "set_precision", "time_allreduce"]

log = logging.getLogger(__name__)
_IMPL = tf.distribute.experimental.CommunicationImplementation


def local_gpus() -> int:
    return len(tf.config.list_physical_devices("GPU"))


def resolve_communication(requested: str, *, gpus: int) -> str:
    """``nccl`` or ``ring``: NCCL only when asked for (or auto) and GPUs exist; warns otherwise."""
    if requested == "ring":
        return "ring"
    if gpus:
        return "nccl"
    if requested == "nccl":
        log.warning("--communication nccl asked for, but this worker has no GPU: using ring all-reduce over gRPC")
    return "ring"


@contextlib.contextmanager
def heartbeat(what: str, *, every_s: float = 10.0) -> Iterator[None]:
    """Logs ``what`` every ``every_s`` seconds until the block ends."""
    done = threading.Event()
    start = time.monotonic()

    def beat() -> None:
        while not done.wait(every_s):
            log.info("%s: still waiting after %.0fs (every worker must start and connect first)", what, time.monotonic() - start)

    thread = threading.Thread(target=beat, name="heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
    log.info("%s: done in %.1fs", what, time.monotonic() - start)


def make_strategy(*, cluster: ClusterInfo, communication: str, gpus: int) -> tf.distribute.MultiWorkerMirroredStrategy:
    """MWMS over ``cluster``; returns once every worker has joined (the first collective ran)."""
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=_IMPL.NCCL if resolve_communication(communication, gpus=gpus) == "nccl" else _IMPL.RING
    )
    resolver = None
    if cluster.is_distributed:
        resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
            tf.train.ClusterSpec({job: list(addrs) for job, addrs in cluster.jobs.items()}),
            task_type=cluster.task_type,
            task_id=cluster.task_index,
            num_accelerators={"GPU": gpus} if gpus else None,
            rpc_layer="grpc",
        )
    if resolver is not None:
        configure_coordination(resolver.cluster_spec())
    log.info("%s", cluster.describe())
    with heartbeat(f"worker {cluster.worker_index}: connecting to {cluster.num_workers} worker(s)"):
        strategy = tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver, communication_options=options)
        time_allreduce(strategy, [(1,)], repeats=1)
    log.info(
        "strategy ready: %d replica(s) in sync, %s all-reduce",
        strategy.num_replicas_in_sync,
        options.implementation.name.lower(),
    )
    return strategy


# A worker on a busy 2-core machine can stall for tens of seconds (TF's default heartbeat timeout is
# 10 s, after which the service declares it dead and stops the job). A worker that really died
# (SIGKILL, out of memory) closes its connections and is seen at once, whatever these say.
HEARTBEAT_TIMEOUT_S = 120


def configure_coordination(cluster_spec: tf.train.ClusterSpec) -> None:
    """The coordination service MWMS would set up, with a heartbeat timeout sized for a loaded machine.
    MWMS keeps a service configured before it (TF 2.21: it configures one only when
    ``context.coordination_service`` is None); there is no public API for this timeout."""
    from tensorflow.compiler.xla.tsl.protobuf import coordination_config_pb2
    from tensorflow.python.distribute import multi_worker_util
    from tensorflow.python.eager import context

    if context.context().coordination_service is not None:
        return
    jobs = [coordination_config_pb2.CoordinatedJob(name=job, num_tasks=cluster_spec.num_tasks(job))
            for job in ("chief", "worker") if job in cluster_spec.jobs]
    context.context().configure_coordination_service(
        service_type="standalone",
        service_leader=multi_worker_util.coordination_leader(cluster_spec),
        coordinated_jobs=jobs,
        heartbeat_timeout_in_ms=HEARTBEAT_TIMEOUT_S * 1000,
    )


def time_allreduce(strategy: tf.distribute.Strategy, shapes: Sequence[Sequence[int]], *, repeats: int = 9) -> float:
    """Median seconds of one SUM all-reduce of float32 tensors of ``shapes`` across all replicas."""

    @tf.function
    def reduce_once() -> tf.Tensor:
        def replica_fn() -> tf.Tensor:
            grads = [tf.zeros(shape, tf.float32) for shape in shapes]
            reduced = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, grads)
            return reduced[0]

        return strategy.run(replica_fn)

    def run() -> float:
        start = time.perf_counter()
        for value in strategy.experimental_local_results(reduce_once()):
            value.numpy()
        return time.perf_counter() - start

    run()  # builds the function and the collective groups, and lines the workers up
    # The median: the first calls can include a wait for a worker that arrived later.
    return statistics.median(run() for _ in range(repeats))


def set_precision(mode: str, *, gpus: int) -> tuple[str, bool]:
    """Sets Keras's global dtype policy; returns (policy name, whether the loss needs scaling)."""
    if mode == "off":
        return "float32", False
    dtype = mode if mode != "auto" else ("float16" if gpus else "bfloat16")
    policy = f"mixed_{dtype}"
    keras.mixed_precision.set_global_policy(policy)
    return policy, dtype == "float16"
