"""``text.store_stages``: a text run's document store and units are its job's first stages. Run
like any stage, in line or on a pool, they stage the same units, text entry and store bytes; the
small parts' documents are tokenized as the store is built, the others' left to CountRanges."""
from __future__ import annotations

import gzip
import os

import numpy as np

from pipelines import pool
from pipelines.driver import run_job
from shardprep import config, naming, planning, schema
from shardprep.formats.base import InputFile
from shardprep.graph import units as staged
from shardprep.job import Job
from shardprep.run import parser
from shardprep.text import prepare
from shardprep.text.store_stages import TextRun, stage_text, text_job
from shardprep.text.tokens import unit_url
from shardprep.text.vocab import train_vocab, write_vocab

WORDS = "the cat sat on a mat dog ran far river stone music night".split()


def _corpus(folder) -> None:
    """A small .txt file (one part, tokenized as it is built), a larger gzip one (one part of several
    units, tokenized by CountRanges), and a vocabulary."""
    folder.mkdir()
    docs = ["".join(f"{WORDS[(i * k) % 13]} {WORDS[(i + k) % 13]}.\n" for k in range(1, 4)) for i in range(60)]
    (folder / "a.txt").write_text("\n".join(docs[:5]))
    (folder / "b.txt.gz").write_bytes(gzip.compress("\n".join(docs[5:]).encode()))
    write_vocab(train_vocab(iter(d for doc in docs for d in doc.splitlines()), 60), folder / "vocab.txt")


def _planned(tmp_path, name: str, workers, *extra: str) -> tuple[config.ReshardConfig, list, bytes]:
    """The text job's first stages run (ExpandParts, BuildStore, PlanUnits; GroupBands before
    PlanUnits with ``--dedup near``): the config and units they staged and the store's bytes."""
    corpus = tmp_path / "corpus"
    files = [InputFile(i, str(corpus / n), os.path.getsize(corpus / n), "text", n.endswith(".gz"))
             for i, n in enumerate(("a.txt", "b.txt.gz"))]
    args, _ = parser().parse_known_args(["--input", "x", "--output", "y", "--task", "bert-pretraining", "--vocab",
                                         str(corpus / "vocab.txt"), "--unit-mb", "0.001", *extra])
    vocab = prepare.check(args)
    cfg = config.ReshardConfig(output=str(tmp_path / name), run_id=naming.new_run_id(),
                               features=schema.schema_to_json(prepare.schema_of(args)),
                               sources=tuple((f.url, f.size) for f in files), splits=planning.parse_splits("train"),
                               num_shards=2)
    run = TextRun(args, vocab, tuple(files), {}, 1 << 20)
    job, parts = text_job(cfg, run)
    near = ["GroupBands"] if "near" in extra else []
    planning_stages = len(near) + 3
    assert [s.name for s in job.stages[:planning_stages + 1]] == \
        ["ExpandParts", "BuildStore", *near, "PlanUnits", "ExpandUnits"]
    assert job.stages[1].heavy and job.stages[planning_stages].over == ("PlanUnits",) and job.num_units is None
    stage_text(cfg, run, parts)
    first = Job(job.stages[:planning_stages], job.inputs, job.staged, "PlanUnits")
    chunks, _ = run_job(first, workers)
    assert chunks == list(range(staged.num_chunks(len(staged.read_all(job.staged)))))
    store = next((tmp_path / name).rglob("store.jsonl"))
    return staged.with_sources(staged.slim(cfg), job.staged), staged.read_all(job.staged), store.read_bytes()


def test_the_store_stages_stage_the_same_units_in_line_and_on_a_pool(tmp_path):
    _corpus(tmp_path / "corpus")
    cfg, units, store = _planned(tmp_path, "inline", None)
    with pool.local_pool(2) as workers:
        pooled_cfg, pooled_units, pooled_store = _planned(tmp_path, "pooled", workers)
    assert store == pooled_store
    assert [(u.file.index, u.start, u.end, u.first_position) for u in units] == \
        [(u.file.index, u.start, u.end, u.first_position) for u in pooled_units]
    assert cfg.sources == pooled_cfg.sources and cfg.text["task"] == "bert-pretraining"
    assert {k: v for k, v in cfg.text.items() if k != "vocab"} == \
        {k: v for k, v in pooled_cfg.text.items() if k != "vocab"}  # the vocabulary's path names the run
    spec = units[0].file.text
    assert spec.num_documents == 60 and np.load(spec.index_url).size == 60
    tokenized = [os.path.exists(unit_url(spec.store_url, u.first_position)) for u in units]
    assert tokenized[0] and not all(tokenized), tokenized  # a.txt's as it was built; b.txt's left to CountRanges


def test_near_dedup_groups_the_bands_in_the_job_the_same_in_line_and_on_a_pool(tmp_path):
    """GroupBands (BuildStore's band pieces grouped by bucket, on the workers) gives the same store,
    its copies dead letters, in line and on a pool of two processes."""
    _corpus(tmp_path / "corpus")
    with open(tmp_path / "corpus" / "a.txt", "a") as f:  # exact and near copies of b.txt.gz's documents
        f.write("\n\n" + "".join(f"{WORDS[(9 * k) % 13]} {WORDS[(9 + k) % 13]}.\n" for k in range(1, 4)))
    _, units, store = _planned(tmp_path, "inline", None, "--dedup", "near", "--dedup-threshold", "0.5")
    with pool.local_pool(2) as workers:
        _, pooled_units, pooled_store = _planned(tmp_path, "pooled", workers, "--dedup", "near",
                                                 "--dedup-threshold", "0.5")
    assert store == pooled_store and len(units) == len(pooled_units)
    assert store.count(b'"r": "duplicate"') + store.count(b'"r": "near_duplicate"') >= 1
