"""A bottleneck answer that is true: the class a point's critical path (or a GEMM's bound stage) names is
the class whose doubling gains most, or within one point of it (kbfast.measure.sensitivity), over decode,
prefill, GEMM shapes and collectives."""

from __future__ import annotations

import pytest

from kbfast.config import load_system
from kbfast.measure.registry import WORKLOADS, measure
from kbfast.measure.sensitivity import sensitivity
from kbfast.topology.builder import build_tables
from kbfast.topology.routing import Router

FABRIC = {"UCIe connection", "router mesh", "inter-SIP path", "PE link"}
# what a critical-path category (a model step's, a collective's) or a GEMM's bound stage says binds
CLASSES_OF = {
    "gemm_compute": {"GEMM MAC rate", "TCM channels"}, "hbm_stream": {"HBM pseudo-channels", "PE link"},
    "math": {"MATH rate"}, "collective": {"IPCQ slots"} | FABRIC,
    "compute": {"GEMM MAC rate", "MATH rate"}, "hbm": {"HBM pseudo-channels", "PE link"},
    "fabric_transfer": FABRIC, "fabric_wait": FABRIC, "ipcq_slot": {"IPCQ slots"},
    "ipcq_backpressure": {"IPCQ slots"} | FABRIC,
    "dma_read": {"HBM pseudo-channels", "PE link"}, "dma_write": {"HBM pseudo-channels", "PE link"},
    "tcm_read": {"TCM channels"}, "tcm_write": {"TCM channels"},
}


@pytest.fixture(scope="module")
def system():
    t = build_tables(load_system())
    return t, Router(t)


def model(**f) -> dict:
    return {**WORKLOADS["model"].fields, "kind": "model", "model": "llama3_70b", **f}


def gemm(**f) -> dict:
    return {**WORKLOADS["gemm"].fields, "kind": "gemm", **f}


def coll(**f) -> dict:
    return {**WORKLOADS["collective"].fields, "kind": "collective", "ranks": "cube_pe0", **f}


CASES = {
    "decode, batch 1": model(phase="decode", batch=1),
    "decode, batch 8": model(phase="decode", batch=8),
    "prefill, 512 tokens": model(phase="prefill", seq=512, collective="lrab"),
    "prefill, 512 tokens, auto": model(phase="prefill", seq=512),
    "GEMM 32x32x3072 load_ref": gemm(m=32, n=32, k=3072),
    "GEMM 512^3 load_load": gemm(m=512, n=512, k=512, staging="load_load"),
    "GEMM 256x256x1024 ref_ref": gemm(m=256, n=256, k=1024, staging="ref_ref"),
    "all-reduce ring_pipe 8 MiB": coll(op="all_reduce", algorithm="ring_pipe", size=8 << 20),
    "all-reduce lrab 96 KiB": coll(op="all_reduce", algorithm="lrab", size=96 << 10),
    "all-gather 1 MiB": coll(op="all_gather", size=1 << 20),
}


def named(row: dict) -> str:
    """What the point's own answer says binds it: a GEMM's bound stage, else its largest critical-path part."""
    if "bound_stage" in row:
        return row["bound_stage"]
    parts = {k[len("critical_path_"):-3]: v for k, v in row.items() if k.startswith("critical_path_")}
    return max(parts, key=parts.get)


# Where the answers still disagree, measured: lrab at 96 KiB on the cube pe0s puts 51.6 % of its critical path in
# fabric transfer (UCIe 2x gains 10.35 %) and 16.5 % in IPCQ slot posts and reads, yet the slot tiers 2x gain
# 11.83 %, 1.5 points more: the critical path walks one chain of messages, and faster slots shorten the others
# that wait beside it.  Issue "LLM layers…" item 4 keeps this open.
# the cases whose answers disagree today (issue work left open):
# * lrab at 96 KiB: the critical path and the sensitivity disagree by 1.5 points;
# * prefill with auto's hier2d all-reduce: the critical path credits the GEMMs' spans to HBM streaming (their
#   tile reads are the busiest stage), yet doubling the PCs or the PE link gains 2.8 % and 0.8 %, while UCIe
#   gains 11.5 %: the tile reads wait on per-tile latency, which no 2x class of the sensitivity halves
OPEN = {"all-reduce lrab 96 KiB": "critical path and sensitivity disagree by 1.5 points",
        "prefill, 512 tokens, auto": "HBM streaming named, but the tile reads are latency-bound: UCIe 2x gains most"}


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.xfail(strict=True, reason=OPEN[c])) if c in OPEN
                                  else c for c in CASES])
def test_the_named_bottleneck_is_the_largest_sensitivity(system, case: str) -> None:
    t, r = system
    w = CASES[case]
    row = measure(t, r, w, "fast").row
    _, gains = sensitivity(t.spec, w, row["latency_ns"])
    top = gains[0]["gain"]
    part = named(row)
    best = max(g["gain"] for g in gains if g["resource"] in CLASSES_OF[part])
    assert best >= top - 0.01, (part, [(g["resource"], round(g["gain"], 4)) for g in gains])
