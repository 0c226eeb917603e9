"""The traced generator path (trace once per role, replay in Numba) against the generator reference.

``allreduce`` builds lrab, lrab_corner, ring, tree and hier3 by tracing each kernel once per rank role
(kbfast.workloads.templates) and replaying every rank (kbfast.workloads.symbolic).  Its Program must be
bit-for-bit the one ``run_kernels`` (one generator per rank) emits, with the tile load and store
(``tile_io``, the default) and without, and its symbolic check must raise the same ScheduleErrors.  ``tests/snapshot_programs.py`` compares many more cases against a saved snapshot.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kbfast.config import load_system
from kbfast.ir import Op, Program, ProgramBuilder
from kbfast.topology.builder import build_tables
from kbfast.topology.names import hbm_ctrl, pe_block
from kbfast.topology.routing import Router
from kbfast.workloads import collectives as C
from kbfast.workloads.collectives import hier3
from kbfast.workloads.collectives.placement import sip_grid
from kbfast.workloads.install import (
    grid_peers,
    install,
    neighbor_fn,
    ring_peers,
    tree_peers,
    wire,
)
from kbfast.workloads.kernels import ScheduleError, Tl, run_kernels, with_tile_io
from kbfast.workloads.launch import launch_timing
from kbfast.workloads.symbolic import _distinct_rows, run_traced

SYSTEMS = {
    "ring3_2x2": {"sips.count": 3, "sip.cube_mesh.w": 2, "sip.cube_mesh.h": 2},
    "torus6_3x2": {"sips.count": 6, "sips.topology": "torus_2d", "sips.w": 3, "sips.h": 2,
                   "sip.cube_mesh.w": 3, "sip.cube_mesh.h": 2},
    "mesh6_3x3": {"sips.count": 6, "sips.topology": "mesh_2d_no_wrap", "sips.w": 2, "sips.h": 3,
                  "sip.cube_mesh.w": 3, "sip.cube_mesh.h": 3},
}


@pytest.fixture(scope="module")
def systems():
    out = {}
    for name, over in SYSTEMS.items():
        t = build_tables(load_system(overrides=over))
        out[name] = (t, Router(t))
    return out


# The installs as neighbour functions over the dict-form install(): the reference the array wirings
# (C.intercube_wiring, hier3.wiring) must equal.
def intercube_install(t):
    """pe0 of every cube: N/S/E/W on the cube mesh (no wrap) and ``global_*`` to the same cube of the
    neighbouring SIPs per ``sips.topology`` (spec_ccl §5.10)."""
    lay = t.layout
    nc = lay.n_cubes_per_sip
    cube_fn = neighbor_fn("mesh_2d_no_wrap", nc, lay.cube_w, lay.cube_h)
    kind, w, h = sip_grid(t)
    assert kind in ("ring_1d", "torus_2d", "mesh_2d_no_wrap")
    sip_fn = neighbor_fn(kind, lay.n_sips, w, h, prefix="global_")

    def intra(rank: int, n: int) -> dict[str, int]:
        sip, cube = divmod(rank, nc)
        return {d: sip * nc + p for d, p in cube_fn(cube, nc).items()}

    def inter(rank: int, n: int) -> dict[str, int]:
        sip, cube = divmod(rank, nc)
        return {d: p * nc + cube for d, p in sip_fn(sip, lay.n_sips).items()}

    return install(lay.n_sips * nc, intra, inter)


def hier3_install(n_pe: int, n_cubes: int, n_sips: int):
    """hier3's install from neighbour functions (the dict form)."""
    line = lambda n: (lambda pos, m: {**({"W": pos - 1} if pos > 0 else {}), **({"E": pos + 1} if pos < n - 1 else {})})  # noqa: E731

    def table(rank: int, n: int) -> dict[str, int]:
        sip, rest = divmod(rank, n_cubes * n_pe)
        cube, pe = divmod(rest, n_pe)
        out = {f"intra_{d}": sip * n_cubes * n_pe + cube * n_pe + p for d, p in line(n_pe)(pe, n_pe).items()}
        if pe == 0:
            out.update({{"W": "N", "E": "S"}[d]: sip * n_cubes * n_pe + c * n_pe for d, c in
                        line(n_cubes)(cube, n_cubes).items()})
            if cube == 0:
                out.update({f"global_{d}": s * n_cubes * n_pe for d, s in line(n_sips)(sip, n_sips).items()})
        return out

    return install(n_pe * n_cubes * n_sips, table)


def _reference(t, router, algorithm: str, nbytes: int, ranks: str, tile_io: bool = True) -> Program:
    """``allreduce`` as it was: a generator per rank, driven by ``run_kernels`` over the dict install (with
    the tile load and store of ``with_tile_io``, looked up by name, when ``tile_io``)."""
    lay = t.layout
    n_pe = len(t.plan.pe_router)
    nodes = [pe_block(t, s, c, p) for s in range(lay.n_sips) for c in range(lay.n_cubes_per_sip)
             for p in range(1 if ranks == "cube_pe0" else n_pe)]
    n = len(nodes)
    kind, w, h = sip_grid(t)
    corner = algorithm == "lrab_corner"
    info = {"cube_w": lay.cube_w, "cube_h": lay.cube_h, "n_sips": lay.n_sips, "sip_kind": kind, "sip_w": w,
            "sip_h": h, "n_pe": n_pe, "n_cubes": lay.n_cubes_per_sip,
            "root_col": lay.cube_w - 1 if corner else lay.cube_w // 2,
            "root_row": lay.cube_h - 1 if corner else lay.cube_h // 2}
    inst = (intercube_install(t) if algorithm.startswith("lrab") else
            install(n, neighbor_fn("tree_binary", n)) if algorithm == "tree" else
            hier3_install(n_pe, lay.n_cubes_per_sip, lay.n_sips) if algorithm == "hier3" else
            install(n, neighbor_fn("ring_1d", n)))
    b = ProgramBuilder(t, router, name=f"allreduce-{algorithm}@{nbytes}B")
    agents = [b.pe_agent(v) for v in nodes]
    kernel = with_tile_io(C.KERNELS[algorithm]) if tile_io else C.KERNELS[algorithm]
    run_kernels(b, agents, inst, kernel, nbytes, info=info)
    p = b.build(launch_ns=launch_timing(t, router, np.array(nodes)).target_start_ns)
    if tile_io:   # every rank's own slice, by name
        own = [hbm_ctrl(t, s, c, pe) for s in range(lay.n_sips) for c in range(lay.n_cubes_per_sip)
               for pe in range(1 if ranks == "cube_pe0" else n_pe)]
        dma = np.isin(p.op_code, (Op.DMA_READ, Op.DMA_WRITE))
        assert list(p.op_target[dma]) == [own[a] for a in p.op_agent[dma]]
    return p


def _assert_same(p: Program, q: Program) -> None:
    for f in dataclasses.fields(Program):
        x, y = getattr(p, f.name), getattr(q, f.name)
        if f.name == "tables":
            continue
        if f.name == "channels":
            for g in dataclasses.fields(x):
                a, b = getattr(x, g.name), getattr(y, g.name)
                assert np.asarray(a).dtype == np.asarray(b).dtype and np.array_equal(a, b), g.name
        elif isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes(), f.name
        else:
            assert x == y, f.name


@pytest.mark.parametrize("tile_io", [True, False], ids=["tile_io", "no_tile_io"])
@pytest.mark.parametrize("system", list(SYSTEMS))
@pytest.mark.parametrize("algorithm,ranks", [("lrab", "cube_pe0"), ("lrab_corner", "cube_pe0"), ("ring", "cube_pe0"),
                                             ("tree", "cube_pe0"), ("tree", "all_pes"), ("hier3", "all_pes")])
def test_traced_program_is_the_generator_program(systems, system: str, algorithm: str, ranks: str,
                                                 tile_io: bool) -> None:
    t, router = systems[system]
    fast = C.allreduce(t, router, 3000, algorithm, ranks=ranks, tile_io=tile_io).program
    _assert_same(fast, _reference(t, router, algorithm, 3000, ranks, tile_io))
    assert int(np.isin(fast.op_code, (Op.DMA_READ, Op.DMA_WRITE)).sum()) == (2 * fast.n_agents if tile_io else 0)


def _same_install(a, b) -> None:
    assert a.tables == b.tables and a.recv_dir == b.recv_dir and a.sender_of == b.sender_of


def test_array_install_is_the_dict_install(systems) -> None:
    for n in (1, 2, 3, 5):
        _same_install(wire(*ring_peers(n)).to_install(), install(n, neighbor_fn("ring_1d", n)))
        _same_install(wire(*tree_peers(n)).to_install(), install(n, neighbor_fn("tree_binary", n)))
        r = np.arange(n)
        if n > 1:
            _same_install(wire(["E"], ((r + 1) % n)[:, None]).to_install(),
                          install(n, neighbor_fn("ring_1d_unidir", n)))
    for w in (1, 2, 3):
        for h in (1, 2, 3):
            for kind in ("torus_2d", "mesh_2d_no_wrap"):
                _same_install(wire(*grid_peers(w, h, kind == "torus_2d")).to_install(),
                              install(w * h, neighbor_fn(kind, w * h, w, h)))
    for t, _ in systems.values():
        _same_install(C.intercube_wiring(t).to_install(), intercube_install(t))
    _same_install(hier3.wiring(4, 3, 2).to_install(), hier3_install(4, 3, 2))


def test_array_install_errors_match() -> None:
    from kbfast.workloads.install import IpcqInitError

    for fn, peers in ((lambda r, n: {"E": 2} if r < 2 else {}, (["E"], np.array([[2], [2], [-1]]))),
                      (lambda r, n: {0: {"X": 1}, 1: {"Y": 2}, 2: {"Y": 1}}[r],
                       (["X", "Y"], np.array([[1, -1], [-1, 2], [-1, 1]])))):
        with pytest.raises(IpcqInitError) as want:
            install(3, fn)
        with pytest.raises(IpcqInitError) as got:
            wire(*peers)
        assert str(got.value) == str(want.value)


# Broken kernels: the traced path raises what run_kernels raises.
def _double(tl: Tl):
    acc = tl.contribution()
    yield tl.send("E", acc)
    got = yield tl.recv("W")
    return tl.add(tl.add(acc, got), got)


def _stuck(tl: Tl):
    got = yield tl.recv("W")
    yield tl.send("E", tl.contribution())
    return tl.add(tl.contribution(), got)


def _one_round(tl: Tl):
    yield tl.send("E", tl.contribution())
    return tl.add(tl.contribution(), (yield tl.recv("W")))


def _bad_direction(tl: Tl):
    yield tl.send("N", tl.contribution())
    return tl.contribution()


@pytest.mark.parametrize("kernel", [_double, _stuck, _one_round, _bad_direction])
def test_traced_errors_are_the_generator_errors(systems, kernel) -> None:
    t, router = systems["ring3_2x2"]
    nodes = [pe_block(t, 0, 0, p) for p in range(3)]
    b = ProgramBuilder(t, router)
    with pytest.raises(Exception) as want:
        run_kernels(b, [b.pe_agent(v) for v in nodes], install(3, neighbor_fn("ring_1d", 3)), kernel, 256)
    b = ProgramBuilder(t, router)
    with pytest.raises(Exception) as got:
        run_traced(b, b.pe_agents(np.array(nodes)), wire(*ring_peers(3)), kernel, 256, np.zeros((3, 1)))
    assert type(got.value) is type(want.value) and str(got.value) == str(want.value)
    assert isinstance(want.value, (ScheduleError, KeyError)) or "direction" in str(want.value)


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 200), k=st.integers(1, 6), span=st.integers(1, 40))
def test_distinct_rows_matches_numpy_unique_over_rows(seed, n, k, span) -> None:
    rows = np.random.default_rng(seed).integers(-span, span, (n, k))
    _, rep, inverse = np.unique(rows, axis=0, return_index=True, return_inverse=True)
    got_rep, got_inverse = _distinct_rows(rows)
    assert np.array_equal(got_rep, rep) and np.array_equal(got_inverse, inverse.ravel())


# -- the pipelined rings, traced (a model's all-reduce runs them so: kbfast.workloads.collectives.in_model) --------
@pytest.mark.parametrize("system,algorithm,ranks,nbytes", [
    (system, algorithm, ranks, 3000) for system in SYSTEMS for algorithm, ranks in
    (("ring_pipe", "cube_pe0"), ("hier2d", "cube_pe0"), ("hier2d", "all_pes"))] + [
    ("ring3_2x2", "ring_pipe", "all_pes", 3000), ("torus6_3x2", "ring_pipe", "cube_pe0", 200_000),
    ("ring3_2x2", "hier2d", "all_pes", 200_000)])
def test_traced_pipelined_ring_is_the_tagged_generator_program(systems, system: str, algorithm: str, ranks: str,
                                                               nbytes: int) -> None:
    """ring_pipe and hier2d count their chunks from the rank's own, so every rank runs the same ops: traced
    once (one role, opaque payloads, ``tl.same`` checks) they emit the Program that one tagged generator per
    rank (the collective library's ``run_kernels``) emits, bit for bit."""
    from kbfast.workloads.collectives.placement import kernel_info, rank_nodes
    from kbfast.workloads.collectives.table import TABLE

    from kbfast.workloads.collectives.rs_ag import MAX_RANKS

    t, router = systems[system]
    alg = TABLE[algorithm]
    nodes = rank_nodes(t, ranks)
    n = len(nodes)
    if n > MAX_RANKS:
        pytest.skip(f"{n} ranks: over the tagged kernels' limit of {MAX_RANKS}")
    info = kernel_info(t, ranks=ranks)
    launch = launch_timing(t, router, nodes).target_start_ns
    b = ProgramBuilder(t, router, name="tagged")
    run_kernels(b, [b.pe_agent(v) for v in nodes], alg.wiring(t, n, info), alg.kernel, nbytes, info=info)
    tagged = b.build(launch_ns=launch)
    b = ProgramBuilder(t, router, name="tagged")
    inst = alg.wiring(t, n, info)
    labels = sorted({d for table in inst.tables for d in table})
    peer = np.array([[table.get(d, -1) for d in labels] for table in inst.tables], np.int64).reshape(n, -1)
    run_traced(b, b.pe_agents(nodes), wire(labels, peer), alg.kernel, nbytes, np.zeros((n, 1), np.int64), info)
    _assert_same(b.build(launch_ns=launch), tagged)


def _pieces_differ(tl: Tl):
    """Two pieces of one buffer, one of them reduced with the neighbour's and one not: tl.same must refuse."""
    a = b = tl.contribution()
    yield tl.send("E", a)
    a = tl.add(a, (yield tl.recv("W")))
    return tl.same(a, b)


def test_same_refuses_pieces_with_different_contributors(systems) -> None:
    """``tl.same`` (the traced check instruction) raises where the generator's integer check raises."""
    t, router = systems["ring3_2x2"]
    nodes = [pe_block(t, 0, 0, 0), pe_block(t, 0, 1, 0)]
    for traced in (False, True):
        b = ProgramBuilder(t, router, name="differ")
        with pytest.raises(ScheduleError, match="pieces of one buffer whose contributors differ in ranks"):
            if traced:
                run_traced(b, b.pe_agents(np.array(nodes)), wire(*ring_peers(2)), _pieces_differ, 64,
                           np.zeros((2, 1), np.int64))
            else:
                run_kernels(b, [b.pe_agent(v) for v in nodes], install(2, neighbor_fn("ring_1d", 2)),
                            _pieces_differ, 64)
