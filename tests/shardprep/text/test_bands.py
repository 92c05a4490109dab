"""``text.bands``: the band groups of a text run, formed in the job's shuffle. The edges are the same
whatever the buckets and however the parts are cut; the leader rule over them keeps what the
sequential rule over every document's band keys keeps where no band group has more than
``GROUP_LEADERS + 1`` documents; a larger group's leaders are its first members, kept or not."""
from __future__ import annotations

import random

import numpy as np

from shardprep.formats.base import InputFile
from shardprep.job import groups
from shardprep.text import bands
from shardprep.text.corpus import CorpusArrays, DedupSettings
from shardprep.text.dedup import Verifier, edges_of, first_copies, kept_in_store, kept_of, shared_bands
from shardprep.text.minhash import MinHasher, keys_of
from shardprep.text.store import BuildPart, store_parts

VOCAB = [f"w{i}" for i in range(3000)]


def _families(r: random.Random, n: int) -> list[list[str]]:
    """Documents of a few sentences, some near copies (a word or a few changed) and exact copies."""
    docs: list[list[str]] = []
    for _ in range(n):
        if docs and r.random() < 0.4:
            doc = list(r.choice(docs))
            if r.random() < 0.7:
                words = doc[0].split()
                for _ in range(r.choice((1, 2, 6))):
                    words[r.randrange(len(words))] = r.choice(VOCAB)
                doc[0] = " ".join(words)
        else:
            doc = [" ".join(r.choice(VOCAB) for _ in range(r.randint(12, 30))) for _ in range(r.randint(2, 4))]
        docs.append(doc)
    return docs


def _sequential(keys: np.ndarray, doc: np.ndarray, verifier: Verifier) -> np.ndarray:
    """The rule before the band groups moved into the job: documents in id order, each compared with
    the first ``GROUP_LEADERS`` *kept* documents of each band it shares (the launcher held every key)."""
    first = first_copies(doc)
    reps = np.flatnonzero(first == np.arange(len(first)))
    rows, group_of = shared_bands(keys[reps])
    kept = np.arange(len(reps))
    leaders: dict[int, list[int]] = {}
    for r in np.unique(rows).tolist():
        mine = group_of[rows == r].tolist()
        found = sorted({c for g in mine for c in leaders.get(g, ())})
        j = verifier.first_similar(int(reps[r]), reps[found].tolist()) if found else -1
        if j >= 0:
            kept[r] = found[j]
        else:
            for g in mine:
                if len(leaders.setdefault(g, [])) < bands.GROUP_LEADERS:
                    leaders[g].append(r)
    out = np.arange(len(first))
    out[reps] = reps[kept]
    return out[first]


def _texts(docs: list[list[str]]) -> list[str]:
    return ["\n".join(d) for d in docs]


def test_the_rule_over_edges_keeps_what_the_sequential_rule_keeps_in_small_groups(monkeypatch):
    r = random.Random(1)
    texts = _texts(_families(r, 400))
    sig = MinHasher().signatures(texts)
    keys = keys_of(sig, 14, 8)
    doc = np.asarray([hash(t) & 0xFFFFFFFFFFFF for t in texts], np.uint64)
    hasher = MinHasher(1, 1)

    def shingles_of(i: int) -> np.ndarray:
        return np.unique(hasher.shingles([texts[i]])[0])

    arrays = CorpusArrays(np.arange(len(texts)), np.zeros(len(texts), np.int64), doc, keys, sig)
    for threshold, check in ((0.8, shingles_of), (0.8, None), (0.6, shingles_of), (0.0, None)):
        ours = kept_of(arrays, "near", threshold, check)
        assert np.array_equal(ours, _sequential(keys, doc, Verifier(sig, threshold, check))), threshold
    assert (ours != np.arange(len(texts))).sum() > 100
    whole = edges_of(arrays, 0.8, shingles_of)
    monkeypatch.setattr(bands, "_PAIRS_AT_ONCE", 7)  # the groups' pairs formed a few groups at a time
    for a, b in zip(edges_of(arrays, 0.8, shingles_of)[:4], whole[:4]):
        assert np.array_equal(a, b)


def test_a_large_group_compares_a_document_with_its_first_members_kept_or_not():
    """40 documents share one band: 1-32 are copies of 0 (dropped for it), 33-39 alike but not like
    0. The sequential rule compared 34 with 0 and 33 (its first kept ones); the job's rule compares it
    with the group's first 32 (0-31: only 0 kept), so 33-39 are all kept."""
    sig = np.zeros((40, 4), np.uint32)
    sig[33:] = [7, 7, 7, 7]
    sig[33:, 0] = np.arange(33, 40)  # 33-39 agree in 3 of 4 places
    keys = np.full((40, 1), 5, np.uint64)
    doc = np.arange(40, dtype=np.uint64) + np.uint64(1)
    arrays = CorpusArrays(np.arange(40), np.zeros(40, np.int64), doc, keys, sig)
    assert kept_of(arrays, "near", 0.75).tolist() == [0] * 33 + list(range(33, 40))
    assert _sequential(keys, doc, Verifier(sig, 0.75)).tolist() == [0] * 33 + [33] * 7


def _parts(tmp_path, docs: list[list[str]], unit_bytes: int, dedup: DedupSettings) -> list:
    folder = tmp_path / f"in-{unit_bytes}"
    folder.mkdir()
    half = len(docs) // 2
    files = []
    for i, chunk in enumerate((docs[:half], docs[half:])):
        path = folder / f"{i}.txt"
        path.write_text("\n\n".join("\n".join(d) for d in chunk) + "\n")
        files.append(InputFile(i, str(path), path.stat().st_size, "text", False))
    build = BuildPart(str(tmp_path / f"store-{unit_bytes}"), unit_bytes, (None, None, None), 1 << 20, None, None, dedup)
    return [out for element in store_parts(files, {}, unit_bytes) for out in build.process(element)]


def _edges_by_id(parts: list, buckets: int, dedup: DedupSettings) -> bands.Edges:
    """GroupBands over ``buckets`` buckets, as an engine groups the pieces; uids mapped to ids."""
    pieces = [piece for k, part in enumerate(parts) for piece in bands.write_part(k, part, buckets)]
    edges = [e for group in groups(pieces) for e in bands.GroupBands(dedup).process(group)]
    merged = bands.merge_edges(edges, dedup.bands * dedup.rows)
    firsts = np.cumsum([0] + [len(p.offsets) for p in parts])
    ids = [firsts[u >> 32] + (u & 0xFFFFFFFF) for u in (merged.first, merged.second)]
    return bands.Edges(ids[0], ids[1], merged.agree, merged.exact, merged.places)


def test_the_edges_are_the_same_whatever_the_buckets_and_parts(tmp_path):
    dedup = DedupSettings("near")
    docs = _families(random.Random(2), 300)
    whole = _parts(tmp_path, docs, 1 << 30, dedup)
    cut = _parts(tmp_path, docs, 4000, dedup)
    assert len(whole) == 2 and len(cut) > 6
    reference = _edges_by_id(whole, 1, dedup)
    assert len(reference.first) > 20 and (reference.exact == bands.EXACT).any()
    for parts, buckets in ((whole, 5), (cut, 1), (cut, 7)):
        edges = _edges_by_id(parts, buckets, dedup)
        for a, b in zip(edges[:4], reference[:4]):
            assert np.array_equal(a, b), buckets
    texts = _texts(docs)
    doc = np.asarray([hash(t) & 0xFFFFFFFFFFFF for t in texts], np.uint64)
    arrays = CorpusArrays(np.arange(len(texts)), np.zeros(len(texts), np.int64), doc)
    in_job = kept_in_store(cut, arrays, dedup, bands.merge_edges(
        [e for group in groups([p for k, part in enumerate(cut) for p in bands.write_part(k, part, 3)])
         for e in bands.GroupBands(dedup).process(group)], 112))
    assert np.array_equal(in_job, kept_in_store(whole, arrays, dedup, None))  # None: grouped in this process


def test_a_document_read_back_has_the_shingles_of_its_text(tmp_path):
    """``Shingles`` reads an entry of a store part by its offset: the shingles of the text its part's
    sketch hashed."""
    docs = [["The cat sat on the mat.", "A dog ran far, far away!"], ["Ünïcode wörds here too."], ["one"],
            ["river stone music night the cat sat on"]]
    (tmp_path / "a.txt").write_text("\n\n".join("\n".join(d) for d in docs) + "\n")
    file = InputFile(0, str(tmp_path / "a.txt"), (tmp_path / "a.txt").stat().st_size, "text", False)
    work = BuildPart(str(tmp_path / "s"), 1 << 20, (None, None, None), 1000, None, dedup=DedupSettings("near"))
    part = next(iter(work.process((file, (), None))))
    with bands.Shingles(lambda i: (part.url, int(part.offsets[i])), 5) as shingles_of:
        for i, d in enumerate(docs):
            assert np.array_equal(shingles_of(i), np.unique(MinHasher(1, 1).shingles(["\n".join(d)])[0]))
