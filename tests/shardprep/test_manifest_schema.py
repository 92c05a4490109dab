"""shardprep.manifest_schema through ``Manifest.from_json``: a section of the wrong type is one
``manifest is malformed: <field>: expected ...`` error; optional fields stay optional and keys this
tool does not know pass."""
from __future__ import annotations

import copy
from typing import Any

import pytest

from shardprep import manifest

SHARD = {"path": "run-1/train/train-00000-of-00001.tfrecord", "num_records": 4, "num_bytes": 100, "crc32c": "0a1b2c3d"}
STATS = {"count": 4, "missing": 0, "min": 1, "max": 4.5, "mean": 2.5, "std": 1.1, "zeros": 0,
         "quantiles": {"p50": 2.0}, "histogram": {"edges": [1.0, 2.0, 4.5], "counts": [2, 2]},
         "quantile_histogram": {"edges": [1, 4.5], "counts": [4]}}
TEXT = {"task": "bert-pretraining", "vocab": "run-1/vocab.txt", "vocab_num_bytes": 120, "vocab_crc32c": "00ff00ff",
        "vocab_size": 30, "cased": False, "max_seq_length": 64, "max_predictions_per_seq": 10, "masked_lm_prob": 0.15,
        "short_seq_prob": 0.1, "dupe_factor": 2, "whole_word_masking": False, "seed": 12345}


def _doc() -> dict[str, Any]:
    return {
        "format": "shardprep.manifest", "version": 1, "seed": 1, "shuffled": True,
        "features": {"x": {"dtype": "float32", "shape": []}, "s": {"dtype": "string", "shape": []}},
        "splits": {"train": {"num_records": 4, "num_bytes": 100, "shards": [dict(SHARD)]}},
        "accounting": {"read": 4, "written": 4, "rejected": 0},
        "statistics": {"train": {"x": dict(STATS), "s": {"count": 4, "missing": 0, "distinct": 2, "top": [["a", 3], ["b", 1]],
                                                         "distinct_estimated": False, "bytes_mean": 1.0}}},
        "text": dict(TEXT),
    }


def test_a_whole_manifest_loads():
    m = manifest.Manifest.from_json(_doc())
    assert m.statistics["train"]["x"]["mean"] == 2.5 and m.text["vocab"] == "run-1/vocab.txt"


def test_optional_sections_and_fields_stay_optional():
    doc = _doc()
    del doc["statistics"], doc["text"]
    manifest.Manifest.from_json(doc)
    doc = _doc()
    doc["statistics"]["train"]["x"] = {"count": 4, "missing": 0}  # --statistics of an older tool: fewer fields
    doc["text"] = {k: TEXT[k] for k in ("task", "vocab", "vocab_size", "max_seq_length")}
    doc["text"]["vocab"] = "vocab.txt"  # older text runs kept it at DIR/vocab.txt, without size or crc32c
    manifest.Manifest.from_json(doc)


def test_unknown_keys_pass_in_the_top_level_shards_statistics_and_text():
    doc = _doc()
    doc["label"] = "x"
    doc["a_later_section"] = {"anything": [1, 2]}
    doc["splits"]["train"]["shards"][0]["a_later_key"] = {"path": "run-1/train/x.more", "num_bytes": 3}
    doc["statistics"]["train"]["x"]["a_later_figure"] = "text"
    doc["text"]["a_later_flag"] = [1]
    manifest.Manifest.from_json(doc)


MALFORMED = [
    (lambda d: d["statistics"]["train"]["x"].update(mean="2.5"), "statistics.train.x.mean: expected a number"),
    (lambda d: d["statistics"]["train"]["x"].update(min=True), "statistics.train.x.min: expected a number"),
    (lambda d: d["statistics"]["train"]["x"].update(count="4"), "statistics.train.x.count: expected a non-negative integer"),
    (lambda d: d["statistics"]["train"]["x"].pop("count"), "statistics.train.x.count: expected a non-negative integer, found missing"),
    (lambda d: d["statistics"]["train"]["x"].pop("missing"), "statistics.train.x.missing: expected a non-negative integer"),
    (lambda d: d["statistics"]["train"]["x"].update(missing=-1), "statistics.train.x.missing: expected a non-negative integer"),
    (lambda d: d["statistics"]["train"].update(x=[1, 2]), "statistics.train.x: expected an object"),
    (lambda d: d["statistics"].update(train=[]), "statistics.train: expected an object"),
    (lambda d: d.update(statistics=[]), "statistics: expected an object"),
    (lambda d: d["statistics"]["train"]["x"]["quantiles"].update(p50="2"), "statistics.train.x.quantiles.p50: expected a number"),
    (lambda d: d["statistics"]["train"]["x"]["histogram"].update(counts="bad"), "statistics.train.x.histogram.counts: expected a list"),
    (lambda d: d["statistics"]["train"]["x"]["histogram"].update(edges=[1, 2]), "statistics.train.x.histogram.edges: expected one more edge"),
    (lambda d: d["statistics"]["train"]["x"]["histogram"].update(counts=[2, -1]), "statistics.train.x.histogram.counts[1]: expected a non-negative"),
    (lambda d: d["statistics"]["train"]["s"].update(top=[["a", 3], ["b"]]), "statistics.train.s.top[1]: expected a [value, count] pair"),
    (lambda d: d["statistics"]["train"]["s"].update(top=[[1, 3]]), "statistics.train.s.top[0][0]: expected a string"),
    (lambda d: d["statistics"]["train"]["s"].update(distinct_estimated="no"), "statistics.train.s.distinct_estimated: expected true or false"),
    (lambda d: d["splits"].update(train=[]), "splits.train: expected an object"),
    (lambda d: d.update(splits=[{"train": {}}]), "splits: expected an object"),
    (lambda d: d["splits"]["train"].pop("num_records"), "splits.train.num_records: expected a non-negative integer, found missing"),
    (lambda d: d["splits"]["train"]["shards"].append(["x"]), "splits.train.shards[1]: expected an object"),
    (lambda d: d["accounting"].pop("read"), "accounting.read: expected a non-negative integer, found missing"),
    (lambda d: d.update(created=5), "created: expected a string"),
    (lambda d: d["text"].pop("vocab"), "text.vocab: expected a path inside the data set folder, found missing"),
    (lambda d: d["text"].update(vocab=5), "text.vocab: expected a string"),
    (lambda d: d["text"].update(vocab_size="30"), "text.vocab_size: expected a positive integer"),
    (lambda d: d["text"].update(max_seq_length=0), "text.max_seq_length: expected a positive integer"),
    (lambda d: d["text"].update(labels="a,b"), "text.labels: expected a list"),
    (lambda d: d["text"].update(labels=["a", 2]), "text.labels[1]: expected a string"),
    (lambda d: d["text"].update(vocab_crc32c="XYZ"), "text.vocab_crc32c: expected 8 lower-case hex digits"),
    (lambda d: d["text"].pop("vocab_crc32c"), "text.vocab_crc32c: expected the vocabulary's size and crc32c together"),
    (lambda d: d.update(text="vocab.txt"), "text: expected an object"),
]


@pytest.mark.parametrize("edit, says", MALFORMED, ids=[m[1].split(":")[0] + f"-{i}" for i, m in enumerate(MALFORMED)])
def test_a_malformed_section_is_one_error_naming_its_field(edit, says):
    doc = copy.deepcopy(_doc())
    edit(doc)
    with pytest.raises(manifest.ManifestError) as e:
        manifest.Manifest.from_json(doc)
    assert str(e.value).startswith(f"manifest is malformed: {says}"), str(e.value)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("vocab", ["../../../../../etc/passwd", "/dev/zero", "run-1/../../x", "gs://b/vocab.txt"])
def test_a_vocabulary_path_outside_the_data_set_is_refused_on_load(vocab):
    doc = _doc()
    doc["text"]["vocab"] = vocab
    with pytest.raises(manifest.ManifestError, match=r"^manifest field text\.vocab: .* is not a plain path inside the data set folder"):
        manifest.Manifest.from_json(doc)
