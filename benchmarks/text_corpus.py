"""A synthetic pre-training corpus in BERT's layout, deterministic for a seed and sized in MB.

``python -m benchmarks.text_corpus --mb 20 --output DIR [--files 4] [--seed 0]``. One sentence per
line, a blank line between documents, as google-research/bert's sample_text.txt. Words are drawn
from a lexicon of ``LEXICON`` made-up words (syllables, 1-12 letters, mean ~5 as English text's)
with Zipf-Mandelbrot frequencies (rank ``r`` has weight ``1 / (r + 2.7)``; the shortest words
the most frequent, as in natural text); sentences hold a log-normal number of words (median 18,
3-80), with a capital first word, commas, now and then a number, and a final . ? or !; documents
hold a log-normal number of sentences (median 12, 1-600: a few long articles, many short ones).
The text is cut into ``files`` files of unequal size (documents whole), as a user's corpus.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import sys

import numpy as np

__all__ = ["LEXICON", "PATTERN", "corpus", "generate"]

LEXICON = 60_000
PATTERN = "corpus-*.txt"  # the corpus's files in its folder (other files may sit beside them)
_SYLLABLES = ("a e i o u an en in on ka ti ro mu se la ve di no ha ber ter tion ing ous ment pre con "
              "str pla qua ght ph sh ch th er al ic ly est ness ure ble").split()
_ENDS = (".", ".", ".", ".", ".", ".", "?", "!")
_VERSION = 1


def _lexicon(rng: np.random.Generator) -> np.ndarray:
    """``LEXICON`` distinct words, most frequent first (shorter words rank higher on average)."""
    words: dict[str, None] = {}
    while len(words) < LEXICON:
        n = int(rng.integers(1, 5))
        words.setdefault("".join(_SYLLABLES[k] for k in rng.integers(0, len(_SYLLABLES), n)))
    out = list(words)
    # rank by length plus noise: frequent words short, but not strictly
    order = np.argsort(np.array([len(w) for w in out]) + rng.normal(0, 2.5, len(out)), kind="stable")
    return np.array(out, dtype=object)[order]


def _document(rng: np.random.Generator, lexicon: np.ndarray, cdf: np.ndarray) -> str:
    sentences = int(np.clip(np.round(rng.lognormal(np.log(12), 1.0)), 1, 600))
    lengths = np.clip(np.round(rng.lognormal(np.log(18), 0.45, sentences)), 3, 80).astype(int)
    ids = np.searchsorted(cdf, rng.random(int(lengths.sum())))
    words = lexicon[ids]
    numbers = rng.random(len(words)) < 0.01
    for k in np.flatnonzero(numbers):
        words[k] = str(int(rng.integers(0, 3000)))
    commas = rng.random(len(words)) < 0.06
    for k in np.flatnonzero(commas):
        words[k] = words[k] + ","
    ends = rng.integers(0, len(_ENDS), sentences)
    lines, at = [], 0
    for s, n in enumerate(lengths):
        w = list(words[at:at + n])
        at += n
        w[0] = w[0].capitalize()
        lines.append(" ".join(w).rstrip(",") + _ENDS[ends[s]])
    return "\n".join(lines) + "\n"


def generate(mb: float, output: str, *, files: int = 4, seed: int = 0) -> list[str]:
    """Writes about ``mb`` MB of text into ``files`` .txt files in ``output``; their paths."""
    rng = np.random.default_rng(seed)
    lexicon = _lexicon(rng)
    weights = 1.0 / (np.arange(LEXICON) + 2.7)
    cdf = np.cumsum(weights) / weights.sum()
    shares = np.array([0.4, 0.3, 0.2, 0.1][:files] if files <= 4 else [1.0] * files)
    limits = np.cumsum(shares / shares.sum()) * mb * 1e6
    os.makedirs(output, exist_ok=True)
    paths, size, k = [], 0, 0
    f = None
    while k < files:
        if f is None:
            paths.append(os.path.join(output, f"corpus-{k:02d}.txt"))
            f = open(paths[-1], "w", encoding="utf-8")
            first = True
        doc = _document(rng, lexicon, cdf)
        data = doc if first else "\n" + doc  # a blank line between documents
        f.write(data)
        first = False
        size += len(data.encode("utf-8"))
        if size >= limits[k]:
            f.close()
            f, k = None, k + 1
    return paths


def corpus(mb: float, folder: str, *, files: int = 4, seed: int = 0) -> list[str]:
    """``generate``'s files in ``folder``, reused when made before with the same parameters."""
    params = {"mb": mb, "files": files, "seed": seed, "version": _VERSION}
    done = os.path.join(folder, "DONE.json")
    try:
        with open(done) as f:
            if json.load(f) == params:
                return sorted(glob.glob(os.path.join(folder, PATTERN)))
    except (OSError, ValueError):
        pass
    shutil.rmtree(folder, ignore_errors=True)
    tmp = folder + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    generate(mb, tmp, files=files, seed=seed)
    with open(os.path.join(tmp, "DONE.json"), "w") as f:
        json.dump(params, f)
    os.rename(tmp, folder)
    return corpus(mb, folder, files=files, seed=seed)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.text_corpus", description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    paths = generate(args.mb, args.output, files=args.files, seed=args.seed)
    print(f"wrote {sum(os.path.getsize(p) for p in paths) / 1e6:.1f} MB in {len(paths)} files to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
