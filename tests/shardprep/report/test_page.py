"""``python -m shardprep.report``: one self-contained HTML page of a real data set (issue 36)."""
from __future__ import annotations

import copy
import html
import json
import re
import shutil
import subprocess
import time
from html.parser import HTMLParser
from pathlib import Path

import pytest

from shardprep import manifest
from shardprep.report import feature_section
from shardprep.report import page as report_page
from shardprep.report import red_flags as report_flags
from shardprep.report.charts import js_divergence, rebin
from tests.conftest import run_cli
from tests.gcs_emulator import gcs, gcs_emulator  # noqa: F401 - fixtures
from tests.shardprep.report.report_fixtures import manifest_doc as _doc


@pytest.fixture(scope="module")
def page(dataset, tmp_path_factory) -> tuple[Path, str]:
    target = tmp_path_factory.mktemp("page") / "report.html"
    proc = run_cli("shardprep.report", dataset, "-o", target, check=True)
    assert "wrote" in proc.stdout and "red flag" in proc.stdout
    return target, target.read_text(encoding="utf-8")


def test_the_page_names_every_split_and_feature_and_is_self_contained(dataset, page):
    _, text = page
    m = manifest.load(str(dataset))
    for split in m.splits:
        assert f"<h3>{split} " in text
    for i, name in enumerate(m.features):  # ids by index: safe and unique whatever a name holds
        assert f'<div class="card" id="feature-{i}"><h3>{html.escape(name)}<span' in text
    assert text.startswith("<!DOCTYPE html>") and "<svg" in text and "<style>" in text
    tags, attributes = _markup(text)  # nothing runs, nothing is fetched
    assert not tags & {"script", "link", "img", "iframe", "object", "embed", "base"}, tags
    assert not {a for a in attributes if a in ("src", "href") or a.startswith("on")}, attributes
    assert not re.search(r"@import|url\(", text.split("</style>", 1)[0])
    assert "records per shard" in text and "bytes per shard" in text


def _markup(text: str) -> tuple[set[str], set[str]]:
    """The tag and attribute names of an HTML document, as a browser's tokenizer sees them."""
    tags: set[str] = set()
    attributes: set[str] = set()

    class Collect(HTMLParser):
        def handle_starttag(self, tag, attrs):
            tags.add(tag)
            attributes.update(name for name, _ in attrs)

    Collect().feed(text)
    return tags, attributes


def test_hostile_values_are_escaped(page):
    _, text = page
    assert "<script" not in text.lower() and "<img" not in text.lower()
    assert "&lt;img src=x onerror=alert(1)&gt;" in text  # the feature name
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in text  # the value in the top-values table


def test_dead_letters_show_reasons_examples_and_positions(dataset, page):
    _, text = page
    m = manifest.load(str(dataset))
    assert m.rejected.by_reason == {"type_mismatch": 2}
    assert "type_mismatch: examples" in text
    letters = [json.loads(line) for p in m.rejected.paths for line in (dataset / p).read_text().splitlines()]
    for entry in letters:
        assert f"<td>{entry['position']:,}</td>" in text
    assert "field &#x27;id&#x27; holds" in text  # the detail, escaped


def test_histograms_quantiles_and_divergence_when_the_statistics_hold_them(dataset):
    """The fields another change adds to the statistics (histogram, quantiles, ...): drawn and compared;
    eval's x shifted far from train's is flagged."""
    doc = _doc(dataset)
    extra = {"zeros": 3, "quantiles": {k: i / 10 for i, k in enumerate(("p1", "p5", "p25", "p50", "p75", "p95", "p99"))},
             "quantile_histogram": {"edges": [0, 1, 2], "counts": [5, 5]}}
    doc["statistics"]["train"]["x"].update(extra, histogram={"edges": [i / 10 for i in range(11)], "counts": [10] * 10})
    doc["statistics"]["eval"]["x"].update(extra, histogram={"edges": [1 + i / 10 for i in range(11)], "counts": [10] * 10})
    doc["statistics"]["train"]["text"].update(bytes_mean=6.5, bytes_min=6, bytes_max=27, distinct_estimated=True)
    m = manifest.Manifest.from_json(doc)
    text = report_page.render(str(dataset), m)
    assert "p50" in text and "quantile histogram" in text and "bytes min/mean/max" in text and "(est.)" in text
    assert text.count("<svg") >= 4 + 2 + 2  # 2 shard charts per split, a histogram and a quantile histogram per split
    flags = report_flags.red_flags(m)
    assert any(f.where == "feature x in eval" and "Jensen-Shannon divergence 1.000" in f.why for f in flags)
    same = copy.deepcopy(doc)
    same["statistics"]["eval"]["x"]["histogram"] = same["statistics"]["train"]["x"]["histogram"]
    assert not any(f.where == "feature x in eval" for f in report_flags.red_flags(manifest.Manifest.from_json(same)))
    few = copy.deepcopy(doc)
    few["statistics"]["eval"]["x"]["count"] = report_flags.MIN_COMPARED - 1  # too few records: noise, not compared
    assert not any(f.where == "feature x in eval" for f in report_flags.red_flags(manifest.Manifest.from_json(few)))


def test_statistics_absent_or_partial_still_render(dataset):
    doc = _doc(dataset)
    doc.pop("statistics")
    text = report_page.render(str(dataset), manifest.Manifest.from_json(doc))
    assert "holds no statistics" in text and f'id="feature-{list(doc["features"]).index("x")}"><h3>x<' in text
    doc = _doc(dataset)
    doc["statistics"]["train"]["x"] = {"count": 3, "missing": 0}  # no numbers
    report_page.render(str(dataset), manifest.Manifest.from_json(doc))
    doc["statistics"]["eval"]["x"]["histogram"] = {"edges": [0, 1], "counts": "bad"}  # malformed: refused on load
    with pytest.raises(manifest.ManifestError, match=r"^manifest is malformed: statistics\.eval\.x\.histogram\.counts: "):
        manifest.Manifest.from_json(doc)


def test_cli_errors_are_one_line_and_exit_2(tmp_path, dataset):
    proc = run_cli("shardprep.report", tmp_path / "none", "-o", tmp_path / "r.html")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "no manifest" in proc.stderr
    proc = run_cli("shardprep.report", dataset, "-o", tmp_path / "no" / "r.html")
    assert proc.returncode == 2 and "does not exist" in proc.stderr
    proc = run_cli("shardprep.report", dataset, "--label", "nope", "-o", tmp_path / "r.html")
    assert proc.returncode == 2 and "not a feature" in proc.stderr
    proc = run_cli("shardprep.report", "--help")
    assert proc.returncode == 0 and "self-contained HTML" in proc.stdout


def test_default_output_is_report_html_in_the_current_folder(tmp_path, dataset, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert report_page.main([str(dataset)]) == 0
    assert (tmp_path / "report.html").read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


def test_divergence_and_rebinning():
    assert js_divergence([1, 2, 3], [2, 4, 6]) == pytest.approx(0)
    assert js_divergence([1, 0], [0, 1]) == pytest.approx(1)
    assert 0 < js_divergence([3, 1], [1, 3]) < 1
    assert sum(rebin([0, 1, 2], [4, 6], [0, 0.5, 1, 1.5, 2])) == pytest.approx(10)
    assert rebin([0, 1, 2], [4, 6], [0, 0.5, 1, 1.5, 2]) == pytest.approx([2, 2, 3, 3])
    assert rebin([5, 5], [7], [0, 5, 10]) == [0, 7]  # a point mass (a constant feature's one bin)


def _chromium() -> str | None:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    if shutil.which("apt-get"):  # CI installs it (.ci/run); elsewhere try once, as root
        subprocess.run("apt-get update -qq && apt-get install -y -qq chromium", shell=True, capture_output=True,
                       timeout=600)
    return shutil.which("chromium")


def _browser(tmp_path: Path) -> list[str]:
    """Headless chromium's command line (skips the test where it is absent and cannot be installed)."""
    browser = _chromium()
    if browser is None:
        pytest.skip("chromium is not installed and `apt-get install chromium` failed (CI installs it: .ci/run)")
    return [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--enable-logging=stderr", "--v=0", f"--user-data-dir={tmp_path / 'profile'}"]


def test_a_headless_browser_renders_the_page(dataset, page, tmp_path):
    """Debian's chromium loads the file with no console message, its DOM holds the splits, and the
    screenshot is a drawn page (many colours, a fair share of non-white pixels)."""
    from PIL import Image

    flags = _browser(tmp_path)
    target, _ = page
    url = target.resolve().as_uri()
    dom = subprocess.run([*flags, "--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    label = list(manifest.load(str(dataset)).features).index("label")
    assert "<h3>train " in dom.stdout and "<h3>eval " in dom.stdout and f'id="feature-{label}"><h3>label<' in dom.stdout
    assert ":CONSOLE" not in dom.stderr and "Content Security Policy" not in dom.stderr, dom.stderr[-2000:]
    png = tmp_path / "shot.png"
    shot = subprocess.run([*flags, f"--screenshot={png}", "--window-size=1280,2000", url],
                          capture_output=True, text=True, timeout=120)
    assert shot.returncode == 0 and png.exists(), shot.stderr[-2000:]
    with Image.open(png) as im:
        rgb = im.convert("RGB")
        assert rgb.size == (1280, 2000)
        colours = rgb.getcolors(maxcolors=1 << 20) or []
        assert len(colours) > 20
        white = sum(c for c, px in colours if min(px) >= 245)
        assert 0.05 < 1 - white / (rgb.size[0] * rgb.size[1]) < 0.95


@pytest.mark.slow
def test_a_gcs_data_set_reports_and_the_report_can_go_to_gcs(dataset, tmp_path, gcs):  # noqa: F811
    """The report reads only the manifest and the dead letters: those uploaded, gs:// DIR works, and -o gs://."""
    from shardprep import fs

    m = manifest.load(str(dataset))
    for rel in ["manifest.json", *m.rejected.paths]:
        gcs.upload(dataset / rel, f"ds/{rel}")
    assert report_page.main([gcs.url("ds"), "-o", gcs.url("out/report.html")]) == 0
    text = fs.read_bytes(gcs.url("out/report.html")).decode("utf-8")
    assert "<h3>train " in text and "type_mismatch: examples" in text and "&lt;script&gt;" in text


def test_a_missing_dead_letter_file_is_a_note_not_a_failure(dataset):
    doc = _doc(dataset)
    doc["rejected"]["paths"] = [p.replace("rejected-", "gone-") for p in doc["rejected"]["paths"]]
    text = report_page.render(str(dataset), manifest.Manifest.from_json(doc))
    assert "gone-00000-of-00001.jsonl is missing" in text and "type_mismatch" in text


def _wide(dataset: Path, features: int) -> manifest.Manifest:
    """The data set's manifest with ``features`` features, each a copy of a real one's spec and statistics
    (cycling through x, id, text, label, and const every 16th: constant, so flagged)."""
    doc = _doc(dataset)
    models = ["x", "id", "text", "label"]
    names = [f"feature {i:05d} " + ("const" if i % 16 == 15 else models[i % 4]) for i in range(features)]
    model_of = {n: "const" if n.endswith("const") else n.rsplit(" ", 1)[1] for n in names}
    doc["features"] = {n: doc["features"][model_of[n]] for n in names}
    doc["statistics"] = {split: {n: stats[model_of[n]] for n in names} for split, stats in doc["statistics"].items()}
    return manifest.Manifest.from_json(doc)


def test_many_features_draw_a_bounded_number_in_full_and_list_the_rest(dataset):
    m = _wide(dataset, 1_000)
    text = report_page.render(str(dataset), m)
    names = list(m.features)
    flagged = [i for i, n in enumerate(names) if n.endswith("const")]  # 62 of them, drawn first
    drawn = feature_section.drawn_features(m, {names[i] for i in flagged})
    assert len(drawn) == feature_section.FULL_FEATURES and set(flagged) <= set(drawn) and drawn == sorted(drawn)
    first = [i for i in range(len(names)) if i not in flagged][:feature_section.FULL_FEATURES - len(flagged)]
    assert drawn == sorted([*flagged, *first])
    assert text.count('<div class="card" id="feature-') == feature_section.FULL_FEATURES
    for i, name in enumerate(names):  # every feature named once: in a card or a compact line
        assert (f'id="feature-{i}"><h3>{name}<' in text) != (f"  {name}  " in text), name
    assert text.count('<details class="page"') == 2 + 1  # 900 features in pages of 500, the red flags past 100
    assert text.count('<details class="page" open>') == 1
    assert text.count("<li><b>feature ") == len(report_flags.red_flags(m)) == 2 * len(flagged) > report_page.FLAGS_LISTED
    assert f"{2 * len(flagged) - report_page.FLAGS_LISTED} more red flags</summary>" in text


def test_a_report_of_10000_features_opens_in_a_browser_within_10_seconds(dataset, tmp_path):
    """The page of 10,000 features (44 MiB, minutes in a browser, before 100 were drawn in full and the rest
    listed in closed pages) stays small and opens fast: chromium's --dump-dom, start-up included, within 10 s.
    A machine busy with other work gets a second and a third try; the fastest counts."""
    flags = _browser(tmp_path)
    m = _wide(dataset, 10_000)
    text = report_page.render(str(dataset), m)
    target = tmp_path / "wide.html"
    target.write_text(text, encoding="utf-8")
    assert len(text.encode()) < 4 * 2**20, len(text.encode())  # about 3.0 MiB: 150 bytes a feature and split
    assert text.count("<svg") <= 2 * 2 * len(m.splits) + feature_section.FULL_FEATURES * 2 * len(m.splits)
    times = []
    for _ in range(3):
        start = time.monotonic()
        dom = subprocess.run([*flags, "--dump-dom", target.resolve().as_uri()], capture_output=True, text=True,
                             timeout=120)
        times.append(time.monotonic() - start)
        assert dom.returncode == 0, dom.stderr[-2000:]
        assert list(m.features)[-1] in dom.stdout and ":CONSOLE" not in dom.stderr  # the last page parsed too
        if times[-1] < 10:
            break
    assert min(times) < 10, f"chromium took {', '.join(f'{t:.1f}' for t in times)} s to open a report of 10,000 features"


def test_a_hostile_name_in_the_compact_lines_is_escaped_for_html_and_bidi(dataset):
    m = _wide(dataset, 150)
    doc = m.to_json()
    hostile = "zz <img src=x onerror=alert(1)>\u202eevil\u200b"  # sorts last: a compact line
    last = list(doc["features"])[-1]
    doc["features"] = {**{k: v for k, v in doc["features"].items() if k != last}, hostile: doc["features"][last]}
    for stats in doc["statistics"].values():
        stats[hostile] = stats.pop(last)
    text = report_page.render(str(dataset), manifest.Manifest.from_json(doc))
    assert "  zz &lt;img src=x onerror=alert(1)&gt;\\u202eevil\\u200b  " in text
    assert "\u202e" not in text and "\u200b" not in text and "<img" not in text
