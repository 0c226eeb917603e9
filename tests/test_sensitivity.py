"""Sensitivities (kbfast.measure.sensitivity): each resource class made 2x faster alone, through the registry
on the fast path; the class that binds a point is the one whose doubling shortens it most."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from kbfast.cli.main import app
from kbfast.config import load_system
from kbfast.config.loader import apply_overrides, validate
from kbfast.measure.registry import WORKLOADS
from kbfast.measure.rows import PATHS
from kbfast.measure.sensitivity import CLASSES, FACTOR, sensitivity


def _value(spec, path: str):
    node = spec.model_dump()
    for key in path.split("."):
        node = node[key]
    return node


@pytest.mark.parametrize("name", list(CLASSES))
def test_each_class_makes_its_keys_2x_faster_and_nothing_else(name: str) -> None:
    spec = load_system()
    over = CLASSES[name](spec)
    derived = validate(name, apply_overrides(spec.model_dump(), over))
    assert over
    for path, value in over.items():
        before = _value(spec, path)
        assert value == pytest.approx(before / FACTOR if name == "MATH rate" else before * FACTOR)   # a cost halves
        assert _value(derived, path) == value
    assert {k for k, v in spec.model_dump().items() if v != derived.model_dump()[k]} <= {"pe", "link", "ipcq"}


def gemm(**fields) -> dict:
    return {**WORKLOADS["gemm"].fields, "kind": "gemm", **fields}


def test_a_gemm_streaming_its_weights_is_bound_by_hbm() -> None:
    """32 x 32 x 3072 with B streamed from HBM (bound stage dma_read): doubling HBM gains most (5.4 %)."""
    base, rows = sensitivity(load_system(), gemm(m=32, n=32, k=3072))
    classes, paths = ([r for r in rows if r["scope"] == s] for s in ("class", "path"))
    assert rows == classes + paths and [r["resource"] for r in paths] == sorted(
        (name for name, _ in PATHS.values()), key=lambda n: -next(r["gain"] for r in paths if r["resource"] == n))
    assert classes[0]["resource"] == "HBM pseudo-channels" and classes[0]["gain"] > 0.05
    for scope in (classes, paths):
        assert [r["gain"] for r in scope] == sorted((r["gain"] for r in scope), reverse=True)
    for r in rows:
        assert r["gain"] == pytest.approx(1 - r["latency_ns"] / base, rel=1e-12)
    hbm = next(r for r in paths if r["resource"] == "HBM streaming path")
    assert hbm["gain"] >= classes[0]["gain"]             # the path doubles the PCs and the PE link together


def test_a_gemm_on_pinned_operands_with_fast_tcm_is_bound_by_the_macs() -> None:
    """512^3 with A and B in TCM: the fetch and the GEMM stage tie at 16 ns a tile on the default system, so
    neither alone gains; with 4x the TCM bandwidth the MACs bind, and doubling them gains most."""
    tie = sensitivity(load_system(), gemm(m=512, n=512, k=512, staging="load_load"))[1]
    assert max(r["gain"] for r in tie if r["scope"] == "class") < 0.01
    both = next(r for r in tie if r["resource"] == "GEMM compute path")     # the MACs and the TCM together
    assert both["gain"] > 0.3
    fast_tcm = load_system(overrides={"pe.tcm_read_gbs": 2048, "pe.tcm_write_gbs": 2048})
    rows = sensitivity(fast_tcm, gemm(m=512, n=512, k=512, staging="load_load"))[1]
    assert rows[0]["resource"] == "GEMM MAC rate" and rows[0]["gain"] > 0.3


def test_run_collective_json_carries_the_sensitivities() -> None:
    res = CliRunner().invoke(app, ["run", "collective", "--op", "reduce_scatter", "--ranks", "cube_pe0", "--size",
                                   "64KiB", "--sensitivity", "--exact", "--format", "json"], catch_exceptions=False)
    row = json.loads(res.stdout)
    assert sorted(r["resource"] for r in row["sensitivity"]) == sorted([*CLASSES, *(n for n, _ in PATHS.values())])
    assert all(r["factor"] == 2.0 and r["latency_ns"] > 0 for r in row["sensitivity"])
    assert row["sensitivity_base_ns"] > 0 and row["mode"] == "exact"     # the base is the fast path's
