"""The re-shard command end to end on real files, read back by TensorFlow."""
from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from shardprep import manifest, run, verify
from tests.conftest import read_with_tensorflow, run_cli, sample_rows, uneven_csvs, write_csv


def reshard(*args: str) -> int:
    return run.main([str(a) for a in args])


def crcs(root: Path) -> dict[str, str]:
    m = manifest.load(str(root))
    return {s.path.split("/", 1)[1]: s.crc32c for split in m.splits.values() for s in split.shards}


@pytest.fixture(scope="module")
def uneven(tmp_path_factory):
    raw = tmp_path_factory.mktemp("raw")
    uneven_csvs(raw, 30_000)
    return raw


@pytest.fixture(scope="module")
def done(uneven, tmp_path_factory):
    out = tmp_path_factory.mktemp("ds") / "ds"
    assert reshard("--input", f"{uneven}/*.csv", "--output", out, "--workers", 4, "--split", "train=0.9,eval=0.1") == 0
    return out


def test_uneven_csvs_give_exactly_balanced_splits(done):
    m = manifest.load(str(done))
    assert set(m.splits) == {"train", "eval"}
    for split in m.splits.values():
        counts = [s.num_records for s in split.shards]
        assert len(counts) % 4 == 0 and max(counts) - min(counts) <= 1
    assert m.accounting.read == 30_000 == m.accounting.written + m.accounting.rejected
    assert 0.88 < m.splits["train"].num_records / 30_000 < 0.92
    assert [s.num_records for s in m.sources] == [21_000, 7_500, 1_500]
    assert m.features["id"] == {"dtype": "int64", "shape": []}
    assert m.features["x0"] == {"dtype": "float32", "shape": []}
    assert m.features["text"] == {"dtype": "string", "shape": []}
    assert verify.verify(str(done))[0] == []


def test_tensorflow_parses_every_record_and_nothing_is_lost_or_repeated(done):
    rows = read_with_tensorflow(str(done), "train") + read_with_tensorflow(str(done), "eval")
    ids = sorted(r["id"] for r in rows)
    assert ids == list(range(30_000))
    by_id = {r["id"]: r for r in rows}
    original = sample_rows(30_000 - 21_000 - 7_500, start=28_500)[0]
    got = by_id[original["id"]]
    assert got["text"] == original["text"].encode() and got["label"] == original["label"]
    assert got["x1"] == pytest.approx(original["x1"], abs=1e-6)


def test_records_are_globally_shuffled(done):
    ids = [r["id"] for r in read_with_tensorflow(str(done), "train")[:2000]]
    assert ids != sorted(ids)
    assert max(ids[:200]) > 25_000  # the small last file's rows appear early: a global shuffle


def test_same_seed_gives_identical_bytes_and_another_seed_does_not(uneven, done, tmp_path):
    again = tmp_path / "again"
    assert reshard("--input", f"{uneven}/*.csv", "--output", again, "--workers", 4, "--split", "train=0.9,eval=0.1") == 0
    assert crcs(again) == crcs(done)
    other = tmp_path / "other"
    assert reshard("--input", f"{uneven}/*.csv", "--output", other, "--workers", 4, "--split", "train=0.9,eval=0.1",
                   "--seed", 7) == 0
    assert crcs(other) != crcs(done)


def test_refuses_to_replace_a_data_set_before_reading_input(done, tmp_path, capsys):
    before = (done / "manifest.json").read_bytes()
    assert reshard("--input", str(tmp_path / "nothing-*.csv"), "--output", done, "--num-shards", 4) == 2
    assert "pass --overwrite" in capsys.readouterr().err
    assert (done / "manifest.json").read_bytes() == before


def test_overwrite_replaces_and_keeps_only_the_previous_run(uneven, tmp_path):
    out = tmp_path / "ds"
    assert reshard("--input", f"{uneven}/part-2.csv", "--output", out, "--num-shards", 2) == 0
    first = manifest.load(str(out)).run_ids
    assert reshard("--input", f"{uneven}/part-2.csv", "--output", out, "--num-shards", 3, "--overwrite") == 0
    m = manifest.load(str(out))
    assert len(m.splits["train"].shards) == 3
    assert all((out / r).is_dir() for r in first)  # kept for readers of the previous manifest
    second = m.run_ids
    assert reshard("--input", f"{uneven}/part-2.csv", "--output", out, "--num-shards", 2, "--overwrite",
                   "--keep-previous", 0) == 0
    assert not any((out / r).exists() for r in (*first, *second))


def test_crashed_run_leftovers_are_never_taken_for_data(uneven, tmp_path):
    out = tmp_path / "ds"
    leftover = out / "run-20260101T000000Z-deadbeef" / "train"
    leftover.mkdir(parents=True)
    (leftover / "train-00000-of-00002.tfrecord").write_bytes(b"half written")
    proc = run_cli("shardprep.verify", out)
    assert proc.returncode == 2 and "no manifest" in proc.stderr and "Traceback" not in proc.stderr
    assert reshard("--input", f"{uneven}/part-2.csv", "--output", out, "--num-shards", 2) == 0
    assert not leftover.exists()
    assert verify.verify(str(out))[0] == []


def test_bad_records_above_the_limit_commit_nothing(tmp_path, capsys):
    rows = sample_rows(50)
    path = write_csv(tmp_path / "raw" / "bad.csv", rows)
    text = path.read_text().splitlines()
    text.insert(5, "1,2,3")  # too few columns: file line 6
    text.insert(9, "x,0.1,0.2,0.3,1,more,extra")  # too many columns: file line 10
    path.write_text("\n".join(text) + "\n")
    out = tmp_path / "ds"
    assert reshard("--input", path, "--output", out, "--num-shards", 2) == 1
    err = capsys.readouterr().err
    assert "2 bad records" in err and "--max-bad-records 2" in err
    assert not (out / "manifest.json").exists()
    dead = [json.loads(line) for f in out.glob("run-*/rejected/*.jsonl") for line in f.read_text().splitlines()]
    assert sorted(d["position"] for d in dead) == [6, 10]
    assert all(d["source"].endswith("bad.csv") and d["reason"] == "csv_columns" and d["raw"] for d in dead)

    assert reshard("--input", path, "--output", out, "--num-shards", 2, "--max-bad-records", 2) == 0
    m = manifest.load(str(out))
    assert (m.accounting.read, m.accounting.written, m.accounting.rejected) == (52, 50, 2)
    assert m.rejected.by_reason == {"csv_columns": 2} and m.sources[0].num_rejected == 2


def test_values_that_do_not_fit_the_schema_are_dead_letters(tmp_path):
    rows = [{"id": i, "n": "oops" if i in (3, 11) else i * 2, "text": "t"} for i in range(20)]
    path = write_csv(tmp_path / "raw" / "a.csv", rows)
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"id": {"dtype": "int64", "shape": []}, "n": {"dtype": "int64", "shape": []}}))
    out = tmp_path / "ds"
    assert reshard("--input", path, "--output", out, "--num-shards", 1, "--schema", schema, "--max-bad-records", 2) == 0
    m = manifest.load(str(out))
    assert (m.accounting.read, m.accounting.written, m.accounting.rejected) == (20, 18, 2)
    assert m.rejected.by_reason == {"type_mismatch": 2}
    assert sorted(m.features) == ["id", "n"]  # fields outside a given schema are dropped


@pytest.mark.parametrize("fmt", ["jsonl", "parquet", "tfrecord", "csv.gz"])
def test_every_source_format(tmp_path, fmt):
    rows = sample_rows(500)
    raw = tmp_path / "raw"
    raw.mkdir()
    if fmt == "jsonl":
        (raw / "a.jsonl").write_text("".join(json.dumps({**r, "vec": [r["x0"], r["x1"]]}) + "\n" for r in rows))
    elif fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), raw / "a.parquet", row_group_size=100)
    elif fmt == "csv.gz":
        src = write_csv(tmp_path / "a.csv", rows)
        (raw / "a.csv.gz").write_bytes(gzip.compress(src.read_bytes()))
    else:
        tf = pytest.importorskip("tensorflow")
        with tf.io.TFRecordWriter(str(raw / "a.tfrecord")) as w:
            for r in rows:
                w.write(tf.train.Example(features=tf.train.Features(feature={
                    "id": tf.train.Feature(int64_list=tf.train.Int64List(value=[r["id"]])),
                    "x0": tf.train.Feature(float_list=tf.train.FloatList(value=[r["x0"]])),
                    "text": tf.train.Feature(bytes_list=tf.train.BytesList(value=[r["text"].encode()])),
                })).SerializeToString())
    out = tmp_path / "ds"
    assert reshard("--input", f"{raw}/*", "--output", out, "--num-shards", 3, "--compression", "gzip") == 0
    got = read_with_tensorflow(str(out), "train")
    assert sorted(r["id"] for r in got) == list(range(500))
    assert verify.verify(str(out))[0] == []
    if fmt == "jsonl":
        assert manifest.load(str(out)).features["vec"] == {"dtype": "float32", "shape": [2]}


def test_no_shuffle_deals_input_order_round_robin(tmp_path):
    path = write_csv(tmp_path / "raw" / "a.csv", sample_rows(103))
    out = tmp_path / "ds"
    assert reshard("--input", path, "--output", out, "--num-shards", 4, "--no-shuffle") == 0
    m = manifest.load(str(out))
    tf = pytest.importorskip("tensorflow")
    from shardprep import naming

    for k, shard in enumerate(m.splits["train"].shards):
        ids = [tf.train.Example.FromString(r.numpy()).features.feature["id"].int64_list.value[0]
               for r in tf.data.TFRecordDataset(naming.join(str(out), shard.path))]
        assert ids == list(range(k, 103, 4))


@pytest.mark.parametrize(
    "args, message",
    [
        (["--num-shards", 10, "--workers", 4], "use --num-shards 8 or 12"),
        (["--num-shards", 50], "fewer than its 50 shards"),
        (["--num-shards", 2, "--split", "train=0.9,eval=0.2"], "add up to 1.1"),
        (["--num-shards", 2, "--num-shardz", 3], "unknown argument '--num-shardz'"),
    ],
)
def test_refusals_are_one_line(tmp_path, args, message):
    path = write_csv(tmp_path / "raw" / "a.csv", sample_rows(20))
    proc = run_cli("shardprep.run", "--input", path, "--output", tmp_path / "ds", *args)
    assert proc.returncode != 0
    assert message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_verify_names_a_corrupt_shard_and_inspect_shows_balance(done, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(done, copy)
    proc = run_cli("shardprep.inspect", copy)
    assert proc.returncode == 0 and "file mode" in proc.stdout and "records/shard" in proc.stdout
    m = manifest.load(str(copy))
    shard = m.splits["train"].shards[1]
    target = copy / shard.path
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0xFF
    target.write_bytes(bytes(data))
    proc = run_cli("shardprep.verify", copy)
    assert proc.returncode == 1 and shard.path in proc.stdout and "crc32c" in proc.stdout
