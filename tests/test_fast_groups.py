"""Merged shared resources (kbfast.fast.plan._merge_identical) and the water-filling they feed.

Resources that the same routes use carry the same flows at every instant, so the
fast schedule runs on one resource per group.  These tests pin the grouping
against its definition and the POINT schedule on groups against the schedule
on the unmerged resources, in two resource orders (max-min fair rates do not
depend on the order a flow lists its resources).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kbfast.config import load_system
from kbfast.fast.plan import _merge_identical, _same_shape_routes, _shared_entries, plan_fast
from kbfast.fast.schedule import POINT, schedule, scratch
from kbfast.topology.builder import build_tables
from kbfast.topology.routing import Router
from kbfast.workloads.collectives import allreduce
from kbfast.workloads.probe_catalogue import build_catalogue


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_routes=st.integers(1, 12), n_e=st.integers(0, 10), n_n=st.integers(0, 10))
def test_groups_are_the_resources_with_the_same_routes(seed, n_routes, n_e, n_n) -> None:
    rng = np.random.default_rng(seed)
    n_res = n_e + n_n
    parts = [rng.choice(n_res, rng.integers(0, n_res + 1), replace=False) if n_res else np.zeros(0, int)
             for _ in range(n_routes)]
    sh_ptr = np.concatenate([[0], np.cumsum([len(x) for x in parts])]).astype(np.int64)
    sh_res = np.concatenate(parts).astype(np.int64)
    e_bw = rng.choice([64.0, 128.0, 256.0], n_e)
    n_ovh = rng.choice([1.0, 2.0, 8.0], n_n)
    group, cap, ovh, g_ptr, g_res = _merge_identical(sh_ptr, sh_res, n_e, e_bw, n_ovh)
    routes_of = {x: frozenset(r for r in range(n_routes) if x in parts[r]) for x in set(sh_res.tolist())}
    for x in range(n_res):
        assert (group[x] >= 0) == (x in routes_of)
    for x, routes_x in routes_of.items():
        for y, routes_y in routes_of.items():
            same = routes_x == routes_y and (x < n_e) == (y < n_e)
            assert (group[x] == group[y]) == same, (x, y)
    for g in range(len(cap)):
        members = [x for x in routes_of if group[x] == g]
        edges = [e_bw[x] for x in members if x < n_e]
        nodes = [n_ovh[x - n_e] for x in members if x >= n_e]
        assert (cap[g], ovh[g]) == ((min(edges), 0.0) if edges else (1.0, max(nodes)))
    for r in range(n_routes):
        got = g_res[g_ptr[r]:g_ptr[r + 1]]
        assert len(set(got.tolist())) == len(got)
        assert set(got.tolist()) == {int(group[x]) for x in parts[r]}


def _unmerged_point(p, reverse: bool):
    """The POINT schedule on the unmerged shared resources (each route's in route order, or reversed)."""
    plan = plan_fast(p)
    c, t = plan.compact, p.tables
    e_bw, n_ovh = t.edge_bw_gbs[c.edges], t.node_overhead_ns[c.nodes]
    _, _, sh_ptr, sh_ids = _shared_entries(plan.data_route, p.route_ptr, c.route_edges, e_bw, c.e_dst,
                                           t.node_flit_aware[c.nodes], n_ovh, len(c.edges), len(c.nodes))
    if reverse:
        sh_ids = np.concatenate([sh_ids[sh_ptr[r]:sh_ptr[r + 1]][::-1] for r in range(len(sh_ptr) - 1)] + [sh_ids[:0]])
    has = plan.data_route >= 0
    sh_span = np.zeros((p.n_ops, 2), np.int64)
    sh_span[has, 0], sh_span[has, 1] = sh_ptr[plan.data_route[has]], sh_ptr[plan.data_route[has] + 1]
    sharing = plan.sharing._replace(sh_span=sh_span, sh_res=sh_ids,
                                    res_cap=np.concatenate([e_bw, np.ones(len(c.nodes))]),
                                    res_ovh=np.concatenate([np.zeros(len(c.edges)), n_ovh]))
    head = plan.head_offsets(p.op_nbytes)
    zero = np.zeros(p.n_ops)
    iso = lambda: np.full((p.n_ops, 1 + plan.lowered.hbm.n_pcs), np.nan)   # noqa: E731 - fresh memo per run
    fabric, hbm, P, routes, _ = plan.kernel_inputs
    merged = schedule(POINT, zero, plan.share, head, iso(), *plan.kernel_inputs,
                      scratch(P, fabric, hbm, plan.sharing))
    unmerged = schedule(POINT, zero, plan.share, head, iso(), fabric, hbm, P, routes, sharing,
                        scratch(P, fabric, hbm, sharing))
    return merged, unmerged, plan


def _programs():
    t = build_tables(load_system())
    router = Router(t)
    cat = build_catalogue(t, router)
    for name in ("ctrl_hot_3", "all_pe_cube0_to_pe0", "ucie_eastbound_8pe", "sip_hotspot_pe0"):
        for n in (256, 16384):
            yield pytest.param(cat[name].program(t, router, n), id=f"{name}-{n}B")
    for preset in ("torus6", "mesh6"):
        t6 = build_tables(load_system(preset))
        for alg in ("lrab", "tree"):
            for n in (256, 96 * 1024):
                yield pytest.param(allreduce(t6, Router(t6), n, alg).program, id=f"{preset}-{alg}-{n}B")


@pytest.mark.parametrize("reverse", [False, True], ids=["route_order", "reversed"])
@pytest.mark.parametrize("p", list(_programs()))
def test_point_schedule_on_groups_equals_the_unmerged_one(p, reverse) -> None:
    merged, unmerged, plan = _unmerged_point(p, reverse)
    np.testing.assert_allclose(merged[0].op_end, unmerged[0].op_end, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(merged[0].a_finish, unmerged[0].a_finish, rtol=1e-9, atol=1e-9)
    assert np.array_equal(merged[1], unmerged[1])      # contended ops
    # an edge is contended when its group is
    eg = plan.edge_group
    member = eg >= 0
    assert np.array_equal(merged[2][eg[member]], unmerged[2][:len(eg)][member])


@pytest.mark.parametrize("preset, algorithm", [("torus6", "lrab"), ("mesh6", "ring"), ("ring6", "tree")])
def test_same_shape_routes_group_by_closed_form_inputs(preset: str, algorithm: str) -> None:
    """Channels share an isolated-latency memo exactly when their routes feed the closed form the same
    values (source overhead; per edge c, propagation, next node's overhead and flit awareness)."""
    t = build_tables(load_system(preset))
    p = allreduce(t, Router(t), 4096, algorithm, None if algorithm == "lrab" else "cube_pe0").program
    plan = plan_fast(p)
    fab = plan.lowered.fabric
    ch_route, ch_iso_route = plan.lowered.routes.ch_route, plan.sharing.ch_iso_route
    r_ptr, r_edges, e_src, e_dst, e_c, e_prop, n_ovh, n_flit = (fab.r_ptr, fab.r_edges, fab.e_src, fab.e_dst, fab.e_c,
                                                                fab.e_prop, fab.n_ovh, fab.n_flit)

    def inputs(r: int) -> tuple:
        edges = r_edges[r_ptr[r]:r_ptr[r + 1]]
        return (n_ovh[e_src[edges[0]]], *((e_c[e], e_prop[e], n_ovh[e_dst[e]], bool(n_flit[e_dst[e]])) for e in edges))

    first: dict[tuple, int] = {}
    for r in ch_route:
        first.setdefault(inputs(int(r)), int(r))
    assert [first[inputs(int(r))] for r in ch_route] == list(ch_iso_route)
    assert len(first) < len(ch_route)        # the memo is shared
    rep = _same_shape_routes(np.arange(len(r_ptr) - 1), r_ptr, r_edges, e_src, e_dst, e_c, e_prop, n_ovh, n_flit)
    assert np.all(rep <= np.arange(len(rep))) and np.array_equal(rep[rep], rep)


@pytest.mark.parametrize("preset", ["torus6", "mesh6"])
def test_dmas_that_share_an_isolated_latency_have_the_same_closed_form(preset: str) -> None:
    """A PE's DMA shares the memo of the first DMA with its kind, bytes, first PC and route shapes
    (kbfast.fast.plan.dma_iso_ops): the closed form gives both the same end and the same per-PC commits."""
    from kbfast.fast.closed_form import PE_READ, PE_REQ, new_buf, new_pcs, transfer_end
    from kbfast.ir import Op

    t = build_tables(load_system(preset))
    p = allreduce(t, Router(t), 4096).program          # tile loads and stores: a PE read and write per rank
    plan = plan_fast(p)
    low, rep = plan.lowered, plan.sharing.dma_iso_op
    fab, hbm, routes = low.fabric, low.hbm, low.routes
    dma = np.nonzero(np.isin(p.op_code, (Op.DMA_READ, Op.DMA_WRITE)))[0]
    assert np.all(rep[dma] >= 0) and np.all(rep[dma] <= dma) and np.array_equal(rep[rep[dma]], rep[dma])
    assert np.all(rep[np.setdiff1d(np.arange(p.n_ops), dma)] == -1)
    assert len(np.unique(rep[dma])) < len(dma)            # the memo is shared

    def closed_form(o: int) -> tuple:
        kind = PE_READ if (hbm.read_accept and p.op_code[o] == Op.DMA_READ) else PE_REQ
        pcs = new_pcs(hbm.n_pcs)
        end = transfer_end(kind, 0.0, int(p.op_nbytes[o]), int(routes.op_addr[o]), int(routes.op_route[o]),
                           int(routes.op_rroute[o]), fab, hbm, pcs, new_buf(plan.sharing.max_route), 0)
        return end, pcs[2].tolist()

    for o in dma:
        assert closed_form(int(o)) == closed_form(int(rep[o]))
