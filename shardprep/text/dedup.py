"""``--dedup exact|near`` of a text run's documents: which to drop, and the store part without them.

``kept_of`` joins documents that share a text hash (exact) or, for near, also an LSH band key
(``text.minhash``) into connected components, and gives each document its component's lowest id
(the lowest input position: ids are in input order): a rule of the texts and their order alone,
whatever engine or worker count read them. ``rewrite`` copies one store part with each dropped
document's entry replaced by a dead letter (``duplicate``: an exact copy of the one kept;
``near_duplicate``: a near copy) that names the document kept, and gives the part's new
document offsets and unit cuts.
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence

import numpy as np

from shardprep import fs
from shardprep.text.corpus import CorpusArrays
from shardprep.text.minhash import NO_KEY

__all__ = ["DUPLICATE", "NEAR_DUPLICATE", "components", "kept_of", "rewrite"]

DUPLICATE, NEAR_DUPLICATE = "duplicate", "near_duplicate"
_BAD = re.compile(rb'\{"p": -?\d+, "r": ')  # a store entry that is a dead letter (``text.store._bad``)


def _edges(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pairs of ids that share a key, chained within each group (NO_KEY joins nothing)."""
    order = np.argsort(keys, kind="stable")
    k = keys[order]
    same = (k[1:] == k[:-1]) & (k[1:] != NO_KEY)
    return order[:-1][same], order[1:][same]


def components(n: int, edges: Sequence[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """Each of ``n`` ids' component's lowest id: lowest labels spread over the edges, with pointer
    jumping, until no label changes."""
    label = np.arange(n, dtype=np.int64)
    u = np.concatenate([e[0] for e in edges]) if edges else np.zeros(0, np.int64)
    v = np.concatenate([e[1] for e in edges]) if edges else np.zeros(0, np.int64)
    while len(u):
        low = np.minimum(label[u], label[v])
        before = label.copy()
        np.minimum.at(label, u, low)
        np.minimum.at(label, v, low)
        while True:  # pointer jumping: a label's own label, until stable
            jumped = label[label]
            if np.array_equal(jumped, label):
                break
            label = jumped
        if np.array_equal(label, before):
            break
    return label


def kept_of(arrays: CorpusArrays, mode: str, threshold: float = 0.0) -> np.ndarray:
    """Each document's kept document id (itself where it is kept). Near: a pair that shares a band
    is joined only if its signatures (``arrays.signatures``, where given) agree in at least
    ``threshold`` of their places: the estimated Jaccard similarity, which keeps LSH's pairs below
    the threshold (a band shared by chance) out of the clusters."""
    edges = [_edges(arrays.doc)]
    if mode == "near" and arrays.keys is not None:
        for b in range(arrays.keys.shape[1]):
            u, v = _edges(np.ascontiguousarray(arrays.keys[:, b]))
            if arrays.signatures is not None and len(u):
                agree = (arrays.signatures[u] == arrays.signatures[v]).mean(axis=1)
                u, v = u[agree >= threshold], v[agree >= threshold]
            edges.append((u, v))
    return components(len(arrays.doc), edges)


def rewrite(url: str, out_url: str, first_id: int, kept: np.ndarray, arrays: CorpusArrays,
            cuts: Sequence[tuple[int, int, int]], name: Callable[[int], str]) -> tuple[int, np.ndarray, list]:
    """Copies part ``url`` (its documents ``first_id ..``) to ``out_url``, each dropped document as a
    dead letter naming the one kept (``name(file index)``: its input file); its size, its kept
    documents' offsets and its cuts ``(start, end, first document)``, all from the part's start."""
    ends = {end for _, end, _ in cuts} | {start for start, _, _ in cuts}
    new_at: dict[int, int] = {0: 0}
    kept_before: dict[int, int] = {0: 0}
    offsets: list[int] = []
    at = new = doc = docs_kept = 0
    with fs.open_file(url, "rb") as src, fs.write_atomic(out_url, durable=False) as out:
        for line in src:
            at += len(line)
            if not _BAD.match(line):
                i = first_id + doc
                doc += 1
                k = int(kept[i])
                if k != i:
                    line = _dead_letter(json.loads(line), k, i, arrays, name)
                else:
                    offsets.append(new)
                    docs_kept += 1
            out.write(line)
            new += len(line)
            if at in ends:
                new_at[at], kept_before[at] = new, docs_kept
    new_cuts = [(new_at[s], new_at[e], kept_before[s]) for s, e, _ in cuts]
    return new, np.asarray(offsets, np.int64), new_cuts


def _dead_letter(entry: dict, k: int, i: int, arrays: CorpusArrays, name: Callable[[int], str]) -> bytes:
    exact = arrays.doc[k] == arrays.doc[i]
    where = f"{name(int(arrays.files[k]))} position {int(arrays.positions[k])}"
    text = "\n".join(entry["s"]) if "s" in entry else entry.get("a", "")
    bad = {"p": entry["p"], "r": DUPLICATE if exact else NEAR_DUPLICATE,
           "d": f"{'a copy' if exact else 'a near-duplicate'} of the document kept at {where}", "x": text[:1024]}
    return json.dumps(bad, ensure_ascii=False).encode("utf-8") + b"\n"
