"""Exact mode: flit-level event replay of a Program (design §5)."""

from kbfast.exact.replay import ExactResult, ReplayBudgetExceeded, ReplayDeadlock, run_exact

__all__ = ["ExactResult", "ReplayBudgetExceeded", "ReplayDeadlock", "run_exact"]
