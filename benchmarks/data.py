"""Benchmark inputs, generated once into ``benchmarks/data/`` (git-ignored) and reused.

CSV sets: ``id``, eight float columns ``f0..f7``, an int ``label`` (``f0 > 0``, so a model can learn
it) and a ``text`` column of about 400 bytes (some texts hold commas, so about one row in eight is
quoted). Rows go to three files of very unequal size (70%, 25%, 5% of the rows), the shape that
leaves workers idle when each reads whole files.

TFRecord sets: the same rows as tf.train.Example, written by TensorFlow itself, in two big files
(60% / 40%); and ``uneven-*``: each CSV file converted one to one (same records per file) with a
manifest, so the per-file naive baseline (``benchmarks.naive_trainer``) can be fed the raw, uneven split.

Every set is written to a temporary folder and renamed when complete, with a ``DONE.json`` that
records its parameters; a set whose parameters changed is regenerated.
"""
from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Sequence

import numpy as np

__all__ = ["DATA_DIR", "adopt_plain", "csv_files", "csv_set", "plain_set", "set_features", "small_records", "tfrecord_files", "tfrecord_set",
           "uneven_set"]

DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
CSV_SHARES = (0.70, 0.25, 0.05)
TFR_SHARES = (0.60, 0.40)
_VERSION = 1
_WORDS = (
    "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau "
    "upsilon phi chi psi omega shard worker epoch batch record tensor gradient replica"
).split()
COLUMNS = ("id", *(f"f{j}" for j in range(8)), "label", "text")


def _done(folder: str, params: dict) -> bool:
    try:
        with open(os.path.join(folder, "DONE.json")) as f:
            return json.load(f) == params
    except (OSError, ValueError):
        return False


def _publish(tmp: str, folder: str, params: dict) -> None:
    with open(os.path.join(tmp, "DONE.json"), "w") as f:
        json.dump(params, f)
    if os.path.exists(folder):
        shutil.rmtree(folder)
    os.rename(tmp, folder)


def _counts(rows: int, shares: Sequence[float]) -> list[int]:
    counts = [int(rows * s) for s in shares[:-1]]
    return [*counts, rows - sum(counts)]


def _text_stream(rng: np.random.Generator, nbytes: int) -> str:
    weights = np.ones(len(_WORDS) + 1)
    weights[-1] = 0.0015 * len(_WORDS)  # a comma-word: about 0.15% of words
    weights /= weights.sum()
    vocab = np.array([*_WORDS, "etc,"])
    idx = rng.choice(len(vocab), size=nbytes // 5, p=weights)
    return " ".join(vocab[idx].tolist())


def _write_csv_rows(path: str, first_id: int, count: int, rng: np.random.Generator, stream: str) -> None:
    header = ",".join(COLUMNS) + "\n"
    chunk = 50_000
    with open(path, "w", newline="") as f:
        f.write(header)
        for lo in range(0, count, chunk):
            n = min(chunk, count - lo)
            xs = rng.standard_normal((n, 8)).round(5)
            offsets = rng.integers(0, len(stream) - 512, size=n).tolist()
            lengths = rng.integers(360, 440, size=n).tolist()
            lines = []
            for i, (row, o, length) in enumerate(zip(xs.tolist(), offsets, lengths)):
                text = stream[o:o + length].strip()
                if "," in text:
                    text = f'"{text}"'
                label = 1 if row[0] > 0 else 0
                lines.append(f"{first_id + lo + i},{row[0]},{row[1]},{row[2]},{row[3]},{row[4]},{row[5]},{row[6]},"
                             f"{row[7]},{label},{text}\n")
            f.write("".join(lines))


def set_features() -> dict[str, dict]:
    """The sets' features as a manifest (and ``--schema``) gives them."""
    features = {name: {"dtype": "float32", "shape": []} for name in COLUMNS[1:9]}
    features.update({"id": {"dtype": "int64", "shape": []}, "label": {"dtype": "int64", "shape": []},
                     "text": {"dtype": "string", "shape": []}})
    return features


def csv_set(rows: int, *, log: bool = True) -> str:
    """The folder of a CSV set of ``rows`` rows in three uneven files (generated if missing)."""
    name = _name("csv", rows)
    folder = os.path.join(DATA_DIR, name)
    params = {"version": _VERSION, "rows": rows, "shares": list(CSV_SHARES)}
    if _done(folder, params):
        return folder
    start = time.perf_counter()
    tmp = folder + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    rng = np.random.default_rng(rows)
    stream = _text_stream(rng, 4 << 20)
    first = 0
    for k, count in enumerate(_counts(rows, CSV_SHARES)):
        _write_csv_rows(os.path.join(tmp, f"part-{k}.csv"), first, count, rng, stream)
        first += count
    _publish(tmp, folder, params)
    if log:
        print(f"[data] generated {name}: {rows} rows, {dir_bytes(folder) / 1e6:.0f} MB in "
              f"{time.perf_counter() - start:.1f} s", flush=True)
    return folder


def csv_files(folder: str) -> list[str]:
    return sorted(os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(".csv"))


def tfrecord_files(folder: str) -> list[str]:
    return sorted(os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(".tfrecord"))


def dir_bytes(folder: str, suffixes: tuple[str, ...] = (".csv", ".tfrecord")) -> int:
    return sum(os.path.getsize(os.path.join(folder, n)) for n in os.listdir(folder) if n.endswith(suffixes))


def _name(kind: str, rows: int) -> str:
    return f"{kind}-{rows // 1000}k" if rows % 1000 == 0 else f"{kind}-{rows}"


def plain_set(rows: int, *, log: bool = True) -> str:
    """The rows of ``csv_set(rows)`` as tf.train.Example written by TensorFlow (the plain script's
    64 round-robin files): the source of the TFRecord sets. Generated by running that script once,
    unless ``adopt_plain`` got one from a timed run already."""
    folder = os.path.join(DATA_DIR, _name("plain", rows))
    params = {"version": _VERSION, "rows": rows, "shards": 64}
    if _done(folder, params):
        return folder
    import subprocess
    import sys

    src = csv_set(rows, log=log)
    start = time.perf_counter()
    tmp = folder + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    cmd = [sys.executable, "-m", "benchmarks.contenders.plain_script", *[a for f in csv_files(src) for a in ("--input", f)],
           "--output", tmp, "--num-shards", "64"]
    subprocess.run(cmd, check=True, capture_output=True, cwd=os.path.dirname(os.path.dirname(DATA_DIR)))
    _publish(tmp, folder, params)
    if log:
        print(f"[data] generated {os.path.basename(folder)} in {time.perf_counter() - start:.1f} s", flush=True)
    return folder


def adopt_plain(rows: int, output: str) -> None:
    """Keeps a timed plain-script run's output (64 files) as ``plain_set(rows)``, if there is none yet."""
    folder = os.path.join(DATA_DIR, _name("plain", rows))
    params = {"version": _VERSION, "rows": rows, "shards": 64}
    if _done(folder, params) or len(tfrecord_files(output)) != 64:
        return
    tmp = folder + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(output, tmp)
    _publish(tmp, folder, params)


def _concat(sources: Sequence[str], groups: Sequence[int], outputs: Sequence[str]) -> list[int]:
    """Concatenates consecutive groups of TFRecord files (framing is per record, so this is valid)."""
    from benchmarks.tfrecords import count_records

    counts, i = [], 0
    for size, out in zip(groups, outputs):
        n = 0
        with open(out, "wb") as dst:
            for path in sources[i:i + size]:
                with open(path, "rb") as src:
                    shutil.copyfileobj(src, dst, 8 << 20)
                n += count_records(path)
        counts.append(n)
        i += size
    return counts


def tfrecord_set(rows: int, *, log: bool = True) -> str:
    """Two big TFRecord files (38 and 26 of the plain set's 64 files: about 60% / 40%) of tf.Examples."""
    folder = os.path.join(DATA_DIR, _name("tfrecord", rows))
    params = {"version": _VERSION, "rows": rows, "groups": [38, 26]}
    if _done(folder, params):
        return folder
    src = tfrecord_files(plain_set(rows, log=log))
    tmp = folder + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    _concat(src, params["groups"], [os.path.join(tmp, f"part-{k}.tfrecord") for k in range(2)])
    _publish(tmp, folder, params)
    if log:
        print(f"[data] generated {os.path.basename(folder)}: {dir_bytes(folder) / 1e6:.0f} MB", flush=True)
    return folder


def uneven_set(rows: int, *, log: bool = True) -> str:
    """Three TFRecord files as uneven as the raw CSV files (45, 16 and 3 of the plain set's 64 files:
    70%, 25%, 5% of the records), under a manifest, for the per-file naive baseline
    (``benchmarks.naive_trainer``; the manifest is not balanced, ``trainer_probe`` lets it past the
    balance check)."""
    import google_crc32c

    folder = os.path.join(DATA_DIR, _name("uneven", rows))
    params = {"version": _VERSION, "rows": rows, "groups": [45, 16, 3]}
    if _done(folder, params):
        return folder
    src = tfrecord_files(plain_set(rows, log=log))
    tmp = folder + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    run = "run-raw"
    os.makedirs(os.path.join(tmp, run, "train"))
    n = len(params["groups"])
    rel = [f"{run}/train/train-{k:05d}-of-{n:05d}.tfrecord" for k in range(n)]
    counts = _concat(src, params["groups"], [os.path.join(tmp, p) for p in rel])
    shards = []
    for path, count in zip(rel, counts):
        with open(os.path.join(tmp, path), "rb") as f:
            data = f.read()
        shards.append({"path": path, "num_records": count, "num_bytes": len(data),
                       "crc32c": f"{google_crc32c.value(data):08x}"})
    features = set_features()
    total = sum(counts)
    manifest = {
        "format": "shardprep.manifest", "version": 1, "tool_version": "benchmark", "created": "",
        "record_type": "tf.train.Example", "compression": "none", "seed": 0, "shuffled": False,
        "features": features,
        "splits": {"train": {"num_records": total, "num_bytes": sum(s["num_bytes"] for s in shards),
                             "shards": shards}},
        "sources": [], "rejected": {"num_records": 0, "paths": [], "by_reason": {}},
        "accounting": {"read": total, "written": total, "rejected": 0},
    }
    with open(os.path.join(tmp, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    _publish(tmp, folder, params)
    if log:
        print(f"[data] generated {os.path.basename(folder)}: files of {counts} records", flush=True)
    return folder


if __name__ == "__main__":
    import sys

    for arg in sys.argv[1:]:
        print(csv_set(int(arg)))


def small_records(path: str, nbytes: int, *, distinct: int = 100_000) -> int:
    """Writes ~``nbytes`` of small TFRecord Examples to ``path`` (an int64 ``id``, four float32 ``x``,
    a 20-byte string ``t``, an int64 ``label``: ~90 bytes, ~106 framed): ``distinct`` of them,
    encoded by shardprep's own encoder, repeated. A run's memory and time follow sizes and counts,
    not values; issue 11's memory goal read with records a third of its size. Returns the count."""
    from shardprep import framing, schema
    from shardprep.example import example_encoder

    spec = schema.schema_from_json({"id": {"dtype": "int64", "shape": []}, "x": {"dtype": "float32", "shape": [4]},
                                    "t": {"dtype": "string", "shape": []}, "label": {"dtype": "int64", "shape": []}})
    encode = example_encoder(spec)
    rng = np.random.default_rng(0)
    x = rng.random((distinct, 4), dtype=np.float32).tolist()
    chunk = framing.frame_all(encode({"id": i, "x": x[i], "t": "a" * 20, "label": i % 10}) for i in range(distinct))
    copies = max(1, round(nbytes / len(chunk)))
    with open(path, "wb") as f:
        for _ in range(copies):
            f.write(chunk)
    return copies * distinct
