"""pe2pe: one PE-to-PE transfer of a hop class (spec_pe §11.6), a point-to-point probe without tile I/O."""

from __future__ import annotations

import numpy as np

from kbfast.errors import KbfastError, did_you_mean
from kbfast.ir import ProgramBuilder
from kbfast.topology.builder import Tables
from kbfast.topology.names import hbm_ctrl, pe_block
from kbfast.topology.routing import Router
from kbfast.workloads.launch import launch_timing
from kbfast.workloads.collectives.generate import Collective

HOPS = {
    "h1": ("intra-cube horizontal", (0, 0, 0), (0, 0, 1)),
    "h2": ("intra-cube vertical", (0, 0, 0), (0, 0, 4)),
    "h3": ("inter-cube horizontal", (0, 0, 0), (0, 1, 0)),
    "h4": ("inter-cube vertical", (0, 0, 0), (0, -1, 0)),   # cube w: one row down
    "h5": ("inter-SIP", (0, 0, 0), (1, 0, 0)),
}


def hop_endpoints(t: Tables, hop: str) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """(sip, cube, pe) of the source and the destination of a hop class on ``t`` (cube -1: one row down)."""
    _, src, (s1, c1, p1) = HOPS[hop]
    lay = t.layout
    if c1 < 0:
        c1 = lay.cube_w
    if s1 >= lay.n_sips or c1 >= lay.n_cubes_per_sip or p1 >= len(t.plan.pe_router):
        raise KbfastError(f"hop class {hop} needs a second {'SIP' if s1 else 'cube'} in this topology")
    return src, (s1, c1, p1)


def check_hop(hop: str) -> None:
    """Refuse a hop class that is not one of :data:`HOPS` (a sweep checks it before any point runs)."""
    if hop not in HOPS:
        raise KbfastError(f"unknown hop class {hop!r}: {did_you_mean(hop, HOPS)}")


def pe2pe(t: Tables, router: Router, hop: str, nbytes: int, raw_dma: bool = False, consume: bool = True,
          launch: bool = True, load: bool = True) -> Collective:
    """One PE-to-PE transfer of a hop class (spec_pe §11.6): IPCQ send/recv, or raw DMA load + store
    (``load=False``: the store into the peer's slice alone).

    >>> from kbfast import Router, build_tables, load_system
    >>> t = build_tables(load_system())
    >>> pe2pe(t, Router(t), "h3", 4096).program.n_agents
    2
    """
    check_hop(hop)
    if nbytes <= 0:
        raise KbfastError(f"pe2pe size must be > 0 bytes (got {nbytes})")
    (s0, c0, p0), (s1, c1, p1) = hop_endpoints(t, hop)
    src, dst = pe_block(t, s0, c0, p0), pe_block(t, s1, c1, p1)
    b = ProgramBuilder(t, router, name=f"pe2pe-{hop}-{('dma' if load else 'store') if raw_dma else 'ipcq'}@{nbytes}B")
    a, z = b.pe_agent(src), b.pe_agent(dst)
    b.start(a)
    b.start(z)
    if raw_dma:
        if load:
            b.dma(a, hbm_ctrl(t, s0, c0, p0), nbytes, write=False)  # tl.load from the own slice
        b.dma(a, hbm_ctrl(t, s1, c1, p1), nbytes, write=True)       # tl.store into the peer's slice
    else:
        ch = b.channel(a, z)
        b.send(a, ch, nbytes)
        b.recv(z, ch, nbytes, consume=consume)
    target = launch_timing(t, router, np.array([src, dst])).target_start_ns if launch else 0.0
    how = ("_dma" if load else "_store") if raw_dma else ""   # as the Program's name: a raw DMA says so
    return Collective(program=b.build(launch_ns=target), algorithm=f"pe2pe_{hop}{how}", n_ranks=2, nbytes=nbytes,
                      launch_ns=target)
