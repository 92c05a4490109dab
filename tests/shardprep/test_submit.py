"""``shardprep.submit``: the launcher builds and stages the job, the engine runs it, and a full disk is
one line wherever it came: a text run's store that filled it names the store's bound, its instances
the run's, which is enough room for a rerun. Real runs on a real small disk (tmpfs)."""
from __future__ import annotations

import re
import subprocess

import pytest

from shardprep import manifest, run
from shardprep.text.vocab import train_vocab, write_vocab

WORDS = "the cat sat on a mat dog ran far river stone music night blue green light tree".split()


@pytest.fixture
def disk(tmp_path):
    """``mount(size)``: a fresh tmpfs of ``size`` bytes; skipped where mounting is refused."""
    mounted = []

    def mount(size: int):
        folder = tmp_path / f"disk-{len(mounted)}"
        folder.mkdir()
        if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                          capture_output=True).returncode:
            pytest.skip("cannot mount a tmpfs here")
        mounted.append(folder)
        return folder

    yield mount
    for folder in mounted:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def _corpus(folder, documents: int) -> list[str]:
    folder.mkdir()
    docs = ["".join(f"{WORDS[(i * k) % 17]} {WORDS[(i + k) % 17]} {WORDS[(i * 7 + k) % 17]}.\n" for k in range(1, 6))
            for i in range(documents)]
    (folder / "a.txt").write_text("\n".join(docs))
    write_vocab(train_vocab(iter(line for d in docs for line in d.splitlines()), 80), folder / "vocab.txt")
    return ["--input", str(folder / "a.txt"), "--task", "bert-pretraining", "--vocab", str(folder / "vocab.txt"),
            "--num-shards", "2", "--local-workers", "1", "--max-seq-length", "32", "--max-predictions-per-seq", "5"]


def _needed(err: str) -> float:
    return float(re.search(r"needs at most ([\d,.]+) MB", err).group(1).replace(",", "")) * 1e6


def test_a_text_run_whose_store_fills_the_disk_names_the_stores_bound(tmp_path, disk, capsys):
    args = _corpus(tmp_path / "in", 4000)  # a store of ~0.5 MB
    out = disk(64 * 1024) / "ds"
    assert run.main([*args, "--output", str(out)]) == 1
    err = capsys.readouterr().err
    assert "no space left on the device" in err and "its document store alone needs at most" in err, err
    assert not [p for p in out.rglob("*") if p.is_file()] if out.exists() else True


def test_a_text_run_whose_instances_fill_the_disk_names_the_runs_bound_which_is_enough(tmp_path, disk, capsys):
    args = _corpus(tmp_path / "in", 400)  # a store of ~50 kB, instances of several MB
    out = disk(1 << 20) / "ds"
    assert run.main([*args, "--output", str(out)]) == 1
    err = capsys.readouterr().err
    assert "no space left on the device" in err and "this run needs at most" in err, err
    assert "document store alone" not in err, err
    out = disk(int(_needed(err)) + 64 * 1024) / "ds"
    assert run.main([*args, "--output", str(out)]) == 0, capsys.readouterr().err
    assert manifest.load(str(out)).text["task"] == "bert-pretraining"
