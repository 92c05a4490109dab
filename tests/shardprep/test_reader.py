"""Issue 55 items 3-4: ``shardprep.reader`` reads a split's records at random without TensorFlow,
in the data set's global order, CRC-checked; grain and Keras 3 read through it; on GCS one
ranged GET per contiguous run."""
from __future__ import annotations

import json
import pickle
import random
import shutil
from pathlib import Path

import numpy as np
import pytest

from shardprep import manifest, naming, reader
from tests.conftest import read_with_tensorflow, run_cli, sample_rows, write_csv
from tests.gcs_emulator import gcs, gcs_emulator, proxied  # noqa: F401 - fixtures


@pytest.fixture(scope="module")
def ds(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("reader")
    src = write_csv(tmp / "in.csv", sample_rows(1500))
    out = tmp / "ds"
    run_cli("shardprep.run", "--input", src, "--output", out, "--num-shards", "2", "--split", "train=0.8,eval=0.2",
            check=True)
    return out


def _tf_records(root: Path, split: str) -> list[bytes]:
    tf = pytest.importorskip("tensorflow")
    files = [naming.join(str(root), s.path) for s in manifest.load(str(root)).splits[split].shards]
    return [r.numpy() for r in tf.data.TFRecordDataset(files)]


def test_the_reader_gives_tensorflows_records_in_global_order_at_random(ds) -> None:
    records = reader.open(str(ds), "train")
    expected = _tf_records(ds, "train")
    n, cut = len(expected), manifest.load(str(ds)).splits["train"].shards[0].num_records
    assert len(records) == n > 1000
    assert list(records) == expected and records[:] == expected
    assert records[0] == expected[0] and records[-1] == expected[-1] and records[cut] == expected[cut]
    assert records[10:700:7] == expected[10:700:7]
    rng = random.Random(0)
    indices = [rng.randrange(-n, n) for _ in range(2000)]
    assert records.read(indices) == [expected[i] for i in indices]
    assert records.read(np.arange(cut - 10, cut + 10)) == expected[cut - 10:cut + 10]  # a run across the two shards
    with pytest.raises(IndexError):
        records[n]
    with pytest.raises(IndexError):
        records.read([0, n])
    copy = pickle.loads(pickle.dumps(records))
    assert copy[5] == expected[5]


def test_parsed_records_are_tensorflows_by_the_manifests_features(ds) -> None:
    parsed = reader.open(str(ds), "eval", parsed=True)
    expected = read_with_tensorflow(str(ds), "eval")
    assert len(parsed) == len(expected)
    for got, want in zip(parsed.read(range(len(parsed))), expected):
        assert set(got) == set(want)
        assert got["id"].dtype == np.int64 and got["x0"].dtype == np.float32 and got["id"].shape == ()
        assert {k: v.item() for k, v in got.items()} == pytest.approx(want)


def test_an_older_data_set_is_read_by_scanning_its_shards(ds, tmp_path) -> None:
    old = tmp_path / "old"
    shutil.copytree(ds, old)
    doc = json.loads((old / naming.MANIFEST).read_text())
    for split in doc["splits"].values():
        for shard in split["shards"]:
            (old / shard.pop("index")["path"]).unlink()
    (old / naming.MANIFEST).write_text(json.dumps(doc))
    assert reader.open(str(old), "train")[:] == reader.open(str(ds), "train")[:]


def test_a_damaged_record_is_one_error_naming_the_shard_and_offset(ds, tmp_path) -> None:
    bad = tmp_path / "bad"
    shutil.copytree(ds, bad)
    shard = manifest.load(str(bad)).splits["train"].shards[1]
    cut = manifest.load(str(bad)).splits["train"].shards[0].num_records
    offset = 0
    with open(bad / shard.path, "rb") as f:  # the 3rd record of the second shard
        for _ in range(2):
            length = int.from_bytes(f.read(8), "little")
            offset += length + 16
            f.seek(offset)
    data = bytearray((bad / shard.path).read_bytes())
    data[offset + 20] ^= 0x01
    (bad / shard.path).write_bytes(bytes(data))
    records = reader.open(str(bad), "train")
    assert records[cut + 1] and records[cut + 3]
    for read in (lambda: records[cut + 2], lambda: records.read([0, cut + 2, 5]),
                 lambda: records.read(range(cut, cut + 40)), lambda: list(records)):  # the last two: native.scan's
        with pytest.raises(reader.DamagedRecordError) as e:
            read()
        assert str(e.value).startswith(f"{shard.path}: the record at byte {offset} is damaged (")
        assert "fail their CRC" in str(e.value) and "\n" not in str(e.value)


def test_a_damaged_header_is_found_though_the_same_length_was_read_before(ds, tmp_path) -> None:
    bad = tmp_path / "bad"
    shutil.copytree(ds, bad)
    shard = manifest.load(str(bad)).splits["train"].shards[0]
    offsets = np.fromfile(bad / shard.index.path, "<u8", offset=16)
    lengths = np.diff(offsets)
    k = next(k for k in range(1, len(lengths)) if lengths[k] in lengths[:k])  # an earlier record of its length
    data = bytearray((bad / shard.path).read_bytes())
    data[int(offsets[k]) + 9] ^= 0x01  # the length's CRC
    (bad / shard.path).write_bytes(bytes(data))
    records = reader.open(str(bad), "train")
    records[:k]
    for read in (lambda: records[k], lambda: records.read([k, 0]), lambda: records[:]):
        with pytest.raises(reader.DamagedRecordError, match=f"the record at byte {offsets[k]} is damaged "
                                                            r"\(its length fails its CRC\)"):
            read()


def test_an_unknown_split_is_one_line(ds) -> None:
    with pytest.raises(manifest.ManifestError, match="has no split 'test'"):
        reader.open(str(ds), "test")


@pytest.fixture(scope="module")
def one_split(tmp_path_factory) -> Path:
    """1,200 records (a multiple of 3: grain's DataLoader gives each of N shard workers len // N
    records, dropping the remainder) in one split of 2 shards."""
    tmp = tmp_path_factory.mktemp("grain")
    out = tmp / "ds"
    run_cli("shardprep.run", "--input", write_csv(tmp / "in.csv", sample_rows(1200)), "--output", out,
            "--num-shards", "2", check=True)
    return out


def test_grain_reads_each_record_once_per_epoch_on_three_workers_over_two_shards(one_split) -> None:
    grain = pytest.importorskip("grain")
    records = reader.open(str(one_split), "train")
    assert len(records) == 1200 and len(manifest.load(str(one_split)).splits["train"].shards) == 2
    expected = sorted(records[:])
    seen = []
    for worker in range(3):
        sampler = grain.samplers.IndexSampler(len(records), shard_options=grain.sharding.ShardOptions(
            shard_index=worker, shard_count=3, drop_remainder=False), shuffle=True, num_epochs=1, seed=7)
        loader = grain.DataLoader(data_source=records, sampler=sampler, worker_count=1 if worker == 0 else 0,
                                  operations=[grain.transforms.Batch(batch_size=64, batch_fn=list)])
        batches = list(loader)  # worker 0 reads in a grain worker process: the reader pickles without its maps
        assert [len(b) for b in batches] == [64] * 6 + [16]
        seen.extend(r for b in batches for r in b)  # (batch_fn=list: numpy's stack of bytes drops trailing zeros)
    assert sorted(seen) == expected  # every record exactly once, across the three workers
    first = list(grain.MapDataset.source(records).shuffle(seed=3))
    again = list(grain.MapDataset.source(records).shuffle(seed=3))
    assert first == again != records[:] and sorted(first) == expected  # seeded: the same order each time


def test_keras_fits_on_the_grain_dataset(ds) -> None:
    grain = pytest.importorskip("grain")
    keras = pytest.importorskip("keras")
    parsed = reader.open(str(ds), "train", parsed=True)

    def example(e: dict) -> tuple[np.ndarray, np.ndarray]:
        return np.stack([e["x0"], e["x1"], e["x2"]]).astype(np.float32), e["label"].astype(np.float32)

    dataset = grain.MapDataset.source(parsed).shuffle(seed=0).map(example).batch(100)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer=keras.optimizers.Adam(0.1), loss="binary_crossentropy", metrics=["accuracy"])
    history = model.fit(dataset, epochs=3, verbose=0)
    assert history.history["accuracy"][-1] > 0.8  # the label is x0 + x1 > 0: linearly separable


def test_random_reads_on_gcs_issue_one_ranged_get_per_contiguous_run(gcs, ds) -> None:  # noqa: F811
    fs = gcs.filesystem()
    fs.put(str(ds), f"{gcs.bucket}/ds", recursive=True)
    url = gcs.url("ds")
    local = reader.open(str(ds), "train")
    rng = np.random.default_rng(0)
    indices = np.sort(rng.choice(len(local), 1000, replace=False))
    indices[100:150] = np.arange(300, 350)  # one long run
    indices = np.unique(indices)
    cut = manifest.load(str(ds)).splits["train"].shards[0].num_records
    shard_of = indices >= cut
    runs = 1 + int(np.count_nonzero((np.diff(indices) != 1) | (np.diff(shard_of) != 0)))
    with proxied(gcs) as proxy:
        remote = reader.open(url, "train")
        remote[0]  # the first read of each shard fetches its index
        remote[cut]
        before = len(proxy.log)
        got = remote.read(rng.permutation(indices))
        gets = [p for m, p, s in proxy.log[before:] if m == "GET" and "alt=media" in p]
    assert sorted(got) == sorted(local.read(indices))
    assert len(gets) <= runs < 1000, (len(gets), runs)
