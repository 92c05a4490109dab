"""``python -m benchmarks.bert_pretraining --mb 20``: BERT pre-training data, shardprep against create_pretraining_data.py.

Issue 37's comparison, side by side in one run (``harness.alternate``) on one corpus
(``benchmarks.text_corpus``, BERT's layout) and one vocabulary (``train_vocab`` over the corpus's
first ``VOCAB_TRAIN_MB`` MB, written once to a vocab.txt that every contender is given):

* ``contender``: google-research/bert's algorithm as a user runs it
  (``benchmarks.contenders.create_pretraining_data``: one process, pure-Python WordPiece, every
  document in memory, TensorFlow's writer);
* ``one_process``: ``shardprep.run --task bert-pretraining --local-workers 1``;
* ``all_cores``: the same, the default (a process per core);
* ``two_at_once``: two ``one_process`` runs at once, each into its own folder: what the machine
  gives two independent copies of the work, the ceiling of any 2-process speed-up.

Every run is given BERT's defaults (max_seq_length 128, max_predictions_per_seq 20, masked_lm_prob
0.15, short_seq_prob 0.1) and the same ``--dupe-factor`` (shardprep's default, BERT's: 10). Each
output is read back with TensorFlow under BERT's run_pretraining.py feature spec and summed up
(``statistics``): instances, mean sequence length, masked share of the tokens, random-next share,
the 80/10/10 split of the masked positions. Memory is wait4's peak RSS of the largest single
process (the contender holds every document and instance; shardprep's worker one unit's).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import shlex
import shutil
import sys
from collections.abc import Callable, Sequence

from benchmarks import data, harness, text_corpus

__all__ = ["compare", "statistics"]

WORK = os.path.join(data.DATA_DIR, "work", "bert_pretraining")
VOCAB_TRAIN_MB = 20
NAMES = ("contender", "one_process", "all_cores", "two_at_once")
LABELS = {"contender": "create_pretraining_data.py (BERT's algorithm, one process)",
          "one_process": "shardprep, one process (`--local-workers 1`)",
          "all_cores": "shardprep, every core (the default)",
          "two_at_once": "two shardprep one-process runs at once (the machine's ceiling)"}


def vocab_file(paths: Sequence[str], folder: str, size: int) -> str:
    """A vocab.txt of ``size`` tokens trained on the corpus's first ``VOCAB_TRAIN_MB`` MB, made once."""
    from shardprep.text.vocab import train_vocab, write_vocab

    path = os.path.join(folder, f"vocab-{size}.txt")
    if not os.path.exists(path):
        def lines():
            left = VOCAB_TRAIN_MB * 1e6
            for p in paths:
                with open(p, encoding="utf-8") as f:
                    for line in f:
                        left -= len(line)
                        if left < 0:
                            return
                        yield line
        write_vocab(train_vocab(lines(), size), path)
    return path


def statistics(files: Sequence[str], mask_id: int, max_seq_length: int = 128, max_predictions: int = 20) -> dict:
    """The instances of TFRecord ``files`` read with BERT's run_pretraining.py feature spec, summed up."""
    import numpy as np
    import tensorflow as tf

    spec = {name: tf.io.FixedLenFeature([n], tf.float32 if name == "masked_lm_weights" else tf.int64)
            for name, n in (("input_ids", max_seq_length), ("input_mask", max_seq_length),
                            ("segment_ids", max_seq_length), ("masked_lm_positions", max_predictions),
                            ("masked_lm_ids", max_predictions), ("masked_lm_weights", max_predictions),
                            ("next_sentence_labels", 1))}
    n = tokens = masked = randoms = full = as_mask = kept = 0
    lengths = []
    for batch in tf.data.TFRecordDataset(list(files)).batch(8192).map(lambda x: tf.io.parse_example(x, spec)):
        mask = batch["input_mask"].numpy()
        weights = batch["masked_lm_weights"].numpy()
        ids, positions = batch["input_ids"].numpy(), batch["masked_lm_positions"].numpy()
        length = mask.sum(axis=1)
        lengths.append(length)
        n += len(mask)
        tokens += int(length.sum())
        masked += int(weights.sum())
        randoms += int(batch["next_sentence_labels"].numpy().sum())
        full += int((length == max_seq_length).sum())
        at = np.take_along_axis(ids, positions, axis=1)[weights > 0]
        as_mask += int((at == mask_id).sum())
        kept += int((at == batch["masked_lm_ids"].numpy()[weights > 0]).sum())
    length = np.concatenate(lengths) if lengths else np.zeros(0)
    return {"instances": n, "mean_length": round(tokens / max(n, 1), 3),
            "median_length": float(np.median(length)) if n else 0.0,
            "masked_share": round(masked / max(tokens, 1), 5), "predictions_mean": round(masked / max(n, 1), 3),
            "random_next_share": round(randoms / max(n, 1), 5), "full_length_share": round(full / max(n, 1), 5),
            "masked_as_mask": round(as_mask / max(masked, 1), 5), "masked_kept": round(kept / max(masked, 1), 5)}


class _Output:
    """A contender's output folders: emptied before each run, their TFRecords (``pattern``, else the
    manifest's shards) summed up after."""

    def __init__(self, folders: Sequence[str], pattern: str, mask_id: int) -> None:
        self.folders, self.pattern, self.mask_id = list(folders), pattern, mask_id

    def prepare(self) -> None:
        for f in self.folders:
            shutil.rmtree(f, ignore_errors=True)
        os.makedirs(self.folders[0], exist_ok=True)  # the contender writes into an existing folder

    def check(self, run: harness.Run) -> dict:
        stats = [_statistics_apart(self._files(f), self.mask_id) for f in self.folders]
        if any(s != stats[0] for s in stats):
            raise RuntimeError(f"copies run at once wrote different instances: {stats}")
        return {"stats": stats[0]}


    def _files(self, folder: str) -> list[str]:
        if self.pattern:
            return sorted(glob.glob(os.path.join(folder, self.pattern)))
        with open(os.path.join(folder, "manifest.json")) as f:
            manifest = json.load(f)
        return [os.path.join(folder, s["path"]) for split in manifest["splits"].values() for s in split["shards"]]


def _statistics_apart(files: Sequence[str], mask_id: int) -> dict:
    """``statistics`` in a process of its own: TensorFlow in this one would count in every later
    contender's peak RSS (a child's ``ru_maxrss`` starts at its parent's, from before its exec)."""
    code = ("import json, sys; from benchmarks.bert_pretraining import statistics; "
            "print(json.dumps(statistics(sys.argv[2:], int(sys.argv[1]))))")
    run = harness.run_process([sys.executable, "-c", code, str(mask_id), *files], poll=False)
    if run.returncode != 0:
        raise RuntimeError(f"reading the instances failed:\n{run.tail}")
    return json.loads(run.extra["output"].strip().splitlines()[-1])


def _shardprep(corpus: str, vocab: str, out: str, dupe_factor: int, shards: int, *extra: str) -> list[str]:
    return [sys.executable, "-m", "shardprep.run", "--input", os.path.join(corpus, text_corpus.PATTERN), "--output", out,
            "--task", "bert-pretraining", "--vocab", vocab, "--dupe-factor", str(dupe_factor),
            "--num-shards", str(shards), *extra]


def compare(mb: float, rounds: int = 1, *, dupe_factor: int = 10, shards: int = 16, vocab_size: int = 30522,
            names: Sequence[str] = NAMES, log: Callable[[str], None] = print) -> dict:
    """The contenders ``names`` (``NAMES``; one process always, the baseline) on ``mb`` MB of text,
    alternated for ``rounds`` rounds; their summaries (medians), the outputs' statistics, issue 37's goals."""
    from shardprep.text.vocab import load_vocab

    folder = os.path.join(data.DATA_DIR, f"text-corpus-{mb:g}mb")
    paths = text_corpus.corpus(mb, folder)
    corpus_mb = sum(os.path.getsize(p) for p in paths) / 1e6
    vocab = vocab_file(paths, folder, vocab_size)
    mask_id = load_vocab(vocab).mask_id
    contenders = []
    for name in ["one_process", *(n for n in names if n != "one_process")]:
        out = os.path.join(WORK, name)
        if name == "contender":
            o = _Output([out], "*.tfrecord", mask_id)
            cmd = [sys.executable, "-m", "benchmarks.contenders.create_pretraining_data",
                   f"--input_file={','.join(paths)}", f"--output_file={os.path.join(out, 'instances.tfrecord')}",
                   f"--vocab_file={vocab}", f"--dupe_factor={dupe_factor}"]
        elif name == "two_at_once":
            copies = [os.path.join(out, f"copy-{i}") for i in range(2)]
            o = _Output(copies, "", mask_id)
            cmd = ["sh", "-c", " & ".join(shlex.join(_shardprep(folder, vocab, c, dupe_factor, shards,
                                                                  "--local-workers", "1")) for c in copies) + "; wait"]
        else:
            o = _Output([out], "", mask_id)
            cmd = _shardprep(folder, vocab, out, dupe_factor, shards,
                             *(("--local-workers", "1") if name == "one_process" else ()))
        contenders.append(harness.Contender(name, cmd, prepare=o.prepare, check=o.check))
    harness.warm(paths)
    runs = harness.alternate(contenders, rounds, log=log, memory_round=False)
    shutil.rmtree(WORK, ignore_errors=True)
    base = runs["one_process"]
    summary = {}
    for name, rs in runs.items():
        copies = 2 if name == "two_at_once" else 1
        s = harness.summarize(rs)
        summary[name] = {**s, "mb_per_s": round(copies * corpus_mb / s["wall_s"], 3),
                         "vs_one_process": round(copies * harness.paired_ratio(base, rs), 3),
                         "stats": rs[0].extra["stats"]}
    out = {"mb": round(corpus_mb, 1), "dupe_factor": dupe_factor, "shards": shards, "vocab_size": vocab_size,
           "rounds": rounds, "load_average": harness.load_average(), "summary": summary,
           "runs": {name: [{k: v for k, v in r.to_json().items() if k != "extra"} for r in rs] for name, rs in runs.items()}}
    out["goals"] = goals(summary)
    return out


def goals(summary: dict) -> list[dict]:
    """Issue 37's goals, from ``compare``'s summary (those of the contenders it ran)."""
    goal, out = harness.goal, []
    one = summary["one_process"]
    if "contender" in summary:
        c = summary["contender"]
        out.append(goal("shardprep one process / create_pretraining_data.py (speed, wall)", 1 / c["vs_one_process"], 10))
        a, b = one["stats"], c["stats"]
        out.append(goal("mean sequence length, shardprep vs contender (relative difference)",
                        100 * abs(a["mean_length"] - b["mean_length"]) / b["mean_length"], 2, at_least=False, unit="%"))
        out.append(goal("masked share of the tokens, shardprep - contender (points)",
                        100 * abs(a["masked_share"] - b["masked_share"]), 0.5, at_least=False, unit=" pt"))
        out.append(goal("random-next share, shardprep - contender (points)",
                        100 * abs(a["random_next_share"] - b["random_next_share"]), 2, at_least=False, unit=" pt"))
        out.append(goal("instances, shardprep vs contender (relative difference)",
                        100 * abs(a["instances"] - b["instances"]) / b["instances"], 3, at_least=False, unit="%"))
        out.append(goal("peak RSS, largest shardprep process / contender", one["max_rss_mb"] / c["max_rss_mb"], 1,
                        at_least=False))
    if "all_cores" in summary and "two_at_once" in summary:
        out.append(goal("default (every core) / two one-process runs at once (the machine's ceiling), MB/s",
                        summary["all_cores"]["mb_per_s"] / summary["two_at_once"]["mb_per_s"], 0.95))
    return out


def table(result: dict) -> list[str]:
    """``compare``'s result as markdown lines: BENCHMARKS.md's table."""
    lines = ["| run | wall s | CPU s | MB/s | vs one process | peak RSS MB (largest process) | instances | mean length | "
             "masked share | random next | [MASK] / kept of masked |",
             "|:---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, v in result["summary"].items():
        s = v["stats"]
        lines.append(f"| {LABELS[name]} | {v['wall_s']:.1f} | {v['cpu_s']:.1f} | {v['mb_per_s']:.2f} | "
                     f"{v['vs_one_process']:.3g}x | {v['max_rss_mb']:.0f} | {s['instances']:,} | {s['mean_length']:.2f} | "
                     f"{s['masked_share']:.4f} | {s['random_next_share']:.4f} | {s['masked_as_mask']:.3f} / "
                     f"{s['masked_kept']:.3f} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bert_pretraining", description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=20.0, help="MB of text (issue 37's goal is stated on 200)")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--dupe-factor", type=int, default=10)
    ap.add_argument("--shards", type=int, default=16)
    ap.add_argument("--vocab-size", type=int, default=30522)
    ap.add_argument("--only", default="", help=f"contenders, comma-separated, among {', '.join(NAMES)} "
                    "(one_process always runs)")
    ap.add_argument("--json", help="also write the result here")
    args = ap.parse_args(argv)
    names = [n.strip() for n in args.only.split(",") if n.strip()] or list(NAMES)
    if any(n not in NAMES for n in names):
        ap.error(f"--only: expected among {', '.join(NAMES)}")
    result = compare(args.mb, args.rounds, dupe_factor=args.dupe_factor, shards=args.shards,
                     vocab_size=args.vocab_size, names=names, log=lambda line: print(line, file=sys.stderr, flush=True))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    print(f"{result['mb']} MB of text ({text_corpus.__name__}), vocabulary of {args.vocab_size} tokens, dupe factor "
          f"{args.dupe_factor}, {args.shards} shards; medians of {args.rounds} alternated round(s); load average "
          f"{' '.join(map(str, result['load_average']))} on {os.cpu_count()} CPUs at the end\n")
    print("\n".join(table(result)))
    print()
    for g in result["goals"]:
        print(f"- {g['goal']}: {g['value']:.3g}{g['unit']} ({'>=' if g['at_least'] else '<='} {g['target']}{g['unit']}): "
              f"{'met' if g['met'] else 'NOT MET'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
