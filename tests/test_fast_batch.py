"""Batched isolated transfers (kbfast.fast.isolated) equal exact mode, point by point (design §7 P1).

The batch runs its points by parameter set and route, reusing the size-independent part of the
closed form between points of one route; the cases below repeat routes with many sizes (partial
flits, one flit, long trains) so that reuse is exercised, and mix routes, parameter sets and kinds.
"""

from __future__ import annotations

import numpy as np
import pytest

from kbfast.config import load_system
from kbfast.exact import run_exact
from kbfast.fast.isolated import isolated_latencies
from kbfast.ir import ProgramBuilder
from kbfast.sim.lowering import transfer_routes
from kbfast.topology.builder import Tables, build_tables
from kbfast.topology.names import hbm_ctrl, io_node
from kbfast.topology.routing import Router
from kbfast.workloads.probe_catalogue import random_pe_flows

REL = 1e-9
SIZES = np.array([1, 255, 256, 257, 4096, 5000, 65536, 300_001])


@pytest.fixture(scope="module")
def ahbm() -> tuple[Tables, Router]:
    t = build_tables(load_system("ahbm_2sip"))
    return t, Router(t)


def _exact(t: Tables, router: Router, src: int, dst: int, nbytes: int, addr: int, kind: str) -> float:
    b = ProgramBuilder(t, router)
    if kind == "pe_dma":
        a = b.pe_agent(src)
        write = True
    else:
        a = b.host_agent(int((src - 1) // t.layout.nodes_per_sip))
        write = kind == "h2d"
    op = b.dma(a, dst, nbytes, addr, write=write)
    return run_exact(b.build()).op_latency_ns(op)


def _flows(t: Tables, n_routes: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``n_routes`` random PE -> HBM pairs (cross-SIP ones included), each at every size of SIZES, shuffled."""
    src, dst = random_pe_flows(t, n_routes, seed)
    rng = np.random.default_rng(seed)
    src, dst, nbytes = (np.repeat(src, len(SIZES)), np.repeat(dst, len(SIZES)), np.tile(SIZES, n_routes))
    addr = rng.integers(0, 1 << 20, len(src))
    order = rng.permutation(len(src))
    return src[order], dst[order], nbytes[order], addr[order]


def test_batch_pe_flows_equal_exact(ahbm) -> None:
    t, router = ahbm
    src, dst, nbytes, addr = _flows(t, 6, seed=3)
    got = isolated_latencies(transfer_routes(t, router, src, dst), src, dst, nbytes, addr)
    for i in range(len(src)):
        ref = _exact(t, router, int(src[i]), int(dst[i]), int(nbytes[i]), int(addr[i]), "pe_dma")
        assert got[i] == pytest.approx(ref, rel=REL), (int(src[i]), int(dst[i]), int(nbytes[i]))


@pytest.mark.parametrize("kind", ["h2d", "d2h"])
def test_batch_host_flows_equal_exact(ahbm, kind: str) -> None:
    t, router = ahbm
    pcie = io_node(t, 1, "pcie_ep")
    dst = np.array([hbm_ctrl(t, 1, c, p) for c, p in ((0, 0), (5, 3), (15, 7))])
    src, dst, nbytes = np.full(len(dst) * len(SIZES), pcie), np.repeat(dst, len(SIZES)), np.tile(SIZES, len(dst))
    addr = np.arange(len(src)) * 4352
    got = isolated_latencies(transfer_routes(t, router, src, dst, host=True), src, dst, nbytes, addr, kind=kind)
    for i in range(len(src)):
        ref = _exact(t, router, int(src[i]), int(dst[i]), int(nbytes[i]), int(addr[i]), kind)
        assert got[i] == pytest.approx(ref, rel=REL)


def test_batch_parameter_sets_equal_exact(ahbm) -> None:
    """Points of two same-shape parameter sets interleaved in one call: each equals exact on its own set."""
    t, router = ahbm
    slow = build_tables(load_system("ahbm_2sip", {"link.ucie_conn.bw_gbs": 64.0, "overhead_ns.router": 3.5,
                                                  "fabric.ns_per_mm": 4.0}))
    src, dst, nbytes, addr = _flows(t, 3, seed=11)
    pset = np.arange(len(src)) % 2
    got = isolated_latencies(transfer_routes(t, router, src, dst), src, dst, nbytes, addr, variants=[t, slow],
                             pset=pset)
    slow_router = Router(slow)
    for i in range(len(src)):
        tt, rr = (t, router) if pset[i] == 0 else (slow, slow_router)
        ref = _exact(tt, rr, int(src[i]), int(dst[i]), int(nbytes[i]), int(addr[i]), "pe_dma")
        assert got[i] == pytest.approx(ref, rel=REL)
    base = isolated_latencies(transfer_routes(t, router, src, dst), src, dst, nbytes, addr)
    assert np.array_equal(got[pset == 0], base[pset == 0])
    assert np.all(got[pset == 1] > base[pset == 1])           # slower links and routers on set 1
