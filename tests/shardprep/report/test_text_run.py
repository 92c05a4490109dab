"""The report and ``inspect`` of text runs (``shardprep.report.text_run``): real runs, their corpus counts,
a sample of their sequences, red flags, wordpieces, and hostile text escaped."""
from __future__ import annotations

import csv
import random
import re
from pathlib import Path

from shardprep import manifest, run
from shardprep.report import page
from shardprep.report.text_run import sample, text_flags, vocabulary
from tests.conftest import run_cli

WORDS = "the a river stone music night cat dog house over under quickly runs jumped sat lazy bridge town".split()
BOILER = "See the manual page for more information."


def _run(out: Path, *args) -> None:
    assert run.main([str(a) for a in ("--output", out, "--num-shards", 2, *args)]) == 0


def _corpus(path: Path) -> None:
    r = random.Random(4)
    docs = []
    for _ in range(120):
        d = [" ".join(r.choice(WORDS) for _ in range(r.randint(5, 12))) + "." for _ in range(r.randint(2, 5))]
        docs.append(d + [BOILER, BOILER])
    docs += [list(d) for d in docs[:20]]  # 20 exact copies
    docs.append(["\u202eevil\u202c text [x] <b>bold</b> here."])
    path.write_text("\n\n".join("\n".join(d) for d in docs) + "\n")


def test_a_pretraining_report_shows_the_corpus_the_sequences_and_red_flags(tmp_path):
    _corpus(tmp_path / "a.txt")
    out = tmp_path / "ds"
    _run(out, "--input", tmp_path / "a.txt", "--task", "bert-pretraining", "--train-vocab", 120, "--dupe-factor", 1,
         "--max-seq-length", 256)
    m = manifest.load(str(out))
    c = m.text["corpus"]
    assert c["documents"] == 141 and c["exact_duplicate_documents"] == 20
    assert c["top_repeated_sentences"][0] == [BOILER, 280]
    vocab = vocabulary(str(out), m.text)
    s = sample(str(out), m, vocab)
    assert s.records == m.accounting.written and 0 < s.padding < 1 and s.predictions > 0
    whys = " | ".join(f.why for f in text_flags(m, s))
    assert "are exact copies of another" in whys and "occur more than once" in whys and "padding" in whys
    html = page.build(str(out))
    assert '<h2 id="text">Text</h2>' in html and "most repeated sentences" in html and "[CLS]" in html
    assert "\u202e" not in html and "<b>bold</b>" not in html  # escaped for HTML and bidi controls
    assert "--statistics on" not in html
    proc = run_cli("shardprep.inspect", out)
    assert proc.returncode == 0 and re.search(r"exact copies of another document +20 \(14.2%\)", proc.stdout)
    assert "wordpieces: [CLS]" in proc.stdout and "red flag: text corpus" in proc.stdout
    assert "\u202e" not in proc.stdout


def test_a_classification_report_counts_classes_and_flags_skew(tmp_path):
    r = random.Random(1)
    with open(tmp_path / "c.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["body", "topic"])
        for i in range(300):
            w.writerow([" ".join(r.choice(WORDS) for _ in range(8)), "rare" if i % 30 == 0 else "common"])
    out = tmp_path / "ds"
    _run(out, "--input", tmp_path / "c.csv", "--task", "text-classification", "--text-column", "body", "--label",
         "topic", "--train-vocab", 60, "--max-seq-length", 16)
    m = manifest.load(str(out))
    assert m.text["corpus"]["label_counts"] == {"common": 290, "rare": 10}
    s = sample(str(out), m, vocabulary(str(out), m.text))
    assert any("the most frequent class 'common' has 290" in f.why for f in text_flags(m, s))
    assert "class rare" in page.build(str(out))


def test_statistics_on_with_a_task_is_one_line(tmp_path):
    _corpus(tmp_path / "a.txt")
    proc = run_cli("shardprep.run", "--input", tmp_path / "a.txt", "--output", tmp_path / "ds", "--num-shards", 2,
                   "--task", "bert-pretraining", "--train-vocab", 50, "--statistics", "on")
    assert proc.returncode == 2 and "--statistics on does not go with --task" in proc.stderr
