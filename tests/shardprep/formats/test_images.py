"""``--format images``: headers, both layouts, every broken-image reason, class ids, --max-side, gs://, TF decode."""
from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import zlib
from pathlib import Path

import pytest
from PIL import Image

from shardprep import manifest, run, shard_reader
from shardprep.example import decode_example
from shardprep.formats.image_headers import ImageProblem, sniff
from trainer.demo_images import BROKEN, CLASSES, encode, write_broken, write_images

ARGS = ["--workers", "2", "--split", "train=0.8,eval=0.2"]


def records(root: str) -> list[dict]:
    """Every record of every split, decoded, with the split and shard it came from."""
    m = manifest.load(root)
    out = []
    for name, split in m.splits.items():
        for shard in split.shards:
            with shard_reader.open_shard(root, shard.path, limit=shard.num_bytes) as stream:
                for r in shard_reader.records(stream, compression=m.compression):
                    out.append({**decode_example(r), "_split": name, "_shard": shard.path})
    return out


def dead_letters(root: str) -> list[dict]:
    return [json.loads(line) for p in sorted(Path(root).glob("run-*/rejected/*.jsonl")) for line in p.read_text().splitlines()]


def picture(mode: str = "RGB", size: tuple[int, int] = (37, 23)) -> Image.Image:
    image = Image.new("RGB", size, (10, 200, 30))
    image.putpixel((3, 4), (250, 0, 0))
    image = image.convert(mode)
    if mode in ("RGBA", "LA"):
        image.putpixel((0, 0), (0, 0, 0, 0) if mode == "RGBA" else (0, 0))  # real transparency, so encoders keep alpha
    return image


# --- headers -------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt,mode,channels", [
    ("jpeg", "RGB", 3), ("jpeg", "L", 1), ("png", "RGB", 3), ("png", "RGBA", 4), ("png", "L", 1), ("png", "LA", 2),
    ("png", "P", 3), ("gif", "RGB", 3), ("bmp", "RGB", 3), ("webp", "RGB", 3), ("webp", "RGBA", 4),
])
def test_header_gives_size_and_channels(fmt, mode, channels):
    out = io.BytesIO()
    image = picture(mode)
    image.save(out, fmt.upper(), **({"lossless": True} if fmt == "webp" and mode == "RGBA" else {}))
    info = sniff(out.getvalue())
    assert (info.format, info.width, info.height, info.channels) == (fmt, 37, 23, channels)


def test_png_palette_with_transparency_has_alpha():
    out = io.BytesIO()
    picture("P").save(out, "PNG", transparency=0)
    assert sniff(out.getvalue()).channels == 4


@pytest.mark.parametrize("fmt", ["jpeg", "png", "gif", "bmp", "webp"])
def test_header_check_catches_truncation(fmt):
    data = encode(picture(size=(64, 64)), fmt)
    with pytest.raises(ImageProblem) as e:
        sniff(data[: len(data) - 20])  # cut inside the pixel data, after the header
    assert e.value.reason == "image_truncated", e.value.detail


@pytest.mark.parametrize("data,reason", [
    (b"", "image_empty"), (b"hello, world", "image_not_an_image"), (b"II*\x00" + b"\x00" * 40, "image_unsupported_format"),
    (b"\xff\xd8\xff\xe0\x00\x10JFIF\x00", "image_truncated"), (b"\x00\x00\x00\x18ftypheic" + b"\x00" * 20, "image_unsupported_format"),
])
def test_header_reasons(data, reason):
    with pytest.raises(ImageProblem) as e:
        sniff(data)
    assert e.value.reason == reason


# --- end to end ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("images") / "raw"
    write_images(str(root), per_class=30)
    write_broken(str(root))
    os.makedirs(root / "square" / "deeper")
    (root / "square" / "deeper" / "nested.png").write_bytes(encode(picture(), "png"))  # belongs to class square
    (root / "README.txt").write_text("loose files in the root are not images of a class")
    (root / "circle" / ".DS_Store").write_bytes(b"\x00junk")  # hidden: skipped
    return root


@pytest.fixture(scope="module")
def folder_run(tree, tmp_path_factory) -> str:
    out = str(tmp_path_factory.mktemp("out") / "ds")
    assert run.main(["--input", str(tree), "--format", "images", "--output", out, *ARGS, "--max-bad-records", "5",
                     "--unit-mb", "0.02"]) == 0
    return out


def test_folder_layout_fields_classes_and_balance(tree, folder_run):
    m = manifest.load(folder_run)
    assert m.features["image/class/label"]["names"] == sorted(CLASSES)
    rows = records(folder_run)
    assert len(rows) == 3 * 30 + 1 and m.accounting.rejected == len(BROKEN)
    for r in rows:
        name = r["image/filename"][0].decode()
        data = (tree / name).read_bytes()
        assert r["image/encoded"] == [data]  # the file's own bytes
        assert r["image/key/sha256"] == [hashlib.sha256(data).hexdigest().encode()]
        cls = name.split("/")[0]
        assert r["image/class/text"] == [cls.encode()]
        assert r["image/class/label"] == [sorted(CLASSES).index(cls)]
        with Image.open(io.BytesIO(data)) as im:
            assert (r["image/width"][0], r["image/height"][0]) == im.size
        assert r["image/format"][0].decode() in ("jpeg", "png", "gif", "bmp")
    assert any(r["image/filename"] == [b"square/deeper/nested.png"] for r in rows)
    for name, split in m.splits.items():
        counts = [s.num_records for s in split.shards]
        assert max(counts) - min(counts) <= 1, (name, counts)


def test_broken_images_are_dead_letters_with_path_and_reason(folder_run):
    got = {d["raw"]: d["reason"] for d in dead_letters(folder_run)}
    assert got == BROKEN
    assert all(d["detail"].startswith(str(Path(d["source"]) / d["raw"])) for d in dead_letters(folder_run))


def test_a_file_name_that_is_not_utf8_is_a_dead_letter_with_its_bytes(tmp_path):
    root = tmp_path / "raw"
    write_images(str(root), per_class=2, formats=("jpeg",))
    good = (root / "circle" / "00000.jpg").read_bytes()
    (root / "circle" / os.fsdecode(b"caf\xe9.jpg")).write_bytes(good)  # Latin-1 names
    (root / "circle" / os.fsdecode(b"cut\xe9.jpg")).write_bytes(good[: len(good) // 2])
    out = tmp_path / "ds"
    assert run.main(["--input", str(root), "--format", "images", "--output", str(out), "--num-shards", "1",
                     "--max-bad-records", "2"]) == 0
    got = {base64.b64decode(d["raw_base64"]): (d["reason"], d["detail"]) for d in dead_letters(str(out))}
    assert {raw: reason for raw, (reason, _) in got.items()} == {b"circle/caf\xe9.jpg": "invalid_utf8",
                                                                 b"circle/cut\xe9.jpg": "image_truncated"}
    assert all("\\udce9.jpg" in detail for _, detail in got.values())  # the name escaped in the detail
    assert len(records(str(out))) == 6


def test_loops_second_links_and_dangling_links_in_the_tree_are_skipped_with_a_line(tmp_path, capsys):
    root = tmp_path / "raw"
    write_images(str(root), per_class=2, formats=("png",))
    (root / "circle" / "loop").symlink_to(root)  # back up the tree: a loop 40 levels deep without the check
    (root / "again").symlink_to(root / "circle")  # the same folder twice: its images would count twice
    (root / "circle" / "gone.png").symlink_to(tmp_path / "nothing.png")
    (root / "square" / "deep").mkdir()
    (root / "square" / "deep" / "up").symlink_to(root / "square")
    os.mkfifo(root / "square" / "pipe.png")  # issue 57 item 5: named with what it is, never opened
    (root / "square" / "zero.png").symlink_to("/dev/zero")
    out = tmp_path / "ds"
    assert run.main(["--input", str(root), "--format", "images", "--output", str(out), "--num-shards", "1"]) == 0
    skipped = [line for line in capsys.readouterr().err.splitlines() if line.startswith("[shardprep] skipped ")]
    assert len(skipped) == 6, skipped
    assert any("gone.png: a link to nothing" in line for line in skipped), skipped
    assert any("pipe.png: a FIFO (named pipe), not a regular file" in line for line in skipped), skipped
    assert any("zero.png: a character device, not a regular file" in line for line in skipped), skipped
    got = records(str(out))
    assert len(got) == 2 * len(CLASSES) and not dead_letters(str(out))  # every image once, nothing lost


def _png_chunk(kind: bytes, body: bytes) -> bytes:
    return len(body).to_bytes(4, "big") + kind + body + zlib.crc32(kind + body).to_bytes(4, "big")


def test_decode_check_catches_damage_the_header_misses(tmp_path):
    """Pixels cut (IEND kept): the header check inflates the IDAT stream and finds it short (issue 35).
    A row filter byte that does not exist (the stream whole, its length right): only decoding sees it."""
    root = tmp_path / "raw"
    write_images(str(root), per_class=3, formats=("png",))
    good = (root / "circle" / "00000.png").read_bytes()
    idat = good.index(b"IDAT")
    half = int.from_bytes(good[idat - 4: idat], "big") // 2
    (root / "circle" / "cut.png").write_bytes(good[: idat + 4 + half] + good[-12:])  # pixels cut, IEND kept
    with pytest.raises(ImageProblem) as e:
        sniff((root / "circle" / "cut.png").read_bytes())
    assert e.value.reason == "image_truncated"
    rows = b"".join(bytes([9 if r == 2 else 0]) + bytes(8 * 3) for r in range(4))
    (root / "circle" / "damaged.png").write_bytes(
        b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", (8).to_bytes(4, "big") + (4).to_bytes(4, "big") + b"\x08\x02\0\0\0")
        + _png_chunk(b"IDAT", zlib.compress(rows)) + _png_chunk(b"IEND", b""))
    assert sniff((root / "circle" / "damaged.png").read_bytes()).width == 8
    header, decoded = tmp_path / "header", tmp_path / "decode"
    assert run.main(["--input", str(root), "--format", "images", "--output", str(header), "--num-shards", "2",
                     "--max-bad-records", "1"]) == 0
    assert [(d["raw"], d["reason"]) for d in dead_letters(str(header))] == [("circle/cut.png", "image_truncated")]
    assert len(records(str(header))) == 10  # the header check lets the bad filter byte through
    assert run.main(["--input", str(root), "--format", "images", "--output", str(decoded), "--num-shards", "2",
                     "--check-images", "decode", "--max-bad-records", "2"]) == 0
    assert sorted((d["raw"], d["reason"]) for d in dead_letters(str(decoded))) == [
        ("circle/cut.png", "image_truncated"), ("circle/damaged.png", "image_decode_error")]
    assert len(records(str(decoded))) == 9


def test_decode_error_reason(tmp_path):
    root = tmp_path / "raw"
    write_images(str(root), per_class=2, formats=("png",))
    good = bytearray((root / "circle" / "00000.png").read_bytes())
    idat = good.index(b"IDAT")
    good[idat + 6: idat + 12] = b"\x00\xff\x00\xff\x00\xff"  # corrupt the compressed pixels, keep the length
    (root / "circle" / "00000.png").write_bytes(bytes(good))
    out = tmp_path / "ds"
    assert run.main(["--input", str(root), "--format", "images", "--output", str(out), "--num-shards", "1",
                     "--check-images", "decode", "--max-bad-records", "1"]) == 0
    assert [(d["raw"], d["reason"]) for d in dead_letters(str(out))] == [("circle/00000.png", "image_decode_error")]


def test_listing_layouts_csv_and_jsonl(tree, tmp_path):
    listed = ["circle/00000.jpg", "stripes/00001.jpg", "square/00003.png", "circle/missing.jpg"]
    labels = ["round", "lines", "box", "round"]
    csv_path = tree.parent / "listing.csv"
    csv_path.write_text("file,kind\n" + "".join(f"raw/{p},{c}\n" for p, c in zip(listed, labels)))
    out = tmp_path / "a"
    assert run.main(["--input", str(csv_path), "--format", "images", "--output", str(out), "--num-shards", "2",
                     "--image-path-column", "file", "--image-label-column", "kind", "--max-bad-records", "1"]) == 0
    rows = {r["image/filename"][0].decode(): r for r in records(str(out))}
    assert set(rows) == {f"raw/{p}" for p in listed[:3]}
    assert manifest.load(str(out)).features["image/class/label"]["names"] == ["box", "lines", "round"]
    assert rows["raw/square/00003.png"]["image/class/label"] == [0]
    assert [(d["raw"], d["reason"]) for d in dead_letters(str(out))] == [("raw/circle/missing.jpg", "image_unreadable")]
    jsonl = tree.parent / "listing.jsonl"
    jsonl.write_text("".join(json.dumps({"path": str(tree / p), "label": c}) + "\n" for p, c in zip(listed[:3], labels)))
    out = tmp_path / "b"
    assert run.main(["--input", str(jsonl), "--format", "images", "--output", str(out), "--num-shards", "1"]) == 0
    assert len(records(str(out))) == 3


def test_refuses_a_root_without_class_folders_or_images(tmp_path, capsys):
    flat = tmp_path / "flat"
    flat.mkdir()
    (flat / "a.jpg").write_bytes(encode(picture(), "jpeg"))
    assert run.main(["--input", str(flat), "--format", "images", "--output", str(tmp_path / "o"), "--num-shards", "1"]) == 2
    err = capsys.readouterr().err
    assert "no class folders" in err and "ROOT/<class>/<image>" in err and "1 file(s) directly" in err
    empty = tmp_path / "empty" / "cls"
    empty.mkdir(parents=True)
    (empty / "x.jpg").write_bytes(b"")
    assert run.main(["--input", str(empty.parent), "--format", "images", "--output", str(tmp_path / "o"), "--num-shards", "1"]) == 2
    assert "all empty or missing" in capsys.readouterr().err
    assert run.main(["--input", str(flat / "a.jpg"), "--output", str(tmp_path / "o"), "--num-shards", "1"]) == 2
    assert "--format images" in capsys.readouterr().err
    (empty / "y.jpg").write_bytes(encode(picture(), "jpeg"))
    assert run.main(["--input", str(empty.parent), "--format", "images", "--output", str(empty.parent / "ds"),
                     "--num-shards", "1"]) == 2  # a rerun would read its own shards as a class "ds"
    assert "inside the input" in capsys.readouterr().err


def test_max_side_reencodes_deterministically(tree, tmp_path):
    outs = []
    for name in ("a", "b"):
        out = tmp_path / name
        assert run.main(["--input", str(tree), "--format", "images", "--output", str(out), "--num-shards", "2",
                         "--max-side", "24", "--jpeg-quality", "80", "--max-bad-records", "5", "--check-images", "decode"]) == 0
        outs.append(out)
    shards = [sorted(p.read_bytes() for p in o.glob("run-*/train/*")) for o in outs]
    assert shards[0] == shards[1] and shards[0]
    for r in records(str(outs[0])):
        assert max(r["image/height"][0], r["image/width"][0]) <= 24
        assert r["image/format"] == [b"jpeg"]
        with Image.open(io.BytesIO(r["image/encoded"][0])) as im:
            assert im.size == (r["image/width"][0], r["image/height"][0])


def test_tensorflow_decodes_every_image_to_the_recorded_size(folder_run):
    tf = pytest.importorskip("tensorflow")
    for r in records(folder_run):
        image = tf.io.decode_image(r["image/encoded"][0], expand_animations=False)
        assert image.shape == (r["image/height"][0], r["image/width"][0], r["image/channels"][0]), r["image/filename"]


@pytest.mark.slow
def test_gcs_root_through_the_emulator(tree, folder_run, gcs, tmp_path):  # noqa: F811
    for path in sorted(tree.rglob("*")):
        if path.is_file():
            gcs.upload(path, f"raw/{path.relative_to(tree)}")
    out = gcs.url("ds")
    assert run.main(["--input", gcs.url("raw"), "--format", "images", "--output", out, *ARGS, "--max-bad-records", "5",
                     "--unit-mb", "0.02"]) == 0
    m, local = manifest.load(out), manifest.load(folder_run)
    assert {n: [s.crc32c for s in sp.shards] for n, sp in m.splits.items()} == \
        {n: [s.crc32c for s in sp.shards] for n, sp in local.splits.items()}
    assert m.accounting.rejected == len(BROKEN)


def test_image_model_needs_image_encoded():
    from shardprep.schema import FeatureSpec
    from trainer.features import ModelError, input_features

    features = {"image/encoded": FeatureSpec("string"), "image/class/label": FeatureSpec("int64", (), ("a", "b"))}
    assert input_features("image", features, label="image/class/label") == ("image/encoded",)
    with pytest.raises(ModelError, match="image/encoded"):
        input_features("image", {"x": FeatureSpec("float32"), "y": FeatureSpec("int64")}, label="y")


@pytest.mark.slow
def test_two_workers_train_the_image_model(folder_run, tmp_path):
    """Two local workers: equal steps, no empty replica-step, images/s and input wait reported, eval scored."""
    from trainer.demo_images import train_images

    # --num-classes 2: the label's 3 class names win over a smaller count; the demo's shapes look the same mirrored
    summaries = train_images(folder_run, str(tmp_path / "run"), workers=2, epochs=2, image_size=16,
                             extra=["--num-classes", "2", "--augment", "crop,flip"])
    assert [s["steps"] for s in summaries] == [summaries[0]["steps"]] * 2 and summaries[0]["steps"] > 0
    assert all(s["empty_replica_steps"] == 0 for s in summaries)
    assert all(s["examples_per_second"] > 0 and 0 <= s["input_wait_fraction"] <= 1 for s in summaries)
    assert summaries[0]["eval_examples"] == sum(sp.num_records for sp in [manifest.load(folder_run).splits["eval"]])
    import keras

    model = keras.models.load_model(str(tmp_path / "run" / "export" / "model.keras"))
    assert model.output_shape[-1] == 3


from tests.gcs_emulator import gcs, gcs_emulator  # noqa: E402,F401 - fixtures


def test_image_model_scores_the_same_in_inference_mode_after_a_short_run(tmp_path):
    """Issue 34: batch norm's moving statistics had not settled after a short run, so a model at 1.00 in
    training mode scored 0.67 in inference mode (and so did its eval and its export). The model now has no
    moving statistics: after a short run on a learnable class-folder set, inference mode scores what training
    mode scores on the same images, and held-out images score near the training ones."""
    import keras
    import numpy as np

    from trainer.image_input import IMAGE
    from trainer.image_model import build_image_model

    write_images(str(tmp_path), per_class=48, size=16, formats=("png",))
    xs, ys = [], []
    for c, kind in enumerate(CLASSES):
        for f in sorted((tmp_path / kind).iterdir()):
            with Image.open(f) as im:
                xs.append(np.asarray(im.convert("RGB").resize((16, 16)), np.float32) / 255.0)
            ys.append(c)
    x, y = np.stack(xs), np.array(ys)
    order = np.random.default_rng(0).permutation(len(y))
    train, held = order[:120], order[120:]
    keras.utils.set_random_seed(0)
    model = build_image_model(len(CLASSES), widths=(16, 32))
    model.compile(keras.optimizers.Adam(1e-3), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit({IMAGE: x[train]}, y[train], batch_size=16, epochs=8, shuffle=True, verbose=0)  # 64 steps

    def accuracy(rows, training: bool) -> float:
        return float(np.mean(np.argmax(model({IMAGE: x[rows]}, training=training), -1) == y[rows]))

    train_mode, inference = accuracy(train, True), accuracy(train, False)
    assert train_mode > 0.6, train_mode  # learnable: well above chance (1/3) after 64 steps
    assert abs(inference - train_mode) < 0.02, (inference, train_mode)
    assert accuracy(held, False) > train_mode - 0.2, (accuracy(held, False), train_mode)
