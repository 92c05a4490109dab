"""``--labels-from DIR`` / ``--label-vocab FILE``: a new data set takes an existing one's class names and ids.

Without them a run numbers the classes it finds (image class folders or a listing's label column,
a text-classification run's label column) in its own sorted order, so a test set prepared apart,
holding only classes ``3`` and ``8``, would get ids 0 and 1. With them the class ids are the given
vocabulary's: id ``i`` is name ``i`` of it, every name kept (a class with no record included).

``FILE``: one class name a line, in id order (TFDS's ``labels.txt``; blank lines at the end
ignored). ``DIR``: a committed data set whose manifest names the classes: a text-classification
run's ``text.labels``, else the one int64 feature with class names (an image run's
``image/class/label``; of several, the one named like the new run's label). A class the new input
holds that the vocabulary lacks is refused in one line before any record is read (the class names
are all known from the listing or the document store first): a dead letter would quietly make a
smaller test set that scores another question. TF-free.
"""
from __future__ import annotations

from collections.abc import Collection, Sequence

from shardprep import fs, manifest
from shardprep.errors import UsageError

__all__ = ["LabelVocabError", "apply_vocabulary", "labels_from", "read_label_vocab", "resolve_flags"]


class LabelVocabError(UsageError):
    """A label vocabulary that cannot be read, or that lacks a class of the input: exit 2."""


def _checked(names: Sequence[str], where: str) -> tuple[str, ...]:
    names = tuple(names)
    if not names:
        raise LabelVocabError(f"{where} names no class")
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise LabelVocabError(f"{where} names class(es) {', '.join(map(repr, repeated[:5]))} more than once: each "
                              "name must be on one line only")
    if any(not n.strip() or n != n.strip() for n in names):
        raise LabelVocabError(f"{where} has a blank line or a name with spaces around it inside the list")
    return names


def read_label_vocab(url: str) -> tuple[str, ...]:
    """The class names of a ``labels.txt``-style file, in id order."""
    try:
        text = fs.read_bytes(url).decode("utf-8-sig")
    except FileNotFoundError:
        raise LabelVocabError(f"--label-vocab {url}: no such file (one class name a line, in id order)") from None
    except UnicodeDecodeError as e:
        raise LabelVocabError(f"--label-vocab {url}: not UTF-8 text (byte {e.start})") from None
    return _checked(text.rstrip("\r\n").replace("\r\n", "\n").split("\n"), f"--label-vocab {url}")


def labels_from(root: str, *, feature: str | None = None) -> tuple[str, ...]:
    """The class names of the committed data set at ``root`` (see the module's docstring for which)."""
    if not manifest.exists(root):
        raise LabelVocabError(f"--labels-from {root}: no data set there (no manifest.json)")
    m = manifest.load(root)
    text_labels = (m.text or {}).get("labels")
    if text_labels:
        return _checked([str(x) for x in text_labels], f"--labels-from {root} (text.labels)")
    named = {name: spec.get("names") for name, spec in m.features.items() if spec.get("names")}
    if feature in named:
        named = {feature: named[feature]}
    if len(named) != 1:
        found = f"{len(named)} features with class names ({', '.join(sorted(named))})" if named else "no class names"
        raise LabelVocabError(f"--labels-from {root}: its manifest has {found}: give the names with --label-vocab FILE")
    (name, names), = named.items()
    return _checked([str(x) for x in names], f"--labels-from {root} ({name})")


def resolve_flags(*, labels_from_dir: str | None, label_vocab: str | None, feature: str | None = None) -> tuple[str, ...]:
    """The vocabulary the flags give (empty: neither given; both: refused)."""
    if labels_from_dir and label_vocab:
        raise LabelVocabError("--labels-from and --label-vocab both give the class names: give one")
    if labels_from_dir:
        return labels_from(labels_from_dir, feature=feature)
    if label_vocab:
        return read_label_vocab(label_vocab)
    return ()


def apply_vocabulary(vocabulary: Sequence[str], found: Collection[str], *, what: str) -> tuple[str, ...]:
    """The classes in id order: ``vocabulary`` itself, once every class ``found`` in the input is in it.

    ``what`` names where the classes came from (``class folders of ROOT``), for the refusal."""
    vocabulary = tuple(vocabulary)
    unknown = sorted(set(found) - set(vocabulary))
    if unknown:
        shown = ", ".join(map(repr, unknown[:10])) + (", ..." if len(unknown) > 10 else "")
        raise LabelVocabError(
            f"{len(unknown)} class(es) of the {what} are not in the given label vocabulary of {len(vocabulary)} "
            f"({shown}): add them to the vocabulary, or leave those records out of the input"
        )
    return vocabulary
