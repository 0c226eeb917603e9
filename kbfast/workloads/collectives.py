"""Collective generators: each emits Program IR through kernel-style rank programs (spec_ccl §5).

* ``lrab``: ``lrab_hierarchical_allreduce`` (§5.7–§5.9), pe0 of every cube; centre
  root, bidirectional row then column reduce, inter-SIP exchange on the root
  cube (ring_1d / torus_2d / mesh_2d_no_wrap over ``global_*``), column then row
  broadcast; the single-cube fast path (§5.8).
* ``lrab_corner``: the same with the SE-corner root (§5.6).
* ``ring``: flat ring over PEs, every rank circulating the whole tile (§5.2).
* ``tree``: binary-tree reduce to rank 0, then broadcast (§5.4).
* ``hier3``: 3-level hierarchical (§5.5): PE ring in a cube, pe0 ring over cubes,
  ring over SIPs, each a bidirectional chain to the representative, then broadcast.
* ``rs_ag``: chunked ring reduce-scatter then all-gather (bandwidth optimal).

Every all-reduce kernel runs between a tile load and a tile store by default (``tile_io``): each rank
reads its tile from its own HBM slice before the collective and writes the result back after it
(``kbfast.workloads.kernels.with_tile_io``).  ``pe2pe`` is a point-to-point probe without them.

Ranks: ``cube_pe0`` (pe0 of every cube of every SIP) or ``all_pes``.
"""

from __future__ import annotations

from dataclasses import dataclass

from collections.abc import Callable

import numpy as np

from kbfast.config import budget
from kbfast.errors import KbfastError, did_you_mean, shown
from kbfast.ir import Program, ProgramBuilder
from kbfast.topology.builder import Tables
from kbfast.topology.names import pe_block
from kbfast.topology.routing import Router
from kbfast.workloads.install import (
    Wiring,
    grid_peers,
    install,
    neighbor_fn,
    ring_peers,
    tree_peers,
    wire,
)
from kbfast.workloads.kernels import ScheduleError, Tl, run_kernels, with_tile_io
from kbfast.workloads.launch import launch_timing
from kbfast.workloads.symbolic import run_traced

RS_AG_MAX_RANKS = 1024
ALGORITHMS = ("lrab", "lrab_corner", "ring", "tree", "hier3", "rs_ag")
RANKS = ("cube_pe0", "all_pes")


@dataclass(frozen=True)
class Collective:
    program: Program
    algorithm: str
    n_ranks: int
    nbytes: int                     # per-rank tile
    launch_ns: float
    tile_io: bool | None = None     # all-reduce: tile load and store modelled (None: not a collective kernel)


def _sip_fn(t: Tables):
    spec = t.spec
    w, h = spec.sip_grid()
    kind = spec.sips.topology
    return kind, w, h


def _pe_nodes(t: Tables, per_cube: int) -> np.ndarray:
    """``pe_block(t, s, c, p)`` for every SIP s, cube c and PE p < ``per_cube``, in that order."""
    lay = t.layout
    local = np.array([t.cube_names.index(f"pe{p}.pe_dma") for p in range(per_cube)], np.int64)
    cube = (1 + lay.io_nodes + np.arange(lay.n_cubes_per_sip, dtype=np.int64) * lay.nodes_per_cube)[:, None]
    sip = (np.arange(lay.n_sips, dtype=np.int64) * lay.nodes_per_sip)[:, None]
    return (sip + (cube + local).ravel()).ravel()


def _cube_ranks(t: Tables) -> np.ndarray:
    return _pe_nodes(t, 1)


def _all_pe_ranks(t: Tables) -> np.ndarray:
    return _pe_nodes(t, len(t.plan.pe_router))


def intercube_wiring(t: Tables) -> Wiring:
    """pe0 of every cube: N/S/E/W on the cube mesh (no wrap) and ``global_*`` to the same cube of the
    neighbouring SIPs per ``sips.topology`` (spec_ccl §5.10), as arrays."""
    return wire(*intercube_peers(t))


def intercube_peers(t: Tables) -> tuple[list[str], np.ndarray]:
    """:func:`intercube_wiring`'s labels and neighbour table (rank = SIP * cubes + cube), before the install."""
    lay = t.layout
    nc = lay.n_cubes_per_sip
    neighbor_fn("mesh_2d_no_wrap", nc, lay.cube_w, lay.cube_h)     # the same checks as the install
    kind, w, h = _sip_fn(t)
    if kind not in ("ring_1d", "torus_2d", "mesh_2d_no_wrap"):
        raise KbfastError(f"lrab's inter-SIP exchange supports ring_1d, torus_2d and mesh_2d_no_wrap, "
                          f"not sips.topology={kind!r}")
    neighbor_fn(kind, lay.n_sips, w, h, prefix="global_")
    intra_l, intra = grid_peers(lay.cube_w, lay.cube_h, wrap=False)
    inter_l, inter = (ring_peers(lay.n_sips, "global_") if kind == "ring_1d" else
                      grid_peers(w, h, wrap=kind == "torus_2d", prefix="global_"))
    sip, cube = np.divmod(np.arange(lay.n_sips * nc), nc)
    a = np.where(intra[cube] >= 0, sip[:, None] * nc + intra[cube], -1)
    b = np.where(inter[sip] >= 0, inter[sip] * nc + cube[:, None], -1)
    return intra_l + inter_l, np.concatenate([a, b], axis=1)


def _hier3_wiring(n_pe: int, n_cubes: int, n_sips: int) -> Wiring:
    """hier3's install (spec_ccl §5.5): a PE line per cube, pe0 lines N/S across a SIP's cubes, cube 0's
    pe0 lines ``global_*`` across SIPs, as arrays."""
    sip, rest = np.divmod(np.arange(n_pe * n_cubes * n_sips), n_cubes * n_pe)
    cube, pe = np.divmod(rest, n_pe)
    rank = np.arange(len(sip))
    rep = pe == 0
    sip0 = sip * n_cubes * n_pe
    cols = [np.where(pe > 0, rank - 1, -1), np.where(pe < n_pe - 1, rank + 1, -1),
            np.where(rep & (cube > 0), sip0 + (cube - 1) * n_pe, -1),
            np.where(rep & (cube < n_cubes - 1), sip0 + (cube + 1) * n_pe, -1),
            np.where(rep & (cube == 0) & (sip > 0), (sip - 1) * n_cubes * n_pe, -1),
            np.where(rep & (cube == 0) & (sip < n_sips - 1), (sip + 1) * n_cubes * n_pe, -1)]
    return wire(["intra_W", "intra_E", "N", "S", "global_W", "global_E"], np.stack(cols, axis=1))


def _roles(algorithm: str, n: int, info: dict) -> np.ndarray:
    """Per rank, the features its kernel's control flow depends on (ranks with equal rows run the same ops)."""
    r = np.arange(n)
    if algorithm.startswith("lrab"):
        sip, cube = np.divmod(r, info["cube_w"] * info["cube_h"])
        feats = [cube]
        if info["sip_kind"] == "mesh_2d_no_wrap":      # the chains of §5.9 depend on the SIP's position
            srow, scol = np.divmod(sip, info["sip_w"])
            feats += [scol == 0, scol == info["sip_w"] - 1, srow == 0, srow == info["sip_h"] - 1]
    elif algorithm == "tree":
        feats = [r > 0, 2 * r + 1 < n, 2 * r + 2 < n]
    elif algorithm == "hier3":
        n_pe, nc = info["n_pe"], info["n_cubes"]
        sip, rest = np.divmod(r, nc * n_pe)
        cube, pe = np.divmod(rest, n_pe)
        feats = [pe == 0, pe == n_pe - 1, cube == 0, cube == nc - 1, sip == 0, sip == info["n_sips"] - 1]
    else:   # ring: every rank alike
        feats = [np.zeros(n, bool)]
    return np.stack([np.asarray(f, np.int64) for f in feats], axis=1)


def _inter_sip(tl: Tl, acc: int, kind: str, sip: int, n_sips: int, w: int, h: int):
    """Phase 3 (spec_ccl §5.9) on the root cube's pe0; returns the SIP-wide result."""
    if n_sips == 1:
        return acc
    if kind == "ring_1d":
        return (yield from _ring_circulate(tl, acc, "global_E", "global_W", n_sips))
    if kind == "torus_2d":
        if w > 1:
            acc = yield from _ring_circulate(tl, acc, "global_E", "global_W", w)
        if h > 1:
            acc = yield from _ring_circulate(tl, acc, "global_S", "global_N", h)
        return acc
    row, col = divmod(sip, w)
    acc = yield from _chain(tl, acc, col, w, "global_W", "global_E")
    acc = yield from _chain(tl, acc, row, h, "global_N", "global_S")
    return acc


def _ring_circulate(tl: Tl, acc: int, out: str, inp: str, n: int):
    """n-1 rounds: send current, receive from the other side, accumulate (spec_ccl §5.2)."""
    current = acc
    for _ in range(n - 1):
        yield tl.send(out, current)
        r = yield tl.recv(inp)
        acc = tl.add(acc, r)
        yield tl.math()
        current = r
    return acc


def _chain(tl: Tl, acc: int, pos: int, n: int, toward: str, away: str):
    """Chain reduce to position 0 (receive from ``away``, send ``toward``), then broadcast back."""
    if n == 1:
        return acc
    if pos < n - 1:
        r = yield tl.recv(away)
        acc = tl.add(acc, r)
        yield tl.math()
    if pos > 0:
        yield tl.send(toward, acc)
        acc = yield tl.recv(toward)
    if pos < n - 1:
        yield tl.send(away, acc)
    return acc


def _converge(tl: Tl, acc: int, pos: int, root: int, n: int, lo_dir: str, hi_dir: str):
    """Bidirectional reduce along a line onto ``root`` (spec_ccl §5.7 P1/P2)."""
    if pos < root:
        if pos > 0:
            acc = tl.add(acc, (yield tl.recv(lo_dir)))
            yield tl.math()
        yield tl.send(hi_dir, acc)
    elif pos > root:
        if pos < n - 1:
            acc = tl.add(acc, (yield tl.recv(hi_dir)))
            yield tl.math()
        yield tl.send(lo_dir, acc)
    else:
        if root > 0:
            acc = tl.add(acc, (yield tl.recv(lo_dir)))
            yield tl.math()
        if root < n - 1:
            acc = tl.add(acc, (yield tl.recv(hi_dir)))
            yield tl.math()
    return acc


def _spread(tl: Tl, acc: int, pos: int, root: int, n: int, lo_dir: str, hi_dir: str):
    """Broadcast from ``root`` outward along a line (spec_ccl §5.7 P4/P5)."""
    if pos == root:
        if root > 0:
            yield tl.send(lo_dir, acc)
        if root < n - 1:
            yield tl.send(hi_dir, acc)
    elif pos < root:
        acc = yield tl.recv(hi_dir)
        if pos > 0:
            yield tl.send(lo_dir, acc)
    else:
        acc = yield tl.recv(lo_dir)
        if pos < n - 1:
            yield tl.send(hi_dir, acc)
    return acc


def _tag(tl: Tl, tag: bool, name: str):
    if tag:
        yield tl.phase(name)


def lrab_kernel(tl: Tl):
    """``lrab_hierarchical_allreduce`` on pe0 of every cube (spec_ccl §5.7)."""
    return (yield from lrab_body(tl, tl.contribution(), tl.rank))


def lrab_body(tl: Tl, acc: int, rank: int, tag: bool = True):
    """lrab's phases P1-P5 for value ``acc`` on cube rank ``rank`` (SIP * cubes + cube); returns the result.
    ``tag=False`` leaves the caller's phase in place (no P1-P5 phase tags)."""
    cw, ch, rc, rr = tl.info["cube_w"], tl.info["cube_h"], tl.info["root_col"], tl.info["root_row"]
    nc = cw * ch
    sip, cube = divmod(rank, nc)
    row, col = divmod(cube, cw)
    kind, n_sips, w, h = tl.info["sip_kind"], tl.info["n_sips"], tl.info["sip_w"], tl.info["sip_h"]
    if nc > 1:
        yield from _tag(tl, tag, "P1 row reduce")
        acc = yield from _converge(tl, acc, col, rc, cw, "W", "E")
        if col == rc:
            yield from _tag(tl, tag, "P2 column reduce")
            acc = yield from _converge(tl, acc, row, rr, ch, "N", "S")
    if cube == rr * cw + rc:
        yield from _tag(tl, tag, "P3 inter-SIP")
        acc = yield from _inter_sip(tl, acc, kind, sip, n_sips, w, h)
    if nc > 1:
        if col == rc:
            yield from _tag(tl, tag, "P4 column broadcast")
            acc = yield from _spread(tl, acc, row, rr, ch, "N", "S")
        yield from _tag(tl, tag, "P5 row broadcast")
        acc = yield from _spread(tl, acc, col, rc, cw, "W", "E")
    return acc


def ring_kernel(tl: Tl):
    """Flat ring: every rank circulates its whole tile ws-1 times (spec_ccl §5.2)."""
    tl_acc = tl.contribution()
    yield tl.phase("ring")
    return (yield from _ring_circulate(tl, tl_acc, "E", "W", tl.n_ranks))


def tree_kernel(tl: Tl):
    """Binary tree: reduce children into parent up to rank 0, then broadcast down (spec_ccl §5.4)."""
    acc = tl.contribution()
    r, n = tl.rank, tl.n_ranks
    children = [d for d, c in (("child_left", 2 * r + 1), ("child_right", 2 * r + 2)) if c < n]
    yield tl.phase("reduce")
    for d in children:
        acc = tl.add(acc, (yield tl.recv(d)))
        yield tl.math()
    if r > 0:
        yield tl.send("parent", acc)
        yield tl.phase("broadcast")
        acc = yield tl.recv("parent")
    else:
        yield tl.phase("broadcast")
    for d in children:
        yield tl.send(d, acc)
    return acc


def hier3_kernel(tl: Tl):
    """3-level hierarchical (spec_ccl §5.5): PE line -> pe0, pe0 line over cubes -> cube 0, SIP line -> SIP 0."""
    n_pe, nc, n_sips = tl.info["n_pe"], tl.info["n_cubes"], tl.info["n_sips"]
    sip, rest = divmod(tl.rank, nc * n_pe)
    cube, pe = divmod(rest, n_pe)
    acc = tl.contribution()
    levels = [(pe, n_pe, "intra_W", "intra_E", True), (cube, nc, "N", "S", pe == 0),
              (sip, n_sips, "global_W", "global_E", pe == 0 and cube == 0)]
    for i, (pos, n, lo, hi, member) in enumerate(levels):
        if member and n > 1:
            yield tl.phase(f"L{i + 1} reduce")
            acc = yield from _converge(tl, acc, pos, 0, n, lo, hi)
    for i, (pos, n, lo, hi, member) in reversed(list(enumerate(levels))):
        if member and n > 1:
            yield tl.phase(f"L{i + 1} broadcast")
            acc = yield from _spread(tl, acc, pos, 0, n, lo, hi)
    return acc


def rs_ag_kernel(tl: Tl):
    """Chunked ring reduce-scatter then all-gather.  A payload is ``(contributors << cb) | chunk``: the
    contributor set of one chunk (n bits) tagged with the chunk's index, so a chunk received into the wrong
    slot is caught as well as a contribution counted twice."""
    n, r = tl.n_ranks, tl.rank
    chunk = max(tl.nbytes // n, 1)
    elem = max(tl.n_elem // n, 1)
    cb = n.bit_length()
    have = [(1 << r) << cb | c for c in range(n)]

    def same_chunk(c: int, got: int) -> int:
        if got & ((1 << cb) - 1) != c:
            raise ScheduleError(f"rank {r} receives chunk {got & ((1 << cb) - 1)} into the slot of chunk {c}")
        return got

    yield tl.phase("reduce-scatter")
    for step in range(n - 1):
        send_c, recv_c = (r - step) % n, (r - step - 1) % n
        yield tl.send("E", have[send_c], chunk)
        got = same_chunk(recv_c, (yield tl.recv("W", chunk)))
        have[recv_c] = tl.add(have[recv_c] >> cb, got >> cb) << cb | recv_c
        yield tl.math(elem)
    yield tl.phase("all-gather")
    for step in range(n - 1):
        send_c, recv_c = (r + 1 - step) % n, (r - step) % n
        yield tl.send("E", have[send_c], chunk)
        have[recv_c] = same_chunk(recv_c, (yield tl.recv("W", chunk)))
    out = (1 << n) - 1
    for c in range(n):
        out &= have[c] >> cb        # the ranks present in every chunk
    return out


KERNELS = {"lrab": lrab_kernel, "lrab_corner": lrab_kernel, "ring": ring_kernel, "tree": tree_kernel,
           "hier3": hier3_kernel, "rs_ag": rs_ag_kernel}


def kernel_info(t: Tables, corner_root: bool = False) -> dict:
    """What the collective kernels read of the system: the cube mesh, the SIP grid and its kind, PEs per cube,
    cubes per SIP, and lrab's root cube (the centre, or the SE corner, spec_ccl §5.6-§5.7)."""
    lay = t.layout
    kind, w, h = _sip_fn(t)
    return {"cube_w": lay.cube_w, "cube_h": lay.cube_h, "n_sips": lay.n_sips, "sip_kind": kind, "sip_w": w,
            "sip_h": h, "n_pe": len(t.plan.pe_router), "n_cubes": lay.n_cubes_per_sip,
            "root_col": lay.cube_w - 1 if corner_root else lay.cube_w // 2,
            "root_row": lay.cube_h - 1 if corner_root else lay.cube_h // 2}


def check_tile_fits(spec, nbytes: int, label: str = "") -> None:
    """Refuse an all-reduce whose tile, ``nbytes`` per rank, exceeds a PE's HBM slice, where each rank keeps it
    (kbfast.budget.check_hbm_slice); ``label`` names the input (``"--size 64GiB: "``)."""
    budget.check_hbm_slice(spec, nbytes, f"{label}an all-reduce of {budget.fmt_bytes(nbytes)} per rank does not "
                           "fit: each rank holds its tile", f"use at most {budget.fmt_bytes(spec.hbm_slice_bytes)} "
                           "per rank, or more HBM per cube (hbm.total_gib_per_cube)")


def allreduce(t: Tables, router: Router, nbytes: int, algorithm: str = "lrab", ranks: str | None = None,
              launch: bool = True, tile_io: bool = True,
              beside: Callable[[ProgramBuilder, np.ndarray], None] | None = None) -> Collective:
    """Build the Program of one all-reduce of ``nbytes`` per rank; runs the symbolic check.

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
    if algorithm not in ALGORITHMS:
        raise KbfastError(f"unknown all-reduce algorithm {algorithm!r}: {did_you_mean(algorithm, ALGORITHMS)}")
    if nbytes <= 0:
        raise KbfastError(f"all-reduce size must be > 0 bytes (got {nbytes})")
    if not isinstance(tile_io, (bool, np.bool_)):
        raise KbfastError(f"tile_io must be true or false (got {tile_io!r})")
    if ranks is not None and ranks not in RANKS:
        close = did_you_mean(str(ranks), RANKS)
        raise KbfastError(f"ranks {shown(ranks)} is not a set of ranks: cube_pe0 (pe0 of every cube) or all_pes "
                          f"(every PE){'; ' + close if close.startswith('did') else ''}")
    check_tile_fits(t.spec, nbytes)
    lay = t.layout
    ranks = ranks or ("cube_pe0" if algorithm.startswith("lrab") else "all_pes")
    if algorithm.startswith("lrab") and ranks != "cube_pe0":
        raise KbfastError("lrab runs on pe0 of every cube (ranks=cube_pe0)")
    if algorithm == "hier3" and ranks != "all_pes":
        raise KbfastError("hier3 runs on every PE (ranks=all_pes)")
    nodes = _cube_ranks(t) if ranks == "cube_pe0" else _all_pe_ranks(t)
    n = len(nodes)
    info = kernel_info(t, corner_root=algorithm == "lrab_corner")
    n_pe = info["n_pe"]
    if algorithm == "rs_ag" and n > RS_AG_MAX_RANKS:
        raise KbfastError(f"rs_ag sends 2(n-1) chunks per rank, {2 * n * (n - 1):,} messages on {n} ranks; it is "
                          f"limited to {RS_AG_MAX_RANKS} ranks: use ranks=cube_pe0, ring or lrab")
    b = ProgramBuilder(t, router, name=f"allreduce-{algorithm}@{nbytes}B")
    kernel = with_tile_io(KERNELS[algorithm]) if tile_io else KERNELS[algorithm]
    if algorithm == "rs_ag":
        # payloads carry chunk tags (bit arithmetic): run the generators themselves
        agents = [b.pe_agent(v) for v in nodes.tolist()]
        run_kernels(b, agents, install(n, neighbor_fn("ring_1d", n)), kernel, nbytes, info=info)
    else:
        if algorithm.startswith("lrab"):
            wiring = intercube_wiring(t)
        elif algorithm == "tree":
            wiring = wire(*tree_peers(n))
        elif algorithm == "hier3":
            wiring = _hier3_wiring(n_pe, lay.n_cubes_per_sip, lay.n_sips)
        else:
            wiring = wire(*ring_peers(n))
        run_traced(b, b.pe_agents(nodes), wiring, kernel, nbytes, _roles(algorithm, n, info), info)
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


def pe2pe(t: Tables, router: Router, hop: str, nbytes: int, raw_dma: bool = False, consume: bool = True,
          launch: bool = True) -> Collective:
    """One PE-to-PE transfer of a hop class (spec_pe §11.6): IPCQ send/recv, or raw DMA load + store.

    >>> from kbfast import Router, build_tables, load_system
    >>> t = build_tables(load_system())
    >>> pe2pe(t, Router(t), "h3", 4096).program.n_agents
    2
    """
    if hop not in HOPS:
        raise KbfastError(f"unknown hop class {hop!r}: {did_you_mean(hop, HOPS)}")
    if nbytes <= 0:
        raise KbfastError(f"pe2pe size must be > 0 bytes (got {nbytes})")
    (s0, c0, p0), (s1, c1, p1) = hop_endpoints(t, hop)
    src, dst = pe_block(t, s0, c0, p0), pe_block(t, s1, c1, p1)
    b = ProgramBuilder(t, router, name=f"pe2pe-{hop}-{'dma' if raw_dma else 'ipcq'}@{nbytes}B")
    a, z = b.pe_agent(src), b.pe_agent(dst)
    b.start(a)
    b.start(z)
    if raw_dma:
        from kbfast.topology.names import hbm_ctrl

        b.dma(a, hbm_ctrl(t, s0, c0, p0), nbytes, write=False)      # tl.load from the own slice
        b.dma(a, hbm_ctrl(t, s1, c1, p1), nbytes, write=True)       # tl.store into the peer's slice
    else:
        ch = b.channel(a, z)
        b.send(a, ch, nbytes)
        b.recv(z, ch, nbytes, consume=consume)
    target = launch_timing(t, router, np.array([src, dst])).target_start_ns if launch else 0.0
    return Collective(program=b.build(launch_ns=target), algorithm=f"pe2pe_{hop}", n_ranks=2, nbytes=nbytes,
                      launch_ns=target)
