"""What model runs report (docs/models.md): ``kbfast run model`` and model sweeps.

:func:`model_report` turns a :class:`~kbfast.measure.model.StepResult` into plain data (JSON and CSV write
it as is, full precision); :func:`print_model_report` prints it for people, at 80 columns.  A model sweep's
summary (:func:`model_summary`) and plots (:func:`model_plots`): latency and tokens/s against SIP count,
and the critical path stacked by category per layout.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
from rich.console import Console

from kbfast.config.budget import fmt_bytes
from kbfast.ir import BUFFER_KINDS
from kbfast.report.tables import fit, narrow_table
from kbfast.report.figures import pyplot, save_figure
from kbfast.report.formats import (clean, column_unit, count, duration, in_unit, num, pct, percent, plural, time_unit,
                                   with_unit)
from kbfast.measure.rows import STEP_CATEGORIES, rel_error, tightness
from kbfast.topology.builder import Tables
from kbfast.workloads.collectives.in_model import ALGORITHMS
from kbfast.workloads.commands import COUNTED

if TYPE_CHECKING:                       # a type only: the report never runs a step
    from kbfast.measure.model import StepResult

SHORT = {"ipcq_send": "send", "ipcq_recv": "recv", "dma_read": "read", "dma_write": "write"}
CATEGORY_NAMES = {"gemm_compute": "GEMM compute", "hbm_stream": "HBM streaming", "math": "MATH",
                  "collective": "collective and fabric wait", "other": "other (idle)"}


def model_report(step: StepResult, t: Tables) -> dict:
    """Inputs, one row per piece (latency per run, repeat, per-mode latencies and error, op counts), the
    step's totals and its critical path by category."""
    s, m = step.shape, step.model
    par = step.parallel
    inputs = {"model": m.name, "kind": m.kind, "layout": par.label(step.layout), "topology": t.spec.name,
              "sips": t.layout.n_sips, "working_pes": step.working_pes(), "mode": step.mode,
              "modes": list(step.results)}
    if s is not None:
        inputs.update(phase=s.phase, batch=s.batch, seq=s.seq, kv_len=s.kv_len, layers=step.layers)
    pieces = []
    for i, p in enumerate(step.pieces):
        row = {"piece": p.name, "repeat": step.repeat(p)}
        if p.allreduce:
            row["collective"] = p.collective
        for mode, results in step.results.items():
            r = results[i]
            row[f"{mode}_latency_ns"] = r.latency_ns
            if mode == "fast":
                row.update(fast_lo_ns=r.lo_ns, fast_hi_ns=r.hi_ns,
                           **{f"fast_{k}": v for k, v in tightness(r.lo_ns, r.latency_ns, r.hi_ns).items()})
            row[f"{mode}_wall_s"] = r.wall_s
            row[f"{mode}_method"] = r.method
        if len(step.results) == 2:
            row["rel_error"] = rel_error(row["fast_latency_ns"], row["exact_latency_ns"])
        row.update({f"count[{k}]": v for k, v in step.results[step.mode][i].counts.items()})
        row["macs"] = p.macs
        pieces.append(row)
    out = {"inputs": inputs, "pieces": pieces,
           "stage_end_ns": {p.name: r.phase_ns for p, r in zip(step.pieces, step.results[step.mode])}}
    if step.choices:
        out["collective_choice"] = [{"piece": name, **c} for name, c in step.choices.items()]
    out["memory"] = {p.name: dict(p.memory, **r.prefetch, **ipcq_slot_bytes(r.program))
                     for p, r in zip(step.pieces, step.results[step.mode]) if p.memory}
    if m.kind == "attention_panels":
        return out
    lat = step.latency_ns()
    total = {"latency_ns": lat, "macs": step.macs(), "mac_util": step.mac_util(t)}
    if par.pp > 1:
        total["period_ns"] = step.period_ns()
    if s is not None and s.phase == "decode":
        total["tokens_per_s"] = s.batch / (step.period_ns() * 1e-9)
    elif s is not None:
        total["time_to_first_token_ns"] = lat
    if len(step.results) == 2:
        total["exact_latency_ns"] = step.latency_ns("exact")
        total["rel_error"] = rel_error(lat, total["exact_latency_ns"])
        if par.pp > 1:
            total["exact_period_ns"] = step.period_ns("exact")
            total["period_rel_error"] = rel_error(total["period_ns"], total["exact_period_ns"])
    out["step"] = total
    if par.pp > 1:
        timing = step.pipeline[step.mode]
        out["pipeline"] = {"stages": par.pp, "replicas": par.dp, "micro_batches": par.micro_batches,
                           "stage_is": par.group_text(), "method": step.pipeline_method(),
                           "composed_makespan_ns": timing.makespan_ns, "composed_period_ns": timing.period_ns,
                           "stage_rows": timing.stages, "on_path_ns": timing.on_path}
    out["critical_path_ns"] = step.breakdown()
    out["roofline"] = step.roofline()
    return out


def model_csv(rep: dict, mode: str) -> pd.DataFrame:
    """The CSV of ``run model``: a row per piece (:func:`model_report`'s ``pieces``), then, when the step has a
    total, a ``step`` row with its latency (as ``<mode>_latency_ns``, the column the pieces give theirs in),
    period, MACs, utilisation and tokens/s or time to first token; floats as :func:`clean` writes them."""
    rows = list(rep["pieces"])
    if "step" in rep:
        own = {"latency_ns": f"{mode}_latency_ns", "period_ns": f"{mode}_period_ns"}
        rows.append({"piece": "step", "repeat": 1, **{own.get(k, k): v for k, v in rep["step"].items()}})
    return pd.DataFrame([clean(r) for r in rows]).convert_dtypes()   # counts stay whole beside the step's blanks


def print_model_report(rep: dict, console: Console) -> None:
    """The report as narrow tables (each fits the terminal: :func:`~kbfast.report.tables.fit`), times scaled
    to their values: one unit per column, named in its header."""
    inp = rep["inputs"]
    what = ", ".join(f"{k} {inp[k]}" for k in ("phase", "batch", "seq", "kv_len", "layers") if k in inp)
    layout = f", layout {inp['layout']}" if inp["kind"] != "attention_panels" else ""
    console.print(f"[bold]{inp['model']}[/bold] on {inp['topology']} ({inp['sips']} SIPs, {inp['working_pes']} "
                  f"working PEs){layout}, " + (f"{inp['mode']} mode" if len(inp["modes"]) == 1 else
                  f"{' and '.join(inp['modes'])} modes (the step from {inp['mode']})")
                  + (f"\n{what}" if what else ""), highlight=False)
    modes = [k[:-len("_latency_ns")] for k in rep["pieces"][0] if k.endswith("_latency_ns")]
    unit = column_unit([row[f"{mode}_latency_ns"] for row in rep["pieces"] for mode in modes])
    table = narrow_table("pieces (latency of one run)", "piece", "runs", *(with_unit(mode, unit) for mode in modes),
                         *(("error",) if len(modes) == 2 else ()), "wall",
                         caption="fast: " + ", ".join(sorted({row["fast_method"] for row in rep["pieces"]}))
                         + " (docs/models.md)" if "fast" in modes else None)
    for row in rep["pieces"]:
        table.add_row(row["piece"], count(row["repeat"]), *(in_unit(row[f"{mode}_latency_ns"], unit) for mode in modes),
                      *((pct(row["rel_error"]),) if len(modes) == 2 else ()),
                      " / ".join(duration(row[f"{mode}_wall_s"] * 1e9) for mode in modes))
    console.print(fit(console, table, wrap=("piece",)))
    if "step" in rep:
        st = rep["step"]
        tot = narrow_table("the step", "step", "value")
        tot.add_row("latency", duration(st["latency_ns"]))
        if "exact_latency_ns" in st:
            tot.add_row("exact latency", f"{duration(st['exact_latency_ns'])} ({pct(st['rel_error'])})")
        if "period_ns" in st:
            tot.add_row("period among steps", duration(st["period_ns"]))
        if "exact_period_ns" in st:
            tot.add_row("exact period", f"{duration(st['exact_period_ns'])} ({pct(st['period_rel_error'])})")
        if "tokens_per_s" in st:
            tot.add_row("tokens/s", num(st["tokens_per_s"]))
        if "time_to_first_token_ns" in st:
            tot.add_row("time to first token", duration(st["time_to_first_token_ns"]))
        tot.add_row("MAC utilisation", percent(st["mac_util"], 2))
        tot.add_row("useful MACs", count(st['macs']))
        console.print(fit(console, tot))
        cp = rep["critical_path_ns"]
        whole = sum(cp.values()) or 1.0
        unit = column_unit(list(cp.values()))
        crit = narrow_table("critical path (last PE to finish)", "category", with_unit("time", unit), "share")
        for k in STEP_CATEGORIES:
            crit.add_row(CATEGORY_NAMES[k], in_unit(cp[k], unit), percent(cp[k] / whole))
        console.print(fit(console, crit, wrap=("category",)))
        _print_roofline(rep["roofline"], st["latency_ns"], console)
    if "pipeline" in rep:
        _print_pipeline(rep["pipeline"], console)
    ends = rep["stage_end_ns"].get("layer") or rep["stage_end_ns"].get("mlp")
    if ends:
        unit = column_unit([*ends.values(), *np.diff([0.0, *ends.values()])])
        stages = narrow_table("one layer, stage by stage (from launch)", "stage", with_unit("ends at", unit),
                              with_unit("takes", unit))
        before = 0.0
        for name, end in ends.items():
            stages.add_row(name, in_unit(end, unit), in_unit(end - before, unit))
            before = end
        console.print(fit(console, stages, wrap=("stage",)))
    if rep.get("collective_choice"):
        _print_choice(rep["collective_choice"], console)
    if rep.get("memory"):
        _print_memory(rep["memory"], console)
    counts = narrow_table("op counts per run (commands, all PEs)", "piece", *(SHORT.get(k, k) for k in COUNTED),
                          caption="send / recv: IPCQ; read / write: DMA commands (a GEMM's tile DMAs are its own)")
    for row in rep["pieces"]:
        counts.add_row(row["piece"], *(count(row[f"count[{k}]"]) for k in COUNTED))
    console.print(fit(console, counts))


def _print_pipeline(pl: dict, console: Console) -> None:
    """The stages of one step (fill and drain) as the pieces compose (kbfast.measure.pipeline): when each starts
    and ends, how long it works and idles (its bubble)."""
    rows = pl["stage_rows"]
    unit = column_unit([r["end_ns"] for r in rows])
    table = narrow_table(f"pipeline: {pl['stages']} stages of {pl['stage_is']}, "
                         f"{plural(pl['micro_batches'], 'micro-batch', 'micro-batches')}, "
                         f"{plural(pl['replicas'], 'replica')}", "stage", with_unit("starts", unit),
                         with_unit("ends", unit), with_unit("busy", unit), "bubble",
                         caption=f"composed from the pieces: a step {duration(pl['composed_makespan_ns'])} (fill "
                                 f"and drain), among steps {duration(pl['composed_period_ns'])}; the step's totals: "
                                 f"{pl['method']} (docs/models.md)")
    for i, r in enumerate(rows):
        table.add_row(str(i), in_unit(r["start_ns"], unit), in_unit(r["end_ns"], unit), in_unit(r["busy_ns"], unit),
                      percent(r["idle_ns"] / pl["composed_makespan_ns"]))
    console.print(fit(console, table))


def ipcq_slot_bytes(program) -> dict:
    """The IPCQ slot buffers of the PE that receives on the most (``n_slots`` x ``slot_size`` of each inbound
    channel; the slots grow to fit the largest message, spec_ccl) and the tier that holds them."""
    if program is None or not len(program.channels):
        return {"ipcq_slots": 0, "ipcq_tier": ""}
    ch = program.channels
    per_pe = np.bincount(ch.dst, weights=(ch.n_slots * ch.slot_size).astype(np.float64))
    return {"ipcq_slots": int(per_pe.max()), "ipcq_tier": BUFFER_KINDS[int(ch.kind[0])]}


MEMORY_ROWS = (("HBM: weights", lambda m: fmt_bytes(m["weights"])),
               ("HBM: KV cache", lambda m: fmt_bytes(m["kv_cache"])),
               ("HBM: activations", lambda m: fmt_bytes(m["activations"])),
               ("HBM: of the slice", lambda m: f"{percent(_hbm(m) / m['hbm_slice'])} of {fmt_bytes(m['hbm_slice'])}"),
               ("TCM: pinned operands", lambda m: fmt_bytes(m["tcm_pinned"])),
               ("TCM: tile buffers", lambda m: fmt_bytes(m["tcm_tiles"])),
               ("TCM: of the budget", lambda m: f"{percent((m['tcm_pinned'] + m['tcm_tiles']) / m['tcm'])} of "
                                                f"{fmt_bytes(m['tcm'])}"),
               ("TCM: prefetch", lambda m: f"{fmt_bytes(m['tcm_prefetch'])} of {fmt_bytes(m['tcm_prefetch_area'])} "
                                           "free" if "tcm_prefetch" in m else "none"),
               ("GEMMs streaming A", lambda m: f"{m['a_streamed']} of {m['commands']}"),
               ("IPCQ slots", lambda m: f"{fmt_bytes(m['ipcq_slots'])} {m['ipcq_tier']}".strip()))


def _hbm(m: dict) -> int:
    return m["weights"] + m["kv_cache"] + m["activations"]


def _print_memory(memory: dict, console: Console) -> None:
    """What one working PE holds, per piece: its HBM slice and its TCM against their budgets, and the IPCQ slot
    buffers (docs/models.md, "Memory per PE")."""
    table = narrow_table("memory per working PE", "held", *memory,
                         caption="the largest GEMM's TCM; prefetch: the most one prefetch holds, of the TCM "
                                 "free beside everything else; a GEMM whose A does not fit streams it from HBM; "
                                 "IPCQ slots grow to fit the largest message (spec_ccl)")
    for label, cell in MEMORY_ROWS:
        table.add_row(label, *(cell(m) for m in memory.values()))
    console.print(fit(console, table, wrap=tuple(memory)))     # labels whole; a value wraps between quantities


def _print_choice(choice: list[dict], console: Console) -> None:
    """``auto``'s all-reduce choice per piece: each candidate's latency alone on the piece's PEs, the fastest
    marked."""
    algs = [a for a in ALGORITHMS if any(a in c["candidates_ns"] for c in choice)]
    unit = column_unit([v for c in choice for v in c["candidates_ns"].values() if v is not None])
    table = narrow_table("all-reduce chosen by auto (each candidate alone)", "piece", "message",
                         *(with_unit(a, unit) for a in algs),
                         caption="* the fastest, which the step runs" + ("; refused: over a limit" if any(
                             v is None for c in choice for v in c["candidates_ns"].values()) else "")
                         + " (docs/models.md)")
    for c in choice:
        table.add_row(c["piece"], fmt_bytes(c["bytes"]),
                      *("-" if a not in c["candidates_ns"] else "refused" if c["candidates_ns"][a] is None else
                        ("*" if a == c["chosen"] else "") + in_unit(c["candidates_ns"][a], unit) for a in algs))
    console.print(fit(console, table, wrap=("piece",)))


ROOFLINE_ROWS = (("hbm_floor_ns", "HBM: each byte once"), ("compute_floor_ns", "compute: whole tiles"),
                 ("useful_compute_floor_ns", "compute: useful MACs"), ("collective_floor_ns", "collective links"))


def _print_roofline(roof: dict, latency_ns: float, console: Console) -> None:
    """The step's floors (kbfast.measure.roofline), the step against the largest, and which it is."""
    unit = column_unit([roof[k] for k, _ in ROOFLINE_ROWS] + [latency_ns])
    table = narrow_table("roofline (floors no schedule goes below)", "floor", with_unit("time", unit), "step / floor",
                         caption=f"bound: {roof['bound']}; the step takes {num(roof['ratio'])}x its roofline "
                                 "(docs/models.md)")
    for key, label in ROOFLINE_ROWS:      # a ratio as everywhere: 1.7x
        table.add_row(label, in_unit(roof[key], unit), f"{num(latency_ns / roof[key])}x" if roof[key] > 0 else "-")
    console.print(fit(console, table, wrap=("floor",)))


# -- sweeps ------------------------------------------------------------------------------------------------
KEYS = ("model", "phase", "layout", "batch", "n_sips")
MAX_ROWS = 16             # a summary with more points shows their spread per (phase, layout, SIPs)


def _varying(ok: pd.DataFrame, skip: tuple[str, ...] = ()) -> list[str]:
    """The input columns that vary over the points: the standard keys, then any other axis."""
    axes = [c for c in ok.columns if "." in c and c != "sips.count" and c.split(".", 1)[1] not in KEYS
            and ok[c].nunique() > 1]
    return [c for c in (*KEYS, *axes) if c in ok and c not in skip and ok[c].nunique() > 1]


def model_summary(df: pd.DataFrame) -> pd.DataFrame:
    """One row per point (the varying inputs, joined, as the index): step latency, tokens/s (decode) or time to
    first token (prefill), MAC utilisation (a percent) and the critical path's largest category; above
    ``MAX_ROWS`` points, one row per (phase, layout, SIPs) with the latency's range.  Times stay in ns, with
    one unit for them all in ``attrs['time_units']`` (kbfast.report.formats.column_unit; None: each cell its
    own), as kbfast.report.sweep.table_view prints them."""
    ok = (df[df["error"].isna()] if "error" in df else df).copy()
    if ok.empty:
        return pd.DataFrame()
    cats = [c for c in (f"critical_path_{k}_ns" for k in STEP_CATEGORIES) if c in ok]
    keys = _varying(ok) or ["model"]
    ok = ok.sort_values(keys)
    times = [ok["latency_ns"], *([ok["time_to_first_token_ns"]] if "time_to_first_token_ns" in ok else [])]
    unit = column_unit(pd.concat(times))
    head = (lambda name: f"{name} ({unit})" if unit else name)
    out = pd.DataFrame(index=pd.Index(ok[keys].astype(str).agg(", ".join, axis=1), name=", ".join(keys)))
    out[head("latency")] = ok["latency_ns"].to_numpy()
    if "tokens_per_s" in ok:
        out["tokens/s"] = [num(v, 1) for v in ok["tokens_per_s"]]
    if "time_to_first_token_ns" in ok:
        out[head("TTFT")] = ok["time_to_first_token_ns"].to_numpy()
    util = ok["mac_util"].to_numpy()
    if cats:
        out["bound by"] = [c[len("critical_path_"):-len("_ns")] for c in ok[cats].idxmax(axis=1)]
    if len(out) <= MAX_ROWS:
        out.insert(len(out.columns) - bool(cats), "MAC util", [percent(u) for u in util])
        out.attrs["time_units"] = dict.fromkeys((head("latency"), head("TTFT")), unit)
        return out
    # many points: one row per (phase, layout, SIPs) with the spread over the other inputs
    by = [k for k in ("phase", "layout", "n_sips") if k in ok] or ["model"]
    out = out.reset_index(drop=True).assign(_util=util)
    out[by] = ok[by].to_numpy()
    lat = head("latency")
    agg = {"points": (lat, "size"), head("min"): (lat, "min"), head("max"): (lat, "max"),
           "max MAC util": ("_util", "max")}
    if "bound by" in out:
        agg["bound by"] = ("bound by", lambda v: v.mode().iloc[0])
    table = out.groupby(by, sort=True).agg(**agg)
    table["max MAC util"] = table["max MAC util"].map(percent)
    table.index = pd.Index([", ".join(map(str, i if isinstance(i, tuple) else (i,))) for i in table.index],
                           name=", ".join(by))
    table.attrs["time_units"] = dict.fromkeys((head("min"), head("max")), unit)
    return table


# a model sweep's line plots: (y, file), each against SIP count (kbfast.report.sweep.default_plots draws them
# as every sweep's line plots are, through plot_xy)
LINE_PLOTS = (("latency_ns", "latency_vs_sips.png"), ("tokens_per_s", "tokens_vs_sips.png"))


def model_plots(df: pd.DataFrame, folder: Path) -> list[Path]:
    """A model sweep's own plot: the critical path stacked by category for each layout (and phase) at each SIP
    count (its line plots are :data:`LINE_PLOTS`)."""
    ok = df[df["error"].isna()] if "error" in df else df
    cats = [k for k in STEP_CATEGORIES if f"critical_path_{k}_ns" in ok]
    return [_breakdown(ok, cats, folder / "breakdown.png")] if cats and not ok.empty else []


def _breakdown(ok: pd.DataFrame, cats: list[str], path: Path) -> Path:
    """The critical path stacked by category, one bar per point; one panel per phase (their scales differ)."""
    facets = sorted(ok["phase"].dropna().unique().tolist()) if "phase" in ok and ok["phase"].notna().any() else [None]
    keys = [k for k in ("model", "layout", "batch", "n_sips") if k in _varying(ok)] or ["model"]
    others = [k for k in _varying(ok, skip=("phase", *keys))]
    n_bars = ok.groupby(keys).ngroups
    fig, axes = pyplot().subplots(1, len(facets), figsize=(min(16.0, max(6.0, 0.45 * n_bars * len(facets) + 3)), 4.8),
                             squeeze=False)
    for ax, phase in zip(axes[0], facets):
        part = ok if phase is None else ok[ok["phase"] == phase]
        g = part.groupby(keys, sort=True)[[f"critical_path_{k}_ns" for k in cats]].median()
        unit, scale = time_unit(g.sum(axis=1))          # the tallest bar reads 1 or more
        g = g / scale
        names = [", ".join(str(v) for v in (i if isinstance(i, tuple) else (i,))) for i in g.index]
        bottom = np.zeros(len(g))
        for k in cats:
            vals = g[f"critical_path_{k}_ns"].to_numpy()
            ax.bar(names, vals, bottom=bottom, label=CATEGORY_NAMES[k])
            bottom += vals
        ax.set_ylabel(f"critical path of the step ({unit})")
        ax.set_xlabel(", ".join(keys))
        ax.set_title(f"{phase}" if phase else "where the step's time goes")
        ax.tick_params(axis="x", labelrotation=45, labelsize=7)
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    title = "where the step's time goes, per layout" + (f" (median over {', '.join(others)})" if others else "")
    fig.suptitle(textwrap.fill(title, 100))
    return save_figure(fig, path)
