"""A keyed bijection over [0, n): the deterministic global shuffle.

A balanced Feistel network on the smallest even bit width that covers n, with cycle walking
back into [0, n). Every index maps to a distinct position, the result depends only on (n, seed),
and a batch of indices is permuted in compiled code without materialising the whole permutation.
``inverse`` walks the same cycles backwards: a shard's writer finds the records of its positions
from the positions alone (``graph.stages.WriteShards``), so no per-record plan crosses the runner.
"""
from __future__ import annotations

import numpy as np

from shardprep import native

__all__ = ["Permutation"]

_ROUNDS = 6
_GOLDEN = 0x9E3779B97F4A7C15
_MASK64 = (1 << 64) - 1


def _splitmix(x: int) -> int:
    x = (x + _GOLDEN) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


class Permutation:
    """Bijection of [0, n) keyed by ``seed``; ``Permutation(n, seed)(indices)`` -> positions.

    The rounds run in compiled code (``native.feistel``; its numpy twin without a compiler): each
    round mixes one half with MurmurHash3's 64-bit finaliser of the other and a round key.
    """

    def __init__(self, n: int, seed: int) -> None:
        if n < 0:
            raise ValueError(f"permutation size {n}: expected >= 0")
        self.n = n
        bits = max(2, (max(n, 1) - 1).bit_length())
        bits += bits % 2
        self._half = bits // 2
        state = seed & _MASK64
        keys = []
        for _ in range(_ROUNDS):
            state = _splitmix(state)
            keys.append(state)
        self._keys = np.array(keys, dtype="<u8").tobytes()

    def __call__(self, indices: np.ndarray | list[int]) -> np.ndarray:
        """The positions of ``indices``."""
        return self._walk(indices, inverse=False)

    def inverse(self, positions: np.ndarray | list[int]) -> np.ndarray:
        """The indices whose positions are ``positions``: ``p.inverse(p(i)) == i``."""
        return self._walk(positions, inverse=True)

    def _walk(self, values: np.ndarray | list[int], *, inverse: bool) -> np.ndarray:
        x = np.array(values, dtype=np.uint64)  # a copy: the rounds run in place
        if x.size and int(x.max()) >= self.n:
            raise ValueError(f"value {int(x.max())} is outside [0, {self.n})")
        native.feistel(x, self._keys, self._half, self.n, inverse)
        return x
