"""Exact mode: flit-level event replay of a Program (design §5)."""

from kbfast.exact.replay import ExactResult, run_exact
from kbfast.sim.diagnostics import ReplayBudgetExceeded, ReplayDeadlock

__all__ = ["ExactResult", "ReplayBudgetExceeded", "ReplayDeadlock", "run_exact"]
