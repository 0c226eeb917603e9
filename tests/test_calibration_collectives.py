"""Collective and IPCQ calibration against calibration/reference_public.csv (spec_ccl §8).

All latencies are exact-mode ``max(pe_exec_ns)`` from the launch barrier: ``agent_finish_ns.max() - launch_ns``.
Measured at this commit (exact mode; fast path within 0.2 %):

| row | reference | measured |
|---|---|---|
| centre vs corner, torus6, 96 KiB | -0.22 (22.0 -> 17.2 us) | -0.192 (26.82 -> 21.66 us) |
| centre vs corner, ring6, 96 KiB | -0.07 | -0.168 (32.94 -> 27.41 us) |
| centre vs corner, mesh6, 96 KiB | -0.12 | -0.164 (34.83 -> 29.12 us) |
| torus6 96 KiB, latest model | < 30 us (and > 17.2 us) | 21.66 us |
| buffer kinds, torus6, 64 KiB | tcm 12.0 < hbm 21.4 < sram 24.3 us; hbm/tcm ~1.8, sram/tcm ~2.0 | tcm 15.39 < hbm 24.75 < sram 27.72 us; hbm/tcm 1.608, sram/tcm 1.802 |
| IPCQ overhead vs one DMA write, h3/h4, 128 B .. 10 KB | < 100 ns | -7.4 .. +32.1 ns |
| IPCQ >= raw DMA on h3/h4 | holds (04-27 model) | does NOT hold: IPCQ is 20.4 .. 20.9 ns below raw DMA (xfail) |
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kbfast.config import load_system
from kbfast.exact import run_exact
from kbfast.fast.evaluate import run_fast
from kbfast.ir import ProgramBuilder
from kbfast.topology.builder import Tables, build_tables
from kbfast.topology.names import hbm_ctrl, pe_block
from kbfast.topology.routing import Router
from kbfast.workloads.collectives import HOPS, Collective, allreduce, pe2pe

REPO = Path(__file__).resolve().parents[1]
CSV_CANDIDATES = (REPO / "calibration" / "reference_public.csv",
                  Path("/work/shared/calibration/reference_public.csv"))
KiB = 1024
TILE_96K = 96 * KiB
TILE_64K = 64 * KiB
PE2PE_SIZES = (128, 256, 512, 1024, 2048, 4096, 8192, 10240)   # 128 B .. 10 KB (spec_ccl §8.2)


@pytest.fixture(scope="module")
def ref() -> pd.DataFrame:
    for path in CSV_CANDIDATES:
        if path.is_file():
            return pd.read_csv(path, dtype={"value": str}).set_index("case")
    pytest.skip("reference_public.csv not found")


@cache
def _system(preset: str, **over) -> tuple[Tables, Router]:
    t = build_tables(load_system(preset, overrides=dict(over)))
    return t, Router(t)


def latency(c: Collective, exact: bool = True) -> float:
    res = run_exact(c.program) if exact else run_fast(c.program)
    return float(res.agent_finish_ns.max() - c.launch_ns)


@cache
def allreduce_ns(preset: str, algorithm: str, nbytes: int, kind: str = "tcm", exact: bool = True) -> float:
    t, r = _system(preset, **{"ipcq.buffer_kind": kind})
    return latency(allreduce(t, r, nbytes, algorithm), exact)


# ----------------------------------------------------------------------------------------------------------------
# Centre root (8 hops intra-SIP on 4x4) vs corner root (12 hops), 96 KiB per cube tile.
#
# Tolerance: the reference fractions were measured on 04-27, before the per-flit wire model (ADR-0033
# Phase 2c) and the per-PE HBM controllers, and the commit that followed only kept the invariant "centre <
# corner" (spec_ccl §8.1).  The size of the gain is the intra-SIP share of the total, which those model
# changes moved (the inter-SIP exchange is unchanged by the root choice).  So we assert the sign and a
# magnitude band of 0.02 .. 0.30: wide enough for all three old references (0.07 .. 0.22) and the current
# values (0.16 .. 0.19), narrow enough to catch a root that stops mattering (< 2 %) or a broken broadcast.
#
#   topology   reference   measured (exact)   difference
#   torus6       -0.22        -0.192            +0.028
#   ring6        -0.07        -0.168            -0.098
#   mesh6        -0.12        -0.164            -0.044
CENTRE_CORNER = {"torus6": "allreduce_center_vs_corner_torus", "ring6": "allreduce_center_vs_corner_ring",
                 "mesh6": "allreduce_center_vs_corner_mesh"}


@pytest.mark.parametrize("preset", list(CENTRE_CORNER))
def test_centre_root_beats_corner_root(ref: pd.DataFrame, preset: str) -> None:
    row = ref.loc[CENTRE_CORNER[preset]]
    assert row["metric"] == "relative_change"
    reference = float(row["value"])
    assert reference < 0
    centre = allreduce_ns(preset, "lrab", TILE_96K)
    corner = allreduce_ns(preset, "lrab_corner", TILE_96K)
    change = centre / corner - 1.0
    assert centre < corner, f"{preset}: centre {centre:.1f} ns is not below corner {corner:.1f} ns"
    assert 0.02 <= -change <= 0.30, (f"{preset}: centre vs corner {change:+.3f} (reference {reference:+.2f}), "
                                     "outside the 0.02 .. 0.30 band")
    # the fast path reaches the same conclusion
    fast = allreduce_ns(preset, "lrab", TILE_96K, exact=False) / allreduce_ns(preset, "lrab_corner", TILE_96K,
                                                                                exact=False) - 1.0
    assert abs(fast - change) < 0.01


# ----------------------------------------------------------------------------------------------------------------
# torus_2d 6 SIPs, 96 KiB, tcm, centre root: under the latest guard (30 us) and above the older 17.2 us.
def test_torus6_96k_window(ref: pd.DataFrame) -> None:
    row = ref.loc["allreduce_torus_96k_latest"]
    assert row["metric"] == "latency_ns_upper_bound"
    upper = float(row["value"])
    older = float(re.search(r"-> ([0-9.]+) us", ref.loc["allreduce_center_vs_corner_torus", "note"]).group(1)) * 1000
    assert (upper, older) == (30000.0, 17200.0)
    t, _ = _system("torus6", **{"ipcq.buffer_kind": "tcm"})
    assert t.spec.sips.topology == "torus_2d" and t.spec.sip_grid() == (2, 3) and t.spec.n_sips == 6
    got = allreduce_ns("torus6", "lrab", TILE_96K)
    assert older < got < upper, f"torus6 96 KiB: {got:.1f} ns"   # measured 21 660.6 ns


# ----------------------------------------------------------------------------------------------------------------
# Buffer kinds at 64 KiB per tile on torus6: tcm < hbm < sram, ratios within +-25 % of 1.8 and 2.0.
# Reference (older model): tcm 12.0, hbm 21.4, sram 24.3 us.  Measured: tcm 15 388.6, hbm 24 748.6,
# sram 27 724.6 ns -> hbm/tcm 1.608 (-10.7 % from 1.8), sram/tcm 1.802 (-9.9 % from 2.0).
# Each hop pays the slot write and read: tcm 2 * n/512, hbm 2 * (6 + n/256 + n/256), sram
# 2 * (2 + n/512 + n/128) (spec_ccl §2.7), on top of the same fabric transfer.
def test_buffer_kinds_64k(ref: pd.DataFrame) -> None:
    row = ref.loc["allreduce_buffer_kind_64k"]
    us = {k: float(v) for k, v in re.findall(r"(tcm|hbm|sram) ([0-9.]+)", row["value"])}
    assert round(us["hbm"] / us["tcm"], 1) == 1.8 and round(us["sram"] / us["tcm"], 1) == 2.0
    got = {k: allreduce_ns("torus6", "lrab", TILE_64K, kind=k) for k in ("tcm", "hbm", "sram")}
    assert got["tcm"] < got["hbm"] < got["sram"], got
    hbm_ratio, sram_ratio = got["hbm"] / got["tcm"], got["sram"] / got["tcm"]
    assert abs(hbm_ratio / 1.8 - 1) <= 0.25, f"hbm/tcm = {hbm_ratio:.3f}"
    assert abs(sram_ratio / 2.0 - 1) <= 0.25, f"sram/tcm = {sram_ratio:.3f}"


# ----------------------------------------------------------------------------------------------------------------
# PE-to-PE, inter-cube hops h3 (cube0 -> cube1) and h4 (cube0 -> cube w), default topology.
def _peer(t: Tables, hop: str) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    _, s, d = HOPS[hop]
    return s, (d[0], t.layout.cube_w if d[1] < 0 else d[1], d[2])


def ipcq_ns(hop: str, n: int) -> float:
    t, r = _system("ahbm_2sip")
    return latency(pe2pe(t, r, hop, n))


def raw_dma_ns(hop: str, n: int) -> float:
    t, r = _system("ahbm_2sip")
    return latency(pe2pe(t, r, hop, n, raw_dma=True))


def dma_write_ns(hop: str, n: int) -> float:
    """One PE DMA write of n bytes from the source PE into the peer PE's HBM slice (issue to response)."""
    t, r = _system("ahbm_2sip")
    s, d = _peer(t, hop)
    b = ProgramBuilder(t, r, name=f"dma-write-{hop}")
    a = b.pe_agent(pe_block(t, *s))
    w = b.dma(a, hbm_ctrl(t, *d), n, write=True)
    return run_exact(b.build()).op_latency_ns(w)


# IPCQ overhead (ADR-0023 T5 target < 100 ns): send/recv pair minus a DMA write of the same size.
# Measured (h3 and h4 are identical on the square 4x4 mesh):
#   size      128     256     512     1024    2048    4096    8192    10240
#   ipcq    126.875 133.625 135.625 140.625 152.625 176.625 224.625 248.625
#   write   134.250 140.500 141.500 144.500 152.500 168.500 200.500 216.500
#   ovh      -7.375  -6.875  -5.875  -3.875  +0.125  +8.125 +24.125 +32.125
# (IPCQ skips the HBM commit and pays the slot write + read, n/512 each for tcm, so the overhead grows
# with n/256 and stays below 100 ns up to ~17 KiB.)
@pytest.mark.parametrize("hop", ["h3", "h4"])
def test_ipcq_overhead_under_100ns(ref: pd.DataFrame, hop: str) -> None:
    limit = float(ref.loc["ipcq_overhead_target", "value"])
    assert limit == 100.0
    ovh = np.array([ipcq_ns(hop, n) - dma_write_ns(hop, n) for n in PE2PE_SIZES])
    assert np.all(ovh < limit), dict(zip(PE2PE_SIZES, ovh))
    assert ovh.max() == pytest.approx(32.125) and ovh.min() == pytest.approx(-7.375)


# "IPCQ >= raw DMA (load + store) at every size on h3/h4" (04-27, after the credit became blocking).
# It does not hold with the current semantics.  Measured (exact, ns):
#   size     128     256     512     1024    2048    4096    8192    10240
#   ipcq   126.875 133.625 135.625 140.625 152.625 176.625 224.625 248.625
#   raw    147.250 154.500 156.500 161.500 173.500 197.500 245.500 269.500   (h3 = h4)
# raw DMA = local HBM load (n/256 + 13 ns: one router, 8 ns PC commit, response) + the remote store (train,
# 8 ns HBM commit, zero-byte response back over the same path).  IPCQ = the same train to the peer's
# pe_dma + slot write + slot read (n/512 each, tcm) + the blocking credit (path latency of 16 B back, which
# costs what the store's response costs plus 16/128 ns).  The per-byte terms are equal (n/256 either
# way), so IPCQ stays below raw DMA by a constant: the load's 13 ns + the 8 ns commit - 0.125 = 20.875 ns
# (20.375 at 128 B, a partial flit).  The 04-27 ordering came from an older model (before per-flit wires and
# the DMA channel held through the HBM round trip); charging the drain again at IPCQ inbound, as that model
# did, adds only n/128 ns on h3/h4 and would close the gap from about 2.7 KB up, not at 128 B.
@pytest.mark.xfail(strict=True, reason=(
    "IPCQ < raw DMA on h3/h4 with the current semantics: e.g. h3 4 KiB IPCQ 176.625 ns vs raw DMA 197.5 ns, "
    "IPCQ 20.4-20.9 ns below at every size 128 B..10 KB; raw DMA pays a local HBM load (13 ns + n/256) and "
    "the store's HBM commit (8 ns) + response, IPCQ pays slot write+read (n/256 for tcm) + a blocking "
    "credit that costs the same return path"))
@pytest.mark.parametrize("hop", ["h3", "h4"])
def test_ipcq_not_below_raw_dma(hop: str) -> None:
    gaps = {n: ipcq_ns(hop, n) - raw_dma_ns(hop, n) for n in PE2PE_SIZES}
    assert all(g >= 0 for g in gaps.values()), gaps
