"""TensorFlow side of shardprep: manifest-driven multi-worker training.

Entry points: ``python -m trainer.train`` (one worker), ``python -m trainer.launch`` (W local
workers on loopback), ``python -m trainer.demo`` (the whole product on sample data), ``python -m trainer.demo_text`` (text to a
pre-trained BERT). Modules:
``cluster`` (TF_CONFIG), ``config`` (settings), ``preflight`` (what each worker reads, checked),
``features`` (what ``--model`` reads), ``staging``, ``data`` (tf.data), ``strategy`` (MWMS),
``models``, ``bert_task`` + ``bert`` (``--model bert``: the task from the manifest, keras-hub's encoder and
BERT's heads), ``objective`` (the loss and accuracies of each kind of label), ``session`` (strategy, model, summary), ``controller`` (the outer loop: epochs,
checkpoints, progress, eval, export) driving ``loop.CustomRunner`` or ``fit.FitRunner``
(``keras_compat``: the Keras workarounds ``fit`` needs), ``checkpoints``, ``resume`` (a resume must
keep the input plan), ``evaluate`` (``--eval-split``), ``metrics``, ``idlog`` (``--debug-record-ids``),
``job`` (one worker's run: the composition root), ``tfjob`` (Kubeflow). Importing this package, and
the names below, does not import TensorFlow.

Your own MWMS loop: ``trainer.input`` (``open_input`` below) gives each worker its balanced batches,
epochs that end, Keras ``fit`` and a resume position that survives another worker count (``elastic``).
"""
from __future__ import annotations

from trainer.cluster import ClusterError, ClusterInfo, parse_tf_config
from trainer.config import ConfigError, TrainConfig
from trainer.errors import TrainerError
from trainer.input import Input
from trainer.input import open as open_input
from trainer.preflight import DataSetError, InputPlan, plan_input
from trainer.resume import ResumeError

__all__ = [
    "ClusterError",
    "ClusterInfo",
    "ConfigError",
    "DataSetError",
    "Input",
    "InputPlan",
    "ResumeError",
    "TrainConfig",
    "TrainerError",
    "open_input",
    "parse_tf_config",
    "plan_input",
]
