"""Near-duplicate removal of text runs (issue 58), measured side by side in one process.

* quality: a corpus of random documents, each with planted variants at known word edit rates
  (0.5% to 30%), against the pairs whose exact Jaccard similarity of word 5-grams is >= 0.8
  (precision and recall): the LSH candidates (a shared band of 14 x 8), those whose signatures
  agree in >= 0.8 of their places, and those ``text.dedup.Verifier`` accepts (the estimate, and
  the exact Jaccard where the estimate is near 0.8); the documents ``kept_of`` drops against those
  its leader rule drops on the exact graph, and whether each names a kept document of Jaccard >= 0.8.
* cluster cost: ``text.dedup.kept_of``'s CPU seconds (the band groups' edges, which a run's
  GroupBands stage finds on the workers, and the leader rule over them, the launcher's) on a larger
  planted corpus (every document in a family of near-copies) and on templated pages (one template,
  a few words put in each: many shared bands, few near-duplicates), with the signature estimate
  alone and with the exact checks; and the edges the launcher then holds against the band keys it
  held before (112 bytes a document).
* speed: documents a second on one core for ``text.minhash`` (signatures and band keys) and for
  datasketch's ``MinHash`` (``update_batch`` of the same 5-gram shingles, 112 permutations) +
  ``MinHashLSH(params=(14, 8))`` inserts, rounds alternated, medians.
* whole run: ``python -m shardprep.run --task bert-pretraining --dupe-factor 1`` with and without
  ``--dedup near`` on the same corpus, rounds alternated, medians; and text-classification against
  pre-training on the same text (MB of text a second).

    python -m benchmarks.text_dedup [--docs 10000] [--rounds 3] [--run-mb 8] [--skip quality cluster speed run]
"""
from __future__ import annotations

import argparse
import csv
import itertools
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from shardprep.text.corpus import NO_DEDUP, CorpusArrays
from shardprep.text.dedup import Verifier, edges_of, kept_of, shared_bands
from shardprep.text.minhash import BANDS, ROWS, MinHasher, keys_of, shared_rows

RATES = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3)
VOCAB = [f"w{i}" for i in range(50_000)]


def _doc(r: random.Random, n: int) -> list[str]:
    return [r.choice(VOCAB) for _ in range(n)]


def _shingles(words: list[str], k: int = 5) -> set:
    return {tuple(words[i:i + k]) for i in range(len(words) - k + 1)} or {tuple(words)}


def planted(families: int, seed: int = 1) -> tuple[list[str], list[int]]:
    """Documents and each one's family (an original and its variants, one per edit rate)."""
    r = random.Random(seed)
    texts, family = [], []
    for f in range(families):
        base = _doc(r, r.randint(100, 600))
        for words in [base] + [[r.choice(VOCAB) if r.random() < rate else w for w in base] for rate in RATES]:
            texts.append(" ".join(words))
            family.append(f)
    order = list(range(len(texts)))
    r.shuffle(order)
    return [texts[i] for i in order], [family[i] for i in order]


def _leader_truth(n: int, truth: set) -> np.ndarray:
    """``text.dedup``'s leader rule on the exact graph: each id's kept id, ids in order."""
    earlier: dict[int, list[int]] = {}
    for a, b in truth:
        earlier.setdefault(b, []).append(a)
    kept = np.arange(n)
    for i in range(n):
        kept[i] = next((k for k in sorted(earlier.get(i, ())) if kept[k] == k), i)
    return kept


def _candidates(keys: np.ndarray) -> set:
    """Every pair of ids that shares a band key."""
    rows, groups = shared_bands(keys)
    members: dict[int, list[int]] = {}
    for r, g in zip(rows.tolist(), groups.tolist()):
        members.setdefault(g, []).append(r)
    return {(a, b) for m in members.values() for a, b in itertools.combinations(sorted(m), 2)}


def _pr(predicted: set, truth: set) -> dict:
    hit = len(predicted & truth)
    return {"pairs": len(predicted), "precision": round(hit / max(1, len(predicted)), 4),
            "recall": round(hit / max(1, len(truth)), 4)}


def quality(families: int, threshold: float = NO_DEDUP.threshold) -> dict:
    """The pairs and the documents ``--dedup near`` finds against exact Jaccard >= 0.8 (module docstring)."""
    texts, family = planted(families)
    by_family: dict[int, list[int]] = {}
    for i, f in enumerate(family):
        by_family.setdefault(f, []).append(i)
    truth, near_miss, jaccard = set(), 0, {}
    shingles = [_shingles(t.split()) for t in texts]
    for members in by_family.values():
        for a, b in itertools.combinations(sorted(members), 2):
            j = jaccard[a, b] = len(shingles[a] & shingles[b]) / len(shingles[a] | shingles[b])
            if j >= 0.8:
                truth.add((a, b))
            elif j >= 0.6:
                near_miss += 1
    sig = MinHasher().signatures(texts)
    keys = keys_of(sig, BANDS, ROWS)
    n = len(texts)
    doc = np.arange(n, dtype=np.uint64) + np.uint64(1)  # no exact copies planted
    out: dict = {"documents": n, "true_pairs": len(truth), "pairs_jaccard_0.6_to_0.8": near_miss}
    candidates = _candidates(keys)
    out["candidate_pairs"] = _pr(candidates, truth)
    hasher = MinHasher(1, 1)

    def shingles_of(i: int) -> np.ndarray:
        return np.unique(hasher.shingles([texts[i]])[0])

    for name, check in (("estimate", None), ("estimate_and_exact", shingles_of)):
        verifier = Verifier(sig, threshold, check)
        out[f"verified_pairs_{name}"] = _pr({p for p in candidates if verifier.first_similar(p[1], [p[0]]) == 0}, truth)
        out[f"verified_pairs_{name}"]["exact_checks"] = verifier.exact_checks
    ids = np.arange(n)
    should = _leader_truth(n, truth)
    truly_dropped = set(np.flatnonzero(should != ids).tolist())
    for name, t, check in (("kept_estimate", threshold, None), ("kept_estimate_and_exact", threshold, shingles_of),
                           ("kept_bands_only", 0.0, None)):
        kept = kept_of(CorpusArrays(ids, np.zeros(n, np.int64), doc, keys, sig), "near", t, check)
        dropped = set(np.flatnonzero(kept != ids).tolist())
        named = [jaccard.get((int(kept[i]), i), 0.0) for i in dropped]
        out[name] = {"dropped": len(dropped), "should_drop": len(truly_dropped),
                     "drop_precision": round(len(dropped & truly_dropped) / max(1, len(dropped)), 4),
                     "drop_recall": round(len(dropped & truly_dropped) / max(1, len(truly_dropped)), 4),
                     "named_pair_precision": round(sum(j >= 0.8 for j in named) / max(1, len(named)), 4),
                     "named_pair_min_jaccard": round(min(named, default=1.0), 3)}
    return out


def templated(pages: int, inserted: int = 4, seed: int = 2) -> list[str]:
    """Pages of one 200-word template, each with ``inserted`` random words put in: pairs of Jaccard
    about 0.6-0.8 that share bands, few of them near-duplicates of each other."""
    r = random.Random(seed)
    template = _doc(r, 200)
    out = []
    for _ in range(pages):
        words = list(template)
        for _ in range(inserted):
            words.insert(r.randrange(len(words)), r.choice(VOCAB))
        out.append(" ".join(words))
    return out


def cluster_cost(families: int, pages: int = 5000) -> dict:
    """CPU seconds of ``kept_of`` (GroupBands' edges and the leader rule), the signatures of only the
    documents that share a band, with and without exact checks, and the edges' bytes: on a planted
    corpus, and on templated pages."""
    return {"planted": _cluster_cost(planted(families)[0]), "templated": _cluster_cost(templated(pages))}


def _cluster_cost(texts: list[str]) -> dict:
    n = len(texts)
    sig = MinHasher().signatures(texts)
    keys = keys_of(sig, BANDS, ROWS)
    ids = shared_rows(keys)
    arrays = CorpusArrays(np.arange(n), np.zeros(n, np.int64), np.arange(n, dtype=np.uint64), keys, sig[ids], ids)
    hasher = MinHasher(1, 1)
    out: dict = {"documents": n, "sharing_a_band": len(ids)}
    for name, check in (("estimate", None), ("estimate_and_exact", lambda i: np.unique(hasher.shingles([texts[i]])[0]))):
        start = time.process_time()
        kept = kept_of(arrays, "near", NO_DEDUP.threshold, check)
        out[f"{name}_cpu_s"] = round(time.process_time() - start, 2)
        out[f"{name}_dropped"] = int((kept != np.arange(n)).sum())
    edges = edges_of(arrays, NO_DEDUP.threshold)
    out["edges"] = len(edges.first)
    out["edges_bytes_against_band_keys"] = [sum(a.nbytes for a in edges[:4]), keys.nbytes]
    return out


def _ours(texts: list[str]) -> float:
    """Signatures in batches (the store's are ~4 MB; 2000 documents here), band keys, the clusters."""
    start = time.process_time()
    m = MinHasher()
    sig = np.concatenate([m.signatures(texts[i:i + 2000]) for i in range(0, len(texts), 2000)])
    doc = np.arange(len(texts), dtype=np.uint64)
    kept_of(CorpusArrays(np.arange(len(texts)), np.zeros(len(texts), np.int64), doc, keys_of(sig, BANDS, ROWS), sig),
            "near", NO_DEDUP.threshold)
    return time.process_time() - start


def _datasketch(texts: list[str]) -> float:
    from datasketch import MinHash, MinHashLSH

    start = time.process_time()
    lsh = MinHashLSH(num_perm=112, params=(14, 8))
    for i, t in enumerate(texts):
        words = t.lower().split()
        sh = [" ".join(words[j:j + 5]).encode() for j in range(max(1, len(words) - 4))]
        m = MinHash(num_perm=112)
        m.update_batch(sh)
        lsh.insert(str(i), m)
    return time.process_time() - start


def speed(docs: int, rounds: int) -> dict:
    r = random.Random(3)
    texts = [" ".join(_doc(r, r.randint(50, 800))) for _ in range(docs)]
    ours, theirs = [], []
    for _ in range(rounds):  # alternated: the machine is shared
        ours.append(_ours(texts))
        theirs.append(_datasketch(texts))
    o, t = statistics.median(ours), statistics.median(theirs)
    return {"documents": docs, "mb": round(sum(map(len, texts)) / 1e6, 1), "ours_docs_per_cpu_s": round(docs / o),
            "datasketch_docs_per_cpu_s": round(docs / t), "speedup": round(t / o, 1),
            "ours_cpu_s": [round(x, 2) for x in ours], "datasketch_cpu_s": [round(x, 2) for x in theirs]}


def _corpus(folder: Path, mb: float) -> tuple[Path, Path]:
    """A BERT-layout .txt of ``mb`` MB (5% exact and 5% near copies) and a CSV of its sentences with labels."""
    r = random.Random(5)
    common = VOCAB[:3000]
    docs, size = [], 0
    while size < mb * 1e6:
        d = [" ".join(r.choice(common) for _ in range(r.randint(6, 20))) + "." for _ in range(r.randint(3, 12))]
        if docs and r.random() < 0.1:
            d = list(r.choice(docs))
            if r.random() < 0.5:
                d[0] = d[0] + " extra"
        docs.append(d)
        size += sum(len(s) + 1 for s in d) + 1
    txt = folder / "corpus.txt"
    txt.write_text("\n\n".join("\n".join(d) for d in docs) + "\n")
    with open(folder / "corpus.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["text", "label"])
        for i, d in enumerate(docs):
            w.writerow([" ".join(d), ("a", "b", "c")[i % 3]])
    return txt, folder / "corpus.csv"


def _timed(args: list[str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "shardprep.run", *args, "--num-shards", "4", "--overwrite"],
                          capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(proc.stderr[-2000:])
    return time.perf_counter() - start


def whole_run(mb: float, rounds: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        txt, table = _corpus(folder, mb)
        vocab = folder / "v"
        _timed(["--input", str(txt), "--output", str(vocab), "--task", "bert-pretraining", "--train-vocab", "2000",
                "--dupe-factor", "1"])
        common = ["--vocab", str(vocab)]
        pre = ["--input", str(txt), "--output", str(folder / "pre"), "--task", "bert-pretraining", "--dupe-factor", "1",
               *common]
        cls = ["--input", str(table), "--output", str(folder / "cls"), "--task", "text-classification",
               "--text-column", "text", "--label", "label", *common]
        times: dict[str, list[float]] = {"none": [], "near": [], "classification": []}
        for _ in range(rounds):
            times["none"].append(_timed(pre))
            times["near"].append(_timed([*pre, "--dedup", "near"]))
            times["classification"].append(_timed(cls))
        med = {k: statistics.median(v) for k, v in times.items()}
        text_mb = txt.stat().st_size / 1e6
        return {"text_mb": round(text_mb, 1), "seconds": {k: [round(x, 2) for x in v] for k, v in times.items()},
                "near_over_none": round(med["near"] / med["none"], 2),
                "pretraining_mb_per_s": round(text_mb / med["none"], 2),
                "classification_mb_per_s": round(text_mb / med["classification"], 2),
                "classification_over_pretraining": round(med["none"] / med["classification"], 2)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.text_dedup", description=__doc__.split("\n", 1)[0])
    p.add_argument("--families", type=int, default=400, help=f"quality: originals, each with {len(RATES)} variants")
    p.add_argument("--docs", type=int, default=10_000, help="speed: documents")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--run-mb", type=float, default=8.0, help="whole run: MB of text")
    p.add_argument("--cluster-families", type=int, default=4000, help="cluster cost: originals, each with variants")
    p.add_argument("--skip", nargs="*", default=(), choices=("quality", "cluster", "speed", "run"))
    args = p.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if "quality" not in args.skip:
        print("quality:", quality(args.families), flush=True)
    if "cluster" not in args.skip:
        print("cluster cost:", cluster_cost(args.cluster_families), flush=True)
    if "speed" not in args.skip:
        print("speed:", speed(args.docs, args.rounds), flush=True)
    if "run" not in args.skip:
        print("whole run:", whole_run(args.run_mb, args.rounds), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
