"""Writes docs/images/report.png: ``shardprep.report`` of the demo's data set, as headless chromium shows it.

``python docs/make_report_screenshot.py [--keep DIR]``: writes the demo's CSV files (``trainer.demo``)
with a mostly empty ``discount`` column (a red flag) plus a few rows with an infinite value (dead letters), re-shards them with statistics, writes the
report and screenshots it (Debian's ``chromium``; ``apt-get install chromium``). The PNG is reduced
to a palette so it stays small in the repository.
"""
from __future__ import annotations

import argparse
import csv
import os
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from trainer.demo import FEATURES, write_raw  # noqa: E402

TARGET = ROOT / "docs" / "images" / "report.png"
BROWSER_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def make_dataset(work: Path) -> Path:
    raw = work / "raw"
    rng = random.Random(0)
    for path in write_raw(str(raw), rows=6000):  # plus a "discount" column empty in 3 rows of 4: a red flag
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=[*FEATURES, "label", "text", "discount"])
            w.writeheader()
            w.writerows({**r, "discount": round(rng.uniform(0, 30), 1) if rng.random() < 0.25 else ""} for r in rows)
    with open(raw / "raw-3.csv", "w", newline="") as f:  # dead letters: infinite values
        w = csv.DictWriter(f, fieldnames=[*FEATURES, "label", "text", "discount"])
        w.writeheader()
        for i in range(3):
            w.writerow({**{x: 0.5 for x in FEATURES}, "x3": "inf", "label": 1, "text": f"bad row {i}", "discount": ""})
    out = work / "data"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-m", "shardprep.run", "--input", str(raw / "*.csv"), "--output", str(out),
                    "--num-shards", "4", "--split", "train=0.9,eval=0.1", "--statistics", "on",
                    "--max-bad-records", "10", "--overwrite"], check=True, env=env, cwd=ROOT)
    return out


def screenshot(html: Path, png: Path, profile: Path, *, width: int = 1280, height: int = 2000) -> None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        raise SystemExit("chromium is not installed: apt-get install -y chromium")
    subprocess.run([browser, *BROWSER_FLAGS, f"--user-data-dir={profile}", f"--screenshot={png}",
                    f"--window-size={width},{height}", html.resolve().as_uri()], check=True, capture_output=True,
                   timeout=120)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--keep", metavar="DIR", help="keep the data set and report.html in DIR")
    args = p.parse_args(argv)
    from PIL import Image

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.keep) if args.keep else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        data = make_dataset(work)
        html = work / "report.html"
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        subprocess.run([sys.executable, "-m", "shardprep.report", str(data), "-o", str(html)], check=True, env=env)
        shot = work / "shot.png"
        screenshot(html, shot, Path(tmp) / "profile")
        TARGET.parent.mkdir(parents=True, exist_ok=True)
        with Image.open(shot) as im:
            im.convert("RGB").quantize(colors=64).save(TARGET, optimize=True)
    print(f"wrote {TARGET} ({TARGET.stat().st_size / 1024:.0f} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
