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
HBM = {"HBM pseudo-channels", "PE link", "HBM streaming path"}
GEMM = {"GEMM MAC rate", "TCM channels", "GEMM compute path"}
# what a critical-path category (a model step's, a collective's) or a GEMM's bound stage says binds: its
# classes, and the path (kbfast.measure.rows.PATHS) that doubles them together
CLASSES_OF = {
    "gemm_compute": GEMM, "hbm_stream": HBM,
    "math": {"MATH rate"}, "collective": {"IPCQ slots", "collective path"} | FABRIC,
    "compute": {"GEMM MAC rate", "MATH rate"}, "hbm": HBM,
    "fabric_transfer": FABRIC | {"collective path"}, "fabric_wait": FABRIC | {"collective path"},
    "ipcq_slot": {"IPCQ slots"},
    "ipcq_backpressure": {"IPCQ slots", "collective path"} | FABRIC,
    "dma_read": HBM, "dma_write": HBM, "tcm_read": {"TCM channels", "GEMM compute path"},
    "tcm_write": {"TCM channels", "GEMM compute path"},
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
    "prefill, 512 tokens, hier2d": model(phase="prefill", seq=512, collective="hier2d"),
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


# lrab at 96 KiB on the cube pe0s puts 51.6 % of its critical path in fabric transfer (UCIe 2x gains 10.35 %) and
# 16.5 % in IPCQ slot posts and reads, yet the slot tiers 2x gain 11.83 %, 1.5 points more: the critical path
# walks one chain of messages, and faster slots shorten the others that wait beside it.  A message's path holds
# both (the collective path: fabric and slots together), and that path gains the most of all.
OPEN: dict[str, str] = {}


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.xfail(strict=True, reason=OPEN[c])) if c in OPEN
                                  else c for c in CASES])
def test_the_named_bottleneck_is_the_largest_sensitivity(system, case: str) -> None:
    """The named part's classes, or its path (its classes together), gain the most of every class and path
    doubled, or within a point.  A prefill's tile stream is held by the PCs and the PE link in turn: doubling
    either gains 5.7 % or 1.2 % (UCIe: 8.5 %), doubling both 25.0 % (one layer of 512 tokens, hier2d, as
    auto chooses), which is what its critical path (60 % HBM streaming) says (docs/bottlenecks.md)."""
    t, r = system
    w = CASES[case]
    row = measure(t, r, w, "fast").row
    _, gains = sensitivity(t.spec, w, row["latency_ns"])
    top = max(g["gain"] for g in gains)
    part = named(row)
    best = max(g["gain"] for g in gains if g["resource"] in CLASSES_OF[part])
    assert best >= top - 0.01, (part, [(g["resource"], round(g["gain"], 4)) for g in gains])
