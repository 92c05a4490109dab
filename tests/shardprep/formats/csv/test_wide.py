"""Wide tables: cost follows cells, not columns (docs/design.md, "Wide tables").

A CSV / JSON Lines / Parquet file of a few thousand columns round-trips value for value; the
manifest and features.json are compact past ``manifest.INDENT_MAX_FEATURES`` features; the wide
CSV path (``formats.csv.wide``) gives the bytes and dead letters of the other paths on random shapes.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardprep import framing, manifest, naming, run
from shardprep.example.decoder import decode_example
from shardprep.formats.csv import wide as csv_wide


def _table(columns: int, rows: int, seed: int = 0) -> tuple[list[str], np.ndarray]:
    names = [f"f{i:05d}" for i in range(columns)]
    return names, np.random.default_rng(seed).integers(-500, 1000, size=(rows, columns))


def _write(path: Path, names: list[str], values: np.ndarray) -> Path:
    if path.suffix == ".csv":
        path.write_text(",".join(names) + "\n" + "".join(",".join(map(str, r)) + "\n" for r in values.tolist()))
    elif path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(dict(zip(names, r))) + "\n" for r in values.tolist()))
    else:
        pq.write_table(pa.table({n: values[:, i] for i, n in enumerate(names)}), path)
    return path


def _decoded(root: Path) -> list[dict]:
    out = []
    for shard in sorted((root).glob("run-*/train/*.tfrecord")):
        with open(shard, "rb") as f:
            out += [decode_example(r) for r in framing.read_records(f)]
    return out


def _run(src: Path, out: Path, *extra: str) -> int:
    return run.main(["--input", str(src), "--output", str(out), "--num-shards", "2", "--no-shuffle", *extra])


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_a_wide_table_round_trips_with_a_compact_manifest(tmp_path, suffix, capsys):
    names, values = _table(3000, 6)
    src = _write(tmp_path / f"wide{suffix}", names, values)
    assert _run(src, tmp_path / "out") == 0
    assert "statistics off" in capsys.readouterr().err  # auto: off past 1,000 features
    got = _decoded(tmp_path / "out")
    assert len(got) == 6
    expected = {tuple(int(v) for v in row) for row in values.tolist()}
    assert {tuple(r[n][0] for n in names) for r in got} == expected
    doc = manifest.load(str(tmp_path / "out"))
    assert list(doc.features) == names and all(s["dtype"] == "int64" for s in doc.features.values())
    raw = (tmp_path / "out" / naming.MANIFEST).read_bytes()
    assert raw.count(b"\n") == 1 and len(raw) < 60 * 3000  # compact: ~37 bytes a feature
    features = (tmp_path / "out" / naming.TFDS_FEATURES).read_bytes()
    assert b"\n" not in features and len(features) < 160 * 3000
    assert set(json.loads(features)["featuresDict"]["features"]) == set(names)


def test_a_narrow_manifest_stays_indented(tmp_path):
    names, values = _table(5, 4)
    assert _run(_write(tmp_path / "n.csv", names, values), tmp_path / "out") == 0
    assert (tmp_path / "out" / naming.MANIFEST).read_bytes().count(b"\n") > 10


_cell = st.one_of(st.integers(-10**6, 10**6).map(str), st.sampled_from(["", "1.5", " 7", "x", "0x1", "NA", "2e3"]))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(2, 40), st.integers(1, 8), st.data())
def test_the_wide_csv_path_gives_the_bytes_and_dead_letters_of_the_arrow_path(tmp_path_factory, columns, rows, data,
                                                                              ):
    tmp = tmp_path_factory.mktemp("wide")
    names = [f"c{i}" for i in range(columns)]
    kinds = data.draw(st.lists(st.sampled_from(["int", "float", "text"]), min_size=columns, max_size=columns))
    good = {"int": st.integers(-10**6, 10**6).map(str), "float": st.floats(-1e6, 1e6).map(repr),
            "text": st.text("abc ,\"", max_size=5)}
    lines = [",".join(names)]
    for r in range(rows):
        cells = [data.draw(good[k]) if r == 0 or data.draw(st.booleans()) else data.draw(_cell) for k in kinds]
        lines.append(",".join('"' + c.replace('"', '""') + '"' if ("," in c or '"' in c) else c for c in cells))
    src = tmp / "t.csv"
    src.write_text("\n".join(lines) + "\n")
    outs = []
    for wide in (10**9, 1):  # pyarrow's reader, then the wide path on the same file
        original = csv_wide.WIDE_COLUMNS
        csv_wide.WIDE_COLUMNS = wide
        try:
            out = tmp / f"out{wide}"
            code = _run(src, out, "--max-bad-records", "100", "--statistics", "off")
        finally:
            csv_wide.WIDE_COLUMNS = original
        shards = sorted(out.glob("run-*/train/*"))
        rejected = sorted(out.glob("run-*/rejected/*"))
        outs.append((code, [p.read_bytes() for p in shards], [p.read_bytes() for p in rejected]))
    assert outs[0] == outs[1]


def test_flat_feature_names_give_the_features_json_of_the_tree_path():
    from shardprep import tfds_metadata

    specs = [{"dtype": "int64", "shape": []}, {"dtype": "float32", "shape": [3]},
             {"dtype": "string", "shape": [-1]}, {"dtype": "int64", "shape": [], "names": ["a", "b"]},
             {"dtype": "float32", "shape": [], "nullable": True, "missing": 2},
             {"dtype": "int64", "shape": [2], "nullable": True, "missing": 1}]
    features = {f"f{i:04d}": dict(specs[i % len(specs)]) for i in range(50)} | {"image": specs[2], "encoded": specs[0]}
    assert tfds_metadata.features_json(features) == tfds_metadata._dict_json(tfds_metadata._tree(features))
