"""``kbfast bench``: the benchmarks (``benchmarks``: one function per figure, the ``BENCHMARKS`` table by
name, each figure against its target, docs/bench.md) and their result rows; ``pairing``: ``--vs REV``."""

from kbfast.bench.benchmarks import BENCHMARKS, BenchRow

__all__ = ["BENCHMARKS", "BenchRow"]
