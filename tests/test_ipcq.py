"""IPCQ timing derived by hand from spec_ccl §2 on small ProgramBuilder programs; exact and fast must agree.

The recurrence (spec_ccl §2.10), for the k-th message of one channel (sleep mode, no contention)::

    s_k   = max(call_send_k, r2_{k-n_slots})          # a full ring waits for the credit of message k-n_slots
    vis_k = s_k + V(n) + W(n)                          # data reassembled at the receiver's pe_dma, slot write
    r2_k  = max(call_recv_k, vis_k) + R(n) + C         # slot read, blocking credit; the credit lands at r2_k

System: the default topology with propagation zeroed (``fabric.ns_per_mm = 0``), so every number below
is a sum of binary fractions and the comparisons are exact (1e-9).  The parameters used (checked in
``test_assumptions``):

* ``pe0 -> pe1`` of sip0.cube0 (hop h1) crosses 2 routers (r0c0, r0c1), ``pe5 -> pe1`` crosses 5
  (r4c1 .. r0c1); every link 256 GB/s (a 256 B flit takes 1 ns), router overhead 2 ns, pe_dma 0 ns.
  A train of ``f`` full flits over ``k`` routers reaches the receiving pe_dma (store-and-forward,
  exact_mode R2-R4) at ``V = f + 3k``: flit 0 arrives after 1 ns per wire and 2 ns per router
  (``1 + 3k``), the other flits follow back to back.  h1: ``V(n) = n/256 + 6``; pe5 -> pe1: ``n/256 + 15``.
* Credit (blocking, latest rule): ``C = PATHLAT(receiver -> sender, 16 B)`` = node overheads of the
  reverse route + 16 / 256: h1 ``2 + 2 + 0.0625 = 4.0625``; pe1 -> pe5 ``5 * 2 + 0.0625 = 10.0625``.
  Forked: ``C = 16 / 256 = 0.0625`` and the recv does not wait for it.
* Slot write W and slot read R each cost ``SLOT + HOP`` (spec_ccl §2.7, D9.7 / D9.7+):
  tcm ``n/512``; sram ``2 + n/512 + n/128`` (bank hop over the 128 GB/s router<->sram link);
  hbm ``6 + n/256 + n/256`` (bank hop over the 256 GB/s router<->hbm_ctrl link).
"""

from __future__ import annotations

import numpy as np
import pytest

from kbfast.config import load_system
from kbfast.exact import run_exact
from kbfast.fast.evaluate import run_fast
from kbfast.ir import RECV_ANY, Program
from kbfast.topology.builder import Tables, build_tables
from kbfast.topology.kinds import NodeKind
from kbfast.topology.names import pe_block
from kbfast.topology.routing import Router
from conftest import NO_PROP, SINGLE, KiB, Pair, two_messages

EPS = 1e-9

# h1 (pe0 -> pe1): V(n) = n/256 + 6, credit 4.0625
C_H1 = 4.0625
C_PE5 = 10.0625


def V_h1(n: int) -> float:
    return n / 256 + 6


def slot(kind: str, n: int) -> float:
    """SLOT + HOP, charged once at the slot write and once at the slot read."""
    return {"tcm": n / 512, "sram": 2 + n / 512 + n / 128, "hbm": 6 + n / 256 + n / 256}[kind]


# ----------------------------------------------------------------------------------------------------------------
def _tables(**over) -> Tables:
    return build_tables(load_system(overrides={**NO_PROP, **over}))


@pytest.fixture(scope="module")
def t0() -> Tables:
    return _tables()


@pytest.fixture(scope="module")
def t_forked() -> Tables:
    return _tables(**{"ipcq.credit_mode": "forked"})


@pytest.fixture(scope="module")
def t_poll() -> Tables:
    return _tables(**{"ipcq.backpressure": "poll", "ipcq.poll_interval_ns": 10.0})


def run_both(p: Program):
    return run_exact(p), run_fast(p)


def check(p: Program, expect: dict[int, tuple[float | None, float]], finish: dict[int, float] | None = None):
    """``expect[op] = (begin or None, end)``, checked in exact and fast mode; ``finish[agent]`` likewise."""
    ex, fa = run_both(p)
    for res, mode in ((ex, "exact"), (fa, "fast")):
        for op, (begin, end) in expect.items():
            if begin is not None:
                assert abs(res.op_begin_ns[op] - begin) < EPS, (mode, op, "begin", res.op_begin_ns[op], begin)
            assert abs(res.op_end_ns[op] - end) < EPS, (mode, op, "end", res.op_end_ns[op], end)
        for a, f in (finish or {}).items():
            assert abs(res.agent_finish_ns[a] - f) < EPS, (mode, a, "finish", res.agent_finish_ns[a], f)
    # contention-free: the fast path's bounds collapse onto the point estimate
    np.testing.assert_allclose(fa.agent_finish_lo_ns, fa.agent_finish_ns, rtol=0, atol=EPS)
    return ex, fa


# ----------------------------------------------------------------------------------------------------------------
def test_assumptions(t0: Tables) -> None:
    r = Router(t0)
    for src, dst, k in ((0, 1, 2), (1, 0, 2), (5, 1, 5), (1, 5, 5)):
        a, z = pe_block(t0, 0, 0, src), pe_block(t0, 0, 0, dst)
        edges = r.route(a, z, "pe_dma")
        nodes = r.route_nodes(a, z, "pe_dma")
        assert len(edges) == k + 1
        assert np.all(t0.edge_bw_gbs[edges] == 256.0) and np.all(t0.edge_prop_ns[edges] == 0.0)
        assert np.all(t0.node_kind[nodes[1:-1]] == NodeKind.ROUTER)
        assert np.all(t0.node_overhead_ns[nodes[1:-1]] == 2.0)
        assert t0.node_overhead_ns[nodes[0]] == 0.0 and t0.node_overhead_ns[nodes[-1]] == 0.0
    ipcq = t0.spec.ipcq
    assert ipcq.credit_bytes == 16 and ipcq.credit_mode == "blocking" and ipcq.backpressure == "sleep"
    assert (ipcq.tiers.tcm.bw_gbs, ipcq.tiers.tcm.setup_ns) == (512.0, 0.0)
    assert (ipcq.tiers.sram.bw_gbs, ipcq.tiers.sram.setup_ns) == (512.0, 2.0)
    assert (ipcq.tiers.hbm.bw_gbs, ipcq.tiers.hbm.setup_ns) == (256.0, 6.0)
    # the channel tables carry those costs: slot tier, bank hop, credit latency
    pr = Pair(t0, (0, 1, 5))
    chans = [pr.b.channel(pr.a[0], pr.a[1], kind=k) for k in ("tcm", "sram", "hbm")]
    c5 = pr.b.channel(pr.a[5], pr.a[1])
    for c in chans + [c5]:
        pr.b.send(pr.a[0] if c != c5 else pr.a[5], c, 256)
    ch = pr.b.build().channels
    assert list(ch.hop_bw) == [np.inf, 128.0, 256.0, np.inf]
    assert list(ch.setup_ns) == [0.0, 2.0, 6.0, 0.0]
    assert list(ch.tier_bw) == [512.0, 512.0, 256.0, 512.0]
    assert list(ch.credit_ns) == [C_H1, C_H1, C_H1, C_PE5]
    assert list(ch.n_slots) == [4, 4, 4, 4]


# ----------------------------------------------------------------------------------------------------------------
# One send at 0, one recv called at 0 (h1): SINGLE (tests/conftest.py) holds the hand-derived cases.
@pytest.mark.parametrize(("kind", "n", "vis", "r2"), SINGLE)
def test_single_send_recv(t0: Tables, kind: str, n: int, vis: float, r2: float) -> None:
    assert vis == V_h1(n) + slot(kind, n)
    assert r2 == vis + slot(kind, n) + C_H1
    pr = Pair(t0)
    c = pr.b.channel(pr.a[0], pr.a[1], kind=kind)
    s = pr.b.send(pr.a[0], c, n)
    rv = pr.b.recv(pr.a[1], c, n)
    # the send is fire-and-forget: accepted and returned at 0; the recv takes the message at vis
    check(pr.b.build(), {s: (0.0, 0.0), rv: (vis, r2)}, finish={pr.a[0]: 0.0, pr.a[1]: r2})


@pytest.mark.parametrize("kind", ["tcm", "sram", "hbm"])
def test_slot_tier_costs_differ_by_tier(t0: Tables, kind: str) -> None:
    # The difference between two sizes isolates the per-byte terms: 60 KiB more payload costs
    # 60 KiB/256 on the wire plus twice the per-byte slot term (write + read).
    per_byte = {"tcm": 1 / 512, "sram": 1 / 512 + 1 / 128, "hbm": 1 / 256 + 1 / 256}[kind]
    ends = []
    for n in (4 * KiB, 64 * KiB):
        pr = Pair(t0)
        c = pr.b.channel(pr.a[0], pr.a[1], kind=kind)
        pr.b.send(pr.a[0], c, n)
        rv = pr.b.recv(pr.a[1], c, n)
        ex, fa = run_both(pr.b.build())
        assert abs(ex.op_end_ns[rv] - fa.op_end_ns[rv]) < EPS
        ends.append(ex.op_end_ns[rv])
    assert abs((ends[1] - ends[0]) - 60 * KiB * (1 / 256 + 2 * per_byte)) < EPS


# recv_no_consume skips the slot read (and its bank hop): r2 = vis + C.
@pytest.mark.parametrize(("kind", "n", "vis", "r2"), SINGLE)
def test_recv_no_consume_skips_slot_read(t0: Tables, kind: str, n: int, vis: float, r2: float) -> None:
    pr = Pair(t0)
    c = pr.b.channel(pr.a[0], pr.a[1], kind=kind)
    pr.b.send(pr.a[0], c, n)
    rv = pr.b.recv(pr.a[1], c, n, consume=False)
    check(pr.b.build(), {rv: (vis, vis + C_H1)})
    assert r2 - (vis + C_H1) == slot(kind, n)


# A late recv: r2 = max(call_recv, vis) + R + C with call_recv = 100 > vis = 30 (tcm 4 KiB) -> 100 + 8 + 4.0625.
def test_late_recv_starts_at_call(t0: Tables) -> None:
    pr = Pair(t0)
    c = pr.b.channel(pr.a[0], pr.a[1])
    pr.b.send(pr.a[0], c, 4 * KiB)
    pr.b.compute(pr.a[1], 100.0)
    rv = pr.b.recv(pr.a[1], c, 4 * KiB)
    check(pr.b.build(), {rv: (100.0, 112.0625)})


# ----------------------------------------------------------------------------------------------------------------
# Forked credit (ADR-0023 original): the recv returns at r1 = vis + R; the credit (16 B / 256 GB/s = 0.0625)
# lands at the sender at r1 + 0.0625.  n_slots = 1, two tcm 4 KiB messages sent back to back at 0:
#   msg 0: vis 30, r1 = 38 (recv returns), credit lands 38.0625 -> send 1 accepted at 38.0625
#   msg 1: vis = 38.0625 + 22 + 8 = 68.0625; recv 1 called at 38, begins 68.0625, returns 76.0625.
# The same program with the blocking credit: send 1 at r2_0 = 42.0625, vis 72.0625, r2_1 = 84.125.
# (two_messages, tests/conftest.py, builds that program.)


def test_forked_credit(t_forked: Tables) -> None:
    pr, (s0, s1, r0, r1) = two_messages(t_forked)
    p = pr.b.build()
    assert p.channels.credit_ns[0] == 0.0625 and not p.channels.credit_blocking
    check(p, {s0: (0.0, 0.0), r0: (30.0, 38.0), s1: (38.0625, 38.0625), r1: (68.0625, 76.0625)},
          finish={pr.a[0]: 38.0625, pr.a[1]: 76.0625})


def test_blocking_credit_same_program(t0: Tables) -> None:
    pr, (_s0, s1, r0, r1) = two_messages(t0)
    check(pr.b.build(), {r0: (30.0, 42.0625), s1: (42.0625, 42.0625), r1: (72.0625, 84.125)},
          finish={pr.a[0]: 42.0625, pr.a[1]: 84.125})


# ----------------------------------------------------------------------------------------------------------------
# Poll backpressure, poll_interval_ns = 10: a blocked agent wakes on the grid since + 10 k after the trigger.
# tcm 1 KiB (V = 10, W = R = 2), n_slots = 1, two messages:
#   recv 0 called at 0, vis 12 -> wakes at 20, r1 = 22, r2 = 26.0625
#   send 1 blocked at 0, credit lands 26.0625 -> wakes at 30; vis_1 = 30 + 10 + 2 = 42
#   recv 1 called at 26.0625, vis 42 -> wakes at 26.0625 + 20 = 46.0625, r2 = 46.0625 + 2 + 4.0625 = 52.125
# Sleep (same program): recv 0 at 12 -> 18.0625; send 1 at 18.0625; vis 30.0625; recv 1 -> 36.125.
def test_poll_backpressure(t_poll: Tables) -> None:
    pr, (_s0, s1, r0, r1) = two_messages(t_poll, n=1 * KiB)
    p = pr.b.build()
    assert p.channels.poll_ns == 10.0
    check(p, {r0: (20.0, 26.0625), s1: (30.0, 30.0), r1: (46.0625, 52.125)})


def test_sleep_reference_for_poll(t0: Tables) -> None:
    pr, (_s0, s1, r0, r1) = two_messages(t0, n=1 * KiB)
    check(pr.b.build(), {r0: (12.0, 18.0625), s1: (18.0625, 18.0625), r1: (30.0625, 36.125)})


# Poll, RECV on any channel called at 3 (after COMPUTE 3): vis 12 -> wake on the grid 3 + 10 k = 13;
# r2 = 13 + 2 + 4.0625 = 19.0625.
def test_poll_recv_any(t_poll: Tables) -> None:
    pr = Pair(t_poll)
    c = pr.b.channel(pr.a[0], pr.a[1])
    pr.b.send(pr.a[0], c, 1 * KiB)
    pr.b.compute(pr.a[1], 3.0)
    rv = pr.b.recv(pr.a[1], RECV_ANY, 1 * KiB)
    check(pr.b.build(), {rv: (13.0, 19.0625)})


# ----------------------------------------------------------------------------------------------------------------
# Ring full, tcm 4 KiB (V = 22, W = R = 8, C = 4.0625, so vis = s + 30 and r2 = max(call, vis) + 12.0625).
# n_slots = 1, three messages sent back to back at 0, recvs back to back from 0:
#   s_0 = 0       vis 30        r2_0 = 42.0625
#   s_1 = r2_0 = 42.0625        vis 72.0625   r2_1 = 84.125
#   s_2 = r2_1 = 84.125         vis 114.125   r2_2 = 126.1875
def test_ring_full_one_slot(t0: Tables) -> None:
    pr = Pair(t0)
    c = pr.b.channel(pr.a[0], pr.a[1], n_slots=1)
    s = [pr.b.send(pr.a[0], c, 4 * KiB) for _ in range(3)]
    r = [pr.b.recv(pr.a[1], c, 4 * KiB) for _ in range(3)]
    check(pr.b.build(), {
        s[0]: (0.0, 0.0), s[1]: (42.0625, 42.0625), s[2]: (84.125, 84.125),
        r[0]: (30.0, 42.0625), r[1]: (72.0625, 84.125), r[2]: (114.125, 126.1875),
    })


# n_slots = 2, four messages.  Sender: send0 @0, COMPUTE 16, send1 @16, send2, COMPUTE 16, send3.
# Receiver: COMPUTE 200, recv0, COMPUTE 100, recv1, COMPUTE 100, recv2, recv3.
# (The 16 ns gaps keep consecutive 16-flit trains off each other's wires.)
#   s_0 = 0, vis_0 = 30;  s_1 = 16, vis_1 = 46
#   recv0 @200: r2_0 = 212.0625;  send2 blocked (head 2 - tail 0 = n_slots) until credit 1: s_2 = 212.0625,
#     vis_2 = 242.0625; COMPUTE 16 -> send3 called at 228.0625, ring full again (3 - 1), waits for the
#     credit of message 3 - n_slots = 1
#   recv1 @312.0625 (vis_1 = 46 long past): r2_1 = 324.125 -> s_3 = max(228.0625, r2_1) = 324.125, vis_3 = 354.125
#   recv2 @424.125: r2_2 = 436.1875;  recv3 called 436.1875 > vis_3: r2_3 = 448.25
def test_ring_full_two_slots(t0: Tables) -> None:
    pr = Pair(t0)
    A, Z = pr.a[0], pr.a[1]
    c = pr.b.channel(A, Z, n_slots=2)
    n = 4 * KiB
    s0 = pr.b.send(A, c, n)
    pr.b.compute(A, 16.0)
    s1 = pr.b.send(A, c, n)
    s2 = pr.b.send(A, c, n)
    pr.b.compute(A, 16.0)
    s3 = pr.b.send(A, c, n)
    pr.b.compute(Z, 200.0)
    r0 = pr.b.recv(Z, c, n)
    pr.b.compute(Z, 100.0)
    r1 = pr.b.recv(Z, c, n)
    pr.b.compute(Z, 100.0)
    r2 = pr.b.recv(Z, c, n)
    r3 = pr.b.recv(Z, c, n)
    ex, _ = check(pr.b.build(), {
        s0: (0.0, 0.0), s1: (16.0, 16.0), s2: (212.0625, 212.0625), s3: (324.125, 324.125),
        r0: (200.0, 212.0625), r1: (312.0625, 324.125), r2: (424.125, 436.1875), r3: (436.1875, 448.25),
    }, finish={A: 324.125, Z: 448.25})
    # the blocked sends were reached earlier than they were accepted
    assert ex.op_issue_ns[s2] == 16.0 and ex.op_issue_ns[s3] == 228.0625


# With enough slots nothing blocks: the same sender program with n_slots = 4 sends at 0, 16, 16, 32.
def test_no_blocking_with_four_slots(t0: Tables) -> None:
    pr = Pair(t0)
    A, Z = pr.a[0], pr.a[1]
    c = pr.b.channel(A, Z, n_slots=4)
    n = 4 * KiB
    s0 = pr.b.send(A, c, n)
    pr.b.compute(A, 16.0)
    s1 = pr.b.send(A, c, n)
    pr.b.compute(A, 16.0)
    s2 = pr.b.send(A, c, n)
    pr.b.compute(A, 16.0)
    s3 = pr.b.send(A, c, n)
    pr.b.compute(Z, 200.0)
    rs = [pr.b.recv(Z, c, n) for _ in range(4)]
    # all visible by 48 + 30 = 78 < 200: recvs back to back, 12.0625 each
    check(pr.b.build(), {s0: (0.0, 0.0), s1: (16.0, 16.0), s2: (32.0, 32.0), s3: (48.0, 48.0),
                         **{r: (200 + 12.0625 * i, 200 + 12.0625 * (i + 1)) for i, r in enumerate(rs)}})


# ----------------------------------------------------------------------------------------------------------------
# RECV on any channel (spec_ccl §4.9): round robin over the receiver's inbound channels in install order,
# from a cursor that moves past the channel just served.  Receiver pe1; ch0 from pe0 (1 KiB messages:
# V = 10, W = R = 2, C = 4.0625), ch1 from pe5 (4 KiB: V = 16 + 15 = 31, W = R = 8, C = 10.0625).
def test_recv_any_takes_the_only_visible_channel(t0: Tables) -> None:
    # pe0 sends late (COMPUTE 100): ch1 is visible first at 31 + 8 = 39 -> recv_any #1 takes ch1:
    #   39 + 8 + 10.0625 = 57.0625.  ch0: vis 100 + 12 = 112 -> recv_any #2: 112 + 2 + 4.0625 = 118.0625.
    pr = Pair(t0, (0, 1, 5))
    c0 = pr.b.channel(pr.a[0], pr.a[1])
    c1 = pr.b.channel(pr.a[5], pr.a[1])
    pr.b.compute(pr.a[0], 100.0)
    pr.b.send(pr.a[0], c0, 1 * KiB)
    pr.b.send(pr.a[5], c1, 4 * KiB)
    q0 = pr.b.recv(pr.a[1], RECV_ANY, 4 * KiB)
    q1 = pr.b.recv(pr.a[1], RECV_ANY, 1 * KiB)
    check(pr.b.build(), {q0: (39.0, 57.0625), q1: (112.0, 118.0625)})


def test_recv_any_round_robin(t0: Tables) -> None:
    # Each sender posts two messages (spaced by their train length; pe5 starts at 100 so the two trains
    # never share the r0c1 -> pe1 wire); the receiver starts at 400, when all four are visible.
    # Cursor 0 -> ch0, cursor 1 -> ch1, cursor 0 -> ch0, cursor 1 -> ch1:
    #   ch0 step 2 + 4.0625 = 6.0625, ch1 step 8 + 10.0625 = 18.0625
    #   400 -> 406.0625 -> 424.125 -> 430.1875 -> 448.25
    # (Taking ch0 twice first would end 406.0625, 412.125, 430.1875, 448.25.)
    pr = Pair(t0, (0, 1, 5))
    c0 = pr.b.channel(pr.a[0], pr.a[1])
    c1 = pr.b.channel(pr.a[5], pr.a[1])
    for _ in range(2):
        pr.b.send(pr.a[0], c0, 1 * KiB)
        pr.b.compute(pr.a[0], 4.0)
    pr.b.compute(pr.a[5], 100.0)
    for _ in range(2):
        pr.b.send(pr.a[5], c1, 4 * KiB)
        pr.b.compute(pr.a[5], 16.0)
    pr.b.compute(pr.a[1], 400.0)
    q = [pr.b.recv(pr.a[1], RECV_ANY, 1 * KiB) for _ in range(4)]
    ends = [406.0625, 424.125, 430.1875, 448.25]
    starts = [400.0] + ends[:3]
    check(pr.b.build(), {o: (s, e) for o, s, e in zip(q, starts, ends)})


# ----------------------------------------------------------------------------------------------------------------
# Async recv + WAIT: the recv runs in the background (r2 = 42.0625 for tcm 4 KiB on h1).
@pytest.mark.parametrize(("busy", "finish"), [(5.0, 42.0625), (100.0, 100.0)])
def test_async_recv_and_wait(t0: Tables, busy: float, finish: float) -> None:
    pr = Pair(t0)
    c = pr.b.channel(pr.a[0], pr.a[1])
    pr.b.send(pr.a[0], c, 4 * KiB)
    rv = pr.b.recv(pr.a[1], c, 4 * KiB, is_async=True)
    cp = pr.b.compute(pr.a[1], busy)
    w = pr.b.wait(pr.a[1], rv)
    check(pr.b.build(), {rv: (30.0, 42.0625), cp: (0.0, busy), w: (None, finish)}, finish={pr.a[1]: finish})


def test_async_recvs_wait_all(t0: Tables) -> None:
    # Two async recvs of a two-message channel (n_slots 4), then WAIT for all: they are served in order,
    # the second after the first's credit (the channel's recv side is busy until then):
    #   msg 0: vis 30, r2 42.0625;  msg 1 (sent at 16): vis 46 -> 46 + 12.0625 = 58.0625
    pr = Pair(t0)
    c = pr.b.channel(pr.a[0], pr.a[1])
    pr.b.send(pr.a[0], c, 4 * KiB)
    pr.b.compute(pr.a[0], 16.0)
    pr.b.send(pr.a[0], c, 4 * KiB)
    q0 = pr.b.recv(pr.a[1], c, 4 * KiB, is_async=True)
    q1 = pr.b.recv(pr.a[1], c, 4 * KiB, is_async=True)
    w = pr.b.wait(pr.a[1])
    check(pr.b.build(), {q0: (30.0, 42.0625), q1: (46.0, 58.0625), w: (None, 58.0625)}, finish={pr.a[1]: 58.0625})
