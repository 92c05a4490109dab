"""shardprep.text's tokenizer (HF ``tokenizers``, Rust) against BERT's pure-Python tokenizer: tokens/s.

``python -m benchmarks.text_tokenize [--mb 20] [--reference-mb 2] [--repeats 3]``: generates
``--mb`` MB of text (words from a trained vocabulary's alphabet, accents, CJK, punctuation), trains a
vocabulary of 8,000 tokens on it, tokenizes all of it with ``Vocab.encode_batch`` (a batch of lines
at a time, as a work unit would) and the first ``--reference-mb`` MB with the reference (the pure
Python one the tests compare against; it is ~100x slower, so it gets a prefix), checks the two agree
on that prefix, and prints tokens/s of each and the ratio (medians of ``--repeats``).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from shardprep.text.vocab import parse_vocab, train_vocab  # noqa: E402
from tests.shardprep.text.test_vocab import reference_tokenize  # noqa: E402

_SYLLABLES = ["ka", "to", "ri", "mé", "sa", "nu", "lo", "ve", "qui", "zo", "ber", "ün", "ça", "de", "ing", "tion", "pre"]
_PUNCT = [".", ",", "!", "?", ";", ":", "(", ")", "-", "'", '"']
_CJK = "的一是不了人我在有他这中大来上国个到说们"


def generate(mb: float, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    words = ["".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(1, 4))) for _ in range(20_000)]
    lines, size = [], 0
    while size < mb * 1e6:
        parts = []
        for _ in range(rng.randint(5, 40)):
            r = rng.random()
            w = rng.choice(words)
            parts.append(w.capitalize() if r < 0.1 else rng.choice(_CJK) * 2 if r < 0.13 else w)
            if rng.random() < 0.1:
                parts.append(rng.choice(_PUNCT))
        line = " ".join(parts) + "."
        lines.append(line)
        size += len(line.encode()) + 1
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=20.0)
    ap.add_argument("--reference-mb", type=float, default=2.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batch", type=int, default=1000, help="lines per encode_batch call")
    args = ap.parse_args(argv)
    lines = generate(args.mb)
    t0 = time.perf_counter()
    tokens = train_vocab(lines[: max(1, len(lines) // 10)], 8000)
    train_s = time.perf_counter() - t0
    vocab = parse_vocab(tokens)
    vset = set(tokens)
    prefix, size = [], 0
    for line in lines:
        if size >= args.reference_mb * 1e6:
            break
        prefix.append(line)
        size += len(line.encode()) + 1
    mismatches = sum(vocab.tokenize(x) != reference_tokenize(x, vset) for x in prefix[:2000])

    ours, ref = [], []
    n_ours = n_ref = 0
    for _ in range(args.repeats):
        t = time.perf_counter()
        n_ours = sum(len(ids) for i in range(0, len(lines), args.batch) for ids in vocab.encode_batch(lines[i:i + args.batch]))
        ours.append(n_ours / (time.perf_counter() - t))
        t = time.perf_counter()
        n_ref = sum(len(reference_tokenize(x, vset)) for x in prefix)
        ref.append(n_ref / (time.perf_counter() - t))
    result = {
        "text_mb": args.mb, "reference_mb": args.reference_mb, "vocab_size": len(tokens),
        "train_vocab_s_on_tenth": round(train_s, 2), "mismatches_first_2000_lines": mismatches,
        "tokens": n_ours, "reference_tokens": n_ref,
        "ours_tokens_per_s": round(statistics.median(ours)), "reference_tokens_per_s": round(statistics.median(ref)),
        "ratio": round(statistics.median(ours) / statistics.median(ref), 1),
        "rayon_threads": os.environ.get("RAYON_NUM_THREADS", "default"), "cpus": os.cpu_count(),
    }
    print(json.dumps(result, indent=1))
    return 0 if mismatches == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
