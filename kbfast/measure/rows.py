"""The figures every command reports, computed once: relative error, bounds check, and the fast-vs-exact
comparison of one Program (design §7, parity contract).  Latency from launch and makespan are methods of
the evaluators' common result type, :class:`kbfast.sim.result.Result`.

* relative error = (fast - exact) / exact, 0 when exact is 0;
* in bounds = lower - tol <= exact <= upper + tol with tol = 1e-9 x max(|exact|, 1 ns);
* contention = the fast point estimate minus its contention-free lower bound (every flow at its isolated
  latency, each agent with its PE's channels to itself, no PC read/write switch history): the time that
  sharing links, node workers, DMA channels and pseudo-channels costs.  A point is *contended* when that
  exceeds 1e-6 of its latency (docs/bottlenecks.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kbfast.exact import run_exact
from kbfast.fast.evaluate import run_fast
from kbfast.ir import Program


def rel_error(value: float, reference: float) -> float:
    """(value - reference) / reference; 0 when the reference is 0."""
    return (value - reference) / reference if reference else 0.0


def in_bounds(lower: float, value: float, upper: float) -> bool | None:
    """Whether ``value`` lies in [lower, upper] up to 1e-9 relative; None when the bounds are unknown (NaN)."""
    if not (np.isfinite(lower) and np.isfinite(upper)):
        return None
    tol = 1e-9 * max(abs(value), 1.0)
    return bool(lower - tol <= value <= upper + tol)


CONTENTION_REL = 1e-6


def contention_ns(value: float, lower: float) -> float:
    """The time sharing costs: the point estimate minus the contention-free lower bound (NaN if unknown)."""
    return max(value - lower, 0.0) if np.isfinite(lower) else float("nan")


def contended(value: float, lower: float) -> bool | None:
    """Whether sharing cost more than 1e-6 of the latency; None when the lower bound is unknown."""
    if not np.isfinite(lower):
        return None
    return bool(value - lower > CONTENTION_REL * max(abs(value), 1.0))


@dataclass(frozen=True)
class Comparison:
    """One Program on both evaluators: latencies from ``launch_ns`` (ns) and wall times (s)."""

    program: str
    launch_ns: float
    fast_ns: float
    fast_lower_ns: float
    fast_upper_ns: float
    exact_ns: float
    fast_wall_s: float
    exact_wall_s: float

    @property
    def rel_error(self) -> float:
        """(fast - exact) / exact."""
        return rel_error(self.fast_ns, self.exact_ns)

    @property
    def exact_in_bounds(self) -> bool | None:
        """Whether the exact latency lies inside the fast path's bounds (parity P2)."""
        return in_bounds(self.fast_lower_ns, self.exact_ns, self.fast_upper_ns)


def compare(p: Program, launch_ns: float | None = None) -> Comparison:
    """Evaluate ``p`` on the fast path and by exact replay; latencies count from ``launch_ns`` (default: the
    earliest agent start, so they are makespans).

    >>> from kbfast import Router, allreduce, build_tables, compare, load_system
    >>> t = build_tables(load_system("ring6"))
    >>> c = allreduce(t, Router(t), 4096)
    >>> r = compare(c.program, c.launch_ns)
    >>> abs(r.rel_error) < 0.05 and r.exact_in_bounds
    True
    """
    start = float(p.agent_start_ns.min()) if launch_ns is None else float(launch_ns)
    fast = run_fast(p)
    exact = run_exact(p)
    fast_ns, lower_ns, upper_ns = fast.latency_ns(start)
    return Comparison(program=p.name, launch_ns=start, fast_ns=fast_ns, fast_lower_ns=lower_ns,
                      fast_upper_ns=upper_ns, exact_ns=exact.latency_ns(start)[0], fast_wall_s=fast.wall_s,
                      exact_wall_s=exact.wall_s)
