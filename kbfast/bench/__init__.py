"""``kbfast bench``: the benchmarks (``benchmarks``: one function per figure, the ``BENCHMARKS`` table by
name) and their result rows."""

from kbfast.bench.benchmarks import BENCHMARKS, BenchRow

__all__ = ["BENCHMARKS", "BenchRow"]
