"""``kbfast search``: the best way to run a model's decode step on the tray, for an objective, under
constraints (docs/search.md).

1. The space (kbfast.search.space) is compiled candidate by candidate (and, when TTFT is asked for, its
   prefill of ``--seq`` tokens), and what does not fit or divide is pruned and counted by reason.
2. What is left is a sweep (kbfast.sweep): one model point per candidate (the fast path's point alone, no
   bounds: its printed command gives them), a decode step at ``--kv-len``, and
   when TTFT is asked for, one prefill of ``--seq`` tokens per (layout, all-reduce, overlap, sequence
   parallelism, knobs).  It runs like any sweep: ``--jobs`` processes or a Dask scheduler, results in
   ``--out``, resumable.
3. The metrics, the constraints, the Pareto front and the winner (kbfast.search.front); each candidate carries
   the ``kbfast run model`` command that reproduces its figures.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from kbfast.config import DEFAULT_TOPOLOGY, load_system
from kbfast.config.models import Transformer
from kbfast.errors import KbfastError
from kbfast.search.front import Constraint, rank
from kbfast.search.space import Pruned, Space, prune
from kbfast.sweep.runner import run_sweep
from kbfast.sweep.spec import parse_spec

KEYS = ("layout", "pp", "dp", "ep", "batch", "collective", "overlap", "sequence_parallel")


@dataclass
class SearchResult:
    """Every candidate evaluated (``table``: inputs, metrics, ``feasible``, ``front``, ``best``, ``command``, and
    with TTFT its prefill's ``ttft_command``), the pruning, and how many candidates the space had."""

    table: pd.DataFrame
    pruned: Pruned
    n_candidates: int


def _row(c: dict, seq: int | None = None) -> dict:
    """A candidate's zip row: its decode step, or with ``seq`` a prefill of ``seq`` tokens for one user (for one
    user per data-parallel replica: each replica prefills its own request)."""
    row = {f"workload.{k}": c[k] for k in KEYS if k not in ("sequence_parallel", "ep")}
    if c["ep"] is not None:
        row["workload.ep"] = c["ep"]
    row["workload.sequence_parallel"] = True if c["sequence_parallel"] else None     # as the command line
    row.update(c["set"])
    if seq is not None:
        row.update({"workload.batch": c["dp"], "workload.phase": "prefill", "workload.seq": seq,
                    "workload.kv_len": seq})
    return row


def _sweep(name: str, model: str, topology: str, overrides: dict, rows: list[dict], kv_len: int, method: str,
           out: Path, jobs: int, scheduler: str | None, progress) -> pd.DataFrame:
    data = {"name": name, "description": f"kbfast search over {len(rows)} configurations of {model}",
            "topology": topology, "set": overrides, "seed": 0, "axes": [{"zip": rows}],
            "workload": {"kind": "model", "model": model, "phase": "decode", "kv_len": kv_len, "method": method,
                         "bounds": False}}                       # the front ranks points; a command has the bounds
    spec = parse_spec(data, f"kbfast search ({name})")
    return run_sweep(spec, out, jobs=jobs, scheduler=scheduler, overwrite=True, progress=progress).results


def command(model: str, topology: str | None, sets: list[str], row: dict, kv_len: int, phase: str = "decode",
            seq: int | None = None) -> str:
    """The ``kbfast run model`` command that reproduces ``row``'s step."""
    args = ["kbfast", "run", "model", model, "--phase", phase]
    args += ["--batch", str(int(row["batch"])), "--kv-len", str(kv_len)] if phase == "decode" else \
        ["--batch", str(int(row["dp"])), "--seq", str(seq)]
    args += ["--layout", row["layout"]]
    args += [arg for k in ("pp", "dp") if int(row[k]) > 1 for arg in (f"--{k}", str(int(row[k])))]
    if row.get("ep") is not None and not pd.isna(row["ep"]):
        args += ["--ep", str(int(row["ep"]))]
    args += ["--collective", row["collective"], "--overlap", row["overlap"]]
    if row["sequence_parallel"]:
        args.append("--sequence-parallel")
    if topology:
        args += ["--topology", topology]
    for s in sets:
        args += ["--set", s]
    for k, v in row["set"].items():
        args += ["--set", f"{k}={v}"]
    return shlex.join(args)


def search(model: Transformer, model_arg: str, topology: str | None, overrides: dict, sets: list[str], space: Space,
           objective: str, constraints: list[Constraint], kv_len: int, seq: int, out: Path, method: str = "hybrid",
           jobs: int = 1, scheduler: str | None = None,
           progress: Callable[[int, int], None] | None = None) -> SearchResult:
    """Prune ``space``, evaluate what is left (the module docstring) and rank it."""
    if not isinstance(model, Transformer):
        raise KbfastError(f"{model.name} is of kind {model.kind}: kbfast search takes transformer models\n"
                          "  hint: use llama3_70b, llama32_1b, gpt3_175b or a transformer YAML")
    topo = topology or DEFAULT_TOPOLOGY
    candidates = space.candidates()
    need_ttft = objective == "ttft" or any(c.metric == "ttft_ms" for c in constraints)
    pruned = prune(topo, overrides, model, candidates, kv_len, method, seq if need_ttft else None)
    if not pruned.kept:
        why = "; ".join(f"{n} {r} (e.g. {pruned.examples[r]})" for r, n in pruned.counts.items())
        raise KbfastError(f"every one of the {len(candidates)} candidates was pruned: {why}\n  hint: widen the "
                          "space (more SIPs with --knob sips.count=…, smaller --batch values, a shorter --kv-len)")
    dec = _sweep("search_decode", model_arg, topo, overrides, [_row(c) for c in pruned.kept], kv_len, method,
                 out / "decode", jobs, scheduler, progress)
    table = pd.DataFrame(pruned.kept)
    for col in ("latency_ns", "step_period_ns", "tokens_per_s", "method",
                "collective_used"):
        table[col] = dec[col].to_numpy() if col in dec else np.nan
    table["error"] = dec["error"].to_numpy() if "error" in dec else None
    sips = int(load_system(topo, overrides).sips.count)
    table["n_sips"] = [int(c["set"].get("sips.count", sips)) for c in pruned.kept]
    table["tpot_ms"] = table["step_period_ns"] * 1e-6      # a pipeline's period: its steps overlap
    table["tokens_per_s_per_sip"] = table["tokens_per_s"] / table["n_sips"]
    table["ttft_ms"] = np.nan
    table["command"] = [command(model_arg, topology, sets, r, kv_len) for r in table.to_dict("records")]
    if need_ttft:
        prefills = [_row(c, seq) for c in pruned.kept]     # one user: candidates that differ in batch alone share it
        keys = [repr(sorted(r.items())) for r in prefills]
        rows = dict(zip(keys, prefills))
        first = list(rows)
        pre = _sweep("search_prefill", model_arg, topo, overrides, [rows[k] for k in first], kv_len, method,
                     out / "prefill", jobs, scheduler, progress)
        ns = pre["latency_ns"].to_numpy() if "latency_ns" in pre else np.full(len(pre), np.nan)
        failed = pre["error"].to_numpy() if "error" in pre else [None] * len(pre)
        ttft, why = dict(zip(first, ns * 1e-6)), dict(zip(first, failed))
        table["ttft_ms"] = [ttft[k] for k in keys]
        table["ttft_command"] = [command(model_arg, topology, sets, r, kv_len, "prefill", seq)
                                 for r in table.to_dict("records")]
        table["error"] = [d if isinstance(d, str) else (f"prefill: {why[k]}" if isinstance(why[k], str) else None)
                          for d, k in zip(table["error"], keys)]     # a candidate without its TTFT failed
    return SearchResult(rank(table, objective, constraints), pruned, len(candidates))
