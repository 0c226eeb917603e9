"""Sensitivities: a point's fast-path latency with one resource class at a time made 2x faster, and the gain
(docs/bottlenecks.md "Sensitivities").  What a critical path attributes, a sensitivity tests: the class whose
doubling shortens the point most is what binds it; where two classes bind in turn, the path that holds both
(:data:`PATHS`, doubled together) shows it.

Each class is the system keys it doubles (or halves, for a cost): GEMM MAC rate, HBM (the pseudo-channels and
the router-controller link: a PC's bandwidth is that link's share), TCM channels, the PE link, the cube's
router mesh, a UCIe connection, the inter-SIP path (the IO chiplet's links; the switch is unserialised), the
IPCQ slot tiers, and the PE's MATH costs.  The point is measured again through the registry on each derived
system; everything else is the same.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kbfast.config.loader import apply_overrides, validate
from kbfast.config.schema import SystemSpec
from kbfast.measure.registry import measure
from kbfast.measure.rows import PATHS
from kbfast.topology.builder import build_tables
from kbfast.topology.routing import Router

FACTOR = 2.0


def _scaled(spec: SystemSpec, factor: float, *paths: str) -> dict[str, Any]:
    """The values at dotted keys ``paths`` of ``spec``, times ``factor``."""
    data = spec.model_dump()
    out = {}
    for path in paths:
        node = data
        for key in path.split("."):
            node = node[key]
        out[path] = node * factor
    return out


def _faster(spec: SystemSpec, *paths: str) -> dict[str, Any]:
    """Bandwidths or rates at ``paths``, :data:`FACTOR` x higher."""
    return _scaled(spec, FACTOR, *paths)


def _cheaper(spec: SystemSpec, *paths: str) -> dict[str, Any]:
    """Costs in ns at ``paths``, :data:`FACTOR` x lower."""
    return _scaled(spec, 1.0 / FACTOR, *paths)


# resource class -> the overrides that make it 2x faster on a system
CLASSES: dict[str, Callable[[SystemSpec], dict[str, Any]]] = {
    "GEMM MAC rate": lambda s: _faster(s, "pe.gemm_macs_per_ns"),
    "HBM pseudo-channels": lambda s: _faster(s, "link.router_hbm.bw_gbs"),
    "TCM channels": lambda s: _faster(s, "pe.tcm_read_gbs", "pe.tcm_write_gbs"),
    "PE link": lambda s: _faster(s, "link.pe_to_router.bw_gbs"),
    "router mesh": lambda s: _faster(s, "link.router_mesh.bw_gbs"),
    "UCIe connection": lambda s: _faster(s, "link.ucie_conn.bw_gbs"),
    "inter-SIP path": lambda s: _faster(s, "link.io_conn.bw_gbs", "link.io_to_cube.bw_gbs",
                                        "link.pcie_ep_noc.bw_gbs"),
    "IPCQ slots": lambda s: _faster(s, *(f"ipcq.tiers.{k}.bw_gbs" for k in ("tcm", "sram", "hbm"))),
    "MATH rate": lambda s: _cheaper(s, "pe.math_ns_per_elem", "pe.math_overhead_ns",
                                    *(f"pe.math_ops.{op}" for op in s.pe.math_ops)),
}


def sensitivity(spec: SystemSpec, workload: dict[str, Any],
                latency_ns: float | None = None) -> tuple[float, list[dict[str, Any]]]:
    """The point's fast-path latency on ``spec`` (``latency_ns`` when the caller has it, else measured), and
    for each resource class, then each of :data:`PATHS` (its classes together), ``{resource, scope, factor,
    latency_ns, gain}``: the point's fast-path latency on the system with that class (``scope`` "class") or
    path ("path") :data:`FACTOR` x faster, and ``gain = 1 - latency / base``; largest gain first within each
    scope."""
    if latency_ns is None:
        t = build_tables(spec)
        latency_ns = float(measure(t, Router(t), workload, "fast").row["latency_ns"])

    def row(name: str, scope: str, overrides: dict[str, Any]) -> dict[str, Any]:
        t = build_tables(validate(f"{spec.name} with {name} x{FACTOR:g}",
                                  apply_overrides(spec.model_dump(), overrides, label="sensitivity")))
        lat = float(measure(t, Router(t), workload, "fast").row["latency_ns"])
        return {"resource": name, "scope": scope, "factor": FACTOR, "latency_ns": lat, "gain": 1.0 - lat / latency_ns}

    classes = [row(name, "class", overrides(spec)) for name, overrides in CLASSES.items()]
    paths = [row(name, "path", {k: v for c in members for k, v in CLASSES[c](spec).items()})
             for name, members in PATHS.values()]
    return latency_ns, sorted(classes, key=lambda r: -r["gain"]) + sorted(paths, key=lambda r: -r["gain"])
