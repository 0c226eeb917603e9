"""The probe table and kernbench's invariants on it: pure arithmetic on measured rows, so that commands may
present them (kbfast probe, kbfast calibrate).

Invariants (spec_pe §10, spec_memory §10.1): latency grows with distance
(SAME_CUBE local < remote best < remote worst < REMOTE_CUBE best < worst; probe
local < same half < cross half; H2D and D2H strictly increase with hops);
D2H >= H2D at every hop; util_aggregate <= 100 %; a single issuer has
util_single == util_aggregate; every PE of a launch starts at the barrier.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from kbfast.config.units import format_size
from kbfast.measure.metrics import BREAKDOWN
from kbfast.measure.rows import bound_ratio, rel_error

COLUMNS = ["case", "nbytes", "n_issuers", "latency_ns", "makespan_ns", "effective_bw_gbps", "util_single",
           "util_aggregate"]


def breakdown_column(category: str) -> str:
    """Column of a kernbench breakdown category in the probe table, e.g. ``bd_noc_mesh_ns``."""
    return f"bd_{category}_ns"


def probe_frame(rows: list[dict], exact: list[dict] | None = None) -> pd.DataFrame:
    """The probe table: one row per measured (case, size), from each measurement's figures
    (kbfast.measure.probe.evaluate_case, a probe point's ``details``), the breakdown columns always present.
    ``exact``: the same points' exact figures, which add ``exact_latency_ns``, ``exact_makespan_ns`` and the
    makespan's ``rel_error``."""
    if exact is not None:
        rows = [{**r, "exact_latency_ns": e["latency_ns"], "exact_makespan_ns": e["makespan_ns"],
                 "rel_error": rel_error(r["makespan_ns"], e["makespan_ns"])} for r, e in zip(rows, exact)]
    df = pd.DataFrame(rows, columns=None if rows else COLUMNS)
    for col in map(breakdown_column, BREAKDOWN):
        if col not in df:
            df[col] = np.nan
    if "makespan_lo_ns" in df:     # the fast path's: how far its bounds lie from its points (the farther pair)
        df["bound_ratio"] = [np.fmax(bound_ratio(r.latency_lo_ns, r.latency_ns, r.latency_hi_ns),
                                     bound_ratio(r.makespan_lo_ns, r.makespan_ns, r.makespan_hi_ns))
                             for r in df.itertuples()]
    return df[COLUMNS + [c for c in df.columns if c not in COLUMNS]]


@dataclass(frozen=True)
class Check:
    """One invariant checked on a probe table: its name, whether it holds, and the figures behind it."""

    name: str
    passed: bool
    detail: str


def _chain(df: pd.DataFrame, names: list[str], strict: bool = True) -> tuple[bool, str] | None:
    got = df.set_index("case")["latency_ns"]
    if not all(n in got.index for n in names):
        return None
    vals = [float(got[n]) for n in names]
    ok = all((a < b) if strict else (a <= b) for a, b in zip(vals, vals[1:]))
    return ok, " < ".join(f"{n}={v:,.1f}" for n, v in zip(names, vals)) + " ns"


def check_invariants(df: pd.DataFrame) -> list[Check]:
    """kernbench's probe invariants, per probe size."""
    checks: list[Check] = []
    for nbytes, sub in df.groupby("nbytes", sort=True):
        tag = f"at {format_size(nbytes)}"
        for label, names in (
            ("distance order", ["SAME_CUBE_PE_LOCAL", "SAME_CUBE_PE_REMOTE_BEST", "SAME_CUBE_PE_REMOTE_WORST",
                                "REMOTE_CUBE_PE_REMOTE_BEST", "REMOTE_CUBE_PE_REMOTE_WORST"]),
            ("local < same half < cross half", ["SAME_CUBE_PE_LOCAL", "PROBE_PE_SAME_HALF", "PROBE_PE_CROSS_HALF"]),
        ):
            res = _chain(sub, names)
            if res:
                checks.append(Check(f"{label} {tag}", *res))
        for kind in ("H2D", "D2H"):
            names = sorted((c for c in sub["case"] if c.startswith(f"{kind}_CUBE")), key=lambda c: int(c[8:]))
            res = _chain(sub, names) if len(names) > 1 else None
            if res:
                checks.append(Check(f"{kind} grows with hops {tag}", *res))
        lat = sub.set_index("case")["latency_ns"]
        for c in sub["case"]:
            if c.startswith("H2D_CUBE") and f"D2H{c[3:]}" in lat.index:
                d = f"D2H{c[3:]}"
                checks.append(Check(f"{d} >= {c} {tag}", bool(lat[d] >= lat[c]),
                                    f"D2H {lat[d]:,.1f} ns, H2D {lat[c]:,.1f} ns"))
        bad = sub[sub["util_aggregate"] > 1.0 + 1e-9]
        checks.append(Check(f"util_aggregate <= 100% {tag}", bad.empty,
                            "all cases" if bad.empty else ", ".join(bad["case"])))
        single = sub[(sub["n_issuers"] == 1) & (sub["util_aggregate"] > 0)]
        diff = (single["util_single"] - single["util_aggregate"]).abs() > 1e-9
        if len(single):        # a check with no case to check is no pass
            checks.append(Check(f"single issuer util_single == util_aggregate {tag}", not diff.any(),
                                f"all {len(single)} single-issuer cases" if not diff.any()
                                else ", ".join(single[diff]["case"])))
        if "start_spread_ns" in sub and sub["start_spread_ns"].notna().any():
            spread = float(sub["start_spread_ns"].max())
            slack = float(sub["barrier_slack_ns"].min())
            checks.append(Check(f"launch: every PE starts at the barrier {tag}", spread == 0.0 and slack >= 0.0,
                                f"start spread {spread} ns; earliest start minus latest command arrival {slack} ns"))
    return checks
