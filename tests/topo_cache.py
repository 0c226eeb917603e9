"""Topologies built from overrides of the default system, cached for the test session."""

from __future__ import annotations

from kbfast.config import load_system
from kbfast.topology.builder import Tables, build_tables
from kbfast.topology.routing import Router

# A 1-wide cube mesh has no cube [1, 0] for the default second IO PHY.
ONE_PORT_IO = [{"id": "io0", "n_connections": 4,
                "cube_ports": [{"cube": [0, 0], "side": "N", "phy": "P0", "distance_mm": 2.0}]}]
_TOPO_CACHE: dict[tuple, tuple[Tables, Router]] = {}


def topo(overrides: dict) -> tuple[Tables, Router]:
    """Tables and router of the default system with ``overrides``, cached by the override items."""
    key = tuple(sorted((k, repr(v)) for k, v in overrides.items()))
    if key not in _TOPO_CACHE:
        ov = dict(overrides)
        if ov.get("sip.cube_mesh.w", 4) == 1:
            ov["sip.io_chiplets"] = ONE_PORT_IO
        t = build_tables(load_system(overrides=ov))
        _TOPO_CACHE[key] = (t, Router(t))
    return _TOPO_CACHE[key]


def destination(t: Tables, rng, where: str, sip: int, cube: int) -> tuple[int, int]:
    """(sip, cube) of a destination ``where`` = same_cube / other_cube / other_sip from (sip, cube),
    falling back to a nearer class when the topology has no second cube or SIP."""
    lay = t.layout
    if where == "other_sip" and lay.n_sips < 2:
        where = "other_cube"
    if where == "other_cube" and lay.n_cubes_per_sip < 2:
        where = "same_cube"
    if where == "other_cube":
        return sip, int((cube + 1 + rng.integers(lay.n_cubes_per_sip - 1)) % lay.n_cubes_per_sip)
    if where == "other_sip":
        d_sip = int((sip + 1 + rng.integers(lay.n_sips - 1)) % lay.n_sips)
        return d_sip, int(rng.integers(lay.n_cubes_per_sip))
    return sip, cube
