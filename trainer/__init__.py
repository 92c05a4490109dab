"""TensorFlow side of shardprep: manifest-driven multi-worker training. The front door: every name a
user imports is listed below, and importing this package (and those names) does not import TensorFlow.

Your own MWMS loop: ``open_input`` (``trainer.input``) gives each worker its exactly balanced batches,
epochs that end, Keras ``fit`` under MWMS, and a resume position that survives another worker count
(``trainer.elastic``). ``python -m trainer.launch`` (``trainer.launch.Launcher``) starts W local
workers of any program, each with its own ``TF_CONFIG`` (``make_tf_config``); ``parse_tf_config``
reads it back.

The outer loop as a library (as Orbit's): ``Controller(runner=, settings=, progress=, checkpoints=,
evaluator=, exporter=)`` trains a ``StepRunner`` for ``LoopSettings``, saving through a
``CheckpointSaver``, then scores with an ``Evaluator`` and writes the model with an ``Exporter``
(``RunResult``). Errors: ``TrainerError`` (a ``shardprep.errors.UsageError``: exit 2) and its kinds.

Entry points (commands, kept thin: flags to the library, through ``shardprep.cli.main``), apart from
the library: ``trainer.train`` (one worker), ``trainer.launch`` (W local workers on loopback),
``trainer.evaluate`` (score another data set with a trained model), ``trainer.tfjob`` (a Kubeflow
TFJob), ``trainer.image_rate`` (the image input's rate), and the demos ``trainer.demo`` (the product
on sample data), ``trainer.demo_images``, ``trainer.demo_text`` (text to a pre-trained BERT); their
sample data comes from ``demo_corpus``.

The library's modules: ``refusals`` (the errors), ``cluster`` (TF_CONFIG), ``settings``, ``defaults``
(settings chosen from the manifest), ``preflight`` (what each worker reads, checked before any
collective), ``input`` and ``elastic`` (the public input), ``features`` (what ``--model`` reads),
``staging``, ``data`` and ``image_input`` (tf.data), ``strategy`` (MWMS), ``models`` and
``image_model``, ``bert_task`` + ``bert`` (``--model bert``), ``objective`` (the loss and accuracies of
each kind of label), ``session`` (strategy, model, summary), ``controller`` (the outer loop) driving a
step runner: ``loop`` (``CustomRunner``) or ``fit`` (``FitRunner``; ``keras_compat``: the Keras
workarounds it needs), ``checkpoints``, ``collaborators`` (the job's evaluator and exporter), ``resume``
(a resume must keep the input plan), ``scoring`` (loss and accuracy of a split), ``eta`` (the planned
steps, the ETA, the warning for a long run without a GPU), ``labels`` and
``model_card`` (label vocabularies; what ``trainer.evaluate`` reads beside an export), ``metrics``,
``run_table`` (the end-of-run table), ``idlog`` (``--debug-record-ids``), ``worker`` (one worker's run: the
composition root that wires the controller).
"""
from __future__ import annotations

from trainer.cluster import ClusterError, ClusterInfo, make_tf_config, parse_tf_config
from trainer.controller import (
    CheckpointSaver,
    Controller,
    Evaluator,
    Exporter,
    LoopSettings,
    RunResult,
    StepRunner,
)
from trainer.elastic import ElasticError
from trainer.input import Input
from trainer.input import open as open_input
from trainer.labels import LabelError
from trainer.model_card import CardError
from trainer.preflight import DataSetError, InputPlan, plan_input
from trainer.refusals import CheckpointError, TrainerError
from trainer.resume import ResumeError
from trainer.settings import ConfigError, TrainConfig

__all__ = [
    "CardError",
    "CheckpointError",
    "CheckpointSaver",
    "ClusterError",
    "ClusterInfo",
    "ConfigError",
    "Controller",
    "DataSetError",
    "ElasticError",
    "Evaluator",
    "Exporter",
    "Input",
    "InputPlan",
    "LabelError",
    "LoopSettings",
    "ResumeError",
    "RunResult",
    "StepRunner",
    "TrainConfig",
    "TrainerError",
    "make_tf_config",
    "open_input",
    "parse_tf_config",
    "plan_input",
]

