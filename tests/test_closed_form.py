"""The closed form of one isolated transfer (kbfast.fast.closed_form.transfer_end) against the flit-by-flit
reference in tests/naive.py, over real routes with random attribute tables (store-and-forward nodes
included), every kind, sizes around the flit, addresses, busy PCs and switch penalties; and the fast path's
import contract: nothing in kbfast/fast resolves a route."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from kbfast.config import load_system
from kbfast.fast.closed_form import D2H, H2D, PE_READ, PE_REQ, new_buf, new_pcs, transfer_end
from kbfast.sim.lowering import Fabric, hbm_constants, ns_per_byte, transfer_routes
from kbfast.topology.builder import build_tables
from kbfast.topology.names import hbm_ctrl, io_node
from kbfast.topology.routing import Router
from kbfast.workloads.probe_catalogue import random_pe_flows
from naive import naive_transfer_end

SIZES = [0, 1, 255, 256, 257, 512, 1000, 4096, 5000, 65537]
FAST = Path(__file__).resolve().parents[1] / "kbfast" / "fast"


@pytest.fixture(scope="module")
def ahbm():
    t = build_tables(load_system("ahbm_2sip"))
    return t, Router(t)


def _fabric(t, routes, rng):
    """``routes``' compact fabric with random bandwidths, propagations, overheads and flit awareness."""
    n_e, n_n = len(routes.edges), len(routes.nodes)
    bw = rng.choice([8.0, 32.0, 64.0, 256.0, np.inf], n_e)
    return Fabric(n_ovh=rng.uniform(0.0, 20.0, n_n), n_flit=rng.random(n_n) < 0.7, n_hbm=np.empty(0, np.int32),
                  e_src=routes.e_src, e_dst=routes.e_dst, e_bw=bw, e_c=ns_per_byte(bw),
                  e_prop=rng.uniform(0.0, 5.0, n_e), r_ptr=routes.r_ptr, r_edges=routes.r_edges)


def _check(t, routes, kinds, seed, memo=False):
    """Every pair of ``routes``, kind and size against the flit-by-flit reference, on three random fabrics; with
    ``memo``, the closed form keeps its memos (named by the fabric) from one call to the next."""
    rng = np.random.default_rng(seed)
    hbm = hbm_constants(t.spec)
    k = len(routes.keys)
    buf = new_buf(int(np.diff(routes.r_ptr).max()))
    for trial in range(3):
        fab = _fabric(t, routes, rng)
        for pair in range(k):
            fwd = fab.r_edges[fab.r_ptr[pair]:fab.r_ptr[pair + 1]].tolist()
            rev = fab.r_edges[fab.r_ptr[k + pair]:fab.r_ptr[k + pair + 1]].tolist()
            for kind in kinds:
                for nbytes in SIZES:
                    addr = int(rng.integers(0, 1 << 20))
                    pcs = new_pcs(hbm.n_pcs)
                    pcs[0] = rng.choice([0.0, 3.0], hbm.n_pcs)              # switch penalties
                    pcs[1] = rng.choice([-np.inf, 50.0, 400.0], hbm.n_pcs)  # busy PCs
                    T = float(rng.uniform(0.0, 100.0))
                    got = transfer_end(kind, T, nbytes, addr, pair, k + pair, fab, hbm, pcs, buf,
                                       trial if memo else -1)
                    ref, last = naive_transfer_end(
                        kind, T, nbytes, addr, fwd, rev, fab.e_src, fab.e_dst, fab.e_c, fab.e_bw, fab.e_prop,
                        fab.n_ovh, fab.n_flit, hbm.flit_bytes, hbm.burst_bytes, hbm.pc_shift, hbm.n_pcs,
                        hbm.commit_ns, hbm.burst_commit_ns, pcs[0].tolist(), pcs[1].tolist())
                    assert got == pytest.approx(ref, rel=1e-9), (trial, pair, kind, nbytes)
                    if kind != D2H and nbytes > 0:
                        assert pcs[2].tolist() == pytest.approx(last, rel=1e-9)


@pytest.mark.parametrize("memo", [False, True])
def test_pe_transfers_equal_the_flit_by_flit_reference(ahbm, memo) -> None:
    """Without the memos, and with them: a route's prepared segments, its store-and-forward cuts and its
    response, reused while the route and the fabric stay, refreshed when either changes."""
    t, router = ahbm
    src, dst = random_pe_flows(t, 6, 5)
    _check(t, transfer_routes(t, router, src, dst), (PE_REQ, PE_READ), seed=1, memo=memo)


def test_host_transfers_equal_the_flit_by_flit_reference(ahbm) -> None:
    t, router = ahbm
    dst = np.array([hbm_ctrl(t, 1, c, p) for c, p in ((0, 0), (5, 3), (15, 7))])
    src = np.full(len(dst), io_node(t, 1, "pcie_ep"))
    _check(t, transfer_routes(t, router, src, dst, host=True), (H2D, D2H), seed=2)


def test_the_fast_path_resolves_no_route() -> None:
    """Routes come in through kbfast.sim.lowering: no module of kbfast/fast imports the router or builds
    Programs."""
    for path in sorted(FAST.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = {a.name for a in node.names}
                assert node.module != "kbfast.topology.routing", path.name
                assert "ProgramBuilder" not in names and "reverse_route_edges" not in names, path.name
