"""Cross-check on IPCQ programs: the SimPy reference (kbfast.exact.simpy_ref) against the Numba exact engine.

Both must give the same per-op timestamps (within 1e-9 relative) for SEND/RECV (ring full, sleep and poll
backpressure, blocking and forked credit, recv_no_consume, async recv + WAIT, round-robin RECV on any
channel), random small programs, pe2pe h1..h5 and lrab all-reduces.  As in test_simpy_reference.py,
simultaneous arrivals of two transactions at one node may be served in a different order by the two
(docs/exact_mode.md §4), so the multi-agent cases use distinct, "odd" agent start offsets.

Two cases are regression tests for a fixed engine bug: a RECV queued while the channel's previous RECV still
held it (slot read or credit) was never retried.
"""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest
from conftest import NO_PROP, SINGLE, Pair, both, topo, two_messages

from kbfast.exact import run_exact
from kbfast.sim.diagnostics import ReplayDeadlock
from kbfast.reference.simpy_ref import run_simpy
from kbfast.ir import RECV_ANY, Op, Program, ProgramBuilder
from kbfast.topology.names import hbm_ctrl, pe_block
from kbfast.topology.routing import Router
from kbfast.workloads.collectives import HOPS, allreduce, pe2pe

KiB = 1024
POLL = {"ipcq.backpressure": "poll", "ipcq.poll_interval_ns": 10.0}
FORKED = {"ipcq.credit_mode": "forked"}
MODES = {"sleep": {}, "poll": POLL, "forked": FORKED, "poll_forked": {**POLL, **FORKED}}


class Pes:
    """A builder with PE agents on sip0.cube0 (or the given (sip, cube, pe) triples), at odd start offsets."""

    def __init__(self, overrides: dict, pes=((0, 0, 0), (0, 0, 1)), starts=None):
        t, router = topo(overrides)
        self.b = ProgramBuilder(t, router, name="simpy-ipcq")
        starts = starts or [k * 0.7310585 for k in range(len(pes))]
        self.a = [self.b.pe_agent(pe_block(t, *pe), start_ns=s) for pe, s in zip(pes, starts)]

    def build(self) -> Program:
        return self.b.build()


def ipcq(p: Program):
    """Run both; the program must really exercise IPCQ and every SEND must be accepted."""
    assert len(p.channels) > 0
    ex, sp = both(p)
    assert np.all(np.isfinite(sp.op_end_ns))
    return ex, sp


# -- the hand-derived cases of test_ipcq.py (no propagation, spec_ccl §2.10) ----------------------------------------
@pytest.mark.parametrize(("kind", "n", "vis", "r2"), SINGLE)
def test_hand_single_send_recv(kind, n, vis, r2):
    pr = Pair(topo(NO_PROP)[0])
    c = pr.b.channel(pr.a[0], pr.a[1], kind=kind)
    s = pr.b.send(pr.a[0], c, n)
    rv = pr.b.recv(pr.a[1], c, n)
    _, sp = ipcq(pr.b.build())
    assert (sp.op_end_ns[s], sp.op_begin_ns[rv], sp.op_end_ns[rv]) == (0.0, vis, r2)


@pytest.mark.parametrize(("over", "n", "expect"), [
    # (send 1 accepted, recv 0 begin/end, recv 1 begin/end), n_slots = 1, tcm
    ({}, 4 * KiB, (42.0625, 30.0, 42.0625, 72.0625, 84.125)),            # blocking credit
    (FORKED, 4 * KiB, (38.0625, 30.0, 38.0, 68.0625, 76.0625)),          # forked credit
    (POLL, 1 * KiB, (30.0, 20.0, 26.0625, 46.0625, 52.125)),             # poll, 10 ns grid
    ({}, 1 * KiB, (18.0625, 12.0, 18.0625, 30.0625, 36.125)),            # sleep reference for poll
])
def test_hand_two_messages_one_slot(over, n, expect):
    pr, (_s0, s1, r0, r1) = two_messages(topo({**NO_PROP, **over})[0], n=n)
    _, sp = ipcq(pr.b.build())
    got = (sp.op_begin_ns[s1], sp.op_begin_ns[r0], sp.op_end_ns[r0], sp.op_begin_ns[r1], sp.op_end_ns[r1])
    assert got == expect


# -- single messages ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["tcm", "sram", "hbm"])
@pytest.mark.parametrize("n", [1, 300, 4 * KiB, 64 * KiB])
def test_single_send_recv(kind, n):
    pr = Pes({})
    c = pr.b.channel(pr.a[0], pr.a[1], kind=kind)
    pr.b.start(pr.a[0])
    pr.b.send(pr.a[0], c, n)
    rv = pr.b.recv(pr.a[1], c, n)
    ex, _ = ipcq(pr.build())
    assert ex.op_begin_ns[rv] > 0


@pytest.mark.parametrize("mode", list(MODES))
def test_recv_no_consume_and_late_recv(mode):
    pr = Pes(MODES[mode])
    c = pr.b.channel(pr.a[0], pr.a[1], kind="sram")
    pr.b.send(pr.a[0], c, 4 * KiB)
    pr.b.send(pr.a[0], c, 1000)
    q0 = pr.b.recv(pr.a[1], c, 4 * KiB, consume=False)
    pr.b.compute(pr.a[1], 93.3)
    q1 = pr.b.recv(pr.a[1], c, 1000)            # called after the message became visible
    ex, _ = ipcq(pr.build())
    assert ex.op_begin_ns[q1] == ex.op_issue_ns[q1]
    assert ex.op_end_ns[q0] - ex.op_begin_ns[q0] == pytest.approx(ex.program.channels.credit_ns[0]
                                                                   if "forked" not in mode else 0.0)


# -- ring full: n_slots 1 and 2, several messages --------------------------------------------------------------------
@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("n_slots", [1, 2])
def test_ring_full(mode, n_slots):
    pr = Pes(MODES[mode])
    A, Z = pr.a
    c = pr.b.channel(A, Z, kind="hbm", n_slots=n_slots)
    sizes = [4 * KiB, 1000, 8 * KiB, 256, 2 * KiB, 3 * KiB]
    sends = []
    for k, n in enumerate(sizes):
        sends.append(pr.b.send(A, c, n))
        if k % 2:
            pr.b.compute(A, 17.3)
    pr.b.compute(Z, 150.0)
    for k, n in enumerate(sizes):
        pr.b.recv(Z, c, n)
        if k == 2:
            pr.b.math(Z, 4096)
    ex, _ = ipcq(pr.build())
    blocked = ex.op_begin_ns[sends] > ex.op_issue_ns[sends]
    assert blocked.any()                         # the ring really fills
    if mode.startswith("poll"):                  # a blocked send wakes on the 10 ns grid started when it blocked
        waits = (ex.op_begin_ns[sends] - ex.op_issue_ns[sends])[blocked]
        np.testing.assert_allclose(waits / 10.0, np.round(waits / 10.0), atol=1e-9)


@pytest.mark.parametrize("mode", ["sleep", "poll"])
def test_two_channels_both_ways(mode):
    """A ping-pong over two channels (n_slots 1), across cubes: credits and data share the reverse wires."""
    pr = Pes(MODES[mode], pes=((0, 0, 2), (0, 5, 6)))
    A, Z = pr.a
    ab = pr.b.channel(A, Z, kind="tcm", n_slots=1)
    ba = pr.b.channel(Z, A, kind="sram", n_slots=1)
    for k in range(4):
        pr.b.send(A, ab, 2 * KiB + 100 * k)
        pr.b.send(A, ab, 512)
        pr.b.recv(Z, ab, 2 * KiB + 100 * k)
        pr.b.recv(Z, ab, 512)
        pr.b.math(Z, 1024)
        pr.b.send(Z, ba, 3 * KiB)
        pr.b.recv(A, ba, 3 * KiB)
    ipcq(pr.build())


# -- async recv + WAIT -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("busy", [3.7, 250.0])
def test_async_recv_and_wait(mode, busy):
    pr = Pes(MODES[mode])
    A, Z = pr.a
    c = pr.b.channel(A, Z, n_slots=4)
    pr.b.send(A, c, 4 * KiB)
    pr.b.compute(A, 16.1)
    pr.b.send(A, c, 2 * KiB)
    pr.b.compute(A, 40.3)
    pr.b.send(A, c, 1 * KiB)
    q0 = pr.b.recv(Z, c, 4 * KiB, is_async=True)
    q1 = pr.b.recv(Z, c, 2 * KiB, is_async=True)
    pr.b.compute(Z, busy)
    w0 = pr.b.wait(Z, q0)
    pr.b.wait(Z, q1)             # (q2 is queued once q1 is done: see test_recv_queued_while_channel_busy)
    pr.b.dma(Z, hbm_ctrl(pr.b.t, 0, 0, 1), 2048, is_async=True)
    q2 = pr.b.recv(Z, c, 1 * KiB, is_async=True)
    w = pr.b.wait(Z)
    ex, _ = ipcq(pr.build())
    assert ex.op_end_ns[w0] == max(ex.op_end_ns[q0], ex.op_end_ns[w0 - 1])
    assert ex.op_end_ns[w] >= max(ex.op_end_ns[[q1, q2]])


# -- RECV on any channel: round robin --------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("recv_start", [0.0, 400.0])
def test_recv_any_round_robin(mode, recv_start):
    """Three senders into pe1 of cube 0 (install order ch0, ch1, ch2); the receiver takes six messages."""
    pr = Pes(MODES[mode], pes=((0, 0, 1), (0, 0, 0), (0, 0, 5), (0, 1, 3)),
             starts=[recv_start, 0.31, 7.9, 3.3])
    Z, senders = pr.a[0], pr.a[1:]
    chans = [pr.b.channel(s, Z, n_slots=2) for s in senders]
    for k, (s, c) in enumerate(zip(senders, chans)):
        for m in range(2):
            pr.b.send(s, c, (k + 1) * KiB + 64 * m)
            pr.b.compute(s, 11.7 * (k + 1))
    for _ in range(6):
        pr.b.recv(Z, RECV_ANY, 1 * KiB)
    ipcq(pr.build())


def mixed_named_and_any(named_async: bool, gap: float) -> Program:
    """pe1 takes one message of ch1 by name, then five from any channel (ch0 from pe0, ch1 from pe5)."""
    pr = Pes({}, pes=((0, 0, 1), (0, 0, 0), (0, 0, 5)), starts=[0.0, 0.37, 20.1])
    Z, A, B = pr.a
    ca, cb = pr.b.channel(A, Z), pr.b.channel(B, Z)
    for _ in range(3):
        pr.b.send(A, ca, 2 * KiB)
        pr.b.send(B, cb, 1 * KiB)
        pr.b.compute(B, gap)
    pr.b.recv(Z, cb, 1 * KiB, is_async=named_async)
    for _ in range(5):
        pr.b.recv(Z, RECV_ANY, 1 * KiB)
    return pr.build()


@pytest.mark.parametrize("gap", [0.0, 5.3, 30.1])
def test_recv_any_after_named_recv(gap):
    ipcq(mixed_named_and_any(False, gap))


# -- random small programs -------------------------------------------------------------------------------------------
def random_ipcq(seed: int) -> Program:
    """2-4 PEs of cubes 0, 1, 4, 1-4 channels (any tier, 1-3 slots), every message received once (by name or
    round robin), with COMPUTE, MATH and async DMAs in between.  RECVs are blocking (an async RECV can meet
    the engine bug of test_recv_queued_while_channel_busy)."""
    rng = random.Random(seed)
    pr = Pes(rng.choice(list(MODES.values())), pes=rng.sample([(0, c, x) for c in (0, 1, 4) for x in range(8)],
                                                              rng.randint(2, 4)))
    b, ag, t = pr.b, pr.a, pr.b.t
    plan = [[] for _ in ag]
    for _ in range(rng.randint(1, 4)):
        s, d = rng.sample(range(len(ag)), 2)
        c = b.channel(ag[s], ag[d], kind=rng.choice(["tcm", "sram", "hbm"]), n_slots=rng.randint(1, 3))
        sizes = [rng.choice([1, 255, 256, 1000, 4096, 9000]) for _ in range(rng.randint(1, 4))]
        plan[s] += [("send", c, n) for n in sizes]
        plan[d] += [("recv", c, n) for n in sizes]
    for k, ops in enumerate(plan):
        sends, recvs = [op for op in ops if op[0] == "send"], [op for op in ops if op[0] == "recv"]
        if rng.random() < 0.3:
            recvs = [("recv", RECV_ANY, 1)] * len(recvs)
        while sends or recvs:   # interleave, keeping the order of each list
            op = (sends if sends and (not recvs or rng.random() < 0.5) else recvs).pop(0)
            if rng.random() < 0.3:
                b.compute(ag[k], rng.randint(0, 60) * 0.37)
            if rng.random() < 0.15:
                b.math(ag[k], rng.choice([64, 1024, 4096]))
            if op[0] == "send":
                b.send(ag[k], op[1], op[2])
            else:
                b.recv(ag[k], op[1], op[2], consume=rng.random() < 0.8)
            if rng.random() < 0.1:
                b.dma(ag[k], hbm_ctrl(t, 0, 0, rng.randint(0, 7)), rng.choice([256, 4096]), is_async=True)
        b.wait(ag[k])
    return pr.build()


@pytest.mark.parametrize("seed", range(40))
def test_random_ipcq_programs_agree(seed):
    p = random_ipcq(seed)
    try:
        run_exact(p)
    except ReplayDeadlock:   # e.g. two PEs that both receive first; the reference must deadlock as well
        with pytest.raises(ReplayDeadlock):
            run_simpy(p)
        return
    ipcq(p)


# -- workloads --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("hop", list(HOPS))
@pytest.mark.parametrize("consume", [True, False])
def test_pe2pe(hop, consume):
    t, router = topo({})
    for n in (256, 4 * KiB, 16 * KiB):
        ipcq(pe2pe(t, router, hop, n, consume=consume).program)


@pytest.mark.parametrize("mode", ["sleep", "poll", "forked"])
def test_lrab_allreduce_2x2(mode):
    t, router = topo({"sips.count": 1, "sip.cube_mesh.w": 2, "sip.cube_mesh.h": 2, **MODES[mode]})
    p = allreduce(t, router, 4096).program
    # Every rank starts at the launch barrier; on this topology no two transfers tie at a node (on the
    # 6-SIP presets the inter-SIP exchange does: see docs/exact_mode.md §4), and the replays agree bit for bit.
    ex, sp = ipcq(p)
    np.testing.assert_array_equal(sp.op_end_ns, ex.op_end_ns)
    assert np.sum(p.op_code == Op.SEND) == 6 and ex.agent_finish_ns.max() > p.launch_ns


def test_lrab_allreduce_torus6_nudged(torus6_tables):
    """torus6 at 2 KiB: the un-nudged ranks tie at the inter-SIP exchange (the engine serves the simultaneous
    trains one after another, SimPy interleaves their flits), so the ranks' starts are nudged apart.  With the
    switch links serialised (313.962 GB/s) a nudge of 0.0137 ns per rank still leaves two trains tied where a
    pcie_ep re-streams them (the two orders differ by one 0.815 ns flit); 0.0731 ns separates every tie."""
    t = torus6_tables
    p = allreduce(t, Router(t), 2048).program
    p = dataclasses.replace(p, agent_start_ns=p.agent_start_ns + 0.0731 * np.arange(p.n_agents) ** 1.1)
    ipcq(p)


def test_recv_queued_while_channel_busy():
    """Both messages are visible; q1 is queued at 51.x while q0 (served at 50.x) holds the channel until its
    credit: q1 must begin when q0 ends (the SimPy reference does), the engine never serves it."""
    pr = Pes({})
    A, Z = pr.a
    c = pr.b.channel(A, Z)
    pr.b.send(A, c, 1 * KiB)
    pr.b.send(A, c, 1 * KiB)
    pr.b.compute(Z, 50.0)
    q0 = pr.b.recv(Z, c, 1 * KiB, is_async=True)
    pr.b.compute(Z, 1.0)
    q1 = pr.b.recv(Z, c, 1 * KiB)
    p = pr.build()
    sp = run_simpy(p)
    assert sp.op_begin_ns[q1] == sp.op_end_ns[q0] > sp.op_issue_ns[q1]
    ipcq(p)


@pytest.mark.parametrize("gap", [0.0, 30.1])
def test_recv_any_while_named_recv_holds_the_channel(gap):
    """The async named RECV holds ch1 (slot read + credit) when RECV on any picks ch1's next message:
    the engine deadlocks (gap 0) or serves it only at ch1's next visibility, 20.6 ns late (gap 30.1)."""
    ipcq(mixed_named_and_any(True, gap))


def test_ipcq_deadlock_is_reported():
    pr = Pes({})
    c = pr.b.channel(pr.a[0], pr.a[1], n_slots=1)
    pr.b.send(pr.a[0], c, 256)
    pr.b.send(pr.a[0], c, 256)                  # the ring stays full: nobody receives
    p = pr.build()
    for run in (run_exact, run_simpy):
        with pytest.raises(ReplayDeadlock):
            run(p)
