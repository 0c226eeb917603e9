"""One GEMM on one PE, as the reference's GEMM harness stages it (spec_pe §5.6, §11.1).

``staging`` says how the operands reach the pipeline: ``ref_ref`` streams A and B tile by tile from HBM;
``load_ref`` loads all of A into TCM first (one blocking DMA read, ``tl.load``) and streams B (``tl.ref``);
``load_load`` loads both first.  A and C live in the PE's own HBM slice; B in the slice of ``b_from``
(default: the PE's own), so a remote B shows what the fabric costs the GEMM.

:func:`gemm_metrics` reads a result the way the reference's figures do: the latency from the first op to
the last write, the composite window over the tile-stage records only (the up-front loads excluded), MAC/ns
over the window and over the whole latency, MAC utilisation ``MACs / window / gemm_macs_per_ns``, the
arithmetic intensity (MACs per HBM byte moved, up-front loads included), each PE resource's busy fraction of the window, the
busiest one (the bound stage) and the ideal pipeline (:func:`ideal_ns`: the busiest resource with no gap plus one
tile's other fixed stages, a lower bound on the window).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from kbfast.config import budget
from kbfast.errors import KbfastError, UnknownNodeError, clip, not_one_of, shown
from kbfast.ir import Op, Program, ProgramBuilder, gemm_ops_count
from kbfast.ir.tiling import MAX_DIM, Epilogue, GemmPlan, epilogue, plan_gemm
from kbfast.topology.builder import Tables
from kbfast.topology.names import node_id, node_name
from kbfast.topology.routing import Router

STAGINGS = ("ref_ref", "load_ref", "load_load")
A_ADDR = 0
# PE resources and the ops that hold them (spec_pe §4.2–§4.4)
RESOURCES = {"dma_read": (Op.DMA_READ,), "tcm_read": (Op.FETCH,), "compute": (Op.GEMM, Op.MATH),
             "tcm_write": (Op.STORE,), "dma_write": (Op.DMA_WRITE,)}
TILE_STAGES = (Op.DMA_READ, Op.FETCH, Op.GEMM, Op.MATH, Op.STORE, Op.DMA_WRITE)


@dataclass(frozen=True)
class GemmCase:
    """One GEMM as built: its Program (None until built), its tiling plan, the staging, the PE, where B comes
    from, the up-front operand loads and the op that ends with its last write."""

    program: Program | None
    plan: GemmPlan
    staging: str
    pe: str
    b_from: str
    loads: tuple[int, ...]     # the up-front operand loads (ops)
    done: int                  # the op that ends with the GEMM's last write


def _pe_node(t: Tables, pe: str, kind: str, flag: str = "--pe") -> int:
    """``pe_dma`` or ``hbm_ctrl`` of PE ``sipS.cubeC.peP``; a name that is no PE is refused naming ``flag`` and
    the name as given (not the node name built from it), with the names that exist."""
    cube, local = pe.rsplit(".", 1) if "." in pe else ("", pe)
    try:
        return node_id(t, f"{pe}.pe_dma" if kind == "pe_dma" else f"{cube}.hbm_ctrl.{local}")
    except UnknownNodeError:
        lay = t.layout
        raise UnknownNodeError(f"{flag} {shown(pe)} is not a PE of this system\n  hint: a PE is sipS.cubeC.peP with "
                               f"S < {lay.n_sips}, C < {lay.n_cubes_per_sip}, P < {len(t.plan.pe_router)}, "
                               "e.g. sip0.cube1.pe4") from None


def parse_dim(name: str, value: int | str) -> int:
    """A GEMM dimension: a positive integer up to ``MAX_DIM``, or text with K / Ki (x 1024) or M / Mi (x 1024^2)."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        dim = value
    else:
        match = re.fullmatch(r"\s*(\d{1,30})\s*(Ki|K|Mi|M)?\s*", str(value))
        if not match or int(match[1]) == 0:
            raise KbfastError(f"{name} {clip(repr(value))} is not a positive integer; use e.g. 32, 3072 or 3Ki")
        dim = int(match[1]) * {None: 1, "K": 1024, "Ki": 1024, "M": 1 << 20, "Mi": 1 << 20}[match[2]]
    if dim > MAX_DIM:
        raise KbfastError(f"{name} {clip(str(value))} is more than the limit of {MAX_DIM:,} (16Mi) per GEMM "
                          "dimension; use a smaller value")
    return dim


def gemm_nodes(t: Tables, pe: str, b_from: str | None = None) -> tuple[int, int, int]:
    """(the PE's pe_dma, its HBM controller, the controller holding B) of PE ``pe``."""
    return (_pe_node(t, pe, "pe_dma"), _pe_node(t, pe, "hbm_ctrl"),
            _pe_node(t, b_from, "hbm_ctrl", "--b-from") if b_from else _pe_node(t, pe, "hbm_ctrl"))


def parse_epilogues(t: Tables, text: str | list[str] | tuple[str, ...] | None) -> tuple[Epilogue, ...]:
    """Fused epilogues from ``op[:scope]`` items (a list, or one comma-separated string), in order, each
    priced by kbfast.ir.tiling.epilogue: ``bias,relu`` or ``dequant:k_tile,relu``."""
    items = text.split(",") if isinstance(text, str) else list(text or ())
    out = []
    for item in (i.strip() for i in items):
        if item:
            op, _, scope = item.partition(":")
            out.append(epilogue(t.spec.pe, op.strip(), scope.strip() or "output_tile"))
    return tuple(out)


def gemm_case(t: Tables, router: Router, m: int, n: int, k: int, staging: str = "load_ref",
              pe: str = "sip0.cube0.pe0", b_from: str | None = None, program: bool = True,
              epilogues: tuple[Epilogue, ...] = ()) -> GemmCase:
    """One ``m x n x k`` GEMM on PE ``pe`` (see the module docstring), with fused ``epilogues``;
    ``program=False`` leaves out the Program (``program`` None, ``loads`` empty, ``done`` -1): the max-plus
    path needs the plan only."""
    b_from = b_from or pe
    plan = staged_plan(t, m, n, k, staging, epilogues)
    if not program:                # the PE names are checked where they are looked up
        return GemmCase(None, plan, staging, pe, b_from, (), -1)
    dma, own, src_b = gemm_nodes(t, pe, b_from)
    n_ops = 2 + plan.a_pinned + plan.b_pinned + gemm_ops_count(plan)
    budget.check(f"the Program of the {m:,} x {n:,} x {k:,} GEMM ({n_ops:,} ops)", budget.program_bytes(n_ops),
                 "use the fast path (drop --exact, --compare and --trace), or a smaller GEMM")
    b = ProgramBuilder(t, router, name=f"gemm_{m}x{n}x{k}_{staging}")
    agent = b.pe_agent(dma)
    b.start(agent)
    loads, done = add_gemm(b, agent, plan, own, src_b)
    return GemmCase(b.build(), plan, staging, pe, b_from, loads, done)


def check_staging(staging: str) -> None:
    """Refuse a staging that is not one of :data:`STAGINGS`."""
    if staging not in STAGINGS:
        raise not_one_of("staging", staging, STAGINGS)


def staged_plan(t: Tables, m: int, n: int, k: int, staging: str, epilogues: tuple[Epilogue, ...] = ()) -> GemmPlan:
    """The plan of an ``m x n x k`` GEMM under ``staging`` (which operands are loaded into TCM first)."""
    check_staging(staging)
    plan = plan_gemm(t.spec.pe, m, n, k, a_pinned=staging != "ref_ref", b_pinned=staging == "load_load",
                     epilogues=epilogues)
    a, b, c = plan.operand_bytes()
    gib = budget.fmt_bytes
    budget.check_hbm_slice(t.spec, a + b + c, lambda: f"the {m:,} x {n:,} x {k:,} GEMM (m x n x k) does not fit: its "
                           f"PE lays out A, B and C from address 0 of its HBM slice in whole tiles ({gib(a)} + "
                           f"{gib(b)} + {gib(c)})",
                           "use smaller m, n or k, or more HBM per cube (--set hbm.total_gib_per_cube=N)")
    return plan


def operand_addresses(plan: GemmPlan) -> tuple[int, int, int]:
    """The byte addresses of A, B and C: tile-major from address 0, A, then B, then C (each operand in its
    own controller's slice, at these addresses)."""
    a_bytes, b_bytes, _ = plan.operand_bytes()
    return A_ADDR, A_ADDR + a_bytes, A_ADDR + a_bytes + b_bytes


def add_gemm(b: ProgramBuilder, agent: int, plan: GemmPlan, own: int, src_b: int) -> tuple[tuple[int, ...], int]:
    """Agent ``agent`` loads the pinned operands (phase ``operand load``), then runs the GEMM: A and C in
    controller ``own``'s slice, B in ``src_b``'s (:func:`operand_addresses`).  Returns the load ops and the
    op that ends with the last write."""
    a_bytes, b_bytes, _ = plan.operand_bytes()
    a_addr, b_addr, c_addr = operand_addresses(plan)
    b.phase(agent, "operand load")
    loads = []
    if plan.a_pinned:
        loads.append(b.dma(agent, own, a_bytes, a_addr, write=False))
    if plan.b_pinned:
        loads.append(b.dma(agent, src_b, b_bytes, b_addr, write=False))
    return tuple(loads), b.gemm(agent, plan, (own, a_addr), (src_b, b_addr), (own, c_addr))


def gemm_beside(m: int, n: int, k: int, staging: str = "load_ref"):
    """A ``beside`` hook for :func:`kbfast.workloads.collectives.allreduce`: every rank's PE also runs an
    ``m x n x k`` GEMM on an agent of its own (its own slice), sharing the PE's channels, TCM and compute
    slot with the collective."""
    def add(b: ProgramBuilder, nodes: np.ndarray) -> None:
        t = b.t
        plan = staged_plan(t, m, n, k, staging)
        for node in np.asarray(nodes).tolist():
            pe = node_name(t, node).rsplit(".", 1)[0]
            agent = b.pe_agent(node)
            b.start(agent)
            own = _pe_node(t, pe, "hbm_ctrl")
            add_gemm(b, agent, plan, own, own)
    return add


def gemm_metrics(case: GemmCase, begin: np.ndarray, end: np.ndarray, macs_per_ns: float) -> dict:
    """The reference's GEMM figures from per-op begin and end times (ns); see the module docstring.  A
    resource's busy time is the union of its ops' intervals; the read channel's, its holds: a read that the
    next one queued behind held the channel until that one began."""
    p = case.program
    stage = np.isin(p.op_code, TILE_STAGES) & (p.op_phase == p.phase_names.index("gemm"))
    t0 = float(begin[stage].min())
    busy = {name: _covered(begin[np.isin(p.op_code, codes) & stage], end[np.isin(p.op_code, codes) & stage])
            for name, codes in RESOURCES.items()}
    reads = np.flatnonzero((p.op_code == Op.DMA_READ) & stage)
    if len(reads):
        b, e = begin[reads], end[reads]
        order = np.argsort(b, kind="stable")
        b, e = b[order], e[order]
        busy["dma_read"] = float(np.sum(np.minimum(e, np.append(b[1:], np.inf)) - b))
    latency = float(end[case.done] - begin[p.ops_of(0)[0]])
    return gemm_figures(case, latency, float(end[stage].max()) - t0, busy, macs_per_ns)


def gemm_figures(case: GemmCase, latency: float, window: float, busy: dict[str, float], macs_per_ns: float) -> dict:
    """The row of figures of one GEMM from its latency, composite window and per-resource busy ns."""
    plan = case.plan
    row = {"m": plan.m, "n": plan.n, "k": plan.k, "staging": case.staging, "pe": case.pe, "b_from": case.b_from,
           "n_tiles": plan.n_tile_total, "under_tile": plan.under_tile, "latency_ns": latency, "window_ns": window,
           "macs_per_ns": plan.macs / window if window > 0 else 0.0,
           "macs_per_ns_overall": plan.macs / latency if latency > 0 else 0.0,
           "intensity_macs_per_byte": plan.macs / hbm_bytes(plan),
           "mac_util": plan.macs / window / macs_per_ns if window > 0 else 0.0,
           "bound_stage": max(busy, key=busy.get),
           "ideal_ns": ideal_ns(plan, busy)}
    row.update({f"busy[{name}]": v / window if window > 0 else 0.0 for name, v in busy.items()})
    return row


def ideal_ns(plan: GemmPlan, busy: dict[str, float]) -> float:
    """The ideal pipeline of ``plan``: a resource busy ``busy[name]`` ns with no gap, and one tile's stages of
    fixed length (FETCH, the compute slot on the last k, STORE) that must come before or after it; the
    busiest such sum.  Every tile passes the stages in order and each resource serves one op at a time, so
    each sum, and the ideal, is at most the window (docs/gemm.md)."""
    fetch, comp, store = plan.fetch_ns, plan.comp_last_ns, plan.store_ns     # the fixed stages of one tile
    total = fetch + comp + store
    return max(busy["dma_read"] + total, busy["tcm_read"] + comp + store, busy["compute"] + fetch + store,
               busy["tcm_write"] + fetch + comp, busy["dma_write"] + total)


def hbm_bytes(plan: GemmPlan) -> int:
    """Bytes the GEMM moves between HBM and the PE: every streamed tile read, the pinned operands once, C once."""
    a, b, c = plan.operand_bytes()
    per_tile = (0 if plan.a_pinned else plan.a_tile_bytes) + (0 if plan.b_pinned else plan.b_tile_bytes)
    return plan.n_tile_total * per_tile + (a if plan.a_pinned else 0) + (b if plan.b_pinned else 0) + c


def _covered(begin: np.ndarray, end: np.ndarray) -> float:
    """Length of the union of the intervals [begin, end) (a read's response may overlap the next read)."""
    order = np.argsort(begin, kind="stable")
    total, reach = 0.0, -np.inf
    for b, e in zip(begin[order].tolist(), end[order].tolist()):
        if e > reach:
            total += e - max(b, reach)
            reach = e
    return total
