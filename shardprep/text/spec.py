"""What a text run's work units carry: the task, where its document store and vocabulary are, BERT's settings.

A ``TextSpec`` rides on each text unit's ``InputFile.text`` (small, picklable: URLs, not the data),
so that ``formats.text`` reads a unit with no other context, on any engine's worker.
"""
from __future__ import annotations

import dataclasses

from shardprep.text.pretraining import PretrainingConfig

__all__ = ["CLASSIFICATION", "PRETRAINING", "TASKS", "TextSpec"]

PRETRAINING, CLASSIFICATION = "bert-pretraining", "text-classification"
TASKS = (PRETRAINING, CLASSIFICATION)


@dataclasses.dataclass(frozen=True)
class TextSpec:
    """A text run's settings, the same for every unit."""

    task: str
    store_url: str  # the run's document store (``text.store``): one JSON line per document or bad line
    index_url: str  # the store's byte offset of each document id (.npy, int64)
    num_documents: int
    vocab_url: str  # the run's vocab.txt (``naming.vocab_path``)
    cased: bool
    config: PretrainingConfig = PretrainingConfig()
    labels: tuple[str, ...] = ()  # classification: the label vocabulary, sorted; a label's id is its place
    num_sentences: int = 0  # the store's sentences (an instance takes one or more: ``shardprep.space_bound``)

    def manifest_entry(self, vocab_size: int, *, vocab: str, vocab_bytes: int, vocab_crc32c: str,
                       corpus: dict | None = None, dedup: dict | None = None) -> dict:
        """The manifest's top-level ``"text"`` object (the trainer's contract): the settings that apply to
        the task (classification: no masking settings, its labels). ``vocab``: the vocabulary's path
        relative to the data set folder, with its size and crc32c (checked by ``verify``); ``corpus``:
        what the store saw (``text.corpus.CorpusStats.entry``); ``dedup``: ``--dedup``'s settings and
        the documents it removed by reason."""
        c = self.config
        entry = {"task": self.task, "vocab": vocab, "vocab_num_bytes": vocab_bytes, "vocab_crc32c": vocab_crc32c,
                 "vocab_size": vocab_size, "cased": self.cased, "max_seq_length": c.max_seq_length}
        if self.task == CLASSIFICATION:
            entry["labels"] = list(self.labels)
        else:
            entry.update({"max_predictions_per_seq": c.max_predictions_per_seq, "masked_lm_prob": c.masked_lm_prob,
                          "short_seq_prob": c.short_seq_prob, "dupe_factor": c.dupe_factor,
                          "whole_word_masking": c.whole_word_mask, "seed": c.seed})
        if corpus is not None:
            entry["corpus"] = corpus
        if dedup is not None:
            entry["dedup"] = dedup
        return entry
