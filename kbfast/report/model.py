"""What ``kbfast run model`` reports (docs/models.md): inputs, pieces, the step, its critical path, op counts.

:func:`model_report` turns a :class:`~kbfast.evaluate_model.StepResult` into plain data (JSON and CSV write
it as is, full precision); :func:`print_model_report` prints it for people, at 80 columns.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from kbfast.evaluate_model import CATEGORIES, StepResult
from kbfast.results import rel_error
from kbfast.topology.builder import Tables
from kbfast.workloads.commands import COUNTED

SHORT = {"ipcq_send": "send", "ipcq_recv": "recv", "dma_read": "read", "dma_write": "write"}
CATEGORY_NAMES = {"gemm_compute": "GEMM compute", "hbm_stream": "HBM streaming", "math": "MATH",
                  "collective": "collective and fabric wait", "other": "other (idle)"}


def model_report(step: StepResult, t: Tables) -> dict:
    """Inputs, one row per piece (latency per run, repeat, per-mode latencies and error, op counts), the
    step's totals and its critical path by category."""
    s, m = step.shape, step.model
    inputs = {"model": m.name, "kind": m.kind, "layout": step.layout, "topology": t.spec.name,
              "sips": t.layout.n_sips, "working_pes": len(step.pieces[0].nodes), "mode": step.mode}
    if s is not None:
        inputs.update(phase=s.phase, batch=s.batch, seq=s.seq, kv_len=s.kv_len, layers=step.layers)
    pieces = []
    for i, p in enumerate(step.pieces):
        row = {"piece": p.name, "repeat": step.repeat(p)}
        for mode, results in step.results.items():
            r = results[i]
            row[f"{mode}_latency_ns"] = r.latency_ns
            if mode == "fast":
                row.update(fast_lo_ns=r.lo_ns, fast_hi_ns=r.hi_ns)
            row[f"{mode}_wall_s"] = r.wall_s
            row[f"{mode}_method"] = r.method
        if len(step.results) == 2:
            row["rel_error"] = rel_error(row["fast_latency_ns"], row["exact_latency_ns"])
        row.update({f"count[{k}]": v for k, v in step.results[step.mode][i].counts.items()})
        row["macs"] = p.macs
        pieces.append(row)
    out = {"inputs": inputs, "pieces": pieces}
    if m.kind == "attention_panels":
        return out
    lat = step.latency_ns()
    total = {"latency_ns": lat, "macs": step.macs(), "mac_util": step.mac_util(t)}
    if s is not None and s.phase == "decode":
        total["tokens_per_s"] = s.batch / (lat * 1e-9)
    elif s is not None:
        total["time_to_first_token_ns"] = lat
    if len(step.results) == 2:
        total["exact_latency_ns"] = step.latency_ns("exact")
        total["rel_error"] = rel_error(lat, total["exact_latency_ns"])
    out["step"] = total
    out["critical_path_ns"] = step.breakdown()
    return out


def _us(ns: float) -> str:
    return f"{ns / 1e3:,.2f}"


def print_model_report(rep: dict, console: Console) -> None:
    """The report as three or four narrow tables."""
    inp = rep["inputs"]
    what = ", ".join(f"{k} {inp[k]}" for k in ("phase", "batch", "seq", "kv_len", "layers") if k in inp)
    layout = f", layout {inp['layout']}" if inp["kind"] != "attention_panels" else ""
    console.print(f"[bold]{inp['model']}[/bold] on {inp['topology']} ({inp['sips']} SIPs, {inp['working_pes']} "
                  f"working PEs){layout}, {inp['mode']} mode" + (f"\n{what}" if what else ""), highlight=False)
    modes = [k[:-len("_latency_ns")] for k in rep["pieces"][0] if k.endswith("_latency_ns")]
    table = Table("piece", "runs", *(f"{mode} (us)" for mode in modes),
                  *(("error",) if len(modes) == 2 else ()), "wall (s)", title="pieces (latency of one run)",
                  caption="fast: " + ", ".join(sorted({row["fast_method"] for row in rep["pieces"]}))
                  + " (docs/models.md)" if "fast" in modes else None)
    for row in rep["pieces"]:
        table.add_row(row["piece"], str(row["repeat"]), *(_us(row[f"{mode}_latency_ns"]) for mode in modes),
                      *((f"{100 * row['rel_error']:+.2f} %",) if len(modes) == 2 else ()),
                      " / ".join(f"{row[f'{mode}_wall_s']:.2f}" for mode in modes))
    console.print(table)
    if "step" in rep:
        st = rep["step"]
        tot = Table("step", "value", title="the step")
        tot.add_row("latency", f"{st['latency_ns'] / 1e6:,.3f} ms")
        if "exact_latency_ns" in st:
            tot.add_row("exact latency", f"{st['exact_latency_ns'] / 1e6:,.3f} ms ({100 * st['rel_error']:+.2f} %)")
        if "tokens_per_s" in st:
            tot.add_row("tokens/s", f"{st['tokens_per_s']:,.1f}")
        if "time_to_first_token_ns" in st:
            tot.add_row("time to first token", f"{st['time_to_first_token_ns'] / 1e6:,.3f} ms")
        tot.add_row("MAC utilisation", f"{100 * st['mac_util']:.2f} %")
        tot.add_row("useful MACs", f"{st['macs']:.3e}")
        console.print(tot)
        cp = rep["critical_path_ns"]
        whole = sum(cp.values()) or 1.0
        crit = Table("category", "ms", "share", title="critical path (last PE to finish)")
        for k in CATEGORIES:
            crit.add_row(CATEGORY_NAMES[k], f"{cp[k] / 1e6:,.3f}", f"{100 * cp[k] / whole:.1f} %")
        console.print(crit)
    counts = Table("piece", *(SHORT.get(k, k) for k in COUNTED), title="op counts per run (commands, all PEs)",
                   caption="send / recv: IPCQ; read / write: DMA commands (a GEMM's tile DMAs are its own)")
    counts.columns[0].no_wrap = True
    for row in rep["pieces"]:
        counts.add_row(row["piece"], *(f"{row[f'count[{k}]']:,}" for k in COUNTED))
    console.print(counts)
