"""Prints RELIABILITY.md's tables by running the same cases the tests run.

    python tests/reliability_table.py [--crash] [--corruption] [--load] > tables.md

Without flags it prints the bad-input corpus only (about a minute). Every row is checked with the
test's own assertions; a row whose check fails says FAIL in its last column.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent)]  # the repository: tests/shardprep would shadow the package

from tests.end_to_end import test_bad_input as corpus  # noqa: E402


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def corpus_table() -> list[str]:
    rows = ["| # | case | input | outcome | read / written / rejected | records lost | check |",
            "|---|---|---|---|---|---|---|"]
    for i, case in enumerate(corpus.CASES, 1):
        with tempfile.TemporaryDirectory() as tmp:
            result = corpus.run_case(case, Path(tmp))
            try:
                corpus.check(case, result, Path(tmp))
                ok = "pass"
            except AssertionError as e:
                ok = f"FAIL {_md(str(e))[:80]}"
        if case.outcome.kind == "refused":
            said = result.error_lines[0].split("error: ", 1)[1].replace(tmp, "<tmp>") if result.error_lines else ""
            got = f"refused, exit {result.code}: `{_md(said)[:110]}`"
            counts, lost = "no manifest", "-"
        else:
            reasons = sorted({d["reason"] for d in result.dead})
            where = ", ".join(f"{Path(d['source']).name}:{d['position']}" for d in result.dead)
            got = "works, nothing rejected" if not result.dead else f"dead letter `{', '.join(reasons)}` at {where}"
            counts = f"{result.read} / {result.written} / {result.rejected}"
            lost = str(result.lost)
        via = " (subprocess)" if case.subprocess else ""
        rows.append(f"| {i} | `{case.name}`{via} | {_md(case.what)} | {got} | {counts} | {lost} | {ok} |")
    return rows


def crash_table() -> list[str]:
    from tests.conftest import run_cli
    from tests.end_to_end import test_crash_safety as crash

    rows = ["| kill point | files left (shards / .tmp) | manifest | verify | rerun (no --overwrite) |",
            "|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        source = crash._write_input(tmp / "in")
        run_cli("shardprep.run", *crash._args(source, tmp / "ref"), check=True)
        reference = crash._shard_bytes(tmp / "ref")
        for point in crash.POINTS:
            out = tmp / point
            state = crash.crash(point, source, out)
            manifest = "none" if not (out / "manifest.json").exists() else "PRESENT (FAIL)"
            proc = run_cli("shardprep.verify", out)
            said = proc.stderr.strip().split(": error: ", 1)[-1].replace(str(out), "DIR")[:60]
            start = time.monotonic()
            run_cli("shardprep.run", *crash._args(source, out), check=True)
            same = crash._shard_bytes(out) == reference
            rows.append(f"| {point} | {len(state['files'])} ({state['shards']} / {state['tmp']}) | {manifest} | "
                        f"exit {proc.returncode}: `{_md(said)}...` | committed in {time.monotonic() - start:.0f} s, "
                        f"{len(reference)} files {'byte-identical' if same else 'DIFFERENT (FAIL)'} |")
    return rows


def corruption_table() -> list[str]:
    from shardprep import run, verify
    from tests.end_to_end import test_corruption as corruption
    from trainer import preflight

    rows = ["| damage | `verify` (exit, line) | trainer pre-flight |", "|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        rows_in = [{"x0": i / 7, "x1": -i / 3, "label": i % 2, "text": f"row {i}"} for i in range(2000)]
        src = corruption.write_csv(tmp / "in" / "a.csv", rows_in)
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            assert run.main(["--input", str(src), "--output", str(tmp / "ds"), "--num-shards", "4"]) == 0
        for damage in corruption.DAMAGE:
            copy = tmp / damage.name
            shutil.copytree(tmp / "ds", copy)
            shard = damage.apply(copy)
            out = io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
                code = verify.main([str(copy)])
            line = next((x for x in out.getvalue().splitlines() if shard in x), "(shard not named: FAIL)")
            line = line.replace(shard.split("/", 1)[0], "<run>")
            try:
                corruption._preflight(copy)
                pre = "passes (content is left to `verify`)"
            except preflight.DataSetError as e:
                pre = "refuses: `" + _md(str(e).replace(str(copy), "DIR").replace(shard.split("/", 1)[0], "<run>"))[:90] + "...`"
            rows.append(f"| {_md(damage.what)} | exit {code}: `{_md(line)}` | {pre} |")
    return rows


def load_table() -> list[str]:
    from tests.end_to_end import test_load as load

    rows = ["| load | records | input | seconds | peak RSS |", "|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for name, make, n, shards in (("small records (CSV, 2 columns)", load.small_records, load.SMALL_RECORDS, 16),
                                      (f"{load.BIG_MB} MB records (JSON Lines)", load.big_records, load.BIG_RECORDS, 2)):
            src = make(tmp / name[:5] / "in.csv" if n > 100 else tmp / name[:5] / "in.jsonl")
            m = load.measure(["--input", str(src), "--output", str(tmp / name[:5] / "ds"), "--num-shards", str(shards)],
                             tmp / "log")
            assert m.code == 0, m.stderr[-2000:]
            rows.append(f"| {name} | {n:,} | {src.stat().st_size / 2**20:.0f} MiB | {m.seconds:.0f} | "
                        f"{m.peak_rss / 2**30:.2f} GiB |")
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--crash", action="store_true")
    p.add_argument("--corruption", action="store_true")
    p.add_argument("--load", action="store_true")
    args = p.parse_args()
    print("\n".join(corpus_table()))
    for flag, table in ((args.crash, crash_table), (args.corruption, corruption_table), (args.load, load_table)):
        if flag:
            print()
            print("\n".join(table()))


if __name__ == "__main__":
    main()
