"""``trainer.train --verify-records``: a damaged shard of this worker is refused before the first step."""
from __future__ import annotations

import json
import re

from shardprep import manifest
from tests import trainer_fixtures as fx
from trainer import train


def test_verify_records_names_the_shard_and_offset_before_training(monkeypatch, capsys, tmp_path) -> None:
    data = str(tmp_path / "ds")
    fx.make_dataset(data, rows=400, num_shards=2, eval_fraction=0.0)
    shard = manifest.load(data).splits["train"].shards[0]  # worker 0 of 2 reads shard 0
    path = tmp_path / "ds" / shard.path
    raw = bytearray(path.read_bytes())
    flipped = len(raw) // 2
    raw[flipped] ^= 0x40
    path.write_bytes(bytes(raw))
    addresses = ["127.0.0.1:9", "127.0.0.1:10"]  # never reached: the refusal comes before the strategy connects
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {"worker": addresses}, "task": {"type": "worker", "index": 0}}))
    args = ["--data", data, "--model", "tests.trainer_fixtures:small_model", "--label", "label", "--features", "x0,x1",
            "--per-replica-batch", "8", "--epochs", "1", "--model-dir", str(tmp_path / "run"), "--export", "none",
            "--verify-records"]
    code = train.main(args)
    captured = capsys.readouterr()
    assert code == 2 and captured.err.count("\n") == 1, captured.err
    m = re.search(r"--verify-records: shard (\S+) is damaged at byte (\d+) \(record \d+, tfrecord_\w+\)", captured.err)
    assert m and m[1].endswith(shard.path) and int(m[2]) <= flipped, captured.err
    assert "step 1/" not in captured.out + captured.err
