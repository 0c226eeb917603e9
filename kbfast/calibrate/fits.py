"""Fitting free parameters to the latency rows by least squares (design §12; kbfast.calibrate)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from kbfast.calibrate.rows import LATENCY_ROWS, ROWS, LatencyRow
from kbfast.calibrate.systems import Bench, derive, reference_table
from kbfast.config.loader import check_key_path, lookup
from kbfast.config.schema import SystemSpec
from kbfast.errors import ConfigError, KbfastError


# key -> (lo, hi, finite-difference step in the key's unit).  Bandwidths enter as n / bw and lengths as
# mm * ns_per_mm, so their responses are smooth.  Keys under ``cube.`` move the floor plan: router columns,
# node positions and so routes change in steps, and with ns_per_mm = 0 geometry reaches latency only through
# those route changes.  Their response is piecewise constant; the coarse step samples it.
FIT_DEFAULTS: dict[str, tuple[float, float, float]] = {
    "fabric.ns_per_mm": (0.0, 5.0, 0.01),
    "link.io_conn.bw_gbs": (32.0, 1024.0, 0.1),
    "link.io_to_cube.bw_gbs": (32.0, 1024.0, 0.1),
    "link.ucie_internal.bw_gbs": (32.0, 2048.0, 0.1),
    "link.pcie_ep_noc.bw_gbs": (32.0, 1024.0, 0.1),
    "link.pcie.bw_gbs": (32.0, 4096.0, 0.1),
    "link.io_noc_cpu.bw_gbs": (32.0, 1024.0, 0.1),
    "cube.geometry.w_mm": (10.0, 20.0, 0.5),
    "cube.pe_layout.pe_pitch_mm": (2.0, 3.45, 0.1),   # six router columns on the 16 mm cube
}
FIT_DIGITS = 6                   # fitted values are kept to 6 significant digits (the residuals are of those)
NO_SENSITIVITY = 1e-12           # a Jacobian column below this (relative error per unit of u) moves no row


@dataclass(frozen=True)
class FitParam:
    """A free parameter: dotted key, bounds, finite-difference step (key's unit), start value."""

    key: str
    lo: float
    hi: float
    step: float
    start: float

    @property
    def smooth(self) -> bool:
        """False for floor-plan keys (``cube.*``), whose response is piecewise constant."""
        return not self.key.startswith("cube.")

    @property
    def span(self) -> float:
        """The width of the parameter's bounds, hi - lo."""
        return self.hi - self.lo


def parse_fit(items: list[str], spec: SystemSpec) -> list[FitParam]:
    """``KEY`` or ``KEY=LO:HI`` -> FitParams; bad keys and bounds raise ``ConfigError`` naming the key."""
    params: list[FitParam] = []
    for item in items:
        key, _, bounds = item.partition("=")
        key = key.strip()
        check_key_path("--fit", key)
        if key in [p.key for p in params]:
            raise ConfigError("--fit", key, item, "the key is given twice")
        try:
            value = lookup(spec, key)
        except KeyError:
            raise ConfigError("--fit", key, item, "not a parameter of the validated system (a key inside a "
                              "mapping such as routing.weight_mm cannot be fitted)",
                              "fit a bandwidth, length or time, e.g. fabric.ns_per_mm") from None
        if not isinstance(value, float):
            raise ConfigError("--fit", key, value, "not a continuous parameter (only real-valued keys are fitted)",
                              "fit a bandwidth, length or time")
        if bounds:
            try:
                lo, hi = (float(x) for x in bounds.split(":"))
            except ValueError:
                raise ConfigError("--fit", key, bounds, "bounds must be LO:HI", f"e.g. --fit {key}=1:2") from None
        elif key in FIT_DEFAULTS:
            lo, hi, _ = FIT_DEFAULTS[key]
        else:
            raise ConfigError("--fit", key, item, "no default bounds for this key",
                              f"give them as {key}=LO:HI; keys with default bounds: {', '.join(FIT_DEFAULTS)}")
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
            swapped = f"{hi:g}:{lo:g}" if math.isfinite(lo + hi) and lo > hi else "1:2"
            raise ConfigError("--fit", key, bounds, "bounds need finite LO < HI", f"e.g. --fit {key}={swapped}")
        for end in (lo, hi):   # both ends must give a valid system
            derive(spec, {key: end}, label="--fit")
        default_step = (hi - lo) / (20 if key.startswith("cube.") else 1000)   # coarse for the floor plan
        step = min(FIT_DEFAULTS[key][2] if key in FIT_DEFAULTS else default_step, (hi - lo) / 2)
        params.append(FitParam(key, lo, hi, step, min(max(float(value), lo), hi)))
    if not params:
        raise KbfastError("--fit needs at least one key")
    return params


@dataclass
class FitResult:
    """Fitted values, residuals (relative errors per row) before and after, and sensitivities.

    ``sensitivity[key][case]`` = d err / d(dp / scale), scale = :func:`sensitivity_scale` (|p| at the
    solution, the bound span when p = 0), from a bounded forward difference with the key's step; None for a
    key with no sensitivity.  ``fitted`` lists the keys that moved at least one row and so were fitted.
    """

    params: list[FitParam]
    values: dict[str, float]
    fitted: list[str]
    cases: list[str]
    reference: dict[str, float]
    before: dict[str, float]
    after: dict[str, float]
    sensitivity: dict[str, dict[str, float] | None]
    nfev: int
    message: str

    @property
    def fitted_values(self) -> dict[str, float]:
        """The values of the parameters that were fitted (those that move a row)."""
        return {k: self.values[k] for k in self.fitted}


def sensitivity_scale(p: FitParam, value: float) -> float:
    """What a relative change of ``p`` is relative to: its value, or its bound span when the value is 0."""
    return abs(value) if abs(value) > 1e-9 * p.span else p.span


def fit(spec: SystemSpec, params: list[FitParam], reference: dict[str, float] | None = None,
        cases: Iterable[str] = LATENCY_ROWS) -> FitResult:
    """Least squares on ``err_i = latency_i(p) / reference_i - 1`` over the latency rows, fast path.

    Each key is scaled to ``u = (p - lo) / (hi - lo)`` in [0, 1]; ``scipy.optimize.least_squares``
    (trf, bounds [0, 1]) uses a Jacobian of bounded forward differences with the key's step (backward at the
    upper bound).  A key whose column is zero at the start moves no row: it is reported with no sensitivity
    and keeps its value.  The fitted values are kept to ``FIT_DIGITS`` significant digits, and the residuals
    after the fit are those of the kept values.  The fast path equals the exact replay on these isolated
    transfers (parity P1).
    """
    from scipy.optimize import least_squares

    cases = list(cases)
    ref = reference_table()
    target = reference or {c: float(ref.loc[c, "value"]) for c in cases}
    rows = [ROWS[c] for c in cases]
    if not all(isinstance(r, LatencyRow) for r in rows):
        raise KbfastError(f"fit: only latency rows can be fitted ({', '.join(LATENCY_ROWS)})")
    lo = np.array([p.lo for p in params])
    span = np.array([p.span for p in params])
    start = np.array([p.start for p in params])
    u0 = (start - lo) / span
    memo: dict[tuple, np.ndarray] = {}

    def values_at(u: np.ndarray) -> np.ndarray:
        """p = lo + u (hi - lo); exactly the start value where u is the start, exactly a bound at 0 and 1
        (trf keeps its iterates strictly inside the bounds)."""
        u = np.where(u < 1e-9, 0.0, np.where(u > 1 - 1e-9, 1.0, u))
        return np.where(u == u0, start, lo + u * span)

    def residuals(u: np.ndarray) -> np.ndarray:
        return residuals_at(values_at(u))

    def residuals_at(values: np.ndarray) -> np.ndarray:
        key = tuple(float(v) for v in values)
        if key not in memo:
            bench = Bench(derive(spec, {p.key: v for p, v in zip(params, key)}, label="--fit"))
            memo[key] = np.array([r.measure(bench, "fast", ref, target[r.case]).err for r in rows])
        return memo[key]

    def jacobian(u: np.ndarray, cols: list[int]) -> np.ndarray:
        base = residuals(u)
        jac = np.zeros((len(rows), len(cols)))
        for j, col in enumerate(cols):
            h = params[col].step / span[col]
            h = h if u[col] + h <= 1.0 else -h
            up = u.copy()
            up[col] += h
            jac[:, j] = (residuals(up) - base) / h
        return jac

    before = residuals(u0)
    moving = np.abs(jacobian(u0, list(range(len(params))))).max(axis=0) > NO_SENSITIVITY
    cols = [i for i in range(len(params)) if moving[i]]
    u = u0.copy()
    nfev, message = 0, "no parameter moves any row: nothing fitted"
    if cols:
        def sub(x: np.ndarray) -> np.ndarray:
            full = u0.copy()
            full[cols] = x
            return full

        sol = least_squares(lambda x: residuals(sub(x)), u0[cols], jac=lambda x: jacobian(sub(x), cols),
                            bounds=(0.0, 1.0), method="trf", x_scale=1.0, xtol=1e-12, ftol=1e-12, gtol=1e-12,
                            max_nfev=200)
        u, nfev, message = sub(sol.x), int(sol.nfev), str(sol.message)
    fitted = np.array([float(f"{v:.{FIT_DIGITS}g}") if moving[i] else v for i, v in enumerate(values_at(u))])
    after = residuals_at(fitted)
    values = dict(zip([p.key for p in params], map(float, fitted)))
    jac = jacobian(u, list(range(len(params))))
    sensitivity: dict[str, dict[str, float] | None] = {}
    for i, p in enumerate(params):
        col = jac[:, i] / span[i] * sensitivity_scale(p, values[p.key])
        sensitivity[p.key] = {c: float(s) for c, s in zip(cases, col)} if moving[i] or np.any(col) else None
    return FitResult(params, values, [params[i].key for i in cols], cases, dict(target),
                     dict(zip(cases, map(float, before))), dict(zip(cases, map(float, after))), sensitivity,
                     nfev, message)
