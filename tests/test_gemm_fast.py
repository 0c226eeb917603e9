"""The fast path of isolated GEMMs (kbfast.measure.gemm, kbfast.fast.maxplus_gemm): P1 where the GEMM's transfers never
overlap, the method chosen, and the estimate where they do."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from kbfast.config import load_system
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
    t, r = systems(**{"pe.tile_buffers": depth, "pe.gemm_macs_per_ns": rate, "pe.tcm_read_gbs": tcm,
                      "pe.tcm_write_gbs": tcm, "link.router_hbm.bw_gbs": hbm, "hbm.read_response": read[0],
                      "pe.dma_read_release": read[1]})
    case = gemm_case(t, r, m, n, k, staging, b_from=b_from)
    assert fast_method(case) == "maxplus"
    fast, exact = evaluate_gemm(t, r, case), evaluate_gemm(t, r, case, exact=True)
    for key in ("latency_ns", "window_ns"):
        assert fast[key] == pytest.approx(exact[key], rel=1e-9), key
    assert fast["latency_lo_ns"] == fast["latency_ns"] == fast["latency_hi_ns"]


def test_methods(systems) -> None:
    t, r = systems()
    case = lambda *a: gemm_case(t, r, *a, program=False)      # noqa: E731
    assert fast_method(case(32, 32, 3072, "load_ref")) == "maxplus"
    assert fast_method(case(512, 512, 512, "load_load")) == "maxplus"
    assert fast_method(case(128, 128, 256, "ref_ref")) == "fluid"
    assert fast_method(case(4096, 4096, 4096, "load_ref")) == "maxplus_estimate"
    assert case(4096, 4096, 4096, "load_ref").plan.n_tile_total > FLUID_MAX_TILES


def test_fluid_where_writes_meet_reads(systems) -> None:
    """Several output tiles, operands streamed: the fluid schedule, within 5 % of exact and with bounds that
    hold; the recurrence alone (which leaves the writes' interference out) is below exact: its own lower bound,
    with no upper one (a single GEMM's row carries a warning that says so: kbfast.measure.gemm.ESTIMATE_WARNING,
    tests/test_cli_run.py::test_gemm_estimate_says_so)."""
    t, r = systems()
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
    assert row["method"] == "fluid" and row["bound_stage"] == "dma_read"
    assert row["window_ns"] * 0.99 <= row["ideal_ns"] <= row["window_ns"] <= row["latency_ns"]
    for shape, staging in (((32, 32, 3072), "load_ref"), ((200, 200, 16), "ref_ref"), ((64, 96, 640), "ref_ref"),
                           ((100, 64, 65), "load_load")):
        c = gemm_case(t, r, *shape, staging)
        for row in (evaluate_gemm(t, r, c), evaluate_gemm(t, r, c, exact=True), maxplus_rows(t, r, [c])[0]):
            assert 0 < row["ideal_ns"] <= row["window_ns"], (shape, staging, row["method"])
