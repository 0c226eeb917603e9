"""ring_pipe, the pipelined ring all-reduce (kbfast.workloads.collectives.ring_pipe): its ring embedding, its
ring-depth refusal (its symbolic check: tests/test_collective_ops.py), and parity P2 with exact mode (design §7): the point estimate
within 5 % of exact and ``lo <= exact <= hi`` for every op end, on the seed topologies and ahbm_2sip at
three sizes, for both rank sets.

Rank set ``all_pes`` on a seed topology is 768 ranks in one flat ring (1.2 M messages): the seed SIP
arrangements are kept and their cube mesh cut to 2 x 1 (96 ranks); ahbm_2sip runs all 256 PEs.
"""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

from kbfast.config import load_system
from kbfast.errors import KbfastError
from kbfast.exact import run_exact
from kbfast.fast.evaluate import run_fast
from kbfast.topology.builder import build_tables
from kbfast.topology.routing import Router
from kbfast.workloads.collectives import allreduce, busbw_gbps
from kbfast.workloads.collectives.placement import mesh_cycle, ring_order
from kbfast.workloads.collectives.ring_pipe import LOOKAHEAD, pieces

KiB, MiB = 1024, 1024 * 1024
P2 = 0.05
SIZES = (4 * KiB, 96 * KiB, MiB)
SMALL_MESH = {"sip.cube_mesh.w": 2, "sip.cube_mesh.h": 1}


@cache
def system(topology: str, small: bool = False, **over):
    t = build_tables(load_system(topology, {**(SMALL_MESH if small else {}), **over}))
    return t, Router(t)


@pytest.mark.parametrize(("w", "h"), [(4, 4), (2, 1), (3, 2), (2, 3), (6, 4), (3, 3), (1, 5)])
def test_mesh_cycle_visits_every_cube_through_neighbours(w: int, h: int) -> None:
    """Every cube once; consecutive cubes are mesh neighbours; so are the last and the first when a side
    is even (a Hamiltonian cycle exists exactly then)."""
    cyc = mesh_cycle(w, h)
    assert sorted(cyc) == list(range(w * h))
    hops = [abs(a % w - b % w) + abs(a // w - b // w) for a, b in zip(cyc, cyc[1:] + cyc[:1])]
    assert all(d == 1 for d in hops[:-1])
    assert (hops[-1] == 1) == (w * h > 1 and (w % 2 == 0 or h % 2 == 0) and w > 1 and h > 1 or w * h == 2)


def test_ring_order_keeps_a_cube_s_pes_together_and_visits_every_rank() -> None:
    t, _ = system("ahbm_2sip")
    from kbfast.workloads.collectives import kernel_info
    info = kernel_info(t)
    for n, per_cube in ((32, 1), (256, 8)):
        order = ring_order(info, n)
        assert sorted(order) == list(range(n))
        assert [r // per_cube for r in order[::per_cube]] == [s * 16 + c for s in range(2) for c in mesh_cycle(4, 4)]


@pytest.mark.parametrize("chunk", [1, 16 * KiB, 16 * KiB + 1, 48 * KiB, 4 * MiB])
def test_pieces(chunk: int) -> None:
    assert pieces(chunk) == min(4, max(1, -(-chunk // (16 * KiB))))


def test_a_ring_shallower_than_the_lookahead_is_refused_by_name() -> None:
    t, r = system("ahbm_2sip", **{"ipcq.n_slots": LOOKAHEAD - 1})
    with pytest.raises(KbfastError, match=f"ipcq.n_slots={LOOKAHEAD - 1}: ring_pipe .* at least {LOOKAHEAD}"):
        allreduce(t, r, 64 * KiB, "ring_pipe", "cube_pe0")


def test_it_is_the_fastest_all_reduce_at_8_mib_on_the_cube_pe0s() -> None:
    """On ahbm_2sip's 32 cube pe0s at 8 MiB (tile I/O included): faster than rs_ag and lrab, and at least
    half the UCIe connection's 128 GB/s as bus bandwidth (the ring's hops each take one connection)."""
    t, r = system("ahbm_2sip")
    lat = {a: run_fast((c := allreduce(t, r, 8 * MiB, a, "cube_pe0")).program).latency_ns(c.launch_ns)[0]
           for a in ("ring_pipe", "rs_ag", "lrab")}
    assert lat["ring_pipe"] < lat["rs_ag"] < lat["lrab"]
    assert busbw_gbps(8 * MiB, 32, lat["ring_pipe"]) >= 0.5 * t.spec.link.ucie_conn.bw_gbs


CASES = [(topo, False, "cube_pe0", n) for topo in ("ring6", "torus6", "mesh6", "ahbm_2sip") for n in SIZES]
CASES += [(topo, True, "all_pes", n) for topo in ("ring6", "torus6", "mesh6") for n in SIZES]
CASES += [("ahbm_2sip", False, "all_pes", n) for n in SIZES]


@pytest.mark.parametrize(("topology", "small", "ranks", "nbytes"), CASES,
                         ids=[f"{c[0]}{'-2x1' if c[1] else ''}-{c[2]}-{c[3]}" for c in CASES])
def test_p2_parity_and_bounds_op_by_op(topology: str, small: bool, ranks: str, nbytes: int) -> None:
    t, r = system(topology, small)
    c = allreduce(t, r, nbytes, "ring_pipe", ranks)
    ex, fa = run_exact(c.program), run_fast(c.program)
    lat, _, _ = fa.latency_ns(c.launch_ns)
    exact = ex.latency_ns(c.launch_ns)[0]
    assert abs(lat / exact - 1) <= P2, (lat, exact)
    tol = 1e-9 * np.maximum(ex.op_end_ns, 1.0)
    assert np.all(fa.op_end_lo_ns <= ex.op_end_ns + tol)
    assert np.all(ex.op_end_ns <= fa.op_end_hi_ns + tol)
