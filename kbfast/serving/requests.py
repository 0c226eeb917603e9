"""The requests of a serving run: Poisson arrivals with prompt and output lengths drawn from distributions,
or a trace file (docs/serving.md "Requests").

A length distribution is written as text (``--prompt-len``, ``--output-len``):

==========================  ==============================================================================
``512``                     every request 512 tokens
``uniform:LO:HI``           integers from LO to HI, both included, equally likely
``normal:MEAN:STD``         rounded to an integer
``lognormal:MEDIAN:SIGMA``  ``MEDIAN x exp(SIGMA x z)`` rounded, z standard normal (long-tailed lengths,
                            as measured chat traces are)
==========================  ==============================================================================

A length is 1 to ``MOST_TOKENS`` tokens: a normal or lognormal draw outside is drawn again, and a centre, a
bound or a spread that would put most draws outside is refused, as is such a length in a trace.

Every draw comes from one ``numpy.random.Generator`` seeded by ``--seed``: the same inputs give the same
requests, bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from kbfast.errors import ConfigError, KbfastError

DISTRIBUTIONS = {"uniform": "uniform:LO:HI", "normal": "normal:MEAN:STD", "lognormal": "lognormal:MEDIAN:SIGMA"}
TRACE_COLUMNS = ("arrival_s", "prompt_len", "output_len")
MOST_TOKENS = 10_000_000        # a prompt's or an output's tokens at most
MOST_SIGMA = 10.0               # a lognormal's SIGMA at most
MOST_ARRIVALS = 1_000_000        # expected Poisson arrivals of a run at most (its loop runs about 10^4 steps/s)


@dataclass(frozen=True)
class Lengths:
    """A distribution of token counts (module docstring): its kind and parameters, and the text it came from."""

    kind: str
    params: tuple[float, ...]
    text: str

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` lengths, each from 1 to ``MOST_TOKENS`` (int64)."""
        if self.kind == "const":
            return np.full(n, int(self.params[0]), np.int64)
        if self.kind == "uniform":
            lo, hi = (int(p) for p in self.params)
            return rng.integers(lo, hi + 1, n).astype(np.int64)
        out = np.zeros(n, np.int64)
        todo = np.arange(n)
        while len(todo):                         # draw again what rounds below 1 or above MOST_TOKENS
            z = rng.standard_normal(len(todo))
            a, b = self.params
            x = np.rint(a + b * z) if self.kind == "normal" else np.rint(a * np.exp(b * z))
            x = np.where((x >= 1) & (x <= MOST_TOKENS), x, 0)
            out[todo] = x.astype(np.int64)
            todo = todo[out[todo] < 1]
        return out


def parse_lengths(text: str, flag: str) -> Lengths:
    """A :class:`Lengths` from ``text`` (module docstring); ``flag`` names where it came from in errors."""
    parts = str(text).strip().split(":")
    hint = (f"write a whole number of tokens (1 to {MOST_TOKENS:,}) or one of "
            f"{', '.join(DISTRIBUTIONS.values())}")
    try:
        if len(parts) == 1:
            n = int(parts[0])
            if not 1 <= n <= MOST_TOKENS:
                raise ValueError
            return Lengths("const", (n,), text)
        kind, values = parts[0], [float(p) for p in parts[1:]]
    except ValueError:
        raise KbfastError(f"{flag} {text!r}: not a length distribution\n  hint: {hint}") from None
    if kind not in DISTRIBUTIONS or len(values) != 2:
        raise KbfastError(f"{flag} {text!r}: not a length distribution\n  hint: {hint}")
    a, b = values
    if kind == "uniform" and not (1 <= a <= b <= MOST_TOKENS and a == int(a) and b == int(b)):
        raise KbfastError(f"{flag} {text!r}: uniform takes whole numbers 1 <= LO <= HI <= {MOST_TOKENS:,}\n"
                          "  hint: uniform:128:1024")
    spread = MOST_TOKENS if kind == "normal" else MOST_SIGMA
    if kind in ("normal", "lognormal") and not (1 <= a <= MOST_TOKENS and 0 <= b <= spread):
        raise KbfastError(f"{flag} {text!r}: {kind} takes a centre of 1 to {MOST_TOKENS:,} and a spread of 0 "
                          f"to {spread:,g}\n  hint: {DISTRIBUTIONS[kind]}, e.g. "
                          f"{kind}:512:{128 if kind == 'normal' else 0.5}")
    return Lengths(kind, (a, b), text)


@dataclass(frozen=True)
class Requests:
    """Requests in arrival order: arrival (ns from the run's start), prompt and output tokens."""

    arrival_ns: np.ndarray       # float64, non-decreasing
    prompt: np.ndarray           # int64, at least 1
    output: np.ndarray           # int64, at least 1: the first comes from the prefill

    def __len__(self) -> int:
        return len(self.arrival_ns)


def poisson(rate_per_s: float, duration_s: float, prompt: Lengths, output: Lengths, seed: int) -> Requests:
    """Arrivals of a Poisson process of ``rate_per_s`` over ``duration_s`` (exponential gaps), each with a
    prompt and an output length drawn from ``prompt`` and ``output``."""
    if not rate_per_s > 0:
        raise KbfastError(f"--rate {rate_per_s}: requests per second must be above 0")
    if not duration_s > 0:
        raise KbfastError(f"--duration {duration_s}: seconds of arrivals must be above 0")
    if seed < 0:
        raise KbfastError(f"--seed {seed}: a seed is a whole number of at least 0")
    expected = rate_per_s * duration_s
    if not expected <= MOST_ARRIVALS:
        raise KbfastError(f"--rate {rate_per_s:g} over --duration {duration_s:g} s: {expected:.3g} arrivals expected, "
                          f"more than a run takes ({MOST_ARRIVALS:,})\n  hint: lower --rate or --duration")
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1.0 / rate_per_s, int(expected + 10 * np.sqrt(expected) + 10))
    at = np.cumsum(gaps)
    at = at[at < duration_s]
    n = len(at)
    return Requests(at * 1e9, prompt.draw(rng, n), output.draw(rng, n))


def read_trace(path: Path) -> Requests:
    """Requests from a CSV or Parquet file with columns ``arrival_s``, ``prompt_len`` and ``output_len`` (one
    row per request, in any order: they are sorted by arrival, ties kept in file order)."""
    path = Path(path)
    if not path.is_file():
        raise KbfastError(f"--trace {path}: no such file\n  hint: a CSV or Parquet file with columns "
                          f"{', '.join(TRACE_COLUMNS)}")
    try:
        df = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)
    except Exception as err:  # noqa: BLE001  (pandas raises many kinds for an unreadable file)
        raise KbfastError(f"--trace {path}: cannot be read as {'Parquet' if path.suffix == '.parquet' else 'CSV'} "
                          f"({type(err).__name__}: {err})") from None
    missing = [c for c in TRACE_COLUMNS if c not in df.columns]
    if missing:
        raise ConfigError(str(path), missing[0], None, f"the trace has no column {missing[0]!r} (it has "
                          f"{', '.join(map(str, df.columns)) or 'none'})",
                          f"name its columns {', '.join(TRACE_COLUMNS)}")
    if df.empty:
        raise ConfigError(str(path), "rows", None, "the trace has no requests", "add one row per request")
    for col, low, high in zip(TRACE_COLUMNS, (0.0, 1, 1), (np.inf, MOST_TOKENS, MOST_TOKENS)):
        values = pd.to_numeric(df[col], errors="coerce")
        bad = ~((values >= low) & (values < high if col == "arrival_s" else values <= high))    # NaN too
        if col != "arrival_s":
            bad |= values != np.floor(values)
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0])
            need = "a finite time of at least 0 s" if col == "arrival_s" else \
                f"a whole number of tokens, 1 to {MOST_TOKENS:,}"
            raise ConfigError(str(path), f"{col} (row {row + 1})", df[col].iloc[row], f"must be {need}",
                              "fix or drop that row")
        df[col] = values
    df = df.sort_values("arrival_s", kind="stable")
    return Requests(df["arrival_s"].to_numpy(np.float64) * 1e9, df["prompt_len"].to_numpy(np.int64),
                    df["output_len"].to_numpy(np.int64))
