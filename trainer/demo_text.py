"""``python -m trainer.demo_text`` (``make demo-text``): text to a pre-trained BERT, in a few minutes on 2 cores.

1. Writes a corpus of documents on topics (``trainer.demo_corpus``) as 3 .txt files in BERT's layout.
2. Makes BERT pre-training shards with ``python -m shardprep.run --task bert-pretraining --train-vocab
   --split train=0.9,eval=0.1`` (the split is of instances: an eval instance's document may have given
   training instances too, masked differently).
3. Pre-trains a tiny BERT on 2 local workers with ``python -m trainer.launch ... --model bert --eval-split eval``.
4. Prints the workers' table (equal steps, no empty replica-steps) and the eval line, then the eval
   split's masked-LM accuracy next to the baseline of always predicting the training split's most
   frequent masked token (scored on the eval split), and next-sentence accuracy next to 0.5.
"""
from __future__ import annotations

import argparse
import collections
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from shardprep import manifest, naming
from trainer import demo_corpus
from trainer.run_table import read_summaries

__all__ = ["main", "majority_baseline", "pretrain", "shard_corpus"]

MAX_SEQ, MAX_PREDICTIONS = 64, 10


def shard_corpus(raw_dir: str, out_dir: str, *, workers: int, vocab_size: int, dupe_factor: int) -> None:
    """Runs the re-shard CLI on the corpus as a user would: a trained vocabulary, BERT's instances."""
    cmd = [
        sys.executable, "-m", "shardprep.run", "--input", os.path.join(raw_dir, "*.txt"), "--output", out_dir,
        "--task", "bert-pretraining", "--train-vocab", str(vocab_size), "--max-seq-length", str(MAX_SEQ),
        "--max-predictions-per-seq", str(MAX_PREDICTIONS), "--dupe-factor", str(dupe_factor), "--workers", str(workers),
        "--split", "train=0.9,eval=0.1", "--overwrite",
    ]
    print("$", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def pretrain(data_dir: str, model_dir: str, *, workers: int, size: str, steps: int, epochs: int,
             extra: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Pre-trains BERT-``size`` on ``workers`` local workers through the launcher; returns their summaries."""
    cmd = [
        sys.executable, "-m", "trainer.launch", "--workers", str(workers), "--",
        "--data", data_dir, "--model", "bert", "--bert-size", size, "--per-replica-batch", "32",
        "--epochs", str(epochs), "--steps-per-epoch", str(steps), "--model-dir", model_dir,
        "--shuffle-buffer", "4096", "--log-every", "50", "--eval-split", "eval", *extra,
    ]
    print("$", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)
    return read_summaries(model_dir, workers)


def _masked_tokens(data_dir: str, split: str) -> collections.Counter[int]:
    """How often each token id is a masked position's target in ``split`` (weight > 0)."""
    import tensorflow as tf

    spec = {"masked_lm_ids": tf.io.FixedLenFeature([MAX_PREDICTIONS], tf.int64),
            "masked_lm_weights": tf.io.FixedLenFeature([MAX_PREDICTIONS], tf.float32)}
    counts: collections.Counter[int] = collections.Counter()
    files = [naming.join(data_dir, s.path) for s in manifest.load(data_dir).splits[split].shards]
    for raw in tf.data.TFRecordDataset(files).batch(4096):
        batch = tf.io.parse_example(raw, spec)
        ids, weights = batch["masked_lm_ids"].numpy().ravel(), batch["masked_lm_weights"].numpy().ravel()
        counts.update(ids[weights > 0].tolist())
    return counts


def majority_baseline(data_dir: str) -> tuple[str, float]:
    """The training split's most frequent masked token, and its share of the eval split's masked tokens: the
    accuracy of always predicting it."""
    token = _masked_tokens(data_dir, "train").most_common(1)[0][0]
    held = _masked_tokens(data_dir, "eval")
    with open(naming.join(data_dir, manifest.load(data_dir).text["vocab"])) as f:
        vocab = f.read().split("\n")
    return vocab[token], held[token] / sum(held.values())


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="trainer.demo_text", description=__doc__.splitlines()[0])
    p.add_argument("--out", default="demo-text", help="demo folder (default: ./demo-text), replaced on every run")
    p.add_argument("--docs", type=int, default=2000, help="documents in the corpus")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--bert-size", default="tiny")
    p.add_argument("--steps", type=int, default=250, help="steps per epoch")
    p.add_argument("--epochs", type=int, default=2)
    args = p.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # the baseline reads the shards with TensorFlow here
    if os.path.exists(args.out):
        shutil.rmtree(args.out)
    raw, data, run = (os.path.join(args.out, name) for name in ("raw", "ds", "run"))
    demo_corpus.write_corpus(raw, docs=args.docs)
    try:
        shard_corpus(raw, data, workers=args.workers, vocab_size=400, dupe_factor=3)
        summaries = pretrain(data, run, workers=args.workers, size=args.bert_size, steps=args.steps, epochs=args.epochs)
    except subprocess.CalledProcessError as e:
        print(f"trainer.demo_text: error: {' '.join(e.cmd[1:4])} ... exited with {e.returncode}", file=sys.stderr)
        return 1
    token, share = majority_baseline(data)
    steps = {s["steps"] for s in summaries}
    empty = sum(s["empty_replica_steps"] for s in summaries)
    chief = summaries[0]
    print(f"equal steps on every worker: {len(steps) == 1}; empty replica-steps: {empty}")
    print(f"eval masked-LM accuracy {chief['eval_masked_lm_accuracy']:.4f} vs {share:.4f} always predicting {token!r}, "
          "the training split's most frequent masked token")
    print(f"eval next-sentence accuracy {chief['eval_next_sentence_accuracy']:.4f} vs 0.5 for a guess")
    return 0


if __name__ == "__main__":
    sys.exit(main())
