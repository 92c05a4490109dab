"""Writes docs/cli.md, the flag reference of every command, from the commands' own ``--help``
(argparse), so the reference cannot drift from the code: ``python docs/make_cli.py`` (or
``make docs``); ``--check`` exits 1 when docs/cli.md is stale (``tests/end_to_end/test_docs.py`` runs it)."""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET = ROOT / "docs" / "cli.md"
COMMANDS = {  # module -> what it is for
    "shardprep.run": "re-shard raw data into balanced TFRecord shards and a manifest "
                     "(`python -m pipelines.dataflow ARGS` is this with `--runner dataflow`)",
    "shardprep.verify": "check a committed data set against its manifest",
    "shardprep.index": "give every shard of a data set written without them its record index, and DALI's "
                       "`tfrecord2idx` index",
    "shardprep.inspect": "show a data set's splits, features and a few records",
    "shardprep.report": "write one self-contained HTML report of a data set (charts, dead letters, red flags)",
    "shardprep.clean": "remove run folders no reader needs",
    "shardprep.compact": "rewrite every generation of an appended data set into one, as a new manifest version",
    "trainer.train": "one worker of a MultiWorkerMirroredStrategy training job",
    "trainer.launch": "start N local training workers (or N workers of any MWMS program) on loopback",
    "trainer.evaluate": "score another data set's split with a trained model, its class ids matched by name",
    "trainer.tfjob": "print a Kubeflow TFJob for the same training job",
    "trainer.demo": "the whole path on a sample tabular data set (`make demo`)",
    "trainer.demo_images": "the whole path on a sample image data set (`make demo-images`)",
}


def help_text(module: str) -> str:
    env = {**os.environ, "COLUMNS": "100", "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
    proc = subprocess.run([sys.executable, "-m", module, "--help"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    if proc.returncode != 0:
        raise SystemExit(f"{module} --help failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return proc.stdout.rstrip()


def render() -> str:
    lines = ["# Command-line reference", "",
             "Generated from each command's `--help` by `python docs/make_cli.py`; do not edit by hand",
             "(`tests/end_to_end/test_docs.py` fails when it is stale). The README's quickstart shows the common",
             "flags; [design.md](design.md) says why they are as they are.", ""]
    lines += [f"- [`{module}`](#{module.replace('.', '')}): {what}" for module, what in COMMANDS.items()]
    for module, what in COMMANDS.items():
        lines += ["", f"## {module}", "", what[0].upper() + what[1:] + ".", "", "```", help_text(module), "```"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="exit 1 if docs/cli.md differs from what this writes")
    args = p.parse_args(argv)
    text = render()
    if args.check:
        if not TARGET.exists() or TARGET.read_text() != text:
            print(f"{TARGET} is stale: run python docs/make_cli.py", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(text)
    print(f"wrote {TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
