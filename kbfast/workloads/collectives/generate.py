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
from kbfast.errors import KbfastError, did_you_mean, shown
from kbfast.ir import Program, ProgramBuilder
from kbfast.topology.builder import Tables
from kbfast.topology.routing import Router
from kbfast.workloads.kernels import run_kernels, with_tile_io
from kbfast.workloads.launch import launch_timing
from kbfast.workloads.symbolic import run_traced
from kbfast.workloads.collectives.placement import RANKS, kernel_info, rank_nodes
from kbfast.workloads.collectives.table import ALGORITHMS, TABLE


@dataclass(frozen=True)
class Collective:
    """A collective's Program with what it is: the algorithm (or ``pe2pe_<hop>``), the rank count, the
    per-rank tile, the launch barrier and whether the tile load and store are modelled."""

    program: Program
    algorithm: str
    n_ranks: int
    nbytes: int                     # per-rank tile
    launch_ns: float
    tile_io: bool | None = None     # all-reduce: tile load and store modelled (None: not a collective kernel)


def check_tile_fits(spec, nbytes: int, label: str = "") -> None:
    """Refuse an all-reduce whose tile, ``nbytes`` per rank, exceeds a PE's HBM slice, where each rank keeps it
    (kbfast.config.budget.check_hbm_slice); ``label`` names the input (``"--size 64GiB: "``)."""
    budget.check_hbm_slice(spec, nbytes, f"{label}an all-reduce of {budget.fmt_bytes(nbytes)} per rank does not "
                           "fit: each rank holds its tile", f"use at most {budget.fmt_bytes(spec.hbm_slice_bytes)} "
                           "per rank, or more HBM per cube (hbm.total_gib_per_cube)")


def _check_request(algorithm: str, nbytes: int, ranks: str | None, tile_io) -> None:
    """Refuse an unknown algorithm or rank set, a size below one byte and a ``tile_io`` that is not a bool."""
    if algorithm not in TABLE:
        raise KbfastError(f"unknown all-reduce algorithm {algorithm!r}: {did_you_mean(algorithm, ALGORITHMS)}")
    if nbytes <= 0:
        raise KbfastError(f"all-reduce size must be > 0 bytes (got {nbytes})")
    if not isinstance(tile_io, (bool, np.bool_)):
        raise KbfastError(f"tile_io must be true or false (got {tile_io!r})")
    if ranks is not None and ranks not in RANKS:
        close = did_you_mean(str(ranks), RANKS)
        raise KbfastError(f"ranks {shown(ranks)} is not a set of ranks: cube_pe0 (pe0 of every cube) or all_pes "
                          f"(every PE){'; ' + close if close.startswith('did') else ''}")


def allreduce(t: Tables, router: Router, nbytes: int, algorithm: str = "lrab", ranks: str | None = None,
              launch: bool = True, tile_io: bool = True,
              beside: Callable[[ProgramBuilder, np.ndarray], None] | None = None) -> Collective:
    """Build the Program of one all-reduce of ``nbytes`` per rank; runs the symbolic check.

    ``algorithm`` names an entry of ``kbfast.workloads.collectives.table.TABLE``; ``ranks`` defaults to the
    algorithm's rank set.

    ``beside(builder, rank_nodes)`` adds other work to the same Program before it is built, on agents of its
    own (for example a GEMM on every rank's PE: ``kbfast.workloads.gemm.gemm_beside``); it starts at the
    launch barrier with the collective and shares the PEs' resources with it.

    ``tile_io`` (default): every rank loads its tile from its own HBM slice before the kernel (a blocking
    DMA_READ of ``nbytes`` from ``hbm_ctrl.pe{X}``, address 0, phase ``tile load``) and stores the result
    there after it (a blocking DMA_WRITE, phase ``tile store``), as the reference kernels do; ``False``
    times the IPCQ schedule alone.

    >>> from kbfast import Router, build_tables, load_system
    >>> t = build_tables(load_system("ring6"))
    >>> c = allreduce(t, Router(t), 16384)
    >>> c.n_ranks, c.program.n_ops > 0          # a rank per cube: 6 SIPs x 16 cubes
    (96, True)
    """
    _check_request(algorithm, nbytes, ranks, tile_io)
    check_tile_fits(t.spec, nbytes)
    alg = TABLE[algorithm]
    ranks = ranks or alg.ranks
    if alg.only_ranks and ranks != alg.ranks:
        raise KbfastError(alg.only_ranks)
    nodes = rank_nodes(t, ranks)
    n = len(nodes)
    info = kernel_info(t, corner_root=alg.corner_root)
    if alg.check is not None:
        alg.check(n)
    b = ProgramBuilder(t, router, name=f"allreduce-{algorithm}@{nbytes}B")
    kernel = with_tile_io(alg.kernel) if tile_io else alg.kernel
    if alg.roles is None:       # payloads steer the kernel: one generator per rank
        agents = [b.pe_agent(v) for v in nodes.tolist()]
        run_kernels(b, agents, alg.wiring(t, n, info), kernel, nbytes, info=info)
    else:
        wiring = alg.wiring(t, n, info)
        run_traced(b, b.pe_agents(nodes), wiring, kernel, nbytes, alg.roles(n, info), info)
    if beside is not None:
        beside(b, np.asarray(nodes))
    target = launch_timing(t, router, np.array(nodes)).target_start_ns if launch else 0.0
    return Collective(program=b.build(launch_ns=target), algorithm=algorithm, n_ranks=n, nbytes=nbytes,
                      launch_ns=target, tile_io=bool(tile_io))


def busbw_gbps(nbytes: int, n_ranks: int, latency_ns: float) -> float:
    """NCCL-style bus bandwidth of an all-reduce: (bytes / time) * 2 (n-1) / n."""
    if latency_ns <= 0 or n_ranks < 2:
        return 0.0
    return nbytes / latency_ns * 2.0 * (n_ranks - 1) / n_ranks
