"""``trainer.input`` measured: its input rate against a hand-written pipeline, and an elastic resume's start.

    python -m benchmarks.elastic_input rate [--records N] [--rounds R]
    python -m benchmarks.elastic_input resume [--records N] [--text-bytes B] [--rounds R]

``rate``: one worker, the same shards and batch: records/s of ``trainer.input.open(...).dataset_fn``
(a worker's dataset: interleave, epoch shuffle, batch, parse) against ``TFRecordDataset(files)
.shuffle(1024).batch(B).map(parse_example)`` written by hand, alternated ``--rounds`` times; the median
of each and their ratio (the goal: >= 0.95).

``resume``: a ``trainer.launch`` job of 2 workers interrupted mid-epoch, then resumed from a copy of
its checkpoints with 3 workers (elastic: the epoch's rest dealt from the 2 workers' replayed streams)
and with 2 (the plain resume); seconds from the launch of the resumed workers to their first step
(worker 0's first progress line), alternated ``--rounds`` times (the goal: <= 1.2x).

Data sets are written once to ``benchmarks/data/elastic-*`` (git-ignored): an int64 ``id``, eight
float32 ``f0..f7``, an int64 ``label`` and a string ``text`` of ``--text-bytes`` bytes per record.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time

import numpy as np

from benchmarks.data import DATA_DIR

__all__ = ["main"]

_RUN = "run-20260101T000000Z-0e1a5c1c"
_BATCH = 256


def _dataset(records: int, text_bytes: int, shards: int = 4) -> str:
    """A data set of ``records`` records in ``shards`` shards with its manifest (written once)."""
    import google_crc32c
    import tensorflow as tf

    from shardprep import manifest, naming
    from shardprep.schema import FeatureSpec, schema_to_json

    root = os.path.join(DATA_DIR, f"elastic-{records}-{text_bytes}")
    if os.path.exists(os.path.join(root, "manifest.json")):
        return root
    features = {"id": FeatureSpec("int64"), **{f"f{i}": FeatureSpec("float32") for i in range(8)},
                "label": FeatureSpec("int64"), "text": FeatureSpec("string")}
    rng = np.random.default_rng(0)
    infos = []
    for s in range(shards):
        rel = naming.shard_path(_RUN, "train", s, shards)
        path = naming.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        ids = range(s, records, shards)
        values = rng.standard_normal((len(ids), 8)).astype(np.float32)
        text = b"x" * text_bytes
        with tf.io.TFRecordWriter(path) as writer:
            for row, i in enumerate(ids):
                feature = {"id": tf.train.Feature(int64_list=tf.train.Int64List(value=[i])),
                           "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(values[row, 0] > 0)])),
                           "text": tf.train.Feature(bytes_list=tf.train.BytesList(value=[text]))}
                for k in range(8):
                    feature[f"f{k}"] = tf.train.Feature(float_list=tf.train.FloatList(value=[values[row, k]]))
                writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
        with open(path, "rb") as f:
            data = f.read()
        infos.append(manifest.ShardInfo(rel, len(ids), len(data), google_crc32c.Checksum(data).hexdigest().decode()))
    split = manifest.SplitInfo(records, sum(i.num_bytes for i in infos), tuple(infos))
    manifest.write(root, manifest.Manifest(
        features=schema_to_json(features), splits={"train": split}, sources=(manifest.SourceInfo("bench://rows", 0, records, 0),),
        rejected=manifest.RejectedInfo(), accounting=manifest.Accounting(records, records, 0), seed=0, shuffled=False,
        compression="none"))
    return root


def _rate(ds, records: int) -> float:  # noqa: ANN001 - a tf.data.Dataset
    """Records per second of one pass over ``records`` records of ``ds`` (batches of ``_BATCH``)."""
    it = iter(ds)
    next(it)  # pipeline start-up outside the timing
    start = time.perf_counter()
    n = 0
    for _ in range(records // _BATCH - 2):
        next(it)
        n += _BATCH
    return n / (time.perf_counter() - start)


def rate(records: int, rounds: int) -> dict:
    import tensorflow as tf

    import trainer.input
    from trainer import data

    root = _dataset(records, 0)
    features = ("id", *(f"f{i}" for i in range(8)), "text")
    inp = trainer.input.open(root, label="label", features=features, global_batch_size=_BATCH, shuffle=1024,
                             epochs=None, num_workers=1)
    context = tf.distribute.InputContext(num_input_pipelines=1, input_pipeline_id=0, num_replicas_in_sync=1)
    spec = data.parse_spec(inp.plan.feature_spec)
    files = list(inp.plan.shard_urls)

    def hand() -> tf.data.Dataset:
        ds = tf.data.TFRecordDataset(files).repeat().shuffle(1024).batch(_BATCH, drop_remainder=True)
        ds = ds.map(lambda s: tf.io.parse_example(s, spec), num_parallel_calls=tf.data.AUTOTUNE)
        return ds.prefetch(tf.data.AUTOTUNE)

    api, baseline = [], []
    for _ in range(rounds):
        api.append(_rate(inp.dataset_fn(context), records))
        baseline.append(_rate(hand(), records))
    result = {"records": records, "bytes": inp.plan.shards and sum(s.num_bytes for s in inp.plan.shards),
              "batch": _BATCH, "rounds": rounds, "api_records_per_s": statistics.median(api),
              "hand_written_records_per_s": statistics.median(baseline)}
    result["ratio"] = result["api_records_per_s"] / result["hand_written_records_per_s"]
    return result


def _launch(workers: int, data: str, model_dir: str, *, stop_at: int | None) -> tuple[float, str]:
    """Runs the job; returns (seconds from launch to worker 0's first step, output). ``stop_at``: interrupt
    the launcher once worker 0 reports that step (else at its first step)."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**{k: v for k, v in os.environ.items() if k != "TF_CONFIG"}, "TF_CPP_MIN_LOG_LEVEL": "2",
           "PYTHONUNBUFFERED": "1", "PYTHONPATH": repo}
    args = [sys.executable, "-m", "trainer.launch", "--workers", str(workers), "--restarts", "0", "--", "--data", data,
            "--label", "label", "--features", ",".join(f"f{i}" for i in range(8)), "--global-batch", "960",
            "--epochs", "2", "--model-dir", model_dir, "--checkpoint-every", "20", "--log-every", "1",
            "--shuffle-buffer", "1024", "--seed", "7", "--export", "none"]
    started = time.monotonic()
    proc = subprocess.Popen(args, env=env, cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    lines, first = [], None
    for line in proc.stdout:
        lines.append(line)
        m = re.match(r"\[worker 0\] .* INFO step (\d+)/", line)
        if m and first is None:
            first = time.monotonic() - started
        if m and (stop_at is None or int(m[1]) >= stop_at):
            proc.send_signal(signal.SIGINT)
            break
    proc.wait(timeout=300)
    if first is None:
        raise RuntimeError("".join(lines)[-3000:])
    return first, "".join(lines)


def resume(records: int, text_bytes: int, rounds: int) -> dict:
    root = _dataset(records, text_bytes)
    work = os.path.join(DATA_DIR, "elastic-resume-runs")
    shutil.rmtree(work, ignore_errors=True)
    base = os.path.join(work, "base")
    spe = records // 960
    _launch(2, root, base, stop_at=spe // 2 + 2)  # mid-epoch 0, past a checkpoint
    times: dict[int, list[float]] = {3: [], 2: []}
    for r in range(rounds):
        for workers in (3, 2):
            copy = os.path.join(work, f"w{workers}-{r}")
            shutil.copytree(base, copy)
            seconds, out = _launch(workers, root, copy, stop_at=None)
            if workers == 3:
                assert "elastic resume: epoch 0" in out, out[-3000:]
            times[workers].append(seconds)
    shard_bytes = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs if f.endswith(".tfrecord"))
    result = {"records": records, "bytes": shard_bytes, "rounds": rounds, "steps_per_epoch": spe,
              "elastic_2_to_3_s": statistics.median(times[3]), "same_2_to_2_s": statistics.median(times[2]),
              "all_s": {str(k): v for k, v in times.items()}}
    result["ratio"] = result["elastic_2_to_3_s"] / result["same_2_to_2_s"]
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.elastic_input", description=__doc__.splitlines()[0])
    p.add_argument("what", choices=("rate", "resume"))
    p.add_argument("--records", type=int, default=200_000)
    p.add_argument("--text-bytes", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    out = rate(args.records, args.rounds) if args.what == "rate" else resume(args.records, args.text_bytes, args.rounds)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
