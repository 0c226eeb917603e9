"""The fast-vs-exact comparison of one Program (design §7, parity contract): both evaluators, latencies from
one launch, and the row figures of kbfast.measure.rows."""

from __future__ import annotations

from dataclasses import dataclass

from kbfast.exact import run_exact
from kbfast.fast.evaluate import run_fast
from kbfast.ir import Program
from kbfast.measure.rows import in_bounds, rel_error


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
