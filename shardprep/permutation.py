"""A keyed bijection over [0, n): the deterministic global shuffle.

A balanced Feistel network on the smallest even bit width that covers n, with cycle walking
back into [0, n). Every index maps to a distinct position, the result depends only on (n, seed),
and a batch of indices is permuted at numpy speed without materialising the whole permutation.
"""
from __future__ import annotations

import numpy as np

__all__ = ["Permutation"]

_ROUNDS = 6
_M1 = np.uint64(0xFF51AFD7ED558CCD)
_M2 = np.uint64(0xC4CEB9FE1A85EC53)
_GOLDEN = 0x9E3779B97F4A7C15
_MASK64 = (1 << 64) - 1


def _splitmix(x: int) -> int:
    x = (x + _GOLDEN) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def _fmix(x: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finaliser: a fast, well-mixing function on uint64 arrays."""
    x = x ^ (x >> np.uint64(33))
    x = x * _M1
    x = x ^ (x >> np.uint64(33))
    x = x * _M2
    return x ^ (x >> np.uint64(33))


class Permutation:
    """Bijection of [0, n) keyed by ``seed``; ``Permutation(n, seed)(indices)`` -> positions."""

    def __init__(self, n: int, seed: int) -> None:
        if n < 0:
            raise ValueError(f"permutation size {n}: expected >= 0")
        self.n = n
        bits = max(2, (max(n, 1) - 1).bit_length())
        bits += bits % 2
        self._half = np.uint64(bits // 2)
        self._mask = np.uint64((1 << (bits // 2)) - 1)
        state = seed & _MASK64
        keys = []
        for _ in range(_ROUNDS):
            state = _splitmix(state)
            keys.append(np.uint64(state))
        self._keys = keys

    def _feistel(self, x: np.ndarray) -> np.ndarray:
        left, right = x >> self._half, x & self._mask
        for key in self._keys:
            left, right = right, left ^ (_fmix(right ^ key) & self._mask)
        return (left << self._half) | right

    def __call__(self, indices: np.ndarray | list[int]) -> np.ndarray:
        x = np.asarray(indices, dtype=np.uint64)
        if x.size and int(x.max()) >= self.n:
            raise ValueError(f"index {int(x.max())} is outside [0, {self.n})")
        y = self._feistel(x)
        n = np.uint64(self.n)
        out = y >= n
        while out.any():  # cycle walking: at most a few rounds, since 2**bits < 4n
            y[out] = self._feistel(y[out])
            out = y >= n
        return y
