"""Branch and bound for ``kbfast search`` (docs/search.md "Evaluation"): candidates that a lower bound proves beaten
are never timed, and the front and the best are those of timing every candidate.

A candidate's step cannot take less than its lower bound ``lo`` on the period
(kbfast.measure.model.step_lower_ns), so at best it reaches TPOT ``lo`` and ``users / lo`` tokens/s.  It is
*beaten* when a feasible candidate already timed has at most that TPOT and at least that throughput, one of them
strictly, and is strictly better by the objective: then it is neither on the front nor the best, whatever its
point.  The search times, per number of users (and knobs), the candidate with the smallest bound first (the
leaders), then every candidate their points do not beat.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from kbfast.search.front import OBJECTIVES

# "strictly better" means by more than this share: a sweep keeps 12 significant digits of each figure, so a
# candidate whose bound is its point exactly is not beaten by its twin's rounding (an equal row ties)
STRICTLY = 1e-9


def leaders(candidates: list[dict], lo_ns: np.ndarray) -> list[int]:
    """The candidates to time first: per number of users and knobs, the smallest finite bound (the first on a
    tie), and every candidate without a bound."""
    best: dict[tuple, int] = {}
    for i, c in enumerate(candidates):
        if np.isnan(lo_ns[i]):
            continue
        k = (c["batch"], tuple(sorted(c["set"].items())))
        if k not in best or lo_ns[i] < lo_ns[best[k]]:
            best[k] = i
    return sorted(set(best.values()) | {i for i in range(len(candidates)) if np.isnan(lo_ns[i])})


def beaten(lo_ns: np.ndarray, users: np.ndarray, sips: np.ndarray, timed: pd.DataFrame,
           objective: str) -> np.ndarray:
    """Per candidate (its bound ``lo_ns`` on the period, its users and SIPs): is it beaten (the module docstring)
    by a row of ``timed``, the feasible candidates timed (``tpot_ms``, ``tokens_per_s``,
    ``tokens_per_s_per_sip``)?  A NaN bound is never beaten."""
    lo = np.asarray(lo_ns, float)
    n = len(lo)
    if n == 0 or timed.empty:
        return np.zeros(n, bool)
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot = (lo * 1e-6)[:, None]
        tok = (np.asarray(users, float) / (lo * 1e-9))[:, None]
        per_sip = tok / np.asarray(sips, float)[:, None]
    T, K, S = (timed[c].to_numpy(float)[None, :] for c in ("tpot_ms", "tokens_per_s", "tokens_per_s_per_sip"))
    up, down = 1 + STRICTLY, 1 - STRICTLY
    dominates = (T <= tpot) & (K >= tok) & ((T < tpot * down) | (K > tok * up))
    column = OBJECTIVES[objective][0]
    better = {"tpot_ms": T < tpot * down, "tokens_per_s": K > tok * up,
              "tokens_per_s_per_sip": S > per_sip * up}[column]
    return np.any(dominates & better, axis=1) & ~np.isnan(lo)
