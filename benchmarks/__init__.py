"""Benchmarks of shardprep against what users would run instead (``python -m benchmarks.run_all``).

Every contender runs as its own subprocess (each pays its own imports), the contenders of one
comparison alternate (A, B, C, A, B, C, ...), and results are medians and ratios: absolute times on
a shared machine mean little. ``BENCHMARKS.md`` is generated from ``benchmarks/results/latest.json``.
"""
