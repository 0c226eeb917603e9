"""The hybrid evaluator: the fast path, with a small contended Program replayed exactly and a larger one estimated
by the queueing network.

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
* ``network``: flows met and the Program is too large to replay within the budget (or its replay would not fit
  the memory limit, kbfast.config.budget), and the fluid FIFO queueing network (kbfast.fast.network) finishes
  within ``budget / NETWORK_EVENT_COST`` of its own events: the point estimate is the network's, clamped into
  the bounds.  It takes far fewer events than the replay on bulk transfers (a 256-SIP lrab at 96 KiB: 3.95 M
  against 257 M), and each costs about 6 replay events (docs/fast_path.md §6);
* ``fluid``: neither fits; the fluid estimate stands.

``run_network`` is the fast-path choice ``network``: closed form, else the network within ``NETWORK_MAX_EVENTS``
(kbfast.fast.evaluate; never a replay), else the fluid.

Under ``network`` and ``fluid``, ``not_replayed`` says why the replay did not run (``kbfast run`` prints it
as the ``replay`` row).

The bounds are the fast path's in every case, so ``lower <= point <= upper`` holds throughout.  This module
composes the evaluators and belongs to none of them.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import time

import numpy as np

from kbfast.config.budget import MemoryBudgetError
from kbfast.exact import run_exact
from kbfast.sim.diagnostics import ReplayBudgetExceeded
from kbfast.sim.lowering import replay_events_estimate
from kbfast.fast.evaluate import NETWORK_MAX_EVENTS, FastResult, NetworkBudgetExceeded, network_schedule, run_fast
from kbfast.ir import Program
from kbfast.measure import warmup
from kbfast.measure.methods import CLOSED_FORM, EXACT, EXACT_REPLAY, FLUID, HYBRID_METHODS, NETWORK
from kbfast.sim.result import Result

DEFAULT_BUDGET_EVENTS = 2_000_000     # about 0.1 s of replay at the measured 17-23 M events/s
# A queueing-network event costs about this many replay events of wall time (2.1 M against 12.5 M events/s on
# sip_hotspot_pe0 at 1 MiB, 4.4 M against 29 M on lrab over 256 SIPs at 96 KiB): the network's budget is the
# replay's over it, so both tiers bound the same wait.
NETWORK_EVENT_COST = 6
METHODS = HYBRID_METHODS          # how the point estimate was made (kbfast.measure.methods)


@dataclasses.dataclass(frozen=True)
class HybridResult:
    """A fast-path result whose point estimate may come from an exact replay (see ``method``)."""

    fast: FastResult
    method: str
    replay: Result | None = None   # the exact replay (None when none ran): exact mode's result of the Program
    not_replayed: str = ""         # why flows met and no replay made the point: ``not run: ...`` (the estimated
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
    """Fast path; replay exactly when flows met and the replay fits in ``budget`` events, else the queueing network
    when it fits the same wait, else the fluid (module docstring)."""
    fast = run_fast(p)
    if not fast.shared:
        return HybridResult(fast, CLOSED_FORM)
    if budget <= 0:
        return HybridResult(fast, FLUID, not_replayed="not run: no replay budget")
    ex, not_replayed = _replay(p, budget)
    if ex is not None:
        point = _with_point(fast, ex.op_issue_ns, ex.op_begin_ns, ex.op_end_ns, ex.agent_finish_ns, ex.wall_s)
        return HybridResult(point, EXACT_REPLAY, ex)
    return _network_or_fluid(p, fast, budget // NETWORK_EVENT_COST, not_replayed)


def run_network(p: Program, max_events: int = NETWORK_MAX_EVENTS) -> HybridResult:
    """The fast-path choice ``network``: closed form where no flows met, else the queueing network within
    ``max_events`` of its events (never a replay), else the fluid."""
    fast = run_fast(p)
    if not fast.shared:
        return HybridResult(fast, CLOSED_FORM)
    return _network_or_fluid(p, fast, max_events, "")


def _network_or_fluid(p: Program, fast: FastResult, max_events: int, not_replayed: str) -> HybridResult:
    """``fast`` with the queueing network's point clamped into its bounds, when the network finishes within
    ``max_events`` events and fits the memory limit; else ``fast`` as it is, the fluid's.  ``not_replayed``: why
    no replay made the point (for the network's failure, when it is empty, the network's own reason)."""
    _announce_network_compile()
    t0 = time.perf_counter()
    try:
        S, _ = network_schedule(p, max_events=max_events)
    except NetworkBudgetExceeded:
        return HybridResult(fast, FLUID, not_replayed=not_replayed or f"network: past {_events(max_events)} events")
    except MemoryBudgetError:
        return HybridResult(fast, FLUID, not_replayed=not_replayed or "network: over the memory limit")
    # Both bounds are valid for exact mode, so a point outside them is clamped in (as run_fast does).
    point = _with_point(fast, S.op_issue, S.op_begin, np.clip(S.op_end, fast.op_end_lo_ns, fast.op_end_hi_ns),
                        np.clip(S.a_finish, fast.agent_finish_lo_ns, fast.agent_finish_hi_ns),
                        time.perf_counter() - t0)
    return HybridResult(point, NETWORK, not_replayed=not_replayed)


@functools.cache
def _announce_network_compile() -> None:
    """Say so on stderr when the network's kernel is not cached yet (a first run compiles it on demand, not in the
    command's warm-up: kbfast.measure.warmup); checked once per process, since its first run caches it."""
    if warmup.missing("network"):
        sys.stderr.write(warmup.notice(["network"]) + "\n")
        sys.stderr.flush()


def _replay(p: Program, budget: int) -> tuple[Result | None, str]:
    """The exact replay of ``p`` within ``budget`` events, or None and why it did not run or stopped."""
    estimate = replay_events_estimate(p)
    if estimate > 2 * budget:
        return None, f"not run: ~{_events(estimate)} events > {_events(budget)}"
    try:
        return run_exact(p, max_events=budget), ""
    except ReplayBudgetExceeded:
        return None, f"stopped past {_events(budget)} events"
    except MemoryBudgetError:
        return None, "not run: over the memory limit"


def _with_point(fast: FastResult, issue, begin, end, finish, wall_s: float) -> FastResult:
    """``fast`` with these per-op and per-agent times as its point estimate (its bounds kept), and ``wall_s``
    more time in the evaluator."""
    return dataclasses.replace(fast, op_issue_ns=issue, op_begin_ns=begin, op_end_ns=end, agent_finish_ns=finish,
                               wall_s=fast.wall_s + wall_s)


def _events(n: int) -> str:
    """An event count for the ``replay`` row: ``257 M`` from a million on, else ``15,360``."""
    return f"{n / 1e6:,.0f} M" if n >= 1_000_000 else f"{int(n):,}"


def method_of(r: Result, exact: bool) -> str:
    """How ``r``'s point estimate was made (kbfast.measure.methods): exact mode's replay; a hybrid result's own
    method; else the fluid path's, closed form unless flows met."""
    if exact:
        return EXACT
    return r.method if isinstance(r, HybridResult) else FLUID if r.shared else CLOSED_FORM
