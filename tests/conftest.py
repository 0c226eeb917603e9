"""Shared fixtures: compiled default topology, routers, and small helpers for route checks."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from typer.testing import CliRunner

from kbfast.config import load_system
from kbfast.config.loader import PARAM_SET_DIR_ENV
from kbfast.config.schema import SystemSpec
from kbfast.topology.builder import Tables, build_tables
from kbfast.topology.names import node_id, node_names
from kbfast.topology.routing import Router

# A small but non-trivial override: 2 x 3 cubes per SIP, 3 SIPs.
SMALL_OVERRIDES = {"sip.cube_mesh.w": 2, "sip.cube_mesh.h": 3, "sips.count": 3}


@pytest.fixture(scope="session", autouse=True)
def private_param_sets(tmp_path_factory: pytest.TempPathFactory):
    """Saved parameter sets live in a private folder for the whole run: no test reads the user's own sets
    (~/.config/kbfast/calibration) or writes there or into the package (a test may point it elsewhere)."""
    patch = pytest.MonkeyPatch()
    patch.setenv(PARAM_SET_DIR_ENV, str(tmp_path_factory.mktemp("param_sets")))
    yield
    patch.undo()


@pytest.fixture(scope="session")
def spec() -> SystemSpec:
    return load_system()


@pytest.fixture(scope="session")
def tables(spec: SystemSpec) -> Tables:
    return build_tables(spec)


@pytest.fixture(scope="session")
def router(tables: Tables) -> Router:
    return Router(tables)


@pytest.fixture(scope="session")
def torus6_tables() -> Tables:
    return build_tables(load_system("torus6"))


@pytest.fixture(scope="session")
def small_tables() -> Tables:
    return build_tables(load_system(overrides=SMALL_OVERRIDES))


@pytest.fixture(scope="session")
def small_router(small_tables: Tables) -> Router:
    return Router(small_tables)


def check_route_shape(t: Tables, src: int, dst: int, edges: np.ndarray) -> None:
    """A route is a contiguous chain of table edges from ``src`` to ``dst``."""
    if src == dst:
        assert len(edges) == 0
        return
    assert len(edges) > 0
    assert int(t.edge_src[edges[0]]) == src
    assert int(t.edge_dst[edges[-1]]) == dst
    np.testing.assert_array_equal(t.edge_dst[edges[:-1]], t.edge_src[edges[1:]])


@pytest.fixture(scope="session")
def route_names(tables: Tables, router: Router) -> Callable[[str, str, str], list[str]]:
    """``route_names(src, dst, kind)`` -> node names of the route in the default system."""

    def _names(src: str, dst: str, kind: str = "pe_dma") -> list[str]:
        s, d = node_id(tables, src), node_id(tables, dst)
        check_route_shape(tables, s, d, router.route(s, d, kind))
        return node_names(tables, router.route_nodes(s, d, kind))

    return _names


@pytest.fixture(scope="session")
def check_route() -> Callable[[Tables, int, int, np.ndarray], None]:
    """The :func:`check_route_shape` helper, as a fixture for the test modules."""
    return check_route_shape


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> Callable[[int], CliRunner]:
    """``terminal(columns)`` -> a CliRunner whose commands print at that width, as ``COLUMNS`` sets it when a
    command starts.  The CLI's consoles read ``COLUMNS`` once, at import, and pytest-xdist workers import
    them with ``COLUMNS=80``; so the width is set on them too (and restored after the test)."""
    from kbfast.cli import common

    def at(columns: int) -> CliRunner:
        for console in (common.console, common.err_console):
            monkeypatch.setattr(console, "_width", columns)
        return CliRunner(env={"COLUMNS": str(columns)})

    return at
