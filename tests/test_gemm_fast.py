"""The fast path of isolated GEMMs (kbfast.measure.gemm, kbfast.fast.maxplus_gemm, kbfast.measure.gemm_steady): P1
where the GEMM's transfers never overlap, the steady state where they do, the method chosen, and the estimate and
the fluid schedule where the steady state has no upper bound."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from kbfast.config import load_system
from kbfast.measure import gemm_steady
from kbfast.measure.gemm import FLUID_MAX_TILES, evaluate_gemm, fast_method, maxplus_rows
from kbfast.topology.builder import build_tables
from kbfast.topology.routing import Router
from kbfast.workloads.gemm import gemm_case

DIMS = st.sampled_from([8, 16, 32, 33, 64, 100, 128, 200, 640])


@pytest.fixture(scope="module")
def systems():
    cache = {}

    def get(**over):
        key = tuple(sorted(over.items()))
        if key not in cache:
            t = build_tables(load_system(overrides=over))
            cache[key] = (t, Router(t))
        return cache[key]
    return get


@settings(max_examples=40, deadline=None)
@given(m=DIMS, n=DIMS, k=DIMS, staging=st.sampled_from(["ref_ref", "load_ref", "load_load"]),
       depth=st.integers(1, 3), rate=st.sampled_from([1024.0, 4096.0, 8192.0]),
       tcm=st.sampled_from([256.0, 512.0]), hbm=st.sampled_from([128.0, 256.0]),
       b_from=st.sampled_from([None, "sip0.cube0.pe1", "sip0.cube0.pe6"]),
       read=st.sampled_from([("accepted", "accepted"), ("committed", "response"), ("accepted", "response")]))
def test_p1_where_no_transfers_overlap(systems, m, n, k, staging, depth, rate, tcm, hbm, b_from, read) -> None:
    """One output tile, or both operands pinned: the recurrence equals exact mode (1e-9), whatever the depth,
    GEMM rate, TCM and HBM bandwidth, B's slice and the read semantics."""
    if staging != "load_load":
        m, n = min(m, 32), min(n, 32)
    t, r = _pipeline_system(systems, depth, rate, tcm, hbm, read)
    fast, _ = _equals_exact(t, r, gemm_case(t, r, m, n, k, staging, b_from=b_from), "maxplus")
    assert fast["latency_lo_ns"] == fast["latency_ns"] == fast["latency_hi_ns"]


def _pipeline_system(systems, depth: int, rate: float, tcm: float, hbm: float, read: tuple[str, str]):
    """The default system with the tile pipeline's depth, GEMM rate, TCM and HBM bandwidths and read semantics."""
    return systems(**{"pe.tile_buffers": depth, "pe.gemm_macs_per_ns": rate, "pe.tcm_read_gbs": tcm,
                      "pe.tcm_write_gbs": tcm, "link.router_hbm.bw_gbs": hbm, "hbm.read_response": read[0],
                      "pe.dma_read_release": read[1]})


def _equals_exact(t, r, case, method: str) -> tuple[dict, dict]:
    """``case`` takes the fast ``method`` and equals exact mode (1e-9) in latency and window; both rows."""
    assert fast_method(t, case) == method
    fast, exact = evaluate_gemm(t, r, case), evaluate_gemm(t, r, case, exact=True)
    assert fast["method"] == method
    for key in ("latency_ns", "window_ns"):
        assert fast[key] == pytest.approx(exact[key], rel=1e-9), key
    return fast, exact


def test_methods(systems) -> None:
    t, r = systems()
    case = lambda *a: gemm_case(t, r, *a, program=False)      # noqa: E731
    assert fast_method(t, case(32, 32, 3072, "load_ref")) == "maxplus"
    assert fast_method(t, case(512, 512, 512, "load_load")) == "maxplus"
    assert fast_method(t, case(128, 128, 256, "ref_ref")) == "maxplus_steady"
    assert fast_method(t, case(4096, 4096, 4096, "load_ref")) == "maxplus_steady"
    turn, r = systems(**{"hbm.switch_penalty_ns": 2.0})      # no upper bound for the steady state
    case = lambda *a: gemm_case(turn, r, *a, program=False)   # noqa: E731
    assert fast_method(turn, case(32, 32, 3072, "load_ref")) == "maxplus"
    assert fast_method(turn, case(128, 128, 256, "ref_ref")) == "fluid"
    assert fast_method(turn, case(4096, 4096, 4096, "load_ref")) == "maxplus_estimate"
    assert case(4096, 4096, 4096, "load_ref").plan.n_tile_total > FLUID_MAX_TILES


@pytest.mark.parametrize("n", [13 * 32, 15 * 32])
def test_tiles_off_the_pc_rounds_take_the_fluid_schedule(systems, n) -> None:
    """1-byte elements over 16 PCs: a 1 KiB C tile is half a round of the PCs, so the PCs a tile meets depend
    on its address, and a prefix (laid out with its own shape) meets others; the PC pattern of 32 x N x 128
    repeats every 4 output tiles, which the prefixes' 4, 8 and 12 tiles cannot see (with 13 or 15 output
    tiles the extrapolation was 0.14 and 0.51 % off).  Such a GEMM takes the fluid schedule, within 5 %."""
    t, r = systems(**{"pe.elem_bytes": 1, "hbm.pcs_per_pe": 16, "hbm.efficiency": 0.6})
    c = gemm_case(t, r, 32, n, 128, "ref_ref")
    assert c.plan.c_tile_bytes % gemm_steady.pc_round_bytes(t) != 0
    fast, exact = evaluate_gemm(t, r, c), evaluate_gemm(t, r, c, exact=True)
    assert fast["method"] == "fluid" and abs(fast["latency_ns"] / exact["latency_ns"] - 1) <= 0.05
    assert fast["latency_lo_ns"] <= exact["latency_ns"] <= fast["latency_hi_ns"]


@settings(max_examples=40, deadline=None)
@given(m=st.sampled_from([33, 64, 100, 200, 640]), n=st.sampled_from([33, 64, 100, 128, 640]),
       k=st.sampled_from([16, 64, 65, 300, 640]), staging=st.sampled_from(["ref_ref", "load_ref"]),
       depth=st.integers(1, 3), rate=st.sampled_from([1024.0, 4096.0, 16384.0]),
       tcm=st.sampled_from([256.0, 512.0]), hbm=st.sampled_from([128.0, 256.0]),
       b_from=st.sampled_from([None, "sip0.cube0.pe6", "sip0.cube1.pe4", "sip1.cube2.pe3"]),
       read=st.sampled_from([("accepted", "accepted"), ("committed", "response"), ("accepted", "response")]))
def test_steady_state_equals_exact(systems, m, n, k, staging, depth, rate, tcm, hbm, b_from, read) -> None:
    """Several output tiles and a streamed operand: the C writes meet the reads.  The recurrence plus the excess
    of three short prefixes, extrapolated, equals exact mode (1e-9), and exact lies between the recurrence and
    its upper bound (docs/gemm.md "The steady state")."""
    t, r = _pipeline_system(systems, depth, rate, tcm, hbm, read)
    fast, exact = _equals_exact(t, r, gemm_case(t, r, m, n, k, staging, b_from=b_from), "maxplus_steady")
    assert fast["latency_lo_ns"] <= exact["latency_ns"] * (1 + 1e-12) and exact["latency_ns"] <= fast["latency_hi_ns"]
    assert fast["latency_hi_ns"] <= 4 * exact["latency_ns"]          # an upper bound that informs


def test_steady_state_of_big_gemms(systems) -> None:
    """Beyond the prefixes, the excess grows by the same amount per output tile: 256 x 2048 x 512 (1,024 tiles of
    512 output tiles, B from another cube) equals exact, and a 4096^3 GEMM has a point between bounds 2x apart."""
    t, r = systems()
    _equals_exact(t, r, gemm_case(t, r, 256, 2048, 512, "ref_ref", b_from="sip0.cube1.pe4"), "maxplus_steady")
    big = evaluate_gemm(t, r, gemm_case(t, r, 4096, 4096, 4096, "ref_ref", program=False))
    assert big["method"] == "maxplus_steady" and "warning" not in big
    assert big["latency_lo_ns"] < big["latency_ns"] < big["latency_hi_ns"] <= 2.1 * big["latency_ns"]


@pytest.mark.parametrize("excess", [lambda m, n, k: float(m * n) ** 2, lambda m, n, k: float(k)],
                         ids=["not affine in the output tiles", "depends on the k tiles"])
def test_no_steady_state_falls_back(systems, monkeypatch, excess) -> None:
    """Prefixes whose excess is not affine in the output tiles, or changes with more k tiles, are no steady
    state: the fluid schedule up to FLUID_MAX_TILES tiles, the recurrence alone (with its warning) beyond."""
    t, r = systems()
    monkeypatch.setattr(gemm_steady, "_FITS", type(gemm_steady._FITS)())     # nothing remembered
    monkeypatch.setattr(gemm_steady, "_excess", lambda t, r, plan, tiles, *a: excess(*tiles))
    small = evaluate_gemm(t, r, gemm_case(t, r, 128, 128, 1024, "ref_ref", program=False))
    assert small["method"] == "fluid" and small["latency_lo_ns"] <= small["latency_ns"] <= small["latency_hi_ns"]
    big = evaluate_gemm(t, r, gemm_case(t, r, 4096, 4096, 4096, "ref_ref", program=False))
    assert big["method"] == "maxplus_estimate" and "lower bound" in big["warning"]


def test_fluid_where_writes_meet_reads(systems) -> None:
    """With a PC read/write turnaround (``hbm.switch_penalty_ns`` > 0) the steady state has no upper bound:
    several output tiles with operands streamed take the fluid schedule, within 5 % of exact and with bounds
    that hold; the recurrence alone (which leaves the writes' interference out) is below exact: its own lower
    bound, with no upper one (a single GEMM's row carries a warning that says so:
    kbfast.measure.gemm.ESTIMATE_WARNING, tests/test_cli_run.py::test_gemm_estimate_says_so)."""
    t, r = systems(**{"hbm.switch_penalty_ns": 2.0})
    for shape in ((128, 128, 256), (200, 200, 16), (64, 96, 640)):
        c = gemm_case(t, r, *shape, "ref_ref")
        fast, exact = evaluate_gemm(t, r, c), evaluate_gemm(t, r, c, exact=True)
        assert fast["method"] == "fluid" and abs(fast["latency_ns"] / exact["latency_ns"] - 1) <= 0.05
        assert fast["latency_lo_ns"] <= exact["latency_ns"] <= fast["latency_hi_ns"]
        assert "warning" not in fast
        estimate = maxplus_rows(t, r, [c])[0]
        assert estimate["method"] == "maxplus_estimate" and estimate["latency_ns"] <= exact["latency_ns"]
        assert estimate["latency_lo_ns"] == estimate["latency_ns"] and np.isnan(estimate["latency_hi_ns"])
        assert "warning" not in estimate                     # a sweep's row: its method says it


@settings(max_examples=30, deadline=None)
@given(m=st.sampled_from([33, 64, 100, 128, 200]), n=st.sampled_from([33, 64, 100, 128]),
       k=st.sampled_from([16, 64, 65, 128, 300]), staging=st.sampled_from(["ref_ref", "load_ref"]),
       depth=st.integers(1, 3), rate=st.sampled_from([1024.0, 4096.0, 16384.0]),
       b_from=st.sampled_from([None, "sip0.cube0.pe6", "sip0.cube1.pe4"]),
       switch=st.sampled_from([0.0, 40.0]), read=st.sampled_from([("accepted", "accepted"), ("committed", "response")]))
def test_the_estimate_is_a_lower_bound(systems, m, n, k, staging, depth, rate, b_from, switch, read) -> None:
    """Writes meeting reads only slow transfers down, and the recurrence is monotone in its service times: the
    estimate never exceeds exact mode (a PC's read/write turnaround included, where the writes' upper bound
    of kbfast.fast.maxplus_gemm.gemm_upper fails)."""
    t, r = systems(**{"pe.tile_buffers": depth, "pe.gemm_macs_per_ns": rate, "hbm.switch_penalty_ns": switch,
                      "hbm.read_response": read[0], "pe.dma_read_release": read[1]})
    c = gemm_case(t, r, m, n, k, staging, b_from=b_from)
    estimate, exact = maxplus_rows(t, r, [c])[0], evaluate_gemm(t, r, c, exact=True)
    assert estimate["latency_lo_ns"] <= exact["latency_ns"] * (1 + 1e-12)


def test_batch_equals_one_by_one(systems) -> None:
    t, r = systems()
    cases = [gemm_case(t, r, m, n, k, s, program=False) for m in (16, 32, 256) for n in (32, 128)
             for k in (64, 1000) for s in ("ref_ref", "load_ref", "load_load")]
    batch = maxplus_rows(t, r, cases)
    for c, row in zip(cases, batch):
        assert row == maxplus_rows(t, r, [c])[0]


def test_ideal_never_exceeds_the_window(systems) -> None:
    """The ideal pipeline is a lower bound on the window (docs/gemm.md): 256 x 256 x 1024 ref_ref with B on another
    cube's PE is read-bound at about 90 ns a tile, and (n_tiles + 2) x T_stage had charged the fill and drain
    at that stage time (91,857 against a window of 91,735 ns)."""
    t, r = systems()
    c = gemm_case(t, r, 256, 256, 1024, "ref_ref", b_from="sip0.cube1.pe4", program=False)
    row = evaluate_gemm(t, r, c)
    assert row["method"] == "maxplus_steady" and row["bound_stage"] == "dma_read"
    assert row["window_ns"] * 0.99 <= row["ideal_ns"] <= row["window_ns"] <= row["latency_ns"]
    for shape, staging in (((32, 32, 3072), "load_ref"), ((200, 200, 16), "ref_ref"), ((64, 96, 640), "ref_ref"),
                           ((100, 64, 65), "load_load")):
        c = gemm_case(t, r, *shape, staging)
        for row in (evaluate_gemm(t, r, c), evaluate_gemm(t, r, c, exact=True), maxplus_rows(t, r, [c])[0]):
            assert 0 < row["ideal_ns"] <= row["window_ns"], (shape, staging, row["method"])
