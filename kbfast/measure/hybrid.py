"""The hybrid evaluator: the fast path, with a small contended Program replayed exactly.

The fluid point estimate (docs/fast_path.md §3) is exact where no flows meet (parity P1) and good for
long transfers, but its errors reach 25 % on short contended transfers, where per-transaction overheads,
HBM pseudo-channels and staggered arrivals decide the result (docs/fast_path.md §6).  The flit-level
replay of such a Program is cheap: its cost grows with flits x hops, not with the configuration space.

``run_hybrid`` therefore evaluates the Program on the fast path first and then, by ``method``:

* ``closed form``: no flow met another; the fast path is exact already;
* ``exact replay``: flows met, the replay's estimated event count (``replay_events_estimate``,
  kbfast.sim.lowering) is at
  most ``2 x budget`` and the replay finishes within ``budget`` events; the point estimate is the exact
  replay's (per op and per agent), the bounds stay the fast path's;
* ``fluid``: flows met and the Program is too large to replay within the budget (or its replay would not fit
  the memory limit, kbfast.config.budget); the fluid estimate stands, and ``not_replayed`` says why
  (``kbfast run`` prints it as the ``replay`` row).

The bounds are the fast path's in every case, so ``lower <= point <= upper`` holds throughout.  This module
composes the two evaluators and belongs to neither of them.
"""

from __future__ import annotations

import dataclasses

from kbfast.config.budget import MemoryBudgetError
from kbfast.exact import run_exact
from kbfast.sim.diagnostics import ReplayBudgetExceeded
from kbfast.sim.lowering import replay_events_estimate
from kbfast.fast.evaluate import FastResult, run_fast
from kbfast.ir import Program
from kbfast.measure.methods import CLOSED_FORM, EXACT, EXACT_REPLAY, FLUID, HYBRID_METHODS
from kbfast.sim.result import Result

DEFAULT_BUDGET_EVENTS = 2_000_000     # about 0.1 s of replay at the measured 17-23 M events/s
METHODS = HYBRID_METHODS          # how the point estimate was made (kbfast.measure.methods)


@dataclasses.dataclass(frozen=True)
class HybridResult:
    """A fast-path result whose point estimate may come from an exact replay (see ``method``)."""

    fast: FastResult
    method: str
    replay: Result | None = None   # the exact replay (None when none ran): exact mode's result of the Program
    not_replayed: str = ""         # why flows met and the fluid estimate stands: ``not run: ...`` (the estimated
                                   # events against the budget, the memory limit) or ``stopped past N events``

    @property
    def replay_events(self) -> int:
        """Events of the exact replay (0 when none ran)."""
        return 0 if self.replay is None else int(self.replay.n_events)

    def __getattr__(self, name: str):
        """The fast path's fields and properties (only called for names the dataclass does not define)."""
        if name.startswith("__") or name == "fast":
            raise AttributeError(name)
        return getattr(self.fast, name)


def run_hybrid(p: Program, budget: int = DEFAULT_BUDGET_EVENTS) -> HybridResult:
    """Fast path; replay exactly when flows met and the replay fits in ``budget`` events (module docstring)."""
    fast = run_fast(p)
    if not fast.shared:
        return HybridResult(fast, CLOSED_FORM)
    if budget <= 0:
        return HybridResult(fast, FLUID, not_replayed="not run: no replay budget")
    estimate = replay_events_estimate(p)
    if estimate > 2 * budget:
        return HybridResult(fast, FLUID, not_replayed=f"not run: ~{_events(estimate)} events > {_events(budget)}")
    try:
        ex = run_exact(p, max_events=budget)
    except ReplayBudgetExceeded:                  # a replay that does not fit: the fluid estimate stands
        return HybridResult(fast, FLUID, not_replayed=f"stopped past {_events(budget)} events")
    except MemoryBudgetError:
        return HybridResult(fast, FLUID, not_replayed="not run: over the memory limit")
    point = dataclasses.replace(fast, op_issue_ns=ex.op_issue_ns, op_begin_ns=ex.op_begin_ns,
                                op_end_ns=ex.op_end_ns, agent_finish_ns=ex.agent_finish_ns,
                                wall_s=fast.wall_s + ex.wall_s)     # the replay is part of its time
    return HybridResult(point, EXACT_REPLAY, ex)


def _events(n: int) -> str:
    """An event count for the ``replay`` row: ``257 M`` from a million on, else ``15,360``."""
    return f"{n / 1e6:,.0f} M" if n >= 1_000_000 else f"{int(n):,}"


def method_of(r: Result, exact: bool) -> str:
    """How ``r``'s point estimate was made (kbfast.measure.methods): exact mode's replay; a hybrid result's own
    method; else the fluid path's, closed form unless flows met."""
    if exact:
        return EXACT
    return r.method if isinstance(r, HybridResult) else FLUID if r.shared else CLOSED_FORM
