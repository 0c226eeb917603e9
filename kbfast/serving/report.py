"""What a serving run reports (docs/serving.md "Outputs"): latency percentiles per request, throughput, KV
occupancy, and a figure of the run over time.

* TTFT (time to first token): from a request's arrival to the end of its prefill.
* TPOT (time per output token): from its first token to its last, over its other tokens (requests of more
  than one output token).
* End to end: from arrival to its last token.
* Throughput: output tokens (and requests) served over the span from the first arrival to the last finish.
* KV occupancy: the tokens the running requests hold in the cache (and reserve for their whole output), as a
  share of the capacity, weighted by each step's time.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from kbfast.report.figures import plain_log_axis, pyplot, save_figure
from kbfast.serving.scheduler import Schedule

PERCENTILES = (50, 90, 99)


def _pct(values: np.ndarray) -> dict[str, float]:
    v = values[np.isfinite(values)]
    return {f"p{q}": float(np.percentile(v, q)) if len(v) else float("nan") for q in PERCENTILES}


def latencies(s: Schedule) -> dict[str, np.ndarray]:
    """Per request (NaN where it does not apply): TTFT, TPOT and end to end, ns."""
    r = s.requests
    ttft = s.first_token_ns - r.arrival_ns
    many = r.output > 1
    tpot = np.where(many, (s.finish_ns - s.first_token_ns) / np.maximum(r.output - 1, 1), np.nan)
    return {"ttft_ns": ttft, "tpot_ns": tpot, "e2e_ns": s.finish_ns - r.arrival_ns}


def summary(s: Schedule) -> dict:
    """The run's figures: counts, each latency's percentiles (ns), throughput, and KV occupancy and decode batch
    (time-weighted means and peaks)."""
    lat = latencies(s)
    served = np.isfinite(s.finish_ns)
    steps = s.steps
    took = (steps["end_ns"] - steps["start_ns"]).to_numpy()
    busy = float(took.sum())
    span = float(np.nanmax(s.finish_ns) - s.requests.arrival_ns.min()) if served.any() else 0.0
    dec = (steps["kind"] == "decode").to_numpy()
    held = steps["kv_tokens"].to_numpy() / s.capacity_tokens
    reserved = steps["reserved_tokens"].to_numpy() / s.capacity_tokens
    return {
        "requests": len(s.requests), "served": int(served.sum()), "refused": int(s.refused.sum()),
        "steps": len(steps), "prefill_steps": int((~dec).sum()), "decode_steps": int(dec.sum()),
        "span_ns": span, "busy_share": busy / span if span > 0 else float("nan"),
        **{f"ttft_{k}_ns": v for k, v in _pct(lat["ttft_ns"]).items()},
        **{f"tpot_{k}_ns": v for k, v in _pct(lat["tpot_ns"]).items()},
        **{f"e2e_{k}_ns": v for k, v in _pct(lat["e2e_ns"]).items()},
        "output_tokens_per_s": float(s.requests.output[served].sum()) / (span * 1e-9) if span > 0 else float("nan"),
        "requests_per_s": float(served.sum()) / (span * 1e-9) if span > 0 else float("nan"),
        "decode_batch_mean": float((steps["batch"].to_numpy()[dec] * took[dec]).sum() / took[dec].sum())
        if dec.any() else float("nan"),
        "decode_batch_max": int(steps["batch"].to_numpy()[dec].max()) if dec.any() else 0,
        "kv_held_mean": float((held * took).sum() / busy) if busy > 0 else 0.0,
        "kv_held_max": float(held.max()) if len(held) else 0.0,
        "kv_reserved_max": float(reserved.max()) if len(reserved) else 0.0,
        "kv_capacity_tokens": s.capacity_tokens, "max_batch": s.max_batch,
    }


def _busy_segments(steps, y: np.ndarray, t0: float) -> tuple[np.ndarray, np.ndarray]:
    """A step's value from its start to its end (s since ``t0``), steps joined where one starts as the last
    ends and broken (NaN) across the time between them: no line is drawn where no step ran."""
    start = (steps["start_ns"].to_numpy() - t0) * 1e-9
    end = (steps["end_ns"].to_numpy() - t0) * 1e-9
    gap = np.append(start[1:] > end[:-1], False)         # idle after this step
    x = np.stack([start, end, np.where(gap, end, np.nan)], axis=1).ravel()
    v = np.stack([y, y, np.where(gap, np.nan, y)], axis=1).astype(float).ravel()
    keep = ~np.isnan(x)
    return x[keep], v[keep]


def plot(s: Schedule, out: Path, title: str) -> Path:
    """Three panels over the run's time (s): KV occupancy (held and reserved, % of capacity), the users of each
    decode step, and each request's TTFT and end-to-end latency at its arrival."""
    from matplotlib.ticker import MaxNLocator

    steps = s.steps
    t0 = float(s.requests.arrival_ns.min()) if len(s.requests) else 0.0
    fig, ax = pyplot().subplots(3, 1, figsize=(8, 7.5), sharex=True)
    for col, label in (("kv_tokens", "held"), ("reserved_tokens", "reserved (whole outputs)")):
        ax[0].plot(*_busy_segments(steps, steps[col].to_numpy() / s.capacity_tokens * 100, t0), label=label, lw=1)
    ax[0].set_ylabel("KV cache (% of capacity)")
    ax[0].set_ylim(bottom=0)
    ax[0].legend(loc="best", fontsize=8)
    dec = steps[steps["kind"] == "decode"]
    ax[1].plot(*_busy_segments(dec, dec["batch"].to_numpy(), t0), lw=1)
    ax[1].set_ylabel("decode batch (users)")
    ax[1].set_ylim(0, s.max_batch + 1)
    ax[1].yaxis.set_major_locator(MaxNLocator(integer=True))
    lat = latencies(s)
    at = (s.requests.arrival_ns - t0) * 1e-9
    ax[2].scatter(at, lat["e2e_ns"] * 1e-6, s=6, label="end to end")
    ax[2].scatter(at, lat["ttft_ns"] * 1e-6, s=6, label="time to first token")
    ax[2].set_yscale("log")
    plain_log_axis(ax[2].yaxis, np.concatenate([lat["e2e_ns"], lat["ttft_ns"]]) * 1e-6)
    ax[2].set_ylabel("latency (ms)")
    ax[2].set_xlabel("time since the first arrival (s); latency at the request's arrival")
    ax[2].legend(loc="best", fontsize=8)
    ax[0].set_title(title, fontsize=10)
    return save_figure(fig, out)
