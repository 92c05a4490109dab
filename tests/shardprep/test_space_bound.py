"""The disk space bound (``shardprep.space_bound``, ``capacity.space_bound``): real runs of each kind,
their output folder's bytes sampled while they run, never above the bound the run logs before it
writes; the wire arithmetic against the encoder; and a run given the bound's room on a tmpfs."""
from __future__ import annotations

import gzip
import json
import os
import random
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from shardprep import space_bound
from shardprep.example import wire
from tests.conftest import ROOT

BOUND = re.compile(r"this run writes at most [\d.,]+ MB under \S+ at once \(([\d,]+) bytes")


class Peak:
    """Samples the bytes of every file under a folder (``os.scandir`` sizes) about every millisecond,
    and keeps the largest sum seen and each file's largest size (their sum bounds the peak too)."""

    def __init__(self, root: Path) -> None:
        self.root, self.peak, self.largest = root, 0, {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sizes(self, folder: str) -> dict[str, int]:
        out: dict[str, int] = {}
        try:
            with os.scandir(folder) as it:
                for entry in it:
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            out.update(self._sizes(entry.path))
                        else:
                            out[entry.path] = entry.stat(follow_symlinks=False).st_size
                    except OSError:  # removed meanwhile
                        continue
        except OSError:
            pass
        return out

    def _run(self) -> None:
        while not self._stop.is_set():
            sizes = self._sizes(str(self.root))
            self.peak = max(self.peak, sum(sizes.values()))
            for path, size in sizes.items():
                self.largest[path] = max(size, self.largest.get(path, 0))
            time.sleep(0.001)

    def __enter__(self) -> Peak:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _run(out: Path, *args: str) -> tuple[int, int, str]:
    """Runs ``shardprep.run --output out args``: (peak bytes under out, the logged bound, stderr)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with Peak(out.parent if out.parent.name == "roomy" else out.parent) as peak:
        proc = subprocess.run([sys.executable, "-m", "shardprep.run", "--output", str(out), *args],
                              capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = BOUND.search(proc.stderr)
    assert found, proc.stderr[-3000:]
    bound = int(found.group(1).replace(",", ""))
    print(f"{out.name}: peak {peak.peak:,} bytes, bound {bound:,} bytes, ratio {bound / peak.peak:.2f}; "
          f"{proc.stderr[found.start():found.end() + 200].splitlines()[0]}")
    return peak.peak, bound, proc.stderr


def _folder(tmp_path: Path, name: str) -> Path:
    """An output folder alone in its parent, so the sampler sees only the run's files."""
    parent = tmp_path / f"{name}-out"
    parent.mkdir()
    return parent / name


# --- the wire arithmetic --------------------------------------------------------------------------


@pytest.mark.parametrize("dtype,values", [
    ("int64", [5]), ("int64", [-1]), ("int64", [1, 2, 300, -7]), ("int64", []),
    ("float32", [0.5]), ("float32", [0.0] * 200), ("string", [b""]), ("string", [b"x" * 200, b"ab"]),
])
@pytest.mark.parametrize("name", ["a", "n" * 40, "é" * 100])
def test_entry_bytes_is_the_encoders_map_entry(name, dtype, values) -> None:
    key = name.encode()
    real = len(wire.map_entry(key, wire.feature_message(dtype, values)))
    widths = [len(b) for b in values] if dtype == "string" else [4] * len(values) if dtype == "float32" else [
        len(wire.int64_varint(v)) for v in values]
    assert space_bound.entry_bytes(len(key), dtype, widths) == real


def test_a_csv_value_of_k_characters_never_takes_more_than_the_factor() -> None:
    schema = {"long_feature_name_" * 3: _spec("int64"), "s": _spec("string"), "f": _spec("float32")}
    columns = list(schema)
    factor = space_bound.csv_factor(schema, columns, empty_is_value=False)
    rng = random.Random(0)
    for _ in range(300):
        row = {"long_feature_name_" * 3: rng.choice(["1", "-1", "9", "-123456789012", "0"]),
               "s": "x" * rng.randint(1, 30), "f": rng.choice(["1", "0.5", "-3e30"])}
        text = ",".join(row.values()) + "\n"
        entries = sorted((name.encode(), _message(schema[name].dtype, value)) for name, value in row.items())
        content = b"".join(wire.map_entry(k, m) for k, m in entries)
        example = b"\x0a" + wire.varint(len(content)) + content
        assert 16 + len(example) <= factor * len(text.encode())


def _spec(dtype: str):
    from shardprep.schema import FeatureSpec

    return FeatureSpec(dtype, ())


def _message(dtype: str, value: str) -> bytes:
    if dtype == "int64":
        return wire.feature_message(dtype, [int(value)])
    if dtype == "float32":
        return wire.feature_message(dtype, [float(value)])
    return wire.feature_message(dtype, [value.encode()])


# --- real runs: the peak under the output folder never passes the bound ----------------------------


def test_csv_of_long_feature_names_and_short_values(tmp_path) -> None:
    """The worst case of CSV: every value a digit, every name 40 characters (an Example repeats each
    name in every record)."""
    names = [f"feature_{i:02d}_" + "n" * 28 for i in range(8)]
    rng = random.Random(1)
    src = tmp_path / "wide.csv"
    src.write_text(",".join(names) + "\n" + "".join(",".join(str(rng.randint(0, 9)) for _ in names) + "\n"
                                                    for _ in range(40_000)))
    peak, bound, _ = _run(_folder(tmp_path, "csv"), "--input", str(src), "--num-shards", "4",
                          "--split", "train=0.9,eval=0.1")
    assert peak <= bound <= 3 * peak


def test_csv_of_short_names_with_gzip_shards(tmp_path) -> None:
    rng = random.Random(2)
    src = tmp_path / "digits.csv"
    src.write_text("a,b,c,d,e,f,g,h\n" + "".join(",".join(str(rng.randint(0, 9)) for _ in range(8)) + "\n"
                                                 for _ in range(40_000)))
    peak, bound, _ = _run(_folder(tmp_path, "gz"), "--input", str(src), "--num-shards", "3", "--compression", "gzip")
    assert peak <= bound <= 3 * peak


def test_json_lines_with_lists_strings_and_dead_letters(tmp_path) -> None:
    rng = random.Random(3)
    lines = [json.dumps({"id": i, "tags": [rng.choice("abc") for _ in range(rng.randint(0, 4))],
                         "x": [rng.random() for _ in range(3)], "text": "w" * rng.randint(0, 40)})
             for i in range(20_000)]
    lines[5] = '{"id": "not a number", "tags": [], "x": [1, 2, 3], "text": "' + "\u0001" * 500 + '"}'
    src = tmp_path / "records.jsonl"
    src.write_text("\n".join(lines) + "\n")
    peak, bound, _ = _run(_folder(tmp_path, "jsonl"), "--input", str(src), "--num-shards", "2",
                          "--max-bad-records", "5")
    assert peak <= bound <= 12 * peak  # an empty object {} is a record: 18 bytes framed for 3 of input


def test_tfrecord_pass_through(tmp_path) -> None:
    csv = tmp_path / "in.csv"
    csv.write_text("a,b\n" + "".join(f"{i},{'v' * (i % 50)}\n" for i in range(20_000)))
    first = tmp_path / "first" / "ds"
    _run(_folder(tmp_path, "first"), "--input", str(csv), "--num-shards", "2")
    shards = sorted(str(p) for p in (tmp_path / "first-out").rglob("*.tfrecord"))
    assert shards, first
    peak, bound, _ = _run(_folder(tmp_path, "tfrecord"), *[a for s in shards for a in ("--input", s)],
                          "--num-shards", "3")
    assert peak <= bound <= 3 * peak


def test_images(tmp_path) -> None:
    root = tmp_path / "images"
    for label in ("cat", "dog"):
        (root / label).mkdir(parents=True)
        for i in range(150):
            (root / label / f"{label}-{i:03d}.png").write_bytes(_png(30 + i % 40, 30))
    peak, bound, _ = _run(_folder(tmp_path, "images"), "--input", str(root), "--format", "images", "--num-shards", "2")
    assert peak <= bound <= 3 * peak


def _png(width: int, height: int) -> bytes:
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rng = random.Random(width)
    rows = b"".join(b"\x00" + rng.randbytes(3 * width) for _ in range(height))  # noise: PNG keeps its size
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def _corpus(path: Path, documents: int, seed: int = 4) -> Path:
    rng = random.Random(seed)
    words = ["the", "cat", "sat", "on", "a", "mat", "dogs", "run", "quickly", "unbelievable", "tokenization"]
    with gzip.open(path, "wt") if path.suffix == ".gz" else open(path, "w") as f:
        for _ in range(documents):
            for _ in range(rng.randint(2, 8)):
                f.write(" ".join(rng.choice(words) for _ in range(rng.randint(3, 25))) + ".\n")
            f.write("\n")
    return path


def test_text_pretraining_with_dupe_factor_two(tmp_path) -> None:
    src = _corpus(tmp_path / "corpus.txt", 1500)
    peak, bound, _ = _run(_folder(tmp_path, "pretraining"), "--input", str(src), "--task", "bert-pretraining",
                          "--train-vocab", "200", "--dupe-factor", "2", "--max-seq-length", "128",
                          "--num-shards", "2")
    assert peak <= bound <= 4 * peak


def test_text_classification(tmp_path) -> None:
    rng = random.Random(5)
    src = tmp_path / "reviews.jsonl"
    src.write_text("".join(json.dumps({"text": " ".join(rng.choice(["good", "bad", "film", "plot"])
                                                         for _ in range(rng.randint(2, 60))),
                                       "label": rng.choice(["pos", "neg"])}) + "\n" for _ in range(3000)))
    peak, bound, _ = _run(_folder(tmp_path, "classification"), "--input", str(src), "--task", "text-classification",
                          "--text-column", "text", "--label", "label", "--train-vocab", "50",
                          "--max-seq-length", "64", "--num-shards", "2")
    assert peak <= bound <= 4 * peak


# --- end to end: a run given the bound (+10%) of room on a tmpfs commits; one given less says how much --------


@pytest.fixture
def tmpfs(tmp_path):
    """``mount(size)``: a fresh tmpfs of ``size`` bytes (its path); skipped where mounting is refused."""
    mounted: list[Path] = []

    def mount(size: int) -> Path:
        folder = tmp_path / f"tmpfs-{len(mounted)}"
        folder.mkdir()
        pages = -(-size // 4096) * 4096
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={pages}", "tmpfs", str(folder)],
                              capture_output=True, text=True)
        if proc.returncode:
            pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
        mounted.append(folder)
        return folder

    yield mount
    for folder in mounted:
        subprocess.run(["umount", str(folder)], capture_output=True)


def test_a_run_given_the_bound_of_room_commits_and_a_full_disk_says_the_bound(tmp_path, tmpfs) -> None:
    names = [f"column_{i}_" + "x" * 20 for i in range(6)]
    rng = random.Random(6)
    src = tmp_path / "in.csv"
    src.write_text(",".join(names) + "\n" + "".join(",".join(str(rng.randint(0, 9)) for _ in names) + "\n"
                                                    for _ in range(30_000)))
    flags = ("--input", str(src), "--num-shards", "2", "--split", "train=0.8,eval=0.2")
    peak, bound, _ = _run(_folder(tmp_path, "probe"), *flags)
    roomy = tmpfs(int(bound * 1.1))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    ok = subprocess.run([sys.executable, "-m", "shardprep.run", "--output", str(roomy / "ds"), *flags],
                        capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert (roomy / "ds" / "manifest.json").exists()
    tight = tmpfs(peak // 2)
    full = subprocess.run([sys.executable, "-m", "shardprep.run", "--output", str(tight / "ds"), *flags],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert full.returncode == 1, full.stderr[-2000:]
    line = full.stderr.strip().splitlines()[-1]
    said = re.search(r"needs at most ([\d,.]+) MB free there.*; ([\d,.]+) MB were free when it started", line)
    assert said, line
    assert float(said.group(1).replace(",", "")) * 1e6 >= peak
    assert float(said.group(2).replace(",", "")) * 1e6 <= peak // 2 + 0.05e6  # shown to 0.1 MB
    assert not [p for p in tight.rglob("*") if p.is_file() and "lease" not in p.name], list(tight.rglob("*"))
