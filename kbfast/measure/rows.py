"""The figures every command reports, computed once: relative error, bounds check and contention (design §7,
parity contract); pure arithmetic on a row's numbers, so the report may use it (the fast-vs-exact comparison
of one Program is kbfast.measure.compare).  Latency from launch and makespan are methods of
the evaluators' common result type, :class:`kbfast.sim.result.Result`.

* relative error = (fast - exact) / exact, 0 when exact is 0;
* in bounds = lower - tol <= exact <= upper + tol with tol = 1e-9 x max(|exact|, 1 ns);
* bound ratio = max(upper / point, point / lower): how far the bounds lie from the point estimate; a bound
  more than ``LOOSE_BOUND`` (4) times away is *loose*, and every output that prints it says so
  (docs/fast_path.md §4, "How tight the bounds are");
* contention = the fast point estimate minus its contention-free lower bound (every flow at its isolated
  latency, each agent with its PE's channels to itself, no PC read/write switch history): the time that
  sharing links, node workers, DMA channels and pseudo-channels costs.  A point is *contended* when that
  exceeds 1e-6 of its latency (docs/bottlenecks.md).
"""

from __future__ import annotations

import numpy as np



def rel_error(value: float, reference: float) -> float:
    """(value - reference) / reference; 0 when the reference is 0."""
    return (value - reference) / reference if reference else 0.0


def in_bounds(lower: float, value: float, upper: float) -> bool | None:
    """Whether ``value`` lies in [lower, upper] up to 1e-9 relative; None when the bounds are unknown (NaN)."""
    if not (np.isfinite(lower) and np.isfinite(upper)):
        return None
    tol = 1e-9 * max(abs(value), 1.0)
    return bool(lower - tol <= value <= upper + tol)


LOOSE_BOUND = 4.0


def bound_ratio(lower: float, value: float, upper: float) -> float:
    """max(upper / value, value / lower): 1 when both bounds equal the point; NaN when a bound is unknown or
    the point is not positive."""
    if not (np.isfinite(lower) and np.isfinite(upper) and value > 0):
        return float("nan")
    return max(upper / value, value / lower if lower > 0 else float("inf"))


def tightness(lower: float, value: float, upper: float) -> dict[str, float | bool]:
    """``bound_ratio`` and ``bounds_loose`` (the ratio above ``LOOSE_BOUND``) of a point and its bounds; empty
    when the bounds are unknown."""
    ratio = bound_ratio(lower, value, upper)
    return {} if np.isnan(ratio) else {"bound_ratio": ratio, "bounds_loose": bool(ratio > LOOSE_BOUND)}


CONTENTION_REL = 1e-6


def contention_ns(value: float, lower: float) -> float:
    """The time sharing costs: the point estimate minus the contention-free lower bound (NaN if unknown)."""
    return max(value - lower, 0.0) if np.isfinite(lower) else float("nan")


def contended(value: float, lower: float) -> bool | None:
    """Whether sharing cost more than 1e-6 of the latency; None when the lower bound is unknown."""
    if not np.isfinite(lower):
        return None
    return bool(value - lower > CONTENTION_REL * max(abs(value), 1.0))


BUSY_BOUND = 0.5        # a resource busy at least half the span bounds the result (it is bandwidth-bound)
# a model step's critical-path categories (docs/models.md "Breakdown")
STEP_CATEGORIES = ("gemm_compute", "hbm_stream", "math", "collective", "other")
# the step categories whose work more than one sensitivity class serves (kbfast.measure.sensitivity), with the
# path's name and those classes, doubled together: two classes that bind in turn (a tile stream held by the PCs,
# then by the PE link once the PCs are faster) each gain little alone, and only the path shows it
PATHS: dict[str, tuple[str, tuple[str, ...]]] = {
    "gemm_compute": ("GEMM compute path", ("GEMM MAC rate", "TCM channels")),
    "hbm_stream": ("HBM streaming path", ("HBM pseudo-channels", "PE link")),
    "collective": ("collective path", ("IPCQ slots", "PE link", "router mesh", "UCIe connection", "inter-SIP path")),
}
