"""Shared fixtures and the helpers test modules share: compiled topologies and routers (the default system,
and any override of it, cached for the session), route checks, reading the CLI's output, the exact engine
against the SimPy reference, and the hand-derived IPCQ cases.  Test modules import the plain helpers
(``from conftest import flat``); the slow reference implementations stay in ``naive.py``."""

from __future__ import annotations

import os
import re
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import settings

from typer.testing import CliRunner

from kbfast.config import DEFAULT_TOPOLOGY, load_system
from kbfast.config.param_sets import PARAM_SET_DIR_ENV
from kbfast.config.schema import SystemSpec
from kbfast.exact import ExactResult, run_exact
from kbfast.fast.evaluate import FastResult, run_fast
from kbfast.fast.schedule import Sharing
from kbfast.fast.waterfill import _rates, fill_scratch
from kbfast.ir import Op, Program, ProgramBuilder
from kbfast.topology.builder import Tables, build_tables
from kbfast.topology.names import node_id, node_names, pe_block
from kbfast.topology.routing import Router

KiB = 1024

# The command line's consoles read COLUMNS once, when kbfast.cli.common is first imported.  A CliRunner's env
# holds only during its invoke, so the first command a worker ran set every later test's width (a test module
# running at 200 columns made another's 80-column check see 194-character lines).  Import them here, at 80.
_columns = os.environ.get("COLUMNS")
os.environ["COLUMNS"] = "80"
import kbfast.cli.common  # noqa: E402,F401
if _columns is None:
    del os.environ["COLUMNS"]
else:
    os.environ["COLUMNS"] = _columns

# The property tests draw the same examples on every run ("ci", the default): a suite must not pass or fail
# by the luck of a random seed, and a failure reproduces.  HYPOTHESIS_PROFILE=explore draws new examples each
# run and prints the blob that reproduces a failure (@reproduce_failure): run it to look for new cases.
settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

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


# -- the CLI's output ---------------------------------------------------------------------------------------------
def flat(text: str) -> str:
    """Collapse whitespace: rich wraps long lines at the console width."""
    return re.sub(r"\s+", " ", text)


def refused(res, *fragments: str) -> str:
    """Exit 2, one 'error:' message on stderr holding every fragment, no traceback; returns the message."""
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    err = flat(res.stderr).strip()
    assert err.startswith("error:"), err
    for fragment in fragments:
        assert fragment in err, (fragment, err)
    return err


# -- topologies from overrides of a preset (the default system unless named), cached for the session ---------------
# A 1-wide cube mesh has no cube [1, 0] for the default second IO PHY.
ONE_PORT_IO = [{"id": "io0", "n_connections": 4,
                "cube_ports": [{"cube": [0, 0], "side": "N", "phy": "P0", "distance_mm": 2.0}]}]
_TOPO_CACHE: dict[tuple, tuple[Tables, Router]] = {}


def topo(overrides: dict, preset: str = DEFAULT_TOPOLOGY) -> tuple[Tables, Router]:
    """Tables and router of ``preset`` (default: the default system) with ``overrides``, cached by the preset
    and the override items."""
    key = (preset, *sorted((k, repr(v)) for k, v in overrides.items()))
    if key not in _TOPO_CACHE:
        ov = dict(overrides)
        if ov.get("sip.cube_mesh.w", 4) == 1:
            ov["sip.io_chiplets"] = ONE_PORT_IO
        t = build_tables(load_system(preset, overrides=ov))
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


# -- the fast path's bounds against the exact replay ----------------------------------------------------------------
BOUND_REL = 1e-9   # slack of a bound check: 1e-9 relative (1e-12 ns floor for zero times), float rounding only


def le(a: np.ndarray | float, b: np.ndarray | float, rel: float = BOUND_REL) -> np.ndarray:
    """Elementwise a <= b with 1e-9 relative slack."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    return a <= b + rel * np.maximum(np.abs(a), np.abs(b)) + 1e-12


def describe(p: Program, fast: FastResult, ex: ExactResult, bad: np.ndarray, limit: int = 8) -> str:
    """The ops flagged in ``bad``: agent, code, phase, bytes and address, exact end and the fast path's point
    and bounds (the first ``limit``)."""
    rows = [f"{p.name}: {int(bad.sum())} op(s) differ"]
    for o in np.flatnonzero(bad)[:limit]:
        code, ph = int(p.op_code[o]), int(p.op_phase[o]) if p.op_phase is not None else -1
        rows.append(f"  op {o} ({p.agent_name(int(p.op_agent[o]))}, {Op(code).name}"
                    f"{f', {p.phase_names[ph]}' if ph >= 0 else ''}, {int(p.op_nbytes[o])} B @ {int(p.op_addr[o])}): "
                    f"exact {float(ex.op_end_ns[o])!r}, fast {float(fast.op_end_ns[o])!r} "
                    f"[lo {float(fast.op_end_lo_ns[o])!r}, hi {float(fast.op_end_hi_ns[o])!r}]")
    return "\n".join(rows)


def describe_agents(p: Program, fast: FastResult, ex: ExactResult, bad: np.ndarray, limit: int = 8) -> str:
    """The agents flagged in ``bad``: name, exact finish and the fast path's point and bounds."""
    rows = [f"{p.name}: {int(bad.sum())} agent(s) differ"]
    for a in np.flatnonzero(bad)[:limit]:
        rows.append(f"  agent {a} ({p.agent_name(int(a))}): exact {float(ex.agent_finish_ns[a])!r}, "
                    f"fast {float(fast.agent_finish_ns[a])!r} [lo {float(fast.agent_finish_lo_ns[a])!r}, "
                    f"hi {float(fast.agent_finish_hi_ns[a])!r}]")
    return "\n".join(rows)


def assert_bounds(p: Program, fast: FastResult | None = None,
                  ex: ExactResult | None = None) -> tuple[FastResult, ExactResult]:
    """``lower <= exact <= upper`` for every op end, every agent finish and the makespan (docs/fast_path.md,
    "Bounds"), to :data:`BOUND_REL`; a failure names the ops and agents outside their bounds.  Runs the fast
    path and the exact replay unless given; returns (fast, exact)."""
    fast = run_fast(p) if fast is None else fast
    ex = run_exact(p) if ex is None else ex
    lo_bad, hi_bad = ~le(fast.op_end_lo_ns, ex.op_end_ns), ~le(ex.op_end_ns, fast.op_end_hi_ns)
    a_lo_bad = ~le(fast.agent_finish_lo_ns, ex.agent_finish_ns)
    a_hi_bad = ~le(ex.agent_finish_ns, fast.agent_finish_hi_ns)
    assert not lo_bad.any(), "lower bound above exact\n" + describe(p, fast, ex, lo_bad)
    assert not hi_bad.any(), "upper bound below exact\n" + describe(p, fast, ex, hi_bad)
    assert not a_lo_bad.any(), "lower bound above exact\n" + describe_agents(p, fast, ex, a_lo_bad)
    assert not a_hi_bad.any(), "upper bound below exact\n" + describe_agents(p, fast, ex, a_hi_bad)
    assert le(fast.makespan_lo_ns, ex.makespan_ns), (p.name, fast.makespan_lo_ns, ex.makespan_ns)
    assert le(ex.makespan_ns, fast.makespan_hi_ns), (p.name, ex.makespan_ns, fast.makespan_hi_ns)
    return fast, ex


# -- the exact engine against the SimPy reference -------------------------------------------------------------------
SIMPY_FIELDS = ("op_issue_ns", "op_begin_ns", "op_end_ns", "agent_finish_ns")


def both(p) -> tuple:
    """Run both evaluators and require identical per-op timestamps."""
    from kbfast.reference.simpy_ref import SimpyResult, run_simpy

    ex, sp = run_exact(p), run_simpy(p)
    assert isinstance(sp, SimpyResult) and sp.n_events > 0
    for f in SIMPY_FIELDS:
        np.testing.assert_allclose(getattr(sp, f), getattr(ex, f), rtol=1e-9, atol=0, err_msg=f)
    return ex, sp


# -- IPCQ hand cases (derived in tests/test_ipcq.py's docstring) ------------------------------------------------------
NO_PROP = {"fabric.ns_per_mm": 0.0}


class Pair:
    """A builder with PE agents on sip0.cube0 (pe0 sender, pe1 receiver, optional others)."""

    def __init__(self, t: Tables, pes=(0, 1)):
        self.t = t
        self.b = ProgramBuilder(t, Router(t), name="ipcq-hand")
        self.a = {pe: self.b.pe_agent(pe_block(t, 0, 0, pe)) for pe in pes}


# One send at 0, one recv called at 0 (h1).  vis = V + W; r2 = vis + R + C.
#   tcm  1 KiB: V = 4 + 6 = 10,    W = R = 2                     -> vis 12,   r2 12 + 2 + 4.0625 = 18.0625
#   tcm  4 KiB: V = 16 + 6 = 22,   W = R = 8                     -> vis 30,   r2 42.0625
#   tcm 64 KiB: V = 256 + 6 = 262, W = R = 128                   -> vis 390,  r2 522.0625
#   sram 4 KiB: W = R = 2 + 8 + 32 = 42 (bank hop 4096/128)       -> vis 64,   r2 110.0625
#   sram 64KiB: W = R = 2 + 128 + 512 = 642                       -> vis 904,  r2 1550.0625
#   hbm  4 KiB: W = R = 6 + 16 + 16 = 38 (bank hop 4096/256)      -> vis 60,   r2 102.0625
#   hbm 64 KiB: W = R = 6 + 256 + 256 = 518                       -> vis 780,  r2 1302.0625
SINGLE = [("tcm", 1 * KiB, 12.0, 18.0625), ("tcm", 4 * KiB, 30.0, 42.0625), ("tcm", 64 * KiB, 390.0, 522.0625),
          ("sram", 4 * KiB, 64.0, 110.0625), ("sram", 64 * KiB, 904.0, 1550.0625),
          ("hbm", 4 * KiB, 60.0, 102.0625), ("hbm", 64 * KiB, 780.0, 1302.0625)]


def two_messages(t: Tables, n_slots: int = 1, n: int = 4 * KiB):
    """Two tcm messages of ``n`` bytes sent back to back at 0 on one channel pe0 -> pe1 of ``n_slots`` slots,
    and their two recvs: (pair, (send 0, send 1, recv 0, recv 1))."""
    pr = Pair(t)
    c = pr.b.channel(pr.a[0], pr.a[1], n_slots=n_slots)
    s0, s1 = pr.b.send(pr.a[0], c, n), pr.b.send(pr.a[0], c, n)
    r0, r1 = pr.b.recv(pr.a[1], c, n), pr.b.recv(pr.a[1], c, n)
    return pr, (s0, s1, r0, r1)


# The fast path's max-min rates (kbfast.fast.waterfill._rates) on hand-built flows: test_fast_rates and
# test_naive_refs.
BWS = (32.0, 64.0, 128.0, 256.0, 512.0)


def run_rates(flows, bn, res_cap, res_ovh, nbytes) -> np.ndarray:
    """``_rates`` on every flow of ``flows`` (lists of resource ids), all active and joined."""
    n, n_res = len(flows), len(res_cap)
    users = np.bincount([r for f in flows for r in f], minlength=n_res).astype(np.int64)
    sh_res = np.array([r for f in flows for r in f], np.int64)
    ends = np.cumsum([len(f) for f in flows])
    sh_span = np.stack([ends - [len(f) for f in flows], ends], axis=1).astype(np.int64)
    rate = np.zeros(n)
    sharing = Sharing(sh_span=sh_span, sh_res=sh_res, max_route=0, res_cap=np.asarray(res_cap, np.float64),
                      res_ovh=np.asarray(res_ovh, np.float64), ch_iso_route=np.empty(0, np.int64),
                      dma_iso_op=np.empty(0, np.int64))
    _rates(np.arange(n, dtype=np.int64), n, rate, np.asarray(nbytes, np.int64), sharing,
           fill_scratch(np.asarray(bn, np.float64), users, len(sh_res)))
    return rate


TINY_MODEL = """name: tiny
description: a 2-layer toy transformer (the serving and search tests)
kind: transformer
layers: 2
hidden: 256
heads: 8
kv_heads: 8
head_dim: 32
ffn: 512
ffn_kind: swiglu
norm: rmsnorm
vocab: 4096
"""


TINY_MOE = TINY_MODEL.replace("name: tiny\ndescription: a 2-layer toy transformer (the serving and search tests)",
                              "name: tinymoe\ndescription: a 2-layer toy mixture of experts, 8 SwiGLU experts of "
                              "256, top-2 (the mixture-of-experts tests)").replace("ffn: 512", "ffn: 256") \
    + "experts: 8\ntop_k: 2\n"


def _model_file(tmp_path_factory, name: str, text: str) -> str:
    path = tmp_path_factory.mktemp(name) / f"{name}.yaml"
    path.write_text(text)
    return str(path)


@pytest.fixture(scope="session")
def tiny(tmp_path_factory) -> str:
    """A tiny transformer's YAML: its steps replay exactly in a fraction of a second on tp_cubes."""
    return _model_file(tmp_path_factory, "tiny", TINY_MODEL)


@pytest.fixture(scope="session")
def tiny_moe(tmp_path_factory) -> str:
    """A tiny mixture of experts' YAML: its steps replay exactly in well under a second on tp_cubes."""
    return _model_file(tmp_path_factory, "tinymoe", TINY_MOE)
