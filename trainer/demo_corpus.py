"""The text demo's corpus: documents on topics, in sentences from a small grammar over Zipfian words.

Deterministic for a seed. Each document keeps one topic (sea, farm, city, space, kitchen, forest), and
its sentences come from a few templates (determiner, adjective, noun, verb, preposition, ...), each
word drawn by Zipf's law (weight 1/rank) from its class: shared words for grammar, the topic's own
for meaning. So a masked word is predictable from the grammar around it (after "the" comes an
adjective or a noun) and from the topic the other words set, and a random next segment (from
another document, usually another topic) is told apart from the true one by its words: masked-LM and
next-sentence prediction both have something to learn, and "the" stays the most frequent token.
Written in BERT's layout (one sentence a line, a blank line between documents).
"""
from __future__ import annotations

import itertools
import os
import random
from collections.abc import Sequence

__all__ = ["TOPICS", "document", "documents", "write_corpus"]

# topic: (nouns, verbs, adjectives), most frequent first
TOPICS = {
    "sea": ("ship sailor wave harbor fish whale storm anchor island tide", "sails crosses watches follows reaches",
            "salty deep blue rough calm"),
    "farm": ("farmer cow field barn tractor wheat horse fence pig harvest", "plants feeds ploughs milks gathers",
             "green muddy golden quiet busy"),
    "city": ("driver bus street tower market bridge train office crowd taxi", "drives builds passes visits opens",
             "noisy tall crowded bright modern"),
    "space": ("rocket planet star pilot moon comet orbit station alien galaxy", "launches orbits circles lands explores",
              "distant dark cold silver vast"),
    "kitchen": ("cook bread soup oven knife onion pepper spoon pot cake", "bakes stirs cuts tastes boils",
                "hot sweet fresh spicy warm"),
    "forest": ("wolf tree fox owl deer river path hunter bear mushroom", "hunts climbs hides finds chases",
               "wild old shady tall silent"),
}
_SHARED = {
    "det": "the a every one".split(),
    "prep": "near with under over behind".split(),
    "adv": "then later soon often".split(),
    "conj": "and but while".split(),
}
# N noun, V verb, A adjective, D determiner, P preposition, R adverb, C conjunction
_TEMPLATES = ("D A N V D N", "D N V D A N P D N", "R D N V D N", "D N V D N C D A N V", "D N is A",
              "D A N V P D N", "D A N is A C A")


def _zipf(rng: random.Random, words: Sequence[str]) -> str:
    return rng.choices(words, weights=[1.0 / (rank + 1) for rank in range(len(words))])[0]


def _sentence(rng: random.Random, topic: str) -> str:
    nouns, verbs, adjectives = (part.split() for part in TOPICS[topic])
    classes = {"N": nouns, "V": verbs, "A": adjectives, "D": _SHARED["det"], "P": _SHARED["prep"],
               "R": _SHARED["adv"], "C": _SHARED["conj"]}
    words = [_zipf(rng, classes[slot]) if slot in classes else slot for slot in rng.choice(_TEMPLATES).split()]
    return " ".join(words) + " ."


def document(rng: random.Random, topic: str, *, sentences: tuple[int, int] = (4, 12)) -> list[str]:
    """One document's sentences, all on ``topic``."""
    return [_sentence(rng, topic) for _ in range(rng.randint(*sentences))]


def documents(count: int, *, seed: int = 0) -> list[list[str]]:
    """``count`` documents, topics in turn (so every topic has its share), sentences drawn by ``seed``."""
    rng = random.Random(seed)
    return [document(rng, topic) for topic, _ in zip(itertools.cycle(TOPICS), range(count))]


def write_corpus(folder: str, *, docs: int, files: int = 3, seed: int = 0) -> list[str]:
    """Writes ``docs`` documents into ``files`` .txt files in BERT's layout; returns their paths."""
    os.makedirs(folder, exist_ok=True)
    corpus = documents(docs, seed=seed)
    paths = []
    for i in range(files):
        path = os.path.join(folder, f"corpus-{i}.txt")
        with open(path, "w") as f:
            f.write("\n\n".join("\n".join(doc) for doc in corpus[i::files]) + "\n")
        paths.append(path)
    return paths
