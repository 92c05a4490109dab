"""Hostile input and hostile command lines (issue 13, items 4-8, 10-13), through the real CLI.

Each test is one row of RELIABILITY.md's table: the probe, what must happen, and that nothing else
does (exit code, one line, no traceback, nothing committed where the run must fail).
"""
from __future__ import annotations

import gzip
import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardprep import cli, formats, manifest
from shardprep.errors import InputError
from shardprep.example import RecordError, example_encoder
from shardprep.formats import base, reading
from shardprep.schema import FeatureSpec
from tests.conftest import ROOT, run_cli

RUN = "shardprep.run"


def _rejected(out: Path) -> list[dict]:
    return [json.loads(line) for f in sorted(out.glob("run-*/rejected/*.jsonl")) for line in f.read_text().splitlines()]


def _one_error_line(proc: subprocess.CompletedProcess, code: int) -> str:
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1, proc.stderr
    return errors[0]


# --- 4. non-finite floats --------------------------------------------------------------------------

# CSV "nan"/"NaN" are null tokens (issue 11): missing values, not stored NaNs; JSON NaN is tested below
FLOATS = ["2.5", "inf", "-Infinity", "+inf", "INF", "1e400", "-1e400", "1e39", "3.5"]


@pytest.mark.parametrize("lead", [0, 400_000])  # 5 MB of finite rows (over one 4 MB block): read column-wise
def test_non_finite_csv_floats_are_dead_letters_unless_allowed(tmp_path, lead):
    lines = [f"{i},{FLOATS[i % len(FLOATS)]}" for i in range(len(FLOATS))]
    src = tmp_path / "d.csv"
    src.write_text("id,x\n" + "".join(f"{-i},1.25\n" for i in range(1, lead + 1)) + "\n".join(lines) + "\n")
    schema = tmp_path / "s.json"
    schema.write_text(json.dumps({"id": {"dtype": "int64", "shape": []}, "x": {"dtype": "float32", "shape": []}}))
    outcomes = {}
    for flag in ([], ["--allow-non-finite"]):
        out = tmp_path / f"out{len(flag)}"
        proc = run_cli(RUN, "--input", src, "--output", out, "--num-shards", 1, "--schema", schema,
                       "--max-bad-records", len(lines), *flag, check=True)
        if lead:  # the column-wise path encoded the lead rows, then handed the rest over
            assert "per-record path from record " in proc.stderr and "from record 1 on" not in proc.stderr
        assert manifest.load(str(out)).splits["train"].num_records == lead + len(lines) - len(_rejected(out))
        reasons = {}
        for d in _rejected(out):
            reasons.setdefault(FLOATS[d["position"] - 2 - lead], set()).add(d["reason"])
        outcomes[bool(flag)] = reasons
    assert outcomes[False] == {"inf": {"non_finite"}, "-Infinity": {"non_finite"},
                               "INF": {"non_finite"}, "+inf": {"non_finite"}, "1e400": {"out_of_range"},
                               "-1e400": {"out_of_range"}, "1e39": {"out_of_range"}}
    assert outcomes[True] == {"1e400": {"out_of_range"}, "-1e400": {"out_of_range"}, "1e39": {"out_of_range"}}


def test_a_blank_csv_number_is_a_missing_value_column_wise_too(tmp_path):
    """A field of spaces where a number goes is missing, as an empty one: left out (--on-missing omit, the
    default) or dead letter missing_value (reject), after 5 MB of rows read column-wise."""
    lead = 400_000
    src = tmp_path / "d.csv"
    src.write_text("id,x,n\n" + "".join(f"{-i},1.25,{i}\n" for i in range(1, lead + 1)) + "1,  ,1\n2,2.5,\t\n3,3.5,3\n")
    for on_missing in ("omit", "reject"):
        out = tmp_path / on_missing
        proc = run_cli(RUN, "--input", src, "--output", out, "--num-shards", 1, "--on-missing", on_missing,
                       "--max-bad-records", 2, check=True)
        assert "per-record path from record " in proc.stderr and "from record 1 on" not in proc.stderr
        m = manifest.load(str(out))
        if on_missing == "omit":
            assert not _rejected(out) and m.splits["train"].num_records == lead + 3
            assert [(m.features[c].get("nullable"), m.features[c].get("missing")) for c in ("x", "n")] == [(True, 1)] * 2
        else:
            assert [(d["position"], d["reason"]) for d in _rejected(out)] == [(lead + 2, "missing_value"),
                                                                               (lead + 3, "missing_value")]


def test_a_dead_letter_holding_a_lone_surrogate_is_written_as_json_escapes():
    from shardprep import writer

    line = writer.dead_letter_line(source="a.jsonl", position=2, unit="0:0", reason="unknown_field",
                                   detail="field '\\ud83d'", raw='{"\ud83d": "é"}')
    assert json.loads(line.decode("utf-8"))["raw"] == '{"\ud83d": "é"}'


def test_json_nan_and_infinity_are_dead_letters(tmp_path):
    src = tmp_path / "d.jsonl"
    src.write_text('{"x": 1.5}\n{"x": NaN}\n{"x": Infinity}\n{"x": -Infinity}\n{"x": 1e400}\n{"x": 2}\n')
    out = tmp_path / "out"
    run_cli(RUN, "--input", src, "--output", out, "--num-shards", 1, "--max-bad-records", 4, check=True)
    assert {d["position"]: d["reason"] for d in _rejected(out)} == {2: "non_finite", 3: "non_finite",
                                                                    4: "non_finite", 5: "non_finite"}


@pytest.mark.parametrize("allow", [False, True])
def test_generated_encoder_agrees_with_the_generic_one_on_non_finite_values(monkeypatch, allow):
    from shardprep.example import encoder

    schema = {"a": FeatureSpec("float32", ()), "b": FeatureSpec("float32", ()), "c": FeatureSpec("int64", ())}
    fast = example_encoder(schema, allow_non_finite=allow)
    monkeypatch.setattr(encoder, "scalar_row_encoder", lambda *a, **k: None)
    generic = example_encoder(schema, allow_non_finite=allow)
    values = st.one_of(st.floats(), st.sampled_from(["nan", "inf", "-Infinity", "1e400", "1e39", " 2.5 "]),
                       st.lists(st.floats(), max_size=2))

    def outcome(encode, row):
        try:
            return encode(row)
        except RecordError as e:
            return e.reason

    @settings(max_examples=300, deadline=None)
    @given(st.fixed_dictionaries({"a": values, "b": values, "c": st.integers(-5, 5)}))
    def check(row):
        assert outcome(fast, row) == outcome(generic, row)

    check()


# --- 5. duplicate Parquet column names -------------------------------------------------------------


def test_duplicate_parquet_columns_are_refused(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    table = pa.Table.from_arrays([pa.array([1, 2]), pa.array([3, 4]), pa.array(["a", "b"])], names=["x", "x", "y"])
    src = tmp_path / "d.parquet"
    pq.write_table(table, src)
    with pytest.raises(InputError, match="repeats column name"):
        formats.plan_units(formats.expand_inputs([str(src)]))
    line = _one_error_line(run_cli(RUN, "--input", src, "--output", tmp_path / "out", "--num-shards", 1), 2)
    assert "'x'" in line and "repeats column name" in line


# --- 6. one file by several names ------------------------------------------------------------------


def test_links_to_one_file_are_read_once_and_hidden_files_are_logged(tmp_path):
    data = tmp_path / "in"
    data.mkdir()
    (data / "a.csv").write_text("id\n" + "".join(f"{i}\n" for i in range(100)))
    os.symlink(data / "a.csv", data / "b.csv")
    os.link(data / "a.csv", data / "c.csv")
    (data / "_x.csv").write_text("id\n1\n")
    (data / ".y.csv").write_text("id\n1\n")
    out = tmp_path / "out"
    proc = run_cli(RUN, "--input", f"{data}/*.csv", "--output", out, "--num-shards", 1, check=True)
    assert manifest.load(str(out)).splits["train"].num_records == 100
    assert "b.csv is the same file as" in proc.stderr and "c.csv is the same file as" in proc.stderr
    assert "skipped 2 file(s) whose names start with '.' or '_'" in proc.stderr


def test_output_reached_through_a_symlink_inside_the_input_is_refused(tmp_path):
    data = tmp_path / "in"
    (data / "ds").mkdir(parents=True)
    (data / "ds" / "a.csv").write_text("id\n1\n")  # e.g. a shard-like file of an earlier run
    os.symlink(data, tmp_path / "link")
    line = _one_error_line(run_cli(RUN, "--input", f"{data}/*/*.csv", "--output", tmp_path / "link" / "ds",
                                   "--num-shards", 1), 2)
    assert "is inside the input" in line


# --- 7. input changed during the run ---------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("change", ["cut", "append", "delete"])
def test_an_input_changed_during_the_run_fails_it_naming_the_file(tmp_path, change):
    src = tmp_path / "d.jsonl"
    src.write_text("".join(json.dumps({"x": i}) + "\n" for i in range(2000)))
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SHARDPREP_TEST_DELAYS": "commit.assembled=3"}
    proc = subprocess.Popen([sys.executable, "-m", RUN, "--input", str(src), "--output", str(out), "--num-shards", "1"],
                            cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        if "parsed " in line:  # every record was read; the commit checks the inputs after the delay
            break
    if change == "cut":
        src.write_text(src.read_text()[: 1000])
    elif change == "append":
        with open(src, "a") as f:
            f.write('{"x": 1}\n')
    else:
        src.unlink()
    rest = proc.stderr.read()
    assert proc.wait(timeout=120) == 1, rest
    assert "Traceback" not in rest
    assert f"input file {src}" in rest and ("changed during the run" in rest or "removed during the run" in rest)
    assert not (out / "manifest.json").exists()


# --- 8 and 11. the command line, checked before any input is read ----------------------------------


@pytest.mark.parametrize("args, message", [
    (["--num_shards", "4"], "unknown argument '--num_shards'"),
    (["--direct-num-workers=2"], "unknown argument '--direct-num-workers=2'"),
    (["EXTRA/b.csv"], "quote the glob"),
    (["--max-bad-records", "-1"], "--max-bad-records -1"),
    (["--unit-mb", "0"], "--unit-mb 0"),
    (["--unit-mb", "nan"], "--unit-mb nan"),
    (["--unit-mb", "inf"], "--unit-mb inf"),
    (["--target-shard-mb", "0"], "--target-shard-mb 0"),
    (["--max-record-mb", "-1"], "--max-record-mb -1"),
    (["--keep-previous", "-2"], "--keep-previous -2"),
    (["--split", "Train=1"], "split name 'Train'"),
    (["--workers", "0"], "--workers 0"),
])
def test_bad_arguments_fail_in_one_line_before_reading(tmp_path, args, message):
    src = tmp_path / "a.csv"
    src.write_text("id\n1\n")
    proc = run_cli(RUN, "--input", src, "--output", tmp_path / "out", "--num-shards", 2, *args)
    assert message in _one_error_line(proc, 2)
    assert not (tmp_path / "out").exists()


def test_beam_flags_still_reach_beam(tmp_path):
    src = tmp_path / "a.csv"
    src.write_text("id\n1\n")
    run_cli(RUN, "--input", src, "--output", tmp_path / "out", "--num-shards", 1, "--direct_num_workers", 1,
            check=True)  # the local engine's process count
    run_cli(RUN, "--input", src, "--output", tmp_path / "out2", "--num-shards", 1, "--runner", "beam",
            "--temp_location", tmp_path, check=True)


def test_beam_flags_are_checked_by_beam_and_refused_by_the_other_engines():
    from shardprep import run_checks
    from shardprep.errors import UsageError

    run_checks.refuse_unknown_args(["--direct_num_workers=1", "--temp_location=/tmp"])
    with pytest.raises(UsageError, match="--temp_locaton=/tmp"):
        run_checks.refuse_unknown_args(["--temp_locaton=/tmp"])
    with pytest.raises(UsageError, match="Beam's own flags apply with --runner beam"):
        run_checks.refuse_unknown_args(["--temp_location=/tmp"], beam=False)


@pytest.mark.parametrize("output", ["afile", "afile/sub", "missing/../out"])
def test_outputs_that_cannot_be_folders_are_refused(tmp_path, output):
    src = tmp_path / "a.csv"
    src.write_text("id\n1\n")
    (tmp_path / "afile").write_text("x")
    proc = run_cli(RUN, "--input", src, "--output", f"{tmp_path}/{output}", "--num-shards", 1)
    assert "--output" in _one_error_line(proc, 2)


@pytest.mark.slow
def test_sigint_exits_130_in_one_line_and_removes_the_run_folder(tmp_path):
    src = tmp_path / "d.jsonl"
    src.write_text("".join(json.dumps({"x": i, "s": "y" * 50}) + "\n" for i in range(300_000)))
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", RUN, "--input", str(src), "--output", str(out), "--num-shards", "2",
                             "--unit-mb", "1"], cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        if "parsed " in line:  # the pipeline runs and has spilled a unit
            break
    proc.send_signal(signal.SIGINT)
    rest = proc.stderr.read()
    assert proc.wait(timeout=120) == 130, rest
    assert "Traceback" not in rest and rest.strip().splitlines()[-1] == "shardprep.run: interrupted", rest
    assert not list(out.glob("run-*")) and not (out / "manifest.json").exists()


# --- 10. records over the size limit ---------------------------------------------------------------


def test_read_lines_bounds_a_long_line_and_keeps_offsets(monkeypatch):
    import io

    monkeypatch.setattr(reading, "READ_BLOCK", 7)
    data = b"ab\n" + b"x" * 50 + b"\ncd\n" + b"y" * 30 + b"\nzz"
    got = list(reading.read_lines(io.BytesIO(data), 0, 20))
    assert [(o, type(line).__name__, reading.line_size(line)) for o, line in got] == [
        (0, "bytes", 3), (3, "LongLine", 51), (54, "bytes", 3), (57, "LongLine", 31), (88, "bytes", 2)]


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_a_huge_gzip_line_is_a_dead_letter_in_bounded_memory(tmp_path, fmt):
    """A 1.4 MB .gz holding one 300 MB line: dead letter record_too_large, memory far below the line."""
    src = tmp_path / f"d.{fmt}.gz"
    with gzip.open(src, "wb", compresslevel=1) as f:
        f.write(b"a,b\n1,2\n" if fmt == "csv" else b'{"a": 1}\n')
        f.write(b"3," if fmt == "csv" else b'{"a": "')
        chunk = b"x" * (1 << 20)
        for _ in range(300):
            f.write(chunk)
        f.write(b"\n4,5\n" if fmt == "csv" else b'"}\n{"a": 4}\n')
    out = tmp_path / "out"
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    proc = run_cli(RUN, "--input", src, "--output", out, "--num-shards", 1, "--max-bad-records", 1,
                   "--max-record-mb", 16, check=True)
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    assert [d["reason"] for d in _rejected(out)] == ["record_too_large"], proc.stderr
    assert len(_rejected(out)[0]["raw"]) <= 2048
    assert manifest.load(str(out)).splits["train"].num_records == 2
    assert before / 1024 > 250 or peak_mb < 250 + 300, f"peak RSS {peak_mb:.0f} MB"  # the line alone is 300 MB


# --- 12. log injection -----------------------------------------------------------------------------


def test_safe_escapes_control_and_bidi_characters():
    assert cli.safe("a\nb\x1b]0;t\x07\u202e\tc é") == "a\\nb\\x1b]0;t\\x07\\u202e\\tc é"


def test_control_characters_in_file_names_and_records_reach_no_terminal(tmp_path):
    data = tmp_path / "in"
    data.mkdir()
    name = "a\n[shardprep] committed forged\x1b]0;owned\x07.csv"
    (data / name).write_text("id,x\n1,\x1b[31mred\n2\n")
    (data / "_\x1b[2J.csv").write_text("id,x\n")
    out = tmp_path / "out"
    proc = run_cli(RUN, "--input", f"{data}/*.csv", "--output", out, "--num-shards", 1, "--max-bad-records", 1)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout + proc.stderr
    assert "\x1b" not in text and "\x07" not in text
    assert not any(line.startswith("[shardprep] committed forged") for line in text.splitlines())
    bad = tmp_path / "bad\x1b[2J.csv"
    bad.write_text('"id\n')
    line = _one_error_line(run_cli(RUN, "--input", bad, "--output", tmp_path / "o2", "--num-shards", 1), 2)
    assert "\x1b" not in line and "\\x1b" in line


# --- 13. integers above 2**24 in a float column ----------------------------------------------------


@pytest.mark.parametrize("suffix, body", [("csv", "x\n16777217\n1.5\n"), ("jsonl", '{"x": 16777217}\n{"x": 1.5}\n')])
def test_integers_float32_would_round_are_warned_about(tmp_path, suffix, body):
    src = tmp_path / f"d.{suffix}"
    src.write_text(body)
    proc = run_cli(RUN, "--input", src, "--output", tmp_path / "out", "--num-shards", 1, check=True)
    assert "rounds integers above 2**24" in proc.stderr and "16777216" in proc.stderr and "--schema" in proc.stderr


# --- 2 (trainer side). a resume keeps the data run it started on -----------------------------------


def test_a_resume_pins_the_data_run_across_an_overwrite(tmp_path):
    import shutil

    from shardprep.errors import ManifestError
    from trainer import train
    from trainer.cluster import ClusterInfo
    from trainer.resume import check_resume
    from trainer.worker import plan_job

    src, data, model_dir = tmp_path / "d.csv", tmp_path / "ds", tmp_path / "model"
    src.write_text("x0,x1,x2,x3,label\n" + "".join(f"{i},{i},{i},{i},{i % 2}\n" for i in range(64)))
    run_cli(RUN, "--input", src, "--output", data, "--num-shards", 2, check=True)
    config = train.parse_args(["--data", str(data), "--model", "tests.trainer_fixtures:small_model", "--label", "label",
                               "--features", "x0,x1,x2,x3", "--per-replica-batch", "4", "--epochs", "1",
                               "--model-dir", str(model_dir), "--export", "none"])
    cluster = ClusterInfo(jobs={"worker": ("h:1",)}, task_index=0)
    first = plan_job(config, cluster=cluster, local_replicas=1)
    check_resume(str(model_dir), first.identity, is_chief=True, run_id=first.run_id, data=str(data))
    (model_dir / "checkpoints" / "checkpoint").write_text("")  # as after the first checkpoint
    src.write_text("x0,x1,x2,x3,label\n" + "".join(f"{i},{i},{i},{i},{i % 2}\n" for i in range(80)))
    run_cli(RUN, "--input", src, "--output", data, "--num-shards", 2, "--overwrite", check=True)
    assert manifest.load(str(data)).run_ids != {first.run_id}
    again = plan_job(config, cluster=cluster, local_replicas=1)
    assert again.identity == first.identity and again.run_id == first.run_id
    check_resume(str(model_dir), again.identity, is_chief=True, run_id=again.run_id,
                 data=str(data))  # no "another input plan"
    shutil.rmtree(data / first.run_id)
    with pytest.raises(ManifestError):
        plan_job(config, cluster=cluster, local_replicas=1)


def test_deeply_nested_tf_config_is_one_line_exit_2():
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CONFIG": "[" * 100_000}
    proc = subprocess.run([sys.executable, "-m", "trainer.train", "--data", "x", "--model", "mlp", "--label", "y",
                           "--epochs", "1", "--model-dir", "m", "--per-replica-batch", "2"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert "TF_CONFIG is not valid JSON" in _one_error_line(proc, 2)


def test_a_failing_pipeline_is_one_line_without_beams_traceback(tmp_path, monkeypatch, capsys):
    """Beam logs a failed stage as ``ERROR ... Traceback``; the CLI shows the error once, one line, exit 1."""
    from shardprep import run
    from shardprep.formats.jsonl import JsonLinesFormat

    src = tmp_path / "d.jsonl"
    src.write_text('{"x": 1}\n')
    schema = tmp_path / "s.json"
    schema.write_text('{"x": {"dtype": "int64", "shape": []}}')

    def broken(self, unit):
        raise OSError(5, "Input/output error (injected)")

    monkeypatch.setattr(JsonLinesFormat, "read", broken)
    monkeypatch.setattr(JsonLinesFormat, "column_wise", lambda self, *a: False)
    code = run.main(["--input", str(src), "--output", str(tmp_path / "out"), "--num-shards", "1", "--schema", str(schema),
                     "--local-workers", "1"])  # in this process, where the fault is injected
    err = capsys.readouterr().err
    assert code == 1, err
    assert "Traceback" not in err and "ERROR" not in err, err
    assert [line for line in err.splitlines() if "error" in line.lower()] == [
        line for line in err.splitlines() if line.startswith("shardprep.run: error:")], err
    assert not list((tmp_path / "out").glob("run-*/spill"))


def test_a_csv_record_over_the_limit_across_many_quoted_lines_ends_where_its_quote_closes():
    import io

    from shardprep.formats.csv import source as csv_format

    data = b'1,"start\n' + b"xxxxxxxxxx\n" * 50_000 + b'end"\n2,ok\n3,"a ""q"" b"\n'
    records = list(csv_format._csv_records(io.BytesIO(data), 0, 2, 100_000))
    assert [(pos, err and err[0]) for pos, _, _, err in records] == [(2, "record_too_large"), (50_004, None),
                                                                     (50_005, None)]
    assert [row for _, _, row, _ in records[1:]] == [["2", "ok"], ["3", 'a "q" b']]
    kept = sum(len(raw) for _, raw, _ in records[0][1])
    assert kept <= 100_000 + base.RAW_HEAD_BYTES and sum(reading.line_size(raw) for _, raw, _ in records[0][1]) == len(data) - 19


# --- issue 57 item 5: inputs that are no regular file ----------------------------------------------

def test_non_regular_inputs_are_named_in_the_log_or_refused_in_one_line(tmp_path):
    """A FIFO, a link to /dev/zero and a folder matched by ``*.csv`` are each logged with what they are
    (the run reads the regular file, never opening the FIFO); named directly, one line and exit 2."""
    data = tmp_path / "in"
    data.mkdir()
    (data / "good.csv").write_text("x\n1\n2\n")
    os.mkfifo(data / "pipe.csv")
    os.symlink("/dev/zero", data / "zero.csv")
    (data / "folder.csv").mkdir()
    proc = run_cli(RUN, "--input", data / "*.csv", "--output", tmp_path / "out", "--num-shards", 1, check=True)
    for name, what in [("pipe.csv", "a FIFO (named pipe)"), ("zero.csv", "a character device"),
                       ("folder.csv", "a folder")]:
        assert f"left out {data / name}: {what}, not a regular file" in proc.stderr, proc.stderr
    assert sum(s.num_records for s in manifest.load(str(tmp_path / "out")).splits.values()) == 2
    for name, what in [("pipe.csv", "a FIFO (named pipe)"), ("zero.csv", "a character device")]:
        proc = run_cli(RUN, "--input", data / name, "--output", tmp_path / "out2", "--num-shards", 1)
        line = _one_error_line(proc, 2)
        assert f"is {what}, not a regular file" in line and "matches no files" not in line, line
