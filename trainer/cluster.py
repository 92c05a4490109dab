"""TF_CONFIG: parse, validate, and say which worker this process is.

TF-free, so the launcher and the argument checks run without importing TensorFlow. Only the
chief and worker task types exist under MultiWorkerMirroredStrategy; the chief (or, without one,
worker 0) is worker index 0 of the cluster, as TF's ``multi_worker_util.id_in_cluster`` counts.
"""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

from trainer.refusals import TrainerError

__all__ = ["ClusterError", "ClusterInfo", "make_tf_config", "parse_tf_config"]

TASK_TYPES = ("chief", "worker")


class ClusterError(TrainerError):
    """TF_CONFIG that cannot describe a MultiWorkerMirroredStrategy cluster."""


@dataclasses.dataclass(frozen=True)
class ClusterInfo:
    """The cluster and this process's place in it.

    ``jobs`` maps task type to addresses; empty for a single-process run (no TF_CONFIG).
    """

    jobs: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    task_type: str = "worker"
    task_index: int = 0

    def __post_init__(self) -> None:
        if not self.jobs:
            return
        unknown = sorted(set(self.jobs) - set(TASK_TYPES))
        if unknown:
            raise ClusterError(
                f"TF_CONFIG cluster has task type(s) {unknown}: MultiWorkerMirroredStrategy runs only "
                f"{' and '.join(TASK_TYPES)} tasks (no ps or evaluator); remove them"
            )
        if len(self.jobs.get("chief", ())) > 1:
            raise ClusterError(f"TF_CONFIG cluster has {len(self.jobs['chief'])} chief tasks: expected at most one")
        if self.task_type not in TASK_TYPES:
            raise ClusterError(
                f"TF_CONFIG task type {self.task_type!r} is unknown: expected one of {', '.join(TASK_TYPES)}"
            )
        if self.task_type not in self.jobs:
            raise ClusterError(
                f"TF_CONFIG task type {self.task_type!r} has no addresses in the cluster "
                f"(cluster has {', '.join(sorted(self.jobs))})"
            )
        count = len(self.jobs[self.task_type])
        if not 0 <= self.task_index < count:
            raise ClusterError(
                f"TF_CONFIG task index {self.task_index} is out of range: the cluster has {count} "
                f"{self.task_type} task(s), so the index must be 0..{count - 1}"
            )
        seen: dict[str, str] = {}
        for job, addresses in self.jobs.items():
            for i, address in enumerate(addresses):
                where = f"{job}[{i}]"
                host, sep, port = address.rpartition(":")
                if not sep or not host or not port.isdigit():
                    raise ClusterError(f"TF_CONFIG address {where} = {address!r} is not HOST:PORT")
                if address in seen:
                    raise ClusterError(
                        f"TF_CONFIG address {address!r} is used twice ({seen[address]} and {where}): "
                        f"every task needs its own HOST:PORT"
                    )
                seen[address] = where

    @property
    def num_workers(self) -> int:
        """Training processes in the cluster (chief included); 1 without TF_CONFIG."""
        return max(1, sum(len(self.jobs.get(t, ())) for t in TASK_TYPES))

    @property
    def worker_index(self) -> int:
        """This process's index among all training processes; 0 is the chief."""
        if not self.jobs:
            return 0
        if self.task_type == "chief":
            return 0
        return self.task_index + len(self.jobs.get("chief", ()))

    @property
    def is_chief(self) -> bool:
        return self.worker_index == 0

    @property
    def is_distributed(self) -> bool:
        return bool(self.jobs)

    def describe(self) -> str:
        """One log line: the cluster and this process's role."""
        if not self.jobs:
            return "single process (no TF_CONFIG)"
        cluster = "; ".join(f"{job}: {', '.join(addrs)}" for job, addrs in self.jobs.items())
        me = f"{self.task_type} {self.task_index}"
        if me != f"worker {self.worker_index}":
            me += f" = worker {self.worker_index}"
        return f"cluster of {self.num_workers} worker(s) [{cluster}]; this process is {me}{' (chief)' if self.is_chief else ''}"


def parse_tf_config(text: str | None) -> ClusterInfo:
    """Parses the TF_CONFIG value; ``None`` or blank means a single-process run."""
    if text is None or not text.strip():
        return ClusterInfo()
    try:
        doc: Any = json.loads(text)
    except (ValueError, RecursionError) as e:  # RecursionError: nesting deeper than Python's stack
        raise ClusterError(f"TF_CONFIG is not valid JSON ({type(e).__name__}: {e}): {text[:200]!r}") from None
    if not isinstance(doc, dict):
        raise ClusterError(f"TF_CONFIG must be a JSON object with 'cluster' and 'task', got {type(doc).__name__}")
    cluster, task = doc.get("cluster"), doc.get("task")
    if not isinstance(cluster, dict) or not cluster:
        raise ClusterError("TF_CONFIG has no 'cluster' (expected {\"cluster\": {\"worker\": [\"host:port\", ...]}, ...})")
    if not isinstance(task, dict) or "type" not in task or "index" not in task:
        raise ClusterError(
            "TF_CONFIG has no 'task' with 'type' and 'index' (expected \"task\": {\"type\": \"worker\", \"index\": 0})"
        )
    jobs: dict[str, tuple[str, ...]] = {}
    for job, addresses in cluster.items():
        if isinstance(addresses, str) or not isinstance(addresses, Sequence):
            raise ClusterError(f"TF_CONFIG cluster[{job!r}] must be a list of HOST:PORT strings")
        jobs[str(job)] = tuple(str(a) for a in addresses)
    index = task["index"]
    if isinstance(index, bool) or not isinstance(index, int):
        try:
            index = int(index)
        except (TypeError, ValueError):
            raise ClusterError(f"TF_CONFIG task index {task['index']!r} is not an integer") from None
    return ClusterInfo(jobs=jobs, task_type=str(task["type"]), task_index=index)


def make_tf_config(*, addresses: Sequence[str], index: int) -> str:
    """TF_CONFIG for worker ``index`` of a worker-only cluster (what the launcher sets)."""
    info = ClusterInfo(jobs={"worker": tuple(addresses)}, task_type="worker", task_index=index)
    return json.dumps({"cluster": {"worker": list(info.jobs["worker"])}, "task": {"type": "worker", "index": index}})
