"""Build the Program of one all-reduce from its algorithm's table entry, with the launch barrier.

Every all-reduce kernel runs between a tile load and a tile store by default (``tile_io``): each rank
reads its tile from its own HBM slice before the collective and writes the result back after it
(``kbfast.workloads.kernels.with_tile_io``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kbfast.config import budget
from kbfast.errors import KbfastError, closest, did_you_mean, shown
from kbfast.ir import Program, ProgramBuilder
from kbfast.topology.builder import Tables
from kbfast.topology.routing import Router
from kbfast.workloads.kernels import TILE_LOAD, TILE_STORE, Kernel, Tl, run_kernels, with_tile_io
from kbfast.workloads.launch import launch_timing
from kbfast.workloads.symbolic import run_traced
from kbfast.workloads.collectives.algorithm import check_slots
from kbfast.workloads.collectives.ops import OPS, Op
from kbfast.workloads.collectives.placement import RANKS, is_listed, kernel_info, rank_nodes, ring_order
from kbfast.workloads.collectives.table import OP_TABLE


@dataclass(frozen=True)
class Collective:
    """A collective's Program with what it is: the algorithm (or ``pe2pe_<hop>``, ``pe2pe_<hop>_dma`` for a raw
    DMA load and store, ``_store`` for the store alone), the rank count, the per-rank tile, the launch barrier
    and whether the tile load and store are modelled."""

    program: Program
    algorithm: str
    n_ranks: int
    nbytes: int                     # per-rank tile
    launch_ns: float
    tile_io: bool | None = None     # all-reduce: tile load and store modelled (None: not a collective kernel)
    op: str = "all_reduce"          # the operation (kbfast.workloads.collectives.ops.OPS)


def check_tile_fits(spec, nbytes: int, label: str = "") -> None:
    """Refuse an all-reduce whose tile, ``nbytes`` per rank, exceeds a PE's HBM slice, where each rank keeps it
    (kbfast.config.budget.check_hbm_slice); ``label`` names the input (``"--size 64GiB: "``)."""
    budget.check_hbm_slice(spec, nbytes, f"{label}an all-reduce of {budget.fmt_bytes(nbytes)} per rank does not "
                           "fit: each rank holds its tile", f"use at most {budget.fmt_bytes(spec.hbm_slice_bytes)} "
                           "per rank, or more HBM per cube (hbm.total_gib_per_cube)")


def _what(op: str) -> str:
    """The operation as a message names it: ``all-reduce``, ``reduce-scatter``."""
    return op.replace("_", "-")


def check_names(op: str, algorithm: str | None, ranks: str | None) -> None:
    """Refuse an unknown operation, algorithm (None: the operation's default) or rank set; these read no
    topology, so a sweep checks them before any point runs (a listed rank set's PE names are the topology's,
    checked when the point is built)."""
    if op not in OP_TABLE:
        raise KbfastError(f"unknown collective operation {op!r}: {did_you_mean(op, tuple(OP_TABLE))}")
    what = _what(op)
    if algorithm is not None and algorithm not in OP_TABLE[op]:
        raise KbfastError(f"unknown {what} algorithm {algorithm!r}: {did_you_mean(algorithm, tuple(OP_TABLE[op]))}")
    if ranks is not None and ranks not in RANKS and not is_listed(ranks):
        close = closest(str(ranks), RANKS)
        raise KbfastError(f"ranks {shown(ranks)} is not a set of ranks: cube_pe0 (pe0 of every cube), all_pes "
                          f"(every PE), sip_pe0 (pe0 of cube 0 of every SIP) or a list of PEs "
                          f"(sip0.cube0.pe0,sip1.cube0.pe0)" + (f"\n  hint: {close}" if close else ""))


def _check_request(op: str, algorithm: str, nbytes: int, ranks: str | None, tile_io) -> None:
    """Refuse what :func:`check_names` refuses, a size below one byte and a ``tile_io`` that is not a bool."""
    check_names(op, algorithm, ranks)
    what = _what(op)
    if nbytes <= 0:
        raise KbfastError(f"{what} size must be > 0 bytes (got {nbytes})")
    if not isinstance(tile_io, (bool, np.bool_)):
        raise KbfastError(f"tile_io must be true or false (got {tile_io!r})")


def allreduce(t: Tables, router: Router, nbytes: int, algorithm: str = "lrab", ranks: str | None = None,
              launch: bool = True, tile_io: bool = True,
              beside: Callable[[ProgramBuilder, np.ndarray], None] | None = None) -> Collective:
    """Build the Program of one all-reduce of ``nbytes`` per rank (:func:`collective`); runs the symbolic check.

    ``beside(builder, rank_nodes)`` adds other work to the same Program before it is built, on agents of its
    own (for example a GEMM on every rank's PE: ``kbfast.workloads.gemm.gemm_beside``); it starts at the
    launch barrier with the collective and shares the PEs' resources with it.

    >>> from kbfast import Router, build_tables, load_system
    >>> t = build_tables(load_system("ring6"))
    >>> c = allreduce(t, Router(t), 16384)
    >>> c.n_ranks, c.program.n_ops > 0          # a rank per cube: 6 SIPs x 16 cubes
    (96, True)
    """
    return collective(t, router, nbytes, "all_reduce", algorithm, ranks, launch, tile_io, beside)


def collective(t: Tables, router: Router, nbytes: int, op: str = "all_reduce", algorithm: str | None = None,
               ranks: str | None = None, launch: bool = True, tile_io: bool = True,
               beside: Callable[[ProgramBuilder, np.ndarray], None] | None = None) -> Collective:
    """Build the Program of one collective operation (kbfast.workloads.collectives.ops.OPS) of ``nbytes`` per
    rank (each rank's whole buffer); runs the symbolic check: every rank must end with exactly the
    contributions the operation gives it.

    ``algorithm`` names an entry of ``OP_TABLE[op]`` (default: the operation's first); ``ranks`` is a rank set
    (kbfast.workloads.collectives.placement), default the algorithm's.

    ``tile_io`` (default): every rank loads its input from its own HBM slice before the kernel (a blocking
    DMA_READ from ``hbm_ctrl.pe{X}``, address 0, phase ``tile load``) and stores its output there after it (a
    blocking DMA_WRITE, phase ``tile store``), as the reference kernels do, with the bytes the operation moves
    (``Op.load``, ``Op.store``); ``False`` times the IPCQ schedule alone."""
    algorithm = algorithm or default_algorithm(op, ranks)
    _check_request(op, algorithm, nbytes, ranks, tile_io)
    check_tile_fits(t.spec, nbytes)
    alg = OP_TABLE[op][algorithm]
    ranks = ranks or alg.ranks
    if alg.only_ranks and ranks != alg.ranks:
        raise KbfastError(alg.only_ranks)
    nodes = rank_nodes(t, ranks)
    n = len(nodes)
    info = kernel_info(t, corner_root=alg.corner_root, ranks=ranks)
    if alg.check is not None:
        alg.check(n)
    check_slots(algorithm, alg, t.spec.ipcq.n_slots)
    label = "allreduce" if op == "all_reduce" else op.replace("_", "-")
    b = ProgramBuilder(t, router, name=f"{label}-{algorithm}@{nbytes}B")
    kernel = alg.kernel
    if tile_io:
        kernel = with_tile_io(kernel) if op == "all_reduce" else _with_op_io(kernel, OPS[op], ring_order(info, n)[0])
    if alg.roles is None:       # payloads steer the kernel: one generator per rank
        agents = [b.pe_agent(v) for v in nodes.tolist()]
        expect = alg.expect(n, info) if alg.expect is not None else None
        run_kernels(b, agents, alg.wiring(t, n, info), kernel, nbytes, expect=expect, info=info)
    else:
        wiring = alg.wiring(t, n, info)
        run_traced(b, b.pe_agents(nodes), wiring, kernel, nbytes, alg.roles(n, info), info)
    if beside is not None:
        beside(b, np.asarray(nodes))
    target = launch_timing(t, router, np.array(nodes)).target_start_ns if launch else 0.0
    return Collective(program=b.build(launch_ns=target), algorithm=algorithm, n_ranks=n, nbytes=nbytes,
                      launch_ns=target, tile_io=bool(tile_io), op=op)


def default_algorithm(op: str, ranks: str | None = None) -> str:
    """The operation's first algorithm of ``OP_TABLE`` that runs on ``ranks`` (any, when None): all-reduce's
    lrab on its own rank set, else the first that takes the set."""
    algs = OP_TABLE.get(op, {})
    for name, alg in algs.items():
        if ranks is None or not alg.only_ranks or ranks == alg.ranks:
            return name
    return next(iter(algs), "")


def _with_op_io(kernel: Kernel, op: Op, root: int) -> Kernel:
    """``kernel`` between the tile load and the tile store of ``op``: each in its own phase, each left out
    where the operation moves no bytes for the rank (a broadcast's non-root ranks load nothing, a reduce's
    store nothing); ``root``: the rank a broadcast or a reduce is rooted at."""

    def tiled(tl: Tl):
        is_root = tl.rank == root
        load, store = op.load(tl, is_root), op.store(tl, is_root)
        if load:
            yield tl.phase(TILE_LOAD)
            yield tl.load(load)
        out = yield from kernel(tl)
        if store:
            yield tl.phase(TILE_STORE)
            yield tl.store(store)
        return out

    tiled.__name__ = tiled.__qualname__ = f"{getattr(kernel, '__name__', 'kernel')}_with_{op.name}_io"
    return tiled


def busbw_gbps(nbytes: int, n_ranks: int, latency_ns: float, op: str = "all_reduce") -> float:
    """nccl-tests' bus bandwidth: the algorithm bandwidth ``nbytes / latency`` times the operation's bus
    factor (an all-reduce's ``2 (n-1) / n``; kbfast.workloads.collectives.ops)."""
    if latency_ns <= 0 or n_ranks < 2:
        return 0.0
    if op == "all_reduce":          # the reference's formula, in its order of operations
        return nbytes / latency_ns * 2.0 * (n_ranks - 1) / n_ranks
    return nbytes / latency_ns * OPS[op].bus_factor(n_ranks)
