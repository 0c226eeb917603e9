"""PE_DMA's two virtual channels share the PE egress link by weighted round robin (spec_ccl §2.8, ADR-0023 D8).

Hand-derived case: a PE issues a DMA write (vc_compute) and an IPCQ send (vc_comm) at the same instant; the
PE links are slow and the routers have no overhead (so that alone, the message never queues after the
egress).  The link sends one flit per ``tau = flit / bw`` and starts with
vc_compute; with weights (c, m) it sends up to c compute flits, then up to m comm flits, and so on.  The
send's last flit therefore leaves ``k * tau`` later than alone, where k is the number of compute flits sent
before it, and every later step of the message is unchanged: its RECV ends exactly ``k * tau`` later.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import both, topo

from kbfast.exact import run_exact
from kbfast.fast.evaluate import run_fast
from kbfast.ir import Op, Program, ProgramBuilder
from kbfast.topology.names import hbm_ctrl, pe_block

FLIT = 256
SLOW_EGRESS = {"link.pe_to_router.bw_gbs": 16.0,   # tau = 16 ns per flit; every other link is >= 128 GB/s
               "overhead_ns.router": 0.0}
TAU = FLIT / 16.0


def mixed(weights: tuple[int, int], n_dma: int, n_send: int, with_dma: bool = True) -> Program:
    """pe0 writes ``n_dma`` flits to its own slice and sends ``n_send`` flits to pe1, both at t = 0."""
    t, router = topo({**SLOW_EGRESS, "pe.vc_weights.compute": weights[0], "pe.vc_weights.comm": weights[1]})
    b = ProgramBuilder(t, router, name="vc-wrr")
    a, z = b.pe_agent(pe_block(t, 0, 0, 0)), b.pe_agent(pe_block(t, 0, 0, 1), start_ns=0.0)
    ch = b.channel(a, z)
    b.send(a, ch, n_send * FLIT)
    if with_dma:
        b.dma(a, hbm_ctrl(t, 0, 0, 0), n_dma * FLIT, write=True)
    b.recv(z, ch, n_send * FLIT)
    return b.build()


def compute_flits_before_last_comm(weights: tuple[int, int], n_dma: int, n_send: int) -> int:
    """Replay the round robin of two backlogged channels, compute first; count compute flits before the last comm."""
    left = {0: n_dma, 1: n_send}
    turn, quota, before = 0, weights[0], 0
    while left[1]:
        if not left[turn] or quota == 0:
            if left[1 - turn]:
                turn = 1 - turn
            quota = weights[turn]
        left[turn] -= 1
        quota -= 1
        before += turn == 0
    return before


def recv_end(p: Program, evaluate=run_exact) -> float:
    return float(evaluate(p).op_end_ns[np.flatnonzero(p.op_code == Op.RECV)[0]])


@pytest.mark.parametrize(("weights", "n_dma", "n_send"), [((1, 1), 4, 4), ((1, 3), 4, 4), ((3, 1), 4, 4),
                                                         ((1, 1), 2, 6), ((2, 5), 8, 3)])
def test_send_delay_is_the_compute_flits_sent_before_it(weights, n_dma, n_send) -> None:
    alone = recv_end(mixed(weights, n_dma, n_send, with_dma=False))
    k = compute_flits_before_last_comm(weights, n_dma, n_send)
    assert k > 0
    assert recv_end(mixed(weights, n_dma, n_send)) == pytest.approx(alone + k * TAU, rel=1e-12)


def test_a_larger_comm_weight_helps_ipcq_and_delays_the_dma() -> None:
    ends = {}
    for w in [(4, 1), (1, 1), (1, 4)]:
        ex = run_exact(mixed(w, 32, 8))
        dma = np.flatnonzero(ex.program.op_code == Op.DMA_WRITE)[0]
        ends[w] = (float(ex.op_end_ns[np.flatnonzero(ex.program.op_code == Op.RECV)[0]]), float(ex.op_end_ns[dma]))
    assert ends[(4, 1)][0] > ends[(1, 1)][0] > ends[(1, 4)][0]
    assert ends[(4, 1)][1] < ends[(1, 1)][1] <= ends[(1, 4)][1]   # the DMA's last flit leaves after every send


@pytest.mark.parametrize("weights", [(1, 1), (2, 3), (5, 1)])
def test_simpy_reference_agrees(weights) -> None:
    both(mixed(weights, 12, 9))


def test_fast_path_shares_the_egress_between_channels() -> None:
    """At the default 50/50 the fluid max-min share of the egress is the round robin's; the bounds hold."""
    p = mixed((1, 1), 32, 32)
    ex, fa = run_exact(p), run_fast(p)
    assert fa.shared
    np.testing.assert_array_less(fa.op_end_lo_ns - 1e-9, ex.op_end_ns)
    np.testing.assert_array_less(ex.op_end_ns, fa.op_end_hi_ns + 1e-9)
    assert recv_end(p, run_fast) == pytest.approx(recv_end(p), rel=0.05)
