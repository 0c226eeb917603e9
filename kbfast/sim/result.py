"""What both evaluators return (design §7): one Program's per-op and per-agent times, ns, with bounds.

``run_exact`` returns an :class:`~kbfast.exact.replay.ExactResult` and ``run_fast`` a
:class:`~kbfast.fast.evaluate.FastResult`; both are a :class:`Result`.  An exact replay's bounds are its
own times.  Each adds its per-resource tables ``edges`` and ``pcs`` (docs/exact_mode.md, docs/fast_path.md).

* makespan = last agent finish - earliest agent start;
* latency from launch = last agent finish - ``launch_ns`` (spec_pe §3.6: max ``pe_exec_ns`` from the
  common start barrier);
* a resource's utilisation = its busy time / the span of the result it belongs to (:func:`utilization`,
  the one formula behind every table, field and heat map; docs/bottlenecks.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from kbfast.ir import Op, Program


def utilization(busy_ns, span_ns: float):
    """Busy time over ``span_ns``, the span of the result the resource belongs to (a number or an array, as
    ``busy_ns``); NaN when the span is not positive."""
    busy = np.asarray(busy_ns, np.float64)
    out = busy / span_ns if span_ns > 0 else np.full(busy.shape, np.nan)
    return float(out) if out.ndim == 0 else out


@dataclass(frozen=True, kw_only=True)
class Result:
    """Per-op issue, begin (resources acquired) and end times, agent finish times, and their bounds."""

    program: Program
    wall_s: float                                # time in the evaluator
    op_issue_ns: np.ndarray
    op_begin_ns: np.ndarray
    op_end_ns: np.ndarray
    agent_finish_ns: np.ndarray
    op_end_lo_ns: np.ndarray | None = None       # bounds; None: the times themselves (an exact replay)
    op_end_hi_ns: np.ndarray | None = None
    agent_finish_lo_ns: np.ndarray | None = None
    agent_finish_hi_ns: np.ndarray | None = None

    def __post_init__(self) -> None:
        for bound, value in (("op_end_lo_ns", self.op_end_ns), ("op_end_hi_ns", self.op_end_ns),
                             ("agent_finish_lo_ns", self.agent_finish_ns),
                             ("agent_finish_hi_ns", self.agent_finish_ns)):
            if getattr(self, bound) is None:
                object.__setattr__(self, bound, value)

    def _span(self, finish: np.ndarray) -> float:
        return float(finish.max() - self.program.agent_start_ns.min()) if len(finish) else 0.0

    @property
    def makespan_ns(self) -> float:
        """Time from the earliest agent start to the last agent finish."""
        return self._span(self.agent_finish_ns)

    @property
    def makespan_lo_ns(self) -> float:
        """The lower bound of the makespan: first start to the last agent's lower-bound finish, ns."""
        return self._span(self.agent_finish_lo_ns)

    @property
    def makespan_hi_ns(self) -> float:
        """The upper bound of the makespan: first start to the last agent's upper-bound finish, ns."""
        return self._span(self.agent_finish_hi_ns)

    def latency_ns(self, launch_ns: float) -> tuple[float, float, float]:
        """(latency, lower bound, upper bound) from ``launch_ns``: the last agent's finish minus it."""
        def span(finish: np.ndarray) -> float:
            """The last finish of ``finish`` minus the launch (0 without agents)."""
            return float(finish.max() - launch_ns) if len(finish) else 0.0
        return span(self.agent_finish_ns), span(self.agent_finish_lo_ns), span(self.agent_finish_hi_ns)

    def op_latency_ns(self, op: int) -> float:
        """Issue to completion of one op."""
        return float(self.op_end_ns[op] - self.op_issue_ns[op])

    def ops(self) -> pd.DataFrame:
        """One row per op: agent, op kind, bytes, issue, begin, end (ns)."""
        p = self.program
        return pd.DataFrame({
            "agent": [p.agent_name(a) for a in p.op_agent],
            "op": [Op(int(c)).name for c in p.op_code],
            "nbytes": p.op_nbytes, "issue_ns": self.op_issue_ns, "begin_ns": self.op_begin_ns,
            "end_ns": self.op_end_ns,
        })
