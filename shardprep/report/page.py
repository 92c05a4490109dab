"""``python -m shardprep.report DIR -o report.html``: one self-contained HTML page of a data set (splits, shards, generations, dead letters, feature statistics and red flags).

A text run's page opens with its corpus and a sample of its sequences (``shardprep.report.text_run``);
an appended data set's lists its generations (``shardprep.report.generation_section``).

The page has inline CSS and inline SVG charts drawn here: no JavaScript, nothing fetched, so it
opens from a file, a mail attachment or a bucket. Every string from the data or the manifest
(feature, split and class names, values, dead letters' raw records, file names) goes through
``display.html_text``: control, bidi and zero-width characters escaped, then HTML; element ids are
index-based. Statistics fields a manifest lacks (an older tool, ``--statistics off``) are left out,
never guessed. At any feature count the page stays light: the features section
(``shardprep.report.feature_section``) draws a bounded number in full and lists the rest in closed pages
that a browser lays out only when opened; red flags past ``FLAGS_LISTED`` fold away likewise.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

from shardprep import cli, fs, manifest, members, naming
from shardprep.errors import UsageError
from shardprep.report.charts import bar_chart
from shardprep.report.feature_section import features_html
from shardprep.report.generation_section import generations_html, statistics_note
from shardprep.report.html import e, num, table
from shardprep.report.red_flags import Flag, divergences, red_flags, share_of
from shardprep.report.text_run import TextSample, decoded, sample, text_flags, text_rows, vocabulary
from shardprep.summary import human_bytes

__all__ = ["FLAGS_LISTED", "build", "dead_letter_examples", "main", "render"]

EXAMPLES_PER_REASON = 3
FLAGS_LISTED = 100  # red flags listed at the top; the rest in a closed <details> under them
_MAX_DEAD_LETTER_LINES = 100_000  # read at most this many dead letters for examples
_MAX_DEAD_LETTER_BYTES = 64 << 20  # and at most this many bytes of each dead-letter file
_RAW_CHARS = 300

# ---------------------------------------------------------------- dead letters

def dead_letter_examples(root: str, m: manifest.Manifest, per_reason: int = EXAMPLES_PER_REASON) -> tuple[dict[str, list[dict]], list[str]]:
    """Up to ``per_reason`` dead letters of each reason (``writer.dead_letter_line`` entries), read from
    the run's ``rejected/`` files; and a note per file that could not be read."""
    out: dict[str, list[dict]] = {}
    notes: list[str] = []
    wanted = set(m.rejected.by_reason) or None
    seen = 0
    for i, path in enumerate(m.rejected.paths):
        try:  # a FIFO, a device, a link out of DIR: MemberError (exit 2); a large file: its first bytes
            with members.open_member(root, path, field=f"rejected.paths[{i}]", cap=_MAX_DEAD_LETTER_BYTES,
                                     prefix=True) as f:
                for line in f:
                    seen += 1
                    if seen > _MAX_DEAD_LETTER_LINES:
                        break
                    try:
                        entry = json.loads(line)
                    except ValueError:
                        continue
                    if not isinstance(entry, dict):
                        continue
                    reason = str(entry.get("reason", "unknown"))
                    kept = out.setdefault(reason, [])
                    if len(kept) < per_reason:
                        kept.append(entry)
                    if wanted and all(len(out.get(r, ())) >= per_reason for r in wanted):
                        return out, notes
        except FileNotFoundError:
            notes.append(f"{path} is missing")
        except OSError as err:
            notes.append(f"{path} cannot be read: {type(err).__name__}")
    return out, notes


# ---------------------------------------------------------------- HTML

_CSS = """
:root{color-scheme:light}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;background:#f6f7f9;color:#1d2330}
main{max-width:1180px;margin:0 auto;padding:16px 20px 48px}
h1{font-size:22px;margin:8px 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #d6dae1;padding-bottom:4px}
h3{font-size:15px;margin:0 0 6px;word-break:break-all}
.meta{color:#5a6272;margin:0 0 12px}
.card{background:#fff;border:1px solid #dde1e7;border-radius:6px;padding:12px 14px;margin:10px 0;overflow-x:auto}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(520px,1fr));gap:10px}
table{border-collapse:collapse;margin:6px 0;font-variant-numeric:tabular-nums}
th,td{padding:3px 8px;border-bottom:1px solid #eceef2;text-align:right;vertical-align:top}
th:first-child,td:first-child,td.t,th.t{text-align:left}
th{background:#f1f3f6;font-weight:600}
td.v{max-width:420px;overflow-wrap:anywhere;text-align:left;font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px}
.flags li{margin:4px 0}.flags b{color:#b42318}
.ok{color:#16794c}.bad{color:#b42318;font-weight:600}
.chart{max-width:100%;height:auto;display:block}.ax{font-size:10px;fill:#5a6272}
.charts{display:flex;flex-wrap:wrap;gap:12px;align-items:flex-start}
.charts figure{margin:0}.charts figcaption{font-size:12px;color:#5a6272}
details.page{margin:8px 0}details.page>summary{cursor:pointer;font-weight:600;padding:4px 0}
pre.rows{font:12px/1.35 ui-monospace,Menlo,Consolas,monospace;margin:4px 0;overflow-x:auto}
.tag{display:inline-block;background:#eef1f6;border-radius:3px;padding:0 5px;margin-left:6px;font-size:12px;color:#40495a}
"""


def _splits_html(m: manifest.Manifest) -> str:
    rows, cards = [], []
    for name, info in m.splits.items():
        records = [s.num_records for s in info.shards]
        sizes = [s.num_bytes for s in info.shards]
        if not records:
            rows.append([e(name), "0", num(info.num_records), human_bytes(info.num_bytes), "", "", ""])
            continue
        labels = [f"{name} shard {i}" for i in range(len(records))]
        ratio = f"{max(sizes) / min(sizes):.3f}" if min(sizes) else "n/a"
        rows.append([e(name), num(len(records)), num(info.num_records), human_bytes(info.num_bytes),
                     f"{min(records):,} – {max(records):,} (spread {max(records) - min(records):,})",
                     f"{human_bytes(min(sizes))} – {human_bytes(max(sizes))} (spread {human_bytes(max(sizes) - min(sizes))})",
                     ratio])
        cards.append(
            f'<div class="card"><h3>{e(name)} <span class="tag">{len(records):,} shards</span></h3>'
            f'<div class="charts"><figure>{bar_chart(records, title=f"records per shard of {name}", labels=labels)}'
            f"<figcaption>records per shard (spread {max(records) - min(records):,})</figcaption></figure>"
            f'<figure>{bar_chart(sizes, title=f"bytes per shard of {name}", labels=labels, color="#54a24b")}'
            f"<figcaption>bytes per shard (spread {human_bytes(max(sizes) - min(sizes))})</figcaption></figure></div></div>")
    summary = table(["split", "shards", "records", "bytes", "records per shard", "bytes per shard", "bytes max/min"], rows)
    return f'<div class="card">{summary}</div><div class="grid">{"".join(cards)}</div>'


def _dead_letters_html(root: str, m: manifest.Manifest) -> str:
    acc = m.accounting
    head = (f"<p>read {acc.read:,} = written {acc.written:,} + rejected {acc.rejected:,}"
            f'{"" if acc.read == acc.written + acc.rejected else " <span class=bad>(does not add up)</span>"}</p>')
    if not m.rejected.num_records and not m.rejected.by_reason:
        return f'<div class="card">{head}<p class="ok">No dead letters: every record read was written.</p></div>'
    examples, notes = dead_letter_examples(root, m)
    parts = [head]
    parts.append("<p>files: " + ", ".join(f"<code>{e(p)}</code>" for p in m.rejected.paths) + "</p>")
    reasons = dict(m.rejected.by_reason) or {r: len(x) for r, x in examples.items()}
    parts.append(table(["reason", "records", "share of read"],
                        [[e(r), num(c), f"{100 * share_of(c, acc.read):.2f}%"] for r, c in reasons.items()]))
    for reason in reasons:
        rows = []
        for entry in examples.get(reason, []):
            raw = entry.get("raw")
            if raw is None and "raw_base64" in entry:
                raw = f"(binary, base64) {entry['raw_base64']}"
            raw = str(raw if raw is not None else "")
            raw = raw if len(raw) <= _RAW_CHARS else raw[:_RAW_CHARS] + f"… (+{len(raw) - _RAW_CHARS:,} characters)"
            rows.append([e(str(entry.get("source", ""))), num(entry.get("position")), e(str(entry.get("unit", ""))),
                         e(str(entry.get("detail", ""))), e(raw)])
        if rows:
            parts.append(f"<h3>{e(reason)}: examples</h3>")
            parts.append(table(["source", "position", "unit", "detail", "raw record"], rows, text_cols=(0, 3, 4)))
    parts += [f'<p class="bad">{e(n)}</p>' for n in notes]
    return f'<div class="card">{"".join(parts)}</div>'


def _text_html(m: manifest.Manifest, s: TextSample, vocab: list[str]) -> str:
    """A text run's corpus and sequences (``shardprep.report.text_run``)."""
    rows = table(["", ""], [[e(k), e(v)] for k, v in text_rows(m, s, vocab)], text_cols=(1,))
    parts = [f'<div class="card">{rows}</div>']
    n = int((m.text or {}).get("max_seq_length", 0))
    if s.records and n:
        bins = len(s.lengths)
        labels = [f"{i * n // bins}-{(i + 1) * n // bins} tokens" for i in range(bins)]
        parts.append(f'<div class="card"><div class="charts"><figure>'
                     f'{bar_chart(s.lengths, title="sequence lengths", labels=labels)}'
                     f"<figcaption>tokens a sequence (0 to {n:,}; padding {100 * s.padding:.1f}%), "
                     f"{s.records:,} records sampled</figcaption></figure></div></div>")
    top = ((m.text or {}).get("corpus") or {}).get("top_repeated_sentences") or []
    if top:
        parts.append('<div class="card"><h3>most repeated sentences</h3>'
                     + table(["sentence", "times"], [[e(str(t)), num(c)] for t, c in top], text_cols=(0,)) + "</div>")
    if s.first and vocab:
        shown_rows = [[e(a), e(b)] for a, b in (decoded(r, vocab) for r in s.first)]
        parts.append('<div class="card"><h3>first records, as wordpieces</h3>'
                     + table(["input_ids", "masked (position:original)"], shown_rows, text_cols=(0, 1)) + "</div>")
    return "".join(parts)


def render(root: str, m: manifest.Manifest, *, label: str | None = None) -> str:
    """The report of the data set at ``root`` (its manifest ``m``) as one HTML document."""
    return _page(root, m, label=label)[0]


def _page(root: str, m: manifest.Manifest, *, label: str | None) -> tuple[str, list[Flag]]:
    """The HTML document and the red flags it lists."""
    divs = divergences(m)
    flags = red_flags(m, label=label, divs=divs)
    text_section = ""
    if m.text:
        vocab = vocabulary(root, m.text)
        found = sample(root, m, vocab)
        flags = text_flags(m, found) + flags
        text_section = '<h2 id="text">Text</h2>' + _text_html(m, found, vocab)
    total = sum(s.num_records for s in m.splits.values())
    if flags:
        items = "".join(f"<li><b>{e(f.where)}</b>: {e(f.why)}</li>" for f in flags[:FLAGS_LISTED])
        more = ""
        if len(flags) > FLAGS_LISTED:
            rest = "".join(f"<li><b>{e(f.where)}</b>: {e(f.why)}</li>" for f in flags[FLAGS_LISTED:])
            more = (f'<details class="page"><summary>{len(flags) - FLAGS_LISTED:,} more red flags</summary>'
                    f'<ul class="flags">{rest}</ul></details>')
        flags_html = f'<div class="card"><ul class="flags">{items}</ul>{more}</div>'
    else:
        flags_html = '<div class="card"><p class="ok">No red flags.</p></div>'
    return "".join([
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">",
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">",
        f"<title>shardprep report: {e(root)}</title><style>{_CSS}</style></head><body><main>",
        f"<h1>shardprep report</h1><p class=\"meta\"><code>{e(root)}</code><br>{total:,} records in "
        f"{len(m.splits)} split{'s' * (len(m.splits) != 1)} ({', '.join(e(s) for s in m.splits)}), {len(m.features)} "
        f"feature{'s' * (len(m.features) != 1)}, compression "
        f"{e(m.compression)}, seed {m.seed}, {'shuffled' if m.shuffled else 'input order'}, created {e(m.created)}, "
        f"tool {e(m.tool_version)}"
        f"{f', version {m.data_version:,} of {len(m.generations)} generations' if m.generations else ''}</p>",
        f'<h2 id="flags">Red flags ({len(flags)})</h2>', flags_html,
        text_section,
        '<h2 id="splits">Splits and shards</h2>', _splits_html(m),
        generations_html(m),
        '<h2 id="dead-letters">Dead letters</h2>', _dead_letters_html(root, m),
        f'<h2 id="features">Features ({len(m.features)})</h2>',
        f'<p class="meta">{e(statistics_note(m))}</p>' if len(m.generations) > 1 and m.statistics else "",
        features_html(m, flags, divs),
        "</main></body></html>\n",
    ]), flags


def _manifest_label(root: str) -> str | None:
    """The manifest's ``label`` key, where a writer recorded one (not part of ``manifest.Manifest``)."""
    try:
        doc = json.loads(fs.read_bytes(naming.join(root, naming.MANIFEST)))
    except (OSError, ValueError):
        return None
    label = doc.get("label") if isinstance(doc, dict) else None
    return label if isinstance(label, str) else None


def build(root: str, *, label: str | None = None) -> str:
    """The HTML report of the data set at ``root``."""
    m = manifest.load(root)
    return render(root, m, label=label or _manifest_label(root))


def _main(argv: Sequence[str] | None) -> int:
    p = argparse.ArgumentParser(prog="python -m shardprep.report", description=__doc__.split("\n", 1)[0].split(": ", 1)[1])
    p.add_argument("dir", metavar="DIR", help="data set folder (local, NFS or gs://)")
    p.add_argument("-o", "--output", default="report.html", metavar="FILE",
                   help="the HTML file to write, local or gs:// (default: %(default)s in the current folder)")
    p.add_argument("--label", metavar="NAME", help="the label feature, checked for class imbalance "
                   "(default: the manifest's label, else features named label, class, target, ...)")
    p.add_argument("--verbose", action="store_true", help="tracebacks of unexpected errors")
    args = p.parse_args(argv)
    cli.configure_logging(args.verbose)
    m = manifest.load(args.dir)
    if args.label and args.label not in m.features:
        names = sorted(m.features)
        listed = ", ".join(names[:20]) + (f", ... (+{len(names) - 20:,} more)" if len(names) > 20 else "")
        raise UsageError(f"--label {args.label!r} is not a feature of {args.dir} (features: {listed})")
    if fs.is_local(args.output):
        folder = os.path.dirname(os.path.abspath(args.output))
        if not os.path.isdir(folder):
            raise UsageError(f"-o {args.output}: folder {folder} does not exist")
        if os.path.isdir(args.output):
            raise UsageError(f"-o {args.output} is a folder: give a file name (e.g. {os.path.join(args.output, 'report.html')})")
    text, found = _page(args.dir, m, label=args.label or _manifest_label(args.dir))
    with fs.write_atomic(args.output) as f:
        f.write(text.encode("utf-8"))
    flags = len(found)
    print(f"wrote {args.output} ({human_bytes(len(text.encode()))}, {flags} red flag{'s' if flags != 1 else ''})")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return cli.main("shardprep.report", _main, argv)


if __name__ == "__main__":
    sys.exit(main())
