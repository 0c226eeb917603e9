"""Objectives, constraints and the Pareto front of ``kbfast search`` (docs/search.md "The front").

Every evaluated candidate has these metrics:

=======================  ============  ==========================================================
``tokens_per_s``         maximise      users / the decode step's latency
``tokens_per_s_per_sip`` maximise      the same per SIP of the tray
``tpot``                 minimise      the decode step's latency (ms): time per output token
``ttft``                 minimise      a prefill of ``--seq`` tokens for one user (ms)
=======================  ============  ==========================================================

A constraint is ``METRIC OP VALUE`` with OP one of ``<=``, ``<``, ``>=``, ``>``, and METRIC a metric above with
its unit (``tpot_ms``, ``ttft_ms``, ``tokens_per_s``, ``tokens_per_s_per_sip``) or ``batch``.  The front is the
set of feasible candidates no other feasible candidate beats on both throughput (tokens/s) and latency (TPOT),
each at least as good and one strictly better: the trade-off an architect picks from.
"""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from kbfast.errors import KbfastError, closest, not_one_of

OBJECTIVES = {"tokens_per_s": ("tokens_per_s", True), "tokens_per_s_per_sip": ("tokens_per_s_per_sip", True),
              "tpot": ("tpot_ms", False), "ttft": ("ttft_ms", False)}     # name -> (column, maximise)
CONSTRAINT_METRICS = ("tpot_ms", "ttft_ms", "tokens_per_s", "tokens_per_s_per_sip", "batch")
OPS = {"<=": operator.le, "<": operator.lt, ">=": operator.ge, ">": operator.gt}
_CONSTRAINT = re.compile(r"^\s*([a-z_]+)\s*(<=|>=|<|>)\s*([0-9.eE+-]+)\s*$")


@dataclass(frozen=True)
class Constraint:
    metric: str
    op: str
    value: float
    text: str

    def holds(self, df: pd.DataFrame) -> pd.Series:
        """Per row: does the constraint hold (a NaN metric never does)?"""
        return OPS[self.op](df[self.metric], self.value) & df[self.metric].notna()


def parse_constraint(text: str) -> Constraint:
    """``'ttft_ms<=200'`` as a :class:`Constraint`; anything else is refused with the forms it takes."""
    m = _CONSTRAINT.match(text)
    hint = f"write METRIC OP VALUE, e.g. 'ttft_ms<=200'; METRIC one of {', '.join(CONSTRAINT_METRICS)}"
    if not m:
        raise KbfastError(f"--constraint {text!r}: not a constraint\n  hint: {hint}")
    metric, op, value = m.groups()
    if metric not in CONSTRAINT_METRICS:
        raise KbfastError(f"--constraint {text!r}: no metric {metric!r}\n  hint: "
                          + (closest(metric, CONSTRAINT_METRICS) or hint))
    try:
        v = float(value)
    except ValueError:
        raise KbfastError(f"--constraint {text!r}: {value!r} is not a number\n  hint: {hint}") from None
    return Constraint(metric, op, v, text.strip())


def check_objective(name: str) -> tuple[str, bool]:
    """The objective's column and whether it is maximised."""
    if name not in OBJECTIVES:
        raise not_one_of("--objective", name, OBJECTIVES)
    return OBJECTIVES[name]


def pareto(tokens_per_s: np.ndarray, tpot: np.ndarray) -> np.ndarray:
    """The rows on the front (bool): no other row has at least the throughput and at most the latency, with one
    of them strictly better.  Sorted by latency, then throughput descending, a row is on the front when its
    throughput beats every row before it (ties of both keep the first only)."""
    n = len(tpot)
    order = np.lexsort((-tokens_per_s, tpot))
    keep = np.zeros(n, bool)
    best = -np.inf
    for i in order:
        if tokens_per_s[i] > best:
            keep[i] = True
            best = tokens_per_s[i]
    return keep


def rank(df: pd.DataFrame, objective: str, constraints: list[Constraint]) -> pd.DataFrame:
    """``df`` with ``feasible`` (timed, and every constraint holds), ``front`` (on the Pareto front of the
    feasible) and ``best`` (the feasible row best by ``objective``; the first in candidate order on a tie).  A row
    not timed (``timed`` False: beaten by its bound, kbfast.search.bound) is none of them."""
    column, maximise = check_objective(objective)
    out = df.copy()
    ok = out["error"].isna() if "error" in out else pd.Series(True, index=out.index)
    if "timed" in out:
        ok &= out["timed"].astype(bool)
    for c in constraints:
        ok &= c.holds(out)
    out["feasible"] = ok
    out["front"] = False
    feas = out[ok]
    if len(feas):
        on = pareto(feas["tokens_per_s"].to_numpy(float), feas["tpot_ms"].to_numpy(float))
        out.loc[feas.index[on], "front"] = True
    out["best"] = False
    values = feas[column].dropna()
    if len(values):
        out.loc[values.idxmax() if maximise else values.idxmin(), "best"] = True
    return out


def layout_label(row) -> str:
    """A candidate's layout with its pipeline and data-parallel degrees when above 1, and its expert-parallel
    blocks when given (``tp_pes pp2 ep8``); ``row``: a table row (a Series or a named tuple)."""
    ep = getattr(row, "ep", None)
    return " ".join([row.layout] + [f"{k}{int(getattr(row, k))}" for k in ("pp", "dp") if int(getattr(row, k)) > 1]
                    + ([] if ep is None or pd.isna(ep) else [f"ep{int(ep)}"]))
