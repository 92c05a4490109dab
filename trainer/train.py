"""``python -m trainer.train``: train on a shardprep data set on this worker of a MWMS cluster.

Run the same command on every machine of the cluster, with TF_CONFIG set for each (or through
``python -m trainer.launch`` on one machine). Without TF_CONFIG it trains in a single process.
Hidden flag, for tests and debugging: ``--debug-record-ids`` (each worker logs the ids of the
records of every step, ``trainer.idlog``). Errors go through ``shardprep.cli.main``: one line, exit
2 for a job that cannot work, 1 for a run that failed, 130 for an interrupt.
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import logging
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import NoReturn

from shardprep import cli
from shardprep.errors import RunError
from trainer import defaults
from trainer.bert_task import BERT_SIZES
from trainer.cluster import parse_tf_config
from trainer.settings import (
    AUGMENTS,
    AUTO,
    COMMUNICATIONS,
    DEFAULT_AUGMENT,
    EVAL_RECORDS,
    EXPORTS,
    LOOPS,
    PRECISIONS,
    TrainConfig,
)

__all__ = ["build_parser", "config_from_args", "main", "parse_args"]

PROG = "trainer.train"


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """The trainer's flags (``prog`` for another entry point that takes the same ones)."""
    p = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="data set folder or URL (holds manifest.json)")
    p.add_argument("--split", default="train", help="split to train on (default: train)")
    p.add_argument("--data-version", type=int, metavar="N",
                   help="train on the data set's kept manifest version N (default: the current one; a resume keeps "
                   "the version its checkpoints were trained on)")
    p.add_argument("--model", default=AUTO,
                   help="mlp, text, image (a residual CNN over image/encoded), bert (on shardprep.run --task bert-pretraining "
                        "or text-classification shards), or module:function returning a keras.Model "
                        "(default: image when the data set has image/encoded, else mlp)")
    p.add_argument("--label", default="",
                   help="feature to predict: int64 = class id, string = class name (needs --statistics), float32 = regression "
                        "(required, except for --model bert, which takes it from the data set's text task)")
    p.add_argument("--features", default="", help="comma-separated input features (default: all the model can use, "
                                                  "less identifier-like string columns)")
    p.add_argument("--exclude-features", default="", help="comma-separated features to leave out of the default ones")
    p.add_argument("--skip-missing-label", action="store_true",
                   help="skip the records that lack the label (counted and logged) instead of refusing the data set")
    p.add_argument("--num-classes", type=int, default=None,
                   help="classes of the label (default: its class names or string values, else max(label)+1 from the "
                        "manifest's statistics, else 2)")
    p.add_argument("--image-size", type=int, default=64, help="--model image: square input size in pixels (default: 64)")
    p.add_argument("--augment", choices=AUGMENTS, default=DEFAULT_AUGMENT,
                   help="--model image: random changes to training images: none, crop (a random shift of up to 1/8), "
                        "or crop,flip (also mirrored left-right: never for digits, text, signs or logos) "
                        f"(default: {DEFAULT_AUGMENT})")
    p.add_argument("--bert-size", choices=tuple(BERT_SIZES),
                   help="--model bert: tiny (2 layers, hidden 128), mini (4, 256), small (4, 512) or base (12, 768), built "
                        "from a configuration (default: the --init-from run's, else mini)")
    p.add_argument("--init-from", metavar="DIR",
                   help="--model bert on text-classification shards: start the encoder from the latest checkpoint of the "
                        "pre-training run whose --model-dir is DIR")
    batch = p.add_mutually_exclusive_group()
    batch.add_argument("--per-replica-batch", type=int,
                       help="examples per replica per step (default: from the data set's size, trainer.defaults)")
    batch.add_argument("--global-batch", type=int, help="examples per step over all replicas (must divide by them)")
    p.add_argument("--epochs", type=int, help=f"passes over the data (default: about {defaults.TARGET_STEPS} steps in all)")
    p.add_argument("--model-dir", help="checkpoints, TensorBoard, summaries and the exported model "
                                       "(default: model-<name of --data> in the current folder)")
    p.add_argument("--loop", choices=LOOPS, default="custom", help="custom loop or Keras fit")
    p.add_argument("--communication", choices=COMMUNICATIONS, default="auto")
    p.add_argument("--learning-rate", type=float, default=1e-3)
    p.add_argument("--scale-lr", action="store_true", help="multiply the learning rate by the replica count")
    p.add_argument(
        "--mixed-precision", nargs="?", const="auto", default="off", choices=PRECISIONS,
        help="mixed precision: float16 (with loss scaling), bfloat16, or auto (float16 on GPU, bfloat16 on CPU)",
    )
    p.add_argument("--steps-per-epoch", type=int, help="cap on steps per epoch (never more than the data gives)")
    p.add_argument("--checkpoint-every", type=int, default=0, help="steps between checkpoints (0: about every 60 s and at every epoch's end)")
    p.add_argument("--shuffle-buffer", type=int, default=1024,
                   help="records in the per-worker shuffle buffer, reshuffled every epoch (seed + epoch); 0: file order")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--stage-dir", help="copy this worker's shards to this local folder first")
    p.add_argument("--log-every", type=int, default=50, help="steps between progress lines")
    p.add_argument("--export", choices=EXPORTS, default="keras", help="format of the final model")
    p.add_argument("--eval-split", help="after training, loss and accuracy on this split (e.g. eval)")
    p.add_argument("--eval-records", type=_eval_records, default=EVAL_RECORDS, metavar="N|all",
                   help=f"--eval-split: score about N of its records at most, each worker its first batches "
                        f"(default: {EVAL_RECORDS:,}); all: every record once")
    p.add_argument("--verify-records", action="store_true",
                   help="read this worker's shards and check every record's CRC before the first step")
    p.add_argument("--debug-record-ids", action="store_true", help=argparse.SUPPRESS)
    return p


def parse_args(argv: Sequence[str] | None = None) -> TrainConfig:
    return config_from_args(build_parser().parse_args(argv))


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """The ``TrainConfig`` of parsed flags (which refuses values that cannot work)."""
    return TrainConfig(
        data=args.data,
        data_version=args.data_version,
        split=args.split,
        model=args.model,
        label=args.label,
        features=_names(args.features),
        exclude_features=_names(args.exclude_features),
        skip_missing_label=args.skip_missing_label,
        num_classes=args.num_classes,
        per_replica_batch=args.per_replica_batch,
        global_batch=args.global_batch,
        epochs=args.epochs,
        model_dir=args.model_dir or defaults.default_model_dir(args.data),
        loop=args.loop,
        communication=args.communication,
        learning_rate=args.learning_rate,
        scale_lr=args.scale_lr,
        mixed_precision=args.mixed_precision,
        steps_per_epoch=args.steps_per_epoch,
        checkpoint_every=args.checkpoint_every,
        shuffle_buffer=args.shuffle_buffer,
        seed=args.seed,
        stage_dir=args.stage_dir,
        log_every=args.log_every,
        export=args.export,
        eval_split=args.eval_split,
        eval_records=args.eval_records,
        record_ids=args.debug_record_ids,
        verify_records=args.verify_records,
        image_size=args.image_size,
        augment=args.augment,
        bert_size=args.bert_size,
        init_from=args.init_from,
    )


def _names(text: str) -> tuple[str, ...]:
    return tuple(f.strip() for f in text.split(",") if f.strip())


def _eval_records(text: str) -> int | None:
    """``--eval-records``: a count, or ``all`` (None: every record)."""
    if text.strip().lower() == "all":
        return None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of records or all, not {text!r}") from None


def _tf_error_line(error: Exception) -> str:
    """The line of a TensorFlow error that says what happened (not the traceback of the graph)."""
    lines = [line.strip() for line in str(getattr(error, "message", error)).splitlines()]
    lines = [x for x in lines if x and not x.startswith(("Graph execution error", "Detected at node", "File ", "[["))]
    cause = next((x for x in lines if "aborted by" in x or "Connection" in x), lines[0] if lines else "")
    return cause + (" (another worker failed or lost its connection)" if "Collective" in cause else "")


def _main(argv: Sequence[str] | None, *, then: Callable[[dict], None] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stdout, force=True)
    for handler in logging.getLogger().handlers:  # control characters from paths and names escaped (cli.safe)
        handler.setFormatter(cli.SafeFormatter("%(asctime)s %(levelname)s %(message)s", tracebacks=True))
    for noisy in ("tensorflow", "absl"):  # the trainer logs the cluster and checkpoints itself
        logging.getLogger(noisy).setLevel(logging.WARNING)
    config = parse_args(argv)
    cluster = parse_tf_config(os.environ.get("TF_CONFIG"))
    # Imports TensorFlow: only once the settings are sound.
    from trainer.worker import run_job

    with tf_errors_as_run_errors():
        run_job(config, cluster=cluster, then=then)
    return 0


@contextlib.contextmanager
def tf_errors_as_run_errors() -> Iterator[None]:
    """A TensorFlow error (a peer failed, a collective broke) becomes a ``RunError`` of one good line."""
    try:
        yield
    except Exception as e:
        text = str(getattr(e, "message", e))
        if type(e).__module__.startswith("tensorflow") and "assertion failed: [--" in text:
            # The input pipeline's checks of the data against the flags (trainer.data): the flag's message, exit 2.
            from trainer.labels import LabelError

            inner = text.split("assertion failed: [", 1)[1].split("]\n", 1)[0].rstrip("]").replace("\\'", "'")
            raise LabelError(inner) from e
        if type(e).__module__.startswith("tensorflow"):
            raise RunError(f"{type(e).__name__}: {_tf_error_line(e)}") from e
        raise


def _end_process(summary: dict) -> NoReturn:
    """Ends a worker process whose job is done (checkpoint, export and summary written, logged) without
    TensorFlow's teardown: releasing the tf.data iterators can wait long, every
    thread idle (tf.data's autotuning thread asleep), before the process can exit."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def main(argv: Sequence[str] | None = None, *, standalone: bool = False) -> int:
    """The command; ``standalone`` (``python -m trainer.train``): the process ends as soon as the job is done."""
    return cli.main(PROG, functools.partial(_main, then=_end_process if standalone else None), argv)


if __name__ == "__main__":
    sys.exit(main(standalone=True))
