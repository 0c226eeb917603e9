"""The GEMM tile pipeline (spec_pe §4–§5; kbfast.ir.tiling, ProgramBuilder.gemm): hand-derived cases in exact
mode, the SimPy reference, the fast path (P1 where no two transfers of the GEMM overlap), and the public
calibration rows (calibration/reference_public.csv, gemm_*).

Default topology, pe0 of cube 0 and its own HBM slice.  Per 4 KiB operand tile: a read's last flit reaches
the controller 19 ns after it starts (16 ns of flits on the 256 GB/s PE link, 2 ns router, 1 ns on the router
-> controller link), which frees the read channel (``pe.dma_read_release: accepted``); its response is back 2
ns later (21 ns, ``hbm.read_response: accepted``).  FETCH of A and B (8 KiB at 512 GB/s) 16 ns, GEMM of a
32x64x32 tile at 4096 MAC/ns 16 ns, STORE of the 2 KiB C tile 4 ns, its DMA_WRITE 21 ns (8 ns of flits, 2 + 1,
the 8 ns commit, 2 ns response).
"""

from __future__ import annotations

import numpy as np
import pytest

from kbfast.config import load_system
from kbfast.errors import KbfastError
from kbfast.exact.replay import run_exact
from kbfast.fast.evaluate import run_fast
from kbfast.ir import Op, ProgramBuilder
from kbfast.reference.simpy_ref import run_simpy
from kbfast.sim.lowering import estimate_memory_bytes, fabric_flits, heap_capacity
from kbfast.ir.tiling import Epilogue, plan_gemm
from kbfast.topology.builder import build_tables
from kbfast.topology.names import node_id
from kbfast.topology.routing import Router
from kbfast.workloads.gemm import parse_epilogues

A_ADDR, B_ADDR, C_ADDR = 0, 1 << 20, 2 << 20


@pytest.fixture(scope="module")
def tr():
    t = build_tables(load_system())
    return t, Router(t)


def gemm_program(t, r, m, n, k, *, a_pinned=False, b_pinned=False, epilogues=(), pe=0, b_from=0):
    b = ProgramBuilder(t, r, name="gemm")
    a = b.pe_agent(node_id(t, f"sip0.cube0.pe{pe}.pe_dma"))
    b.start(a)
    own = node_id(t, f"sip0.cube0.hbm_ctrl.pe{pe}")
    src_b = node_id(t, f"sip0.cube0.hbm_ctrl.pe{b_from}")
    plan = plan_gemm(t.spec.pe, m, n, k, a_pinned=a_pinned, b_pinned=b_pinned, epilogues=tuple(epilogues))
    done = b.gemm(a, plan, (own, A_ADDR), (src_b, B_ADDR), (own, C_ADDR))
    return b.build(), plan, done


def exact_end(t, r, *args, **kw) -> float:
    p, _, done = gemm_program(t, r, *args, **kw)
    return float(run_exact(p).op_end_ns[done])


def test_tile_counts_match_the_reference() -> None:
    pe = load_system().pe
    for (m, n, k), tiles in {(512, 512, 512): 2048, (128, 128, 256): 64, (32, 32, 64): 1, (32, 32, 3072): 48,
                             (16, 8, 1): 1, (33, 32, 64): 2}.items():
        assert plan_gemm(pe, m, n, k).n_tile_total == tiles
    assert plan_gemm(pe, 16, 32, 64).under_tile and not plan_gemm(pe, 32, 32, 64).under_tile


def test_one_tile(tr) -> None:
    # A read 0 -> channel free 19; B read 19 -> 40 (19 + 21); FETCH 40 -> 56; GEMM 56 -> 72; STORE 72 -> 76;
    # DMA_WRITE 76 -> 97.
    t, r = tr
    p, plan, done = gemm_program(t, r, 32, 32, 64)
    res = run_exact(p)
    assert res.op_end_ns[done] == 97.0
    ends = {Op(c).name: res.op_end_ns[(p.op_code == c)].max() for c in (Op.FETCH, Op.GEMM, Op.STORE)}
    assert ends == {"FETCH": 56.0, "GEMM": 72.0, "STORE": 76.0}
    reads = np.flatnonzero(p.op_code == Op.DMA_READ)
    assert res.op_begin_ns[reads].tolist() == [0.0, 19.0] and res.op_end_ns[reads].tolist() == [21.0, 40.0]


def test_two_tiles_in_k(tr) -> None:
    # Reads A0 0, B0 19, A1 38, B1 57 (channel freed every 19 ns); tile 1's data at 57 + 21 = 78.
    # FETCH 40 -> 56, 78 -> 94; GEMM 56 -> 72, 94 -> 110; STORE (last k only) 110 -> 114; write -> 135.
    t, r = tr
    assert exact_end(t, r, 32, 32, 128) == 135.0


def test_pinned_operands(tr) -> None:
    # B only: reads at 0, 19 (data 21, 40): FETCH 21 -> 37, 40 -> 56; GEMM 37 -> 53, 56 -> 72; STORE 72 -> 76;
    # write 97.  Both pinned: no reads; FETCH 0 -> 16, 16 -> 32; GEMM 16 -> 32, 32 -> 48; STORE 52; write 73.
    t, r = tr
    assert exact_end(t, r, 32, 32, 128, a_pinned=True) == 97.0
    assert exact_end(t, r, 32, 32, 128, a_pinned=True, b_pinned=True) == 73.0
    assert exact_end(t, r, 32, 32, 128, a_pinned=True) < exact_end(t, r, 32, 32, 128)


def test_epilogues_run_on_the_compute_slot(tr) -> None:
    # Both pinned, 2 k tiles: a 3 ns k_tile epilogue after each GEMM, a 5 ns output_tile one on the last k.
    # GEMM 16 -> 32, MATH -> 35; FETCH 1 ends 32, GEMM 35 -> 51, MATH -> 54, MATH -> 59; STORE 63; write 84.
    t, r = tr
    eps = (Epilogue("dequant", "k_tile", 3.0), Epilogue("relu", "output_tile", 5.0))
    p, _, done = gemm_program(t, r, 32, 32, 128, a_pinned=True, b_pinned=True, epilogues=eps)
    res = run_exact(p)
    assert res.op_end_ns[done] == 84.0
    assert int(np.sum(p.op_code == Op.MATH)) == 3


def test_depth_one_waits_for_fetch(tr) -> None:
    # tile_buffers = 1, B streamed (A pinned): tile t+1's read waits for tile t's FETCH.
    # B0 0 -> data 21, FETCH 21 -> 37; B1 starts 37 -> data 58, FETCH 58 -> 74; GEMM 74 -> 90; STORE 94; 115.
    t = build_tables(load_system(overrides={"pe.tile_buffers": 1}))
    r = Router(t)
    assert exact_end(t, r, 32, 32, 128, a_pinned=True) == 115.0


@pytest.mark.parametrize("shape", [(32, 32, 64), (32, 32, 640), (64, 64, 128), (96, 64, 192), (40, 70, 100)])
@pytest.mark.parametrize("pins", [(False, False), (True, False), (False, True), (True, True)])
def test_exact_equals_the_simpy_reference(tr, shape, pins) -> None:
    t, r = tr
    p, _, _ = gemm_program(t, r, *shape, a_pinned=pins[0], b_pinned=pins[1],
                           epilogues=(Epilogue("bias", "output_tile", 2.0),))
    ex, sp = run_exact(p), run_simpy(p)
    np.testing.assert_array_equal(ex.op_end_ns, sp.op_end_ns)


@pytest.mark.parametrize("shape", [(32, 32, 64), (32, 32, 3072), (16, 8, 200)])
@pytest.mark.parametrize("pins", [(False, False), (True, False), (True, True)])
def test_fast_equals_exact_on_one_output_tile(tr, shape, pins) -> None:
    """One output tile: the write follows every read, no two transfers overlap (P1)."""
    t, r = tr
    p, _, done = gemm_program(t, r, *shape, a_pinned=pins[0], b_pinned=pins[1])
    assert run_fast(p).op_end_ns[done] == pytest.approx(run_exact(p).op_end_ns[done], rel=1e-9)


def test_remote_b_costs_the_fabric(tr) -> None:
    t, r = tr
    assert exact_end(t, r, 32, 32, 640, a_pinned=True, b_from=4) > exact_end(t, r, 32, 32, 640, a_pinned=True)


def test_calibration_load_ref_window(tr) -> None:
    """gemm_load_ref_32x3072x32_window: 992 ns; with the up-front load of A: 1765 ns (both within 3 %)."""
    t, r = tr
    p, plan, done = gemm_program(t, r, 32, 32, 3072, a_pinned=True)
    res = run_exact(p)
    stages = np.isin(p.op_code, [Op.DMA_READ, Op.FETCH, Op.GEMM, Op.MATH, Op.STORE, Op.DMA_WRITE])
    window = res.op_end_ns[stages].max() - res.op_begin_ns[stages].min()
    assert window == 971.0 and abs(window / 992 - 1) < 0.03
    # the A load: one 196,608 B read of the PE's own slice, then the GEMM
    b = ProgramBuilder(t, r)
    a = b.pe_agent(node_id(t, "sip0.cube0.pe0.pe_dma"))
    own = node_id(t, "sip0.cube0.hbm_ctrl.pe0")
    load = b.dma(a, own, 32 * 3072 * 2, A_ADDR, write=False)
    b.gemm(a, plan, (own, A_ADDR), (own, B_ADDR), (own, C_ADDR))
    res = run_exact(b.build())
    assert res.op_end_ns[load] == 773.0           # 768 ns of flits + 2 + 1 + 2: the reference's 1765 - 992
    total = res.agent_finish_ns.max()
    assert total == 773.0 + 971.0 and abs(total / 1765 - 1) < 0.03


def test_multi_tile_slower_and_repeatable(tr) -> None:
    t, r = tr
    one, many = exact_end(t, r, 32, 32, 64), exact_end(t, r, 128, 256, 128)
    assert many > one and exact_end(t, r, 128, 256, 128) == many


def test_bad_gemm_input_is_refused(tr) -> None:
    t, r = tr
    with pytest.raises(KbfastError, match="GEMM m must be a positive integer"):
        plan_gemm(t.spec.pe, 0, 32, 32)
    with pytest.raises(KbfastError, match="scope 'once'"):
        plan_gemm(t.spec.pe, 32, 32, 32, epilogues=(Epilogue("relu", "once", 1.0),))
    b = ProgramBuilder(t, r)
    a = b.pe_agent(node_id(t, "sip0.cube0.pe0.pe_dma"))
    pe = node_id(t, "sip0.cube0.pe1.pe_dma")
    with pytest.raises(KbfastError, match="is not an HBM controller"):
        b.gemm(a, plan_gemm(t.spec.pe, 32, 32, 64), (pe, 0), (pe, 0), (pe, 0))


def test_the_event_queue_counts_fabric_flits_only(tr) -> None:
    """A GEMM op's nbytes counts MACs, a FETCH's or STORE's TCM bytes: none of them are flits.  The exact replay's
    event queue reserved a slot for each such 'flit' too (a 4096^3 GEMM: 25.7 GiB of address space against a
    2.93 GiB estimate); now it reserves about what the memory estimate counts."""
    t, r = tr
    p, _, _ = gemm_program(t, r, 256, 256, 1024)
    assert fabric_flits(p) == int(np.sum(p.op_nbytes[np.isin(p.op_code, (Op.DMA_READ, Op.DMA_WRITE))] // 256))
    assert 80 * heap_capacity(p) <= 1.5 * estimate_memory_bytes(p)
    assert exact_end(t, r, 256, 256, 1024) == float(run_exact(p).op_end_ns.max())   # the replay runs in it


ONE_SIP_2X2 = {"sips.count": 1, "sip.cube_mesh.w": 2, "sip.cube_mesh.h": 2}


@pytest.mark.parametrize("shape", [(32, 32, 640), (128, 128, 256), (64, 64, 1024)])
@pytest.mark.parametrize("nbytes", [4096, 65536])
def test_p2_gemm_beside_an_allreduce(shape, nbytes) -> None:
    """P2: every rank's PE runs a load_ref GEMM on an agent of its own while the lrab all-reduce runs (1 SIP,
    2 x 2 cubes): they share the PE's DMA channels, TCM and compute slot (the reduce's MATH) and its link.
    The fast estimate stays within 5 % of exact, and exact lies inside the fast bounds, op by op."""
    from kbfast.workloads.collectives import allreduce
    from kbfast.workloads.gemm import gemm_beside
    t = build_tables(load_system(overrides=ONE_SIP_2X2))
    c = allreduce(t, Router(t), nbytes, "lrab", beside=gemm_beside(*shape, "load_ref"))
    ex, fa = run_exact(c.program), run_fast(c.program)
    lat_ex, lat_fa = ex.agent_finish_ns.max(), fa.agent_finish_ns.max()
    assert abs(lat_fa / lat_ex - 1) <= 0.05
    assert (fa.op_end_lo_ns <= ex.op_end_ns + 1e-9).all() and (ex.op_end_ns <= fa.op_end_hi_ns + 1e-9).all()
    # the GEMMs really ran beside it: 4 ranks, each with its GEMM's helper agents
    assert c.program.n_agents == 4 * (1 + 1 + 5)


# --------------------------------------------------------------------------------------------------------------
# Properties (exact mode, small shapes): more MAC/ns is never slower, a larger K is never faster, pinning an
# operand is never slower (the GEMM command alone: up-front loads are not part of it).
from hypothesis import given, settings, strategies as st  # noqa: E402

DIMS = st.sampled_from([16, 32, 48, 64, 96, 128, 200])


@pytest.fixture(scope="module")
def systems():
    """Tables and router per (GEMM rate, depth), built once."""
    cache = {}

    def get(rate: float, depth: int):
        if (rate, depth) not in cache:
            t = build_tables(load_system(overrides={"pe.gemm_macs_per_ns": rate, "pe.tile_buffers": depth}))
            cache[rate, depth] = (t, Router(t))
        return cache[rate, depth]
    return get


@settings(max_examples=25, deadline=None)
@given(m=DIMS, n=DIMS, k=DIMS, a=st.booleans(), b=st.booleans(), depth=st.integers(1, 3))
def test_more_macs_per_ns_is_never_slower(systems, m, n, k, a, b, depth) -> None:
    """Where no C write meets the reads: one output tile, or both operands pinned (see the next test)."""
    if not (m <= 32 and n <= 32 or a and b):
        m, n = min(m, 32), min(n, 32)
    ends = [exact_end(*systems(rate, depth), m, n, k, a_pinned=a, b_pinned=b) for rate in (1024.0, 4096.0, 16384.0)]
    assert ends[0] >= ends[1] >= ends[2]


def test_more_macs_per_ns_can_be_slower_when_writes_meet_reads(systems) -> None:
    """A timing anomaly of FIFO resources, not a bug: 200 x 200 x 16 streams A and B (49 output tiles, one k
    tile each) at depth 1.  A faster GEMM issues each C write sooner, into the PE link and PCs that the next
    tiles' reads use (a PE read carries its bytes forward, spec_memory §4.1), and the reads queue behind it:
    2785 ns at 4096 MAC/ns, 3013 ns (+8.2 %) at 16384.  kbfast reproduces the FIFO semantics, so the property
    "more MAC/ns is never slower" holds only where no write meets the reads (docs/gemm.md)."""
    ends = [exact_end(*systems(rate, 1), 200, 200, 16) for rate in (4096.0, 16384.0)]
    assert ends == [2785.0, 3013.0]


def test_an_epilogue_can_make_a_gemm_faster_when_writes_meet_reads(tr) -> None:
    """The same anomaly the other way round: a ``relu`` output-tile epilogue (4 ns of MATH before each C write)
    delays each write, the next tiles' reads reach the PE link and PCs first, and the read channel binds: a
    64 x 64 x 128 GEMM streaming A and B ends at 382 ns instead of 387 ns, in exact mode and in the SimPy
    reference alike (``kbfast run gemm --m 512 --n 512 --k 512 --epilogue relu``: 42.30 µs against 43.06 µs;
    docs/gemm.md)."""
    t, r = tr
    (plain, _, d0), (relu, _, d1) = (gemm_program(t, r, 64, 64, 128, epilogues=e)
                                     for e in ((), parse_epilogues(t, "relu")))
    assert [run_exact(plain).op_end_ns[d0], run_exact(relu).op_end_ns[d1]] == [387.0, 382.0]
    assert [run_simpy(plain).op_end_ns[d0], run_simpy(relu).op_end_ns[d1]] == [387.0, 382.0]


@settings(max_examples=25, deadline=None)
@given(m=DIMS, n=DIMS, k=DIMS, extra=st.integers(1, 3), a=st.booleans(), b=st.booleans())
def test_a_larger_k_is_never_faster(systems, m, n, k, extra, a, b) -> None:
    t, r = systems(4096.0, 2)
    assert exact_end(t, r, m, n, k + 64 * extra, a_pinned=a, b_pinned=b) >= exact_end(t, r, m, n, k, a_pinned=a,
                                                                                      b_pinned=b)


@settings(max_examples=25, deadline=None)
@given(m=DIMS, n=DIMS, k=DIMS, depth=st.integers(1, 3))
def test_pinning_an_operand_is_never_slower(systems, m, n, k, depth) -> None:
    t, r = systems(4096.0, depth)
    streamed = exact_end(t, r, m, n, k)
    assert exact_end(t, r, m, n, k, a_pinned=True) <= streamed
    assert exact_end(t, r, m, n, k, b_pinned=True) <= streamed
    assert exact_end(t, r, m, n, k, a_pinned=True, b_pinned=True) <= min(
        exact_end(t, r, m, n, k, a_pinned=True), exact_end(t, r, m, n, k, b_pinned=True))


def test_math_ops_are_priced_per_op() -> None:
    """MATH = max(overhead, n_elem x ns_per_elem(op)) (decisions table): a 32 x 32 output tile (1024 elements)."""
    from kbfast.ir.tiling import epilogue, math_ns
    pe = load_system().pe
    assert math_ns(pe, 1024) == 8.0                          # add: 1024 / 128
    assert [epilogue(pe, op).ns for op in ("relu", "bias", "exp", "softmax")] == [4.0, 8.0, 16.0, 32.0]
    assert math_ns(pe, 16, "relu") == pe.math_overhead_ns == 2.0   # the overhead floor
    assert epilogue(pe, "dequant", "k_tile").scope == "k_tile"
    with pytest.raises(KbfastError, match="unknown PE_MATH op 'sofmax': did you mean 'softmax'"):
        math_ns(pe, 1024, "sofmax")


def test_cli_epilogues_add_their_cost(tr) -> None:
    """--epilogue: both pinned, 2 k tiles, dequant (4 ns) every k, relu (4 ns) on the last: 73 + 2 x 4 + 4."""
    from kbfast.workloads.gemm import gemm_case, parse_epilogues
    t, r = tr
    eps = parse_epilogues(t, "dequant:k_tile, relu")
    assert [(e.op, e.scope, e.ns) for e in eps] == [("dequant", "k_tile", 4.0), ("relu", "output_tile", 4.0)]
    plain = gemm_case(t, r, 32, 32, 128, "load_load")
    fused = gemm_case(t, r, 32, 32, 128, "load_load", epilogues=eps)
    ends = [run_exact(c.program).op_end_ns[c.done] - run_exact(c.program).op_end_ns[c.loads[-1]] for c in (plain, fused)]
    assert ends[1] - ends[0] == 2 * 4.0 + 4.0
