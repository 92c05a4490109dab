"""TF_CONFIG parsing and validation (TF-free), and the training settings."""
from __future__ import annotations

import json

import pytest

from trainer.cluster import ClusterError, ClusterInfo, make_tf_config, parse_tf_config
from trainer.settings import ConfigError, TrainConfig, global_batch_size


def _cfg(cluster: dict, task_type: str = "worker", index: int = 0) -> str:
    return json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}})


TWO = {"worker": ["h0:1000", "h1:1000"]}
WITH_CHIEF = {"chief": ["c:1"], "worker": ["w0:1", "w1:1"]}


@pytest.mark.parametrize(
    "text, workers, index, chief",
    [
        (None, 1, 0, True),
        ("", 1, 0, True),
        (_cfg(TWO, "worker", 0), 2, 0, True),
        (_cfg(TWO, "worker", 1), 2, 1, False),
        (_cfg(WITH_CHIEF, "chief", 0), 3, 0, True),
        (_cfg(WITH_CHIEF, "worker", 0), 3, 1, False),
        (_cfg(WITH_CHIEF, "worker", 1), 3, 2, False),
        (json.dumps({"cluster": TWO, "task": {"type": "worker", "index": "1"}}), 2, 1, False),
    ],
)
def test_roles(text: str | None, workers: int, index: int, chief: bool) -> None:
    info = parse_tf_config(text)
    assert (info.num_workers, info.worker_index, info.is_chief) == (workers, index, chief)
    assert info.is_distributed == bool(text)


@pytest.mark.parametrize(
    "text, message",
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        (json.dumps({"task": {"type": "worker", "index": 0}}), "no 'cluster'"),
        (json.dumps({"cluster": TWO}), "no 'task'"),
        (json.dumps({"cluster": TWO, "task": {"type": "worker"}}), "no 'task'"),
        (_cfg(TWO, "evaluator", 0), "task type 'evaluator' is unknown"),
        (_cfg({**TWO, "ps": ["p:1"]}, "worker", 0), "task type(s) ['ps']"),
        (_cfg(TWO, "chief", 0), "task type 'chief' has no addresses"),
        (_cfg(TWO, "worker", 2), "index 2 is out of range: the cluster has 2 worker task(s)"),
        (_cfg(TWO, "worker", -1), "index -1 is out of range"),
        (json.dumps({"cluster": TWO, "task": {"type": "worker", "index": "x"}}), "not an integer"),
        (_cfg({"worker": ["h0:1000", "h0:1000"]}), "'h0:1000' is used twice (worker[0] and worker[1])"),
        (_cfg({"chief": ["h:1"], "worker": ["h:1"]}), "used twice (chief[0] and worker[0])"),
        (_cfg({"chief": ["a:1", "b:1"], "worker": ["h:1"]}, "worker", 0), "2 chief tasks"),
        (_cfg({"worker": ["nohost"]}), "is not HOST:PORT"),
        (_cfg({"worker": "h:1"}), "must be a list"),
    ],
)
def test_refusals(text: str, message: str) -> None:
    with pytest.raises(ClusterError) as e:
        parse_tf_config(text)
    assert message in str(e.value)


def test_make_tf_config_round_trips() -> None:
    addresses = ["127.0.0.1:5000", "127.0.0.1:5001", "127.0.0.1:5002"]
    for i in range(3):
        info = parse_tf_config(make_tf_config(addresses=addresses, index=i))
        assert info == ClusterInfo(jobs={"worker": tuple(addresses)}, task_type="worker", task_index=i)
    with pytest.raises(ClusterError, match="out of range"):
        make_tf_config(addresses=addresses, index=3)


BASE = {"data": "d", "model": "mlp", "label": "label", "model_dir": "m", "epochs": 1}


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"per_replica_batch": 8, "global_batch": 16}, "give one of --per-replica-batch B or --global-batch G"),
        ({"features": ("x",), "exclude_features": ("y",)}, "not both"),
        ({"per_replica_batch": 0}, "--per-replica-batch 0"),
        ({"per_replica_batch": 8, "epochs": 0}, "--epochs 0"),
        ({"per_replica_batch": 8, "loop": "scan"}, "--loop 'scan': expected one of custom, fit"),
        ({"per_replica_batch": 8, "features": ("x", "label")}, "names the label"),
        ({"per_replica_batch": 8, "num_classes": 1}, "--num-classes 1"),
    ],
)
def test_config_refusals(changes: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=None) as e:
        TrainConfig(**{**BASE, **changes})
    assert message in str(e.value)


def test_naive_baseline_refuses_keras_fit() -> None:
    """The per-file baseline (benchmark code) measures every replica step: custom loop only."""
    from benchmarks.naive_trainer import check_config

    check_config(TrainConfig(**BASE, per_replica_batch=8))
    with pytest.raises(ConfigError, match="only with --loop custom"):
        check_config(TrainConfig(**BASE, per_replica_batch=8, loop="fit"))


def test_global_batch() -> None:
    assert global_batch_size(TrainConfig(**BASE, per_replica_batch=8), num_replicas=4) == 32
    assert global_batch_size(TrainConfig(**BASE, global_batch=96), num_replicas=4) == 96
    with pytest.raises(ConfigError, match=r"--global-batch 100 does not divide among 3 replicas.*use --global-batch 99 or 102"):
        global_batch_size(TrainConfig(**BASE, global_batch=100), num_replicas=3)
