"""What bounds a result (kbfast.measure.bottleneck, docs/bottlenecks.md): resource loads against the exact replay's
own per-edge statistics and a naive per-op sum, the critical path against hand-derived cases, the
contention flag, the sweep's scaled loads, and the CLI outputs (tables, fields, --links/--pcs/--heatmap)."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from kbfast.measure.bottleneck import (BUSY_BOUND, CATEGORIES, bottleneck, bottleneck_fields, bound_fields,
                               critical_path_by_category, link_load_arrays, node_load_arrays,
                               scaled_bottlenecks, top_resources)
from kbfast.cli.main import app
from kbfast.config import load_system
from kbfast.exact import run_exact
from kbfast.fast.evaluate import run_fast
from kbfast.sim.lowering import data_routes
from kbfast.ir import Op
from kbfast.measure.rows import contended
from kbfast.sweep.batches import _measure_together
from kbfast.sweep.runner import run_sweep
from kbfast.sweep.spec import Point, parse_spec
from kbfast.topology.builder import Tables, build_tables
from kbfast.topology.routing import Router
from kbfast.workloads.probe_catalogue import build_catalogue
from kbfast.workloads.collectives import pe2pe
from kbfast.measure.registry import build
from kbfast.report.explain import bound_text, print_bound
from kbfast.report.wrap import QuantityConsole
from conftest import flat

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def allreduce(t: Tables, router: Router, size: int, algorithm: str = "lrab", ranks: str | None = None):
    return build(t, router, {"kind": "allreduce", "algorithm": algorithm, "size": size, "ranks": ranks,
                             "tile_io": True}).collective


@pytest.fixture(scope="module")
def ring6() -> tuple[Tables, Router]:
    t = build_tables(load_system("ring6"))
    return t, Router(t)


def naive_link_bytes(p) -> dict[int, float]:
    """Bytes per edge, one op and one edge at a time."""
    out: dict[int, float] = {}
    for o, r in enumerate(data_routes(p).tolist()):
        if r >= 0 and p.op_nbytes[o] > 0:
            for e in p.route(r).tolist():
                out[e] = out.get(e, 0.0) + float(p.op_nbytes[o])
    return out


# ----------------------------------------------------------------------------------------------------------------
def test_link_loads_match_the_exact_replay_and_a_naive_sum(torus6_tables: Tables) -> None:
    router = Router(torus6_tables)
    c = allreduce(torus6_tables, router, 5000)
    edges, load, flows = link_load_arrays(c.program)
    assert dict(zip(edges.tolist(), load.tolist())) == naive_link_bytes(c.program)
    ex = run_exact(c.program).edges.set_index("edge")
    busy = load / torus6_tables.edge_bw_gbs[edges]
    assert np.allclose(ex.loc[edges, "busy_ns"].to_numpy(), busy, rtol=1e-12)
    assert flows.min() >= 1


def test_node_loads_count_every_transfer_once(tables: Tables, router: Router) -> None:
    case = build_catalogue(tables, router)["REMOTE_SIP"]
    p = case.program(tables, router, 4096)
    nodes, busy, n = node_load_arrays(p)
    route = p.route(int(data_routes(p)[np.flatnonzero(data_routes(p) >= 0)[0]]))
    entered = [v for v in tables.edge_dst[route].tolist()
               if tables.node_flit_aware[v] and tables.node_overhead_ns[v] > 0]
    assert sorted(nodes.tolist()) == sorted(set(entered))
    assert np.array_equal(busy, n * tables.node_overhead_ns[nodes])


@pytest.mark.parametrize("name, hbm", [("SAME_CUBE_PE_LOCAL", 63 + 8), ("REMOTE_CUBE_PE_REMOTE_WORST", 8)])
def test_critical_path_of_a_lone_dma_is_its_zero_load_latency(tables: Tables, router: Router, name: str,
                                                               hbm: float) -> None:
    """A lone 16 KiB write (64 flits of 256 B) is all zero-load time: HBM and fabric transfer.  Into the
    writer's own slice its 63 streaming flits go at the 256 GB/s HBM link's rate (1 ns each): HBM, with the
    last PC commit (8 ns); the rest (first flit 1 + 1 ns, router 2 ns, response 2 ns) is fabric transfer.
    Across cubes it streams at a 128 GB/s UCIe connection: only the commit is HBM."""
    p = build_catalogue(tables, router)[name].program(tables, router, 16384)
    res = run_exact(p)
    parts = critical_path_by_category(p, res, 0.0)
    assert parts["hbm"] == pytest.approx(hbm) and parts["fabric_wait"] == pytest.approx(0.0)
    assert parts["hbm"] + parts["fabric_transfer"] == pytest.approx(res.makespan_ns)
    if name == "SAME_CUBE_PE_LOCAL":
        assert parts["fabric_transfer"] == pytest.approx(1 + 1 + 2 + 2)


def test_critical_path_of_two_writers_to_one_controller_shows_the_wait(tables: Tables, router: Router) -> None:
    p = build_catalogue(tables, router)["ctrl_hot_2"].program(tables, router, 16384)
    res = run_exact(p)
    parts = critical_path_by_category(p, res, 0.0)
    alone = run_fast(p).makespan_lo_ns          # the farther writer's isolated latency: its zero-load time
    assert parts["hbm"] + parts["fabric_transfer"] == pytest.approx(alone)
    assert parts["fabric_wait"] == pytest.approx(res.makespan_ns - alone) and parts["fabric_wait"] > 0


@pytest.mark.parametrize("mode", [run_fast, run_exact])
def test_a_raw_dma_splits_into_hbm_and_fabric_transfer(tables: Tables, router: Router, mode) -> None:
    """pe2pe h5 --raw-dma, 4 KiB (16 flits of 256 B): a load from the PE's own HBM slice, then a store into
    the peer's slice on the other SIP.  By hand, from ahbm_2sip's links and overheads:

    * the load (pe_dma -> r0c0 -> hbm_ctrl, 256 GB/s links; its response leaves when the controller took
      the last flit, so no commit): 15 streaming flits at the HBM link's rate, 15 ns of HBM; first flit
      1 + 1 ns, router 2 ns, the response back through the router 2 ns: 6 ns of fabric transfer (21 ns);
    * the store (178.86 ns): its payload streams at the 128 GB/s UCIe connections, slower than the HBM link,
      and between the two store-and-forward pcie_eps again over the switch links at their fitted 313.962 GB/s
      (16 flits and the second link's first flit, 13.86 ns), so only the last PC commit, 8 ns, is HBM;
      170.86 ns of fabric transfer.

    It was all filed under HBM (204 ns)."""
    c = pe2pe(tables, router, "h5", 4096, raw_dma=True)
    res = mode(c.program)
    load, store = (np.flatnonzero(c.program.op_code == code)[0] for code in (Op.DMA_READ, Op.DMA_WRITE))
    assert res.op_end_ns[load] - res.op_begin_ns[load] == pytest.approx(21.0)
    switch = 17 * 256 / tables.spec.link.pcie.bw_gbs
    assert res.op_end_ns[store] - res.op_begin_ns[store] == pytest.approx(165.0 + switch)
    parts = critical_path_by_category(c.program, res, c.launch_ns)
    assert parts["hbm"] == pytest.approx(15 + 8)
    assert parts["fabric_transfer"] == pytest.approx(6 + 157.0 + switch)
    assert parts["fabric_wait"] == pytest.approx(0.0) and parts["launch"] == pytest.approx(0.0)
    assert sum(parts.values()) == pytest.approx(res.latency_ns(c.launch_ns)[0])


@pytest.mark.parametrize("mode", [run_fast, run_exact])
@pytest.mark.parametrize("size,algorithm,ranks", [(1024, "lrab", None), (98304, "lrab", None),
                                                   (4096, "ring", "all_pes")])
def test_critical_path_sums_to_the_latency(ring6, mode, size, algorithm, ranks) -> None:
    t, router = ring6
    c = allreduce(t, router, size, algorithm, ranks)
    res = mode(c.program)
    parts = critical_path_by_category(c.program, res, c.launch_ns)
    assert tuple(parts) == CATEGORIES and min(parts.values()) >= 0
    assert sum(parts.values()) == pytest.approx(res.latency_ns(c.launch_ns)[0], rel=1e-12)
    assert parts["compute"] > 0 and parts["fabric_transfer"] > 0


def test_a_saturated_ring_waits_on_credits(ring6) -> None:
    """A flat ring over every PE saturates its UCIe links: the busiest resource is nearly always busy, and
    the critical path is mostly senders waiting for a free slot."""
    t, router = ring6
    c = allreduce(t, router, 98304, "ring", "all_pes")
    res = run_fast(c.program)
    lat = res.latency_ns(c.launch_ns)[0]
    top = top_resources(c.program, lat, res.pcs)
    assert top["utilization"].iloc[0] > 0.95
    parts = critical_path_by_category(c.program, res, c.launch_ns)
    assert max(parts, key=parts.get) == "ipcq_backpressure"


def test_contention_means_time_lost(torus6_tables: Tables, tables: Tables, router: Router) -> None:
    c = allreduce(torus6_tables, Router(torus6_tables), 98304)
    lat, lo, _ = run_fast(c.program).latency_ns(c.launch_ns)
    assert lat == lo and contended(lat, lo) is False       # flows share links, but no flow waits
    p = build_catalogue(tables, router)["ctrl_hot_2"].program(tables, router, 16384)
    r = run_fast(p)
    assert r.makespan_ns > r.makespan_lo_ns and contended(r.makespan_ns, r.makespan_lo_ns) is True


def test_ucie_eastbound_is_bound_by_one_ucie_connection(tables: Tables, router: Router) -> None:
    p = build_catalogue(tables, router)["ucie_eastbound_8pe"].program(tables, router, 16384)
    b = bottleneck(p, run_exact(p).makespan_ns)
    assert b["bottleneck_resource"] == "sip0.cube1 ucie-W.conn0 -> r0c0"
    assert b["bottleneck_kind"] == "ucie_conn_to_router" and 0.85 < b["bottleneck_utilization"] < 1.0


@pytest.mark.parametrize("algorithm, topology", [("lrab", "ring6"), ("rs_ag", "ahbm_2sip")])
def test_batched_sweep_bottlenecks_equal_one_program_per_point(ring6, tables: Tables, router: Router,
                                                               algorithm: str, topology: str) -> None:
    """Batched points take one Program's loads, scaled; they must equal each point's own Program's.  (rs_ag
    runs on all PEs: 256 ranks on ahbm_2sip, where ring6's 768 would make 2.9 M ops a Program.)"""
    sizes = [16, 1000, 4096, 65536]
    points = tuple(Point(index=i, params={}, topology=topology, overrides={}, config_hash=str(i),
                         workload={"kind": "allreduce", "algorithm": algorithm, "size": s, "ranks": None,
                                   "tile_io": True, "method": "fluid"}) for i, s in enumerate(sizes))
    t, router = ring6 if topology == "ring6" else (tables, router)
    for s, row in zip(sizes, _measure_together(points)):
        own = bottleneck(allreduce(t, router, s, algorithm).program, row["latency_ns"])
        for k, v in own.items():
            assert row[k] == v or row[k] == pytest.approx(v, rel=1e-12), (s, k)
        assert row["bound_by"] in ("bandwidth", "contention", "zero_load_chain") and 0 < row["bound_share"] <= 1


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_scaled_bottlenecks_equal_each_points_own(tables: Tables, data) -> None:
    """A batch's busiest resource, its links' busy times scaled per point (scaled_bottlenecks), is the one
    bottleneck_fields names with the scaled times, bit for bit: near ties between links (one ulp apart),
    ties with a node, zero loads, no links or no nodes (the slow, obvious reference is the per-point call)."""
    n_links = data.draw(st.integers(0, 6))
    n_nodes = data.draw(st.integers(0, 3))
    edges = np.array(sorted(data.draw(st.sets(st.integers(0, tables.n_edges - 1), min_size=n_links,
                                              max_size=n_links))), np.int64)
    base = data.draw(st.sampled_from([0.0, 1.0, 3.0, 7.3]))
    busy = np.array([np.nextafter(base, np.inf) if data.draw(st.booleans()) else base
                     * data.draw(st.sampled_from([1.0, 0.5, 1.0 - 1e-12])) for _ in range(n_links)])
    flows = np.arange(1, n_links + 1, dtype=np.int64)
    nodes = np.array(sorted(data.draw(st.sets(st.integers(0, tables.n_nodes - 1), min_size=n_nodes,
                                              max_size=n_nodes))), np.int64)
    node_busy = np.array([data.draw(st.sampled_from([0.0, 0.5, 1.0, 3.0])) for _ in range(n_nodes)])
    scales = np.array(data.draw(st.lists(st.sampled_from([1.0, 0.5, 1 / 3, 1e-3, 0.999999999999]), min_size=1,
                                         max_size=5)))
    spans = np.full(len(scales), 40.0)
    got = scaled_bottlenecks(tables, (edges, busy, flows), (nodes, node_busy, np.ones(n_nodes, np.int64)),
                             scales, spans)
    for s, span, row in zip(scales, spans, got):
        own = bottleneck_fields(tables, (edges, busy * s, flows), (nodes, node_busy, np.ones(n_nodes, np.int64)),
                                span)
        assert row.keys() == own.keys()
        for k in own:
            assert row[k] == own[k] or (own[k] != own[k] and row[k] != row[k]), (k, row[k], own[k])


def _answer(t: Tables, router: Router, size: int, algorithm: str = "lrab", ranks: str | None = None) -> dict:
    """A fast all-reduce's fields as kbfast run computes them: bottleneck, critical path, contention, bound."""
    c = allreduce(t, router, size, algorithm, ranks)
    res = run_fast(c.program)
    lat, lo, _ = res.latency_ns(c.launch_ns)
    row = {"latency_ns": lat, "contention_ns": lat - lo, **bottleneck(c.program, lat),
           **{f"critical_path_{k}_ns": v for k, v in critical_path_by_category(c.program, res, c.launch_ns).items()}}
    return {**row, **bound_fields(row)}


def test_what_bounds_a_collective(ring6) -> None:
    """A resource bounds a result only when busy enough to matter: at 16 B per rank lrab's busiest resource,
    the PCIe switch, is 5 % busy and its messages queue there (contention), yet what bounds the all-reduce
    is its critical path's largest part; a flat ring over every PE keeps a UCIe link busy: bandwidth."""
    t, router = ring6
    small = _answer(t, router, 16)
    assert small["bottleneck_resource"] == "fabric.switch0" and small["bottleneck_utilization"] < 0.1
    assert small["contention_ns"] > 0
    parts = {k: small[f"critical_path_{k}_ns"] for k in CATEGORIES}
    assert small["bound_by"] == max(parts, key=parts.get) == "ipcq_slot"
    assert small["bound_share"] == pytest.approx(parts["ipcq_slot"] / small["latency_ns"])
    big = _answer(t, router, 98304, "ring", "all_pes")
    assert big["bottleneck_utilization"] >= BUSY_BOUND
    assert big["bound_by"] == "bandwidth" and big["bound_share"] == big["bottleneck_utilization"]


def test_what_bounds_a_point_without_a_critical_path() -> None:
    """A batched point has no per-op times: the contention-free chain bounds it, or the time lost to sharing
    when that is the larger share; nothing is claimed without a lower bound."""
    row = {"latency_ns": 3000.0, "contention_ns": 165.0, "bottleneck_utilization": 0.049}
    assert bound_fields(row) == {"bound_by": "zero_load_chain", "bound_share": pytest.approx(1 - 0.055)}
    assert bound_fields({**row, "contention_ns": 2000.0})["bound_by"] == "contention"
    assert bound_fields({**row, "bottleneck_utilization": 0.7}) == {"bound_by": "bandwidth", "bound_share": 0.7}
    assert bound_fields({"latency_ns": 3000.0, "contention_ns": np.nan})["bound_by"] is None


def test_a_sweeps_links_table_has_the_utilisation_of_its_bottleneck_field(tmp_path: Path) -> None:
    """A batched sweep's links table divides by the point's latency, the span of its bottleneck field: the
    busiest link's utilisation in the table is the point's ``bottleneck_utilization``."""
    s = parse_spec({"name": "t", "topology": "ring6", "workload": {"kind": "allreduce", "algorithm": "lrab"},
                    "axes": [{"grid": {"workload.size": ["64KiB", "96KiB"]}}]}, "t.yaml")
    res = run_sweep(s, tmp_path, links=True)
    links = pd.read_parquet(tmp_path / "links.parquet")
    for _, row in res.results.iterrows():
        assert row["bottleneck_kind"] in set(links["kind"])          # a link bounds both points
        top = links[links["point"] == row["point"]]["utilization"].max()
        assert top == pytest.approx(row["bottleneck_utilization"], rel=1e-9)


# ---------------------------------------------------------------------------------------------------- CLI
@pytest.fixture(scope="module")
def runner() -> CliRunner:
    return CliRunner(env={"COLUMNS": "80"})


def test_run_reports_bottleneck_and_critical_path(runner: CliRunner, tmp_path: Path) -> None:
    args = ["run", "allreduce", "--topology", "ring6", "--size", "4KiB"]
    res = runner.invoke(app, [*args, "--links", str(tmp_path / "l.csv"), "--pcs", str(tmp_path / "p.parquet"),
                              "--heatmap", str(tmp_path / "h.png")], catch_exceptions=False)
    assert res.exit_code == 0, res.stderr
    out = flat(res.stdout)
    assert "busiest resources" in out and "critical path" in out and "fabric transfer" in out
    assert "bound by:" in out
    assert max(map(len, res.stdout.splitlines())) <= 80
    links = pd.read_csv(tmp_path / "l.csv")
    assert {"src", "dst", "bytes", "busy_ns", "utilization"} <= set(links) and len(links) > 0
    assert pd.read_parquet(tmp_path / "p.parquet")["commits"].sum() > 0      # the tile load and store
    assert (tmp_path / "h.png").read_bytes()[:8] == PNG_SIGNATURE
    row = json.loads(runner.invoke(app, [*args, "--format", "json"], catch_exceptions=False).stdout)
    cp = [v for k, v in row.items() if k.startswith("critical_path_")]
    assert len(cp) == len(CATEGORIES) and sum(cp) == pytest.approx(row["latency_ns"])
    assert row["bottleneck_resource"] and row["topology"] == "ring6" and row["buffer_kind"] == "tcm"
    assert row["contention"] is False or row["contention_ns"] > 0
    assert row["bound_by"] in CATEGORIES and 0 < row["bound_share"] <= 1
    small = flat(runner.invoke(app, ["run", "allreduce", "--topology", "ring6", "--size", "16B", "--method", "fluid"],
                               catch_exceptions=False).stdout)
    assert "bound by: IPCQ slot posts and reads" in small
    assert "the busiest resource, fabric.switch0, is 4.9 % busy (below 50 %: not a bandwidth bound)" in small
    # the resource the table lists for both SIPs (sip0-1.cube10 ...) keeps that name in the sentence
    two = flat(runner.invoke(app, ["run", "allreduce"], catch_exceptions=False).stdout)
    assert "the busiest resource, sip0-1.cube10 r0c0 -> ucie-N.conn0, is" in two


def test_probe_names_the_busiest_link_and_writes_tables(runner: CliRunner, tmp_path: Path) -> None:
    res = runner.invoke(app, ["probe", "--case", "ucie_eastbound_8pe", "--case", "ctrl_hot_2",
                              "--links", str(tmp_path / "l.parquet")], catch_exceptions=False)
    assert res.exit_code == 0, res.stderr
    assert "sip0.cube1 ucie-W.conn0 -> r0c0" in res.stdout
    assert set(pd.read_parquet(tmp_path / "l.parquet")["case"]) == {"ucie_eastbound_8pe", "ctrl_hot_2"}


@pytest.mark.parametrize("args,words", [
    (["probe", "--heatmap", "x.png"], "--heatmap draws one case"),
    (["probe", "--case", "ctrl_hot_2", "--links", "x.txt"], "--links 'x.txt': the file name must end in .csv"),
    (["run", "pe2pe", "--pcs", "x"], "--pcs 'x': the file name must end in .csv"),
])
def test_bad_output_files_are_refused_before_work(runner: CliRunner, args: list[str], words: str) -> None:
    res = runner.invoke(app, args, catch_exceptions=False)
    assert res.exit_code == 2 and words in flat(res.stderr) and "Traceback" not in res.stderr


@pytest.mark.parametrize("width", [40, 60, 80, 100])
def test_the_bound_sentence_keeps_each_figure_with_its_unit(width: int) -> None:
    """Wrapped at the console's width, the sentence breaks only at spaces, never between a figure and its unit."""
    row = {"bound_by": "fabric_wait", "bound_share": 0.615, "bottleneck_resource": "sip0.cube1 r0c5 -> ucie-N.conn3",
           "bottleneck_utilization": 0.333, "contention_ns": 6498.0, "latency_ns": 10850.0}
    console = QuantityConsole(file=io.StringIO(), width=width)       # the command line's
    print_bound(console, row)
    lines = console.file.getvalue().splitlines()
    text = bound_text(row)
    assert all(len(line) <= width for line in lines) and " ".join(lines) == text
    figures = re.findall(r"\d[\d.]* (?:%|µs)", text)
    assert len(figures) == 5 and all(any(f in line for line in lines) for f in figures)
