"""``trainer.run_table``: the end-of-run table and eval line people read, names from the manifest escaped (issue 57 item 4)."""
from __future__ import annotations

from trainer.run_table import print_report


def test_a_split_name_with_bidi_controls_is_printed_escaped(capsys):
    summary = {"worker": 0, "data_mode": "file", "steps": 10, "examples": 640, "empty_replica_steps": 0,
               "first_loss": 0.7, "final_loss": 0.3, "accuracy": 0.9, "eval_split": "ev\u202eal\u200b",
               "eval_examples": 64, "eval_loss": 0.31, "eval_accuracy": 0.88}
    print_report([summary, {**summary, "worker": 1, "data_mode": "file\u2066"}])
    out = capsys.readouterr().out
    assert "ev\\u202eal\\u200b" in out and "file\\u2066" in out
    assert not {"\u202e", "\u200b", "\u2066"} & set(out)
