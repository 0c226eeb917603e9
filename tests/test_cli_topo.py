"""CLI tests for ``kbfast topo`` (design §9-§10): summaries, plots, routes and user errors (exit code 2)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbfast import __version__
from kbfast.cli import common
from kbfast.cli.main import app
from kbfast.config import load_system, preset_names
from conftest import flat

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
D7_PATH = ["sip0.cube0.pe0.pe_dma", "sip0.cube0.r0c0", "sip0.cube0.r0c1", "sip0.cube0.r0c2", "sip0.cube0.r0c3",
           "sip0.cube0.r0c4", "sip0.cube0.r1c4", "sip0.cube0.hbm_ctrl.pe2"]


@pytest.fixture(scope="module")
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture(autouse=True)
def wide_console(monkeypatch):
    """Rich wraps (and folds long paths) at 80 columns off a terminal; widen both consoles."""
    monkeypatch.setattr(common.console, "width", 1000)
    monkeypatch.setattr(common.err_console, "width", 1000)


def run(runner: CliRunner, *args: str, code: int = 0):
    result = runner.invoke(app, list(args))
    assert result.exit_code == code, (result.output, result.exception)
    if code == 0:
        assert result.exception is None
    return result


def run_error(runner: CliRunner, *args: str) -> str:
    """Run a command that must fail as a user error: exit 2, no traceback; return the message."""
    result = runner.invoke(app, list(args))
    assert result.exit_code == 2, (result.output, result.exception)
    assert isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    assert result.stdout == ""
    assert result.stderr.startswith("error:")
    return flat(result.stderr)


# ------------------------------------------------------------------- list


def test_topo_list(runner):
    """Every preset, in order (its numbers as numbers: torus6 before torus16), each on a row with its YAML's
    description."""
    result = run(runner, "topo", "list")
    rows = [line.split(None, 1) for line in result.stdout.splitlines()]
    names = [r[0] for r in rows if r and r[0] in preset_names()]
    assert names == preset_names()
    assert names.index("torus6") < names.index("torus16") and names.index("whatif_256") < names.index("whatif_1024")
    by_name = {r[0]: r[1].strip() for r in rows if len(r) == 2 and r[0] in preset_names()}
    assert by_name["whatif_256"] == "256 SIPs on one switch; the collective's neighbours: torus_2d 16x16 (what-if)"
    assert all(by_name[n] != "-" for n in preset_names())      # every preset has a description


def test_topo_list_says_ring6_torus6_and_mesh6_differ_only_in_the_neighbours(runner):
    """The three 6-SIP presets are one system (every cross-SIP transfer goes through fabric.switch0); their
    descriptions say that only the collective's neighbour pattern differs, and name it."""
    by_name = {r[0]: r[1].strip() for r in (line.split(None, 1) for line in run(runner, "topo", "list")
                                            .stdout.splitlines()) if len(r) == 2}
    for name, pattern in (("ring6", "ring_1d"), ("torus6", "torus_2d 2x3"), ("mesh6", "mesh_2d_no_wrap 2x3")):
        others = " and ".join(n for n in ("ring6", "torus6", "mesh6") if n != name)
        assert by_name[name] == (f"6 SIPs on one switch, as {others}; only the collective's neighbours "
                                 f"differ: {pattern}")
        spec = load_system(name)
        assert (spec.sips.count, spec.sips.topology) == (6, pattern.split()[0])
    route = json.loads(run(runner, "topo", "route", "ring6", "sip0.cube0.pe0", "sip3.cube0.pe0",
                           "--format", "json").stdout)
    assert "fabric.switch0" in route["nodes"]


def test_topo_list_at_80_columns(runner, monkeypatch):
    """At 80 columns no description is cut (a long one wraps onto the next line)."""
    monkeypatch.setattr(common.console, "width", 80)
    out = run(runner, "topo", "list").stdout
    assert "…" not in out and max(len(line) for line in out.splitlines()) <= 80
    assert "star through one PCIe switch" in flat(out)


def test_topo_export_loads_like_the_preset(runner, tmp_path):
    """topo export writes the preset with its bases merged in: the file loads on its own into the same
    system; it refuses to overwrite a file."""
    out = tmp_path / "mine.yaml"
    res = run(runner, "topo", "export", "torus6", "--out", str(out))
    assert f"written to {out}" in flat(res.stdout)
    text = out.read_text()
    assert text.startswith("# kbfast topology exported from torus6.yaml") and "base:" not in text
    assert load_system(str(out)) == load_system("torus6")
    printed = run(runner, "topo", "export", "ring6").stdout
    assert "sips: {count: 6, topology: ring_1d}" in printed and "cube_mesh: {w: 4, h: 4}" in printed
    assert "the file exists" in run_error(runner, "topo", "export", "torus6", "--out", str(out))
    assert "unknown topology preset" in run_error(runner, "topo", "export", "torsu6")


@pytest.mark.parametrize("preset", preset_names())
def test_topo_export_fits_80_columns_and_loads_back(runner, tmp_path, preset):
    """Every line of an exported preset fits 80 columns (a one-line mapping only where it fits, a long
    description folded), and the file loads into the same system."""
    out = tmp_path / "x.yaml"
    run(runner, "topo", "export", preset, "--out", str(out))
    assert max(len(line) for line in out.read_text().splitlines()) <= 80
    assert load_system(str(out)) == load_system(preset)


def test_version_and_help(runner):
    assert run(runner, "--version").stdout.strip() == f"kbfast {__version__}"
    result = run(runner, "topo", "--help")
    for cmd in ("list", "show", "route", "export"):
        assert cmd in result.stdout


HEAVY = ("matplotlib.pyplot", "scipy.interpolate", "pandas", "numba")


@pytest.mark.parametrize(("args", "loaded"), [
    (["--help"], ()),
    (["run", "--help"], ("pandas", "numba")),            # its module: the evaluators, not the plots or fits
])
def test_a_command_loads_only_what_it_uses(args: list[str], loaded: tuple[str, ...]):
    """``kbfast --help`` lists the commands without loading any (0.2 s, from 3.0 s): the listing's summaries
    are main.COMMANDS'; a command loads its own module, and pyplot and scipy.interpolate load only when a
    command draws or fits."""
    code = ("import sys\nfrom kbfast.cli.main import app\ntry:\n    app(%r)\nexcept SystemExit:\n    pass\n"
            "print('loaded:', *[m for m in %r if m in sys.modules])" % (args, HEAVY))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip().splitlines()[-1].split()[1:] == list(loaded), done.stdout[-400:]


def test_the_listing_names_every_command_as_it_runs():
    """Each command of the lazy listing loads, under its listed name and with its listed summary."""
    import typer.main

    from kbfast.cli.main import COMMANDS, load_command

    group = typer.main.get_command(app)
    ctx = typer.Context(group)
    assert group.list_commands(ctx) == list(COMMANDS)
    for name, (_, _, summary) in COMMANDS.items():
        cmd = group.get_command(ctx, name)
        assert cmd is load_command(name) and (cmd.name, cmd.short_help) == (name, summary)
        assert cmd.params or getattr(cmd, "commands", None), name


@pytest.mark.parametrize("group", [[], ["run"], ["topo"]])
def test_command_lists_fit_80_columns(terminal, group):
    """Each command of a listing takes one line of at most 80 columns: a one-line summary (``short_help``),
    not the first paragraph of its docstring, whose line breaks the listing keeps."""
    out = terminal(80).invoke(app, [*group, "--help"]).stdout
    panel = [line for line in out.split("Commands")[1].splitlines() if line.startswith("│")]
    assert panel and all(len(line) <= 80 for line in out.splitlines())
    assert all(line[2] != " " for line in panel), panel        # no continuation line (its name column blank)
    names = [line.split()[1] for line in panel]
    expected = {(): {"sweep", "run", "topo", "serve", "search"}, ("run",): {"allreduce", "gemm", "model"},
                ("topo",): {"list", "route", "compare-routing"}}[tuple(group)]
    assert expected <= set(names)


@pytest.mark.parametrize("cmd", [["sweep"], ["check"], ["plot"], ["probe"], ["bench"], ["calibrate"],
                                 ["run", "allreduce"], ["run", "pe2pe"], ["run", "gemm"], ["run", "model"],
                                 ["topo", "show"], ["topo", "route"], ["topo", "export"]])
def test_help_shows_flags_bare(runner, cmd):
    """Help lists a flag such as --exact without a <bool> value, a text value by its option's name (not <str> or
    <list[str]>), other values by their type, and no shell-completion options (the top level has none)."""
    out = run(runner, *cmd, "--help").stdout
    assert "<bool>" not in out and "--help" in out
    assert "<str>" not in out and "<list[str]>" not in out and "--install-completion" not in out
    if cmd == ["run", "allreduce"]:
        line = next(line for line in out.splitlines() if "--exact" in line)
        assert "<" not in line.split("--exact", 1)[1].split("Exact")[0]
        assert "<size>" in out and "<buffer-kind>" in out      # a valued option keeps a value
    usage = next(line for line in out.splitlines() if "Usage:" in line)
    assert "{" not in usage                                       # an argument reads <model>, as an option's value
    if cmd == ["run", "model"]:
        assert usage.split() == ["Usage:", "kbfast", "run", "model", "[OPTIONS]", "<model>"]
    if cmd == ["topo", "show"]:
        assert usage.split()[-1] == "[<topology>]"               # an optional one in brackets


# ------------------------------------------------------------------- show


@pytest.mark.parametrize("preset", preset_names())
def test_topo_show_every_preset_json(runner, preset):
    data = json.loads(run(runner, "topo", "show", preset, "--format", "json").stdout)
    spec = load_system(preset)
    for key in ("nodes_by_kind", "edges_by_kind", "n_sips", "n_cubes", "n_pes"):
        assert key in data
    assert data["name"] == preset
    assert data["n_sips"] == spec.sips.count
    assert data["n_cubes"] == 16 * spec.sips.count
    assert data["n_pes"] == 128 * spec.sips.count == data["nodes_by_kind"]["pe_dma"]
    assert data["nodes_by_kind"]["switch"] == 1
    assert data["nodes_by_kind"]["router"] == 32 * data["n_cubes"]
    assert data["edges_by_kind"]["router_mesh"] == 96 * data["n_cubes"]
    assert data["edges_by_kind"]["ucie_mesh"] == 48 * spec.sips.count
    assert data["edges_by_kind"]["pcie"] == 2 * spec.sips.count
    assert data["n_nodes"] == sum(data["nodes_by_kind"].values())
    assert data["n_edges"] == sum(data["edges_by_kind"].values())
    assert data["sip_grid"] == list(spec.sip_grid())
    assert data["per_cube"] == {"routers": 32, "pes": 8, "hbm_ctrls": 8, "ucie_ports": 4, "ucie_conns_per_port": 4}


@pytest.mark.parametrize("preset", preset_names())
def test_topo_show_every_preset_table(runner, preset):
    out = flat(run(runner, "topo", "show", preset).stdout)
    spec = load_system(preset)
    assert out.startswith(preset)
    assert f"{spec.sips.count:,} SIPs ({spec.sips.topology}" in out
    assert f"{16 * spec.sips.count:,} cubes, {128 * spec.sips.count:,} PEs" in out   # every count with separators
    for title in ("Nodes", "Directed edges", "Uncalibrated parameters"):
        assert title in out
    assert "router_mesh" in out and "fabric.ns_per_mm" in out


def test_topo_show_defaults_to_ahbm_2sip(runner):
    default = json.loads(run(runner, "topo", "show", "--format", "json").stdout)
    assert default["name"] == "ahbm_2sip" and default["n_pes"] == 256 and default["n_cubes"] == 32
    assert default["uncalibrated"]["fabric.ns_per_mm"] == load_system().fabric.ns_per_mm
    assert default["edge_bw_gbs_by_kind"]["command"] == [None]           # no serialization
    assert default["edge_bw_gbs_by_kind"]["router_to_sram"] == [128.0]


def test_topo_show_says_where_each_uncalibrated_value_comes_from(terminal, runner):
    """The fitted links come from the shipped set, the other never-valued keys are kbfast's choices, and a --set
    wins over both; the 14 mm set also brings its floor plan (docs/calibration.md, "Parameter sets")."""
    data = json.loads(run(runner, "topo", "show", "--format", "json").stdout)
    assert data["uncalibrated_from_param_set"] == ["link.io_conn.bw_gbs", "link.pcie.bw_gbs"]
    out = terminal(80).invoke(app, ["topo", "show", "--set", "link.pcie.bw_gbs=100"]).stdout
    assert re.search(r"link\.io_conn\.bw_gbs\s+│ 512 GB/s\s+│ set kernbench-2026-11 ", out), out
    assert re.search(r"link\.pcie\.bw_gbs\s+│ 100 GB/s\s+│ --set ", out)
    assert re.search(r"fabric\.ns_per_mm\s+│ 0 ns/mm\s+│ chosen ", out)
    assert max(map(len, out.splitlines())) <= 80
    narrow = json.loads(run(runner, "topo", "show", "--set", "param_set=kernbench-2026-11-14mm",
                            "--format", "json").stdout)
    assert narrow["uncalibrated_from_param_set"] == ["cube.geometry.w_mm", "cube.pe_layout.pe_pitch_mm",
                                                     "link.io_conn.bw_gbs", "link.pcie.bw_gbs"]


def test_topo_show_prints_values_with_their_units_and_counts_right_aligned(terminal):
    """Each uncalibrated value with the unit its key names (a fitted bandwidth in full, no ``.0`` on a whole
    number), a mapping one item a line under its unit, an empty one as ``none``; counts and bandwidths
    right-aligned, so their digits line up."""
    out = terminal(80).invoke(app, ["topo", "show"]).stdout
    for key, text in (("cube.geometry.w_mm", "16 mm"), ("link.pcie.bw_gbs", "313.962 GB/s"),
                      ("ipcq.poll_interval_ns", "10 ns"), ("pe.math_ns_per_elem", "0.0078125 ns/element"),
                      ("pe.gemm_macs_per_ns", "4,096 MACs/ns"), ("pe.tile_buffers", "2"), ("routing.weight_mm", "none")):
        assert re.search(rf"{re.escape(key)}\s+│ {re.escape(text)}\s+│", out), (key, out)
    ops = out[out.index("pe.math_ops"):out.index("pe.gemm_macs_per_ns")]
    assert re.search(r"│ ns/element:\s+│", ops) and re.search(r"│\s+│ softmax 0\.03125\s+│", ops)
    assert "{" not in out and "'" not in out
    assert re.search(r"│ router\s+│ 1,024 │", out) and re.search(r"│ switch\s+│\s{5}1 │", out)
    assert re.search(r"│ pcie\s+│\s+4 │  313\.962 │", out) and re.search(r"│ command\s+│\s+576 │\s+- │", out)


def test_topo_show_with_overrides(runner):
    data = json.loads(run(runner, "topo", "show", "--set", "sip.cube_mesh.w=2", "--set", "sips.count=3",
                          "--format", "json").stdout)
    assert data["n_sips"] == 3 and data["cube_mesh"] == [2, 4] and data["n_cubes"] == 24 and data["n_pes"] == 192
    data = json.loads(run(runner, "topo", "show", "torus6", "--set", "routing.policy=hops", "--format", "json").stdout)
    assert data["routing_policy"] == "hops" and data["sip_grid"] == [2, 3]


def test_topo_show_yaml_file(runner, tmp_path):
    p = tmp_path / "mine.yaml"
    p.write_text("base: ahbm_2sip\nname: mine\nsips: {count: 4, topology: torus_2d}\n")
    data = json.loads(run(runner, "topo", "show", str(p), "--format", "json").stdout)
    assert data["name"] == "mine" and data["n_sips"] == 4 and data["sip_grid"] == [2, 2]


def test_topo_show_plot_writes_png(runner, tmp_path):
    out = tmp_path / "floor.png"
    result = run(runner, "topo", "show", "--plot", str(out))
    assert out.is_file()
    data = out.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 5000
    assert b"IEND" in data[-16:]
    assert "floor plan written to" in flat(result.stdout)


# ------------------------------------------------------------------ route


def test_topo_route_json_d7_path(runner):
    info = json.loads(run(runner, "topo", "route", "ahbm_2sip", "sip0.cube0.pe0", "sip0.cube0.hbm_ctrl.pe2",
                          "--format", "json").stdout)
    assert info["nodes"] == D7_PATH                          # 8 nodes, 7 edges
    assert info["n_edges"] == 7 and len(info["hops"]) == 7
    assert info["kind"] == "pe_dma"
    assert [h["kind"] for h in info["hops"]] == ["pe_to_router"] + ["router_mesh"] * 5 + ["router_to_hbm"]
    assert info["transit_overhead_ns"] == pytest.approx(6 * 2.0)       # six routers at 2 ns
    assert info["total_mm"] == pytest.approx(3.0 + 3 * 7 / 3 + 2.5)       # the 3 mm floor plan
    assert info["propagation_ns"] == pytest.approx(info["total_mm"] * load_system().fabric.ns_per_mm)
    assert [h["mm"] for h in info["hops"]] == pytest.approx([0.0, 3.0, 7 / 3, 7 / 3, 7 / 3, 2.5, 0.0])
    assert info["bottleneck_bw_gbs"] == 256.0
    assert info["store_and_forward"] == []


def test_topo_route_table(runner):
    out = flat(run(runner, "topo", "route", "ahbm_2sip", "sip0.cube0.pe0", "sip0.cube0.hbm_ctrl.pe2").stdout)
    assert "pe_dma route sip0.cube0.pe0.pe_dma -> sip0.cube0.hbm_ctrl.pe2" in out
    assert "7 edges, transit overhead 12.0 ns (ovh ns summed), 12.5 mm (0 ns propagation)" in out      # one time formatter
    assert "router_to_hbm" in out


@pytest.mark.parametrize("columns", [80, 60])
@pytest.mark.parametrize("args", [("list",), ("show",), ("route", "ahbm_2sip", "sip0.cube0.pe0", "sip1.cube3.pe2")])
def test_topo_tables_fit_with_numbers_whole(runner, monkeypatch, args, columns):
    """At 80 and 60 columns every line fits, and a count or bandwidth is never cut or split (a column of names
    the table leaves out says so in its caption: the route's edge kinds at 60)."""
    wide = run(runner, "topo", *args).stdout
    monkeypatch.setattr(common.console, "width", columns)
    out = run(runner, "topo", *args).stdout
    assert out and max(len(line) for line in out.splitlines()) <= columns and "…" not in out
    out = "\n".join(line for line in out.splitlines() if not line.startswith("left out at"))
    cells = re.compile(r"(?<![\w.,])\d[\d,]*(?:\.\d+)?(?![\w.,])")
    assert sorted(cells.findall(out)) == sorted(cells.findall(wide))


def test_topo_route_shows_each_nodes_overhead_at_80_columns(runner, monkeypatch):
    """A column with the overhead a transfer pays at each node (the ends pay none, "-"); it sums to the transit
    overhead.  80 columns hold it, with whole names, also for whatif_256's long ones."""
    info = json.loads(run(runner, "topo", "route", "ahbm_2sip", "sip0.cube0.pe0", "sip1.cube1.pe0",
                          "--format", "json").stdout)
    ovh = info["node_overhead_ns"]
    assert len(ovh) == len(info["nodes"]) and ovh[0] is None and ovh[-1] is None
    by_node = dict(zip(info["nodes"], ovh))
    assert by_node["sip0.cube0.r0c0"] == 2.0 and by_node["sip0.io0.pcie_ep"] == 5.0
    assert by_node["fabric.switch0"] == 5.0 and by_node["sip0.cube0.ucie-N"] == 8.0
    assert sum(ovh[1:-1]) == info["transit_overhead_ns"] == 51.0
    monkeypatch.setattr(common.console, "width", 80)
    out = run(runner, "topo", "route", "ahbm_2sip", "sip0.cube0.pe0", "sip1.cube1.pe0").stdout
    assert "ovh ns" in out and max(len(line) for line in out.splitlines()) <= 80
    rows = {line.split()[1]: line.split()[2] for line in out.splitlines() if line.split()[:1] and
            line.split()[0].isdigit()}
    assert rows["sip0.cube0.pe0.pe_dma"] == "-" and rows["sip0.io0.pcie_ep"] == "5" and rows["sip0.cube0.r0c0"] == "2"
    assert rows["sip1.cube1.pe0.pe_dma"] == "-"
    out = run(runner, "topo", "route", "whatif_256", "sip200.cube15.pe7", "sip255.cube12.hbm_ctrl.pe0").stdout
    assert max(len(line) for line in out.splitlines()) <= 80
    assert " sip200.cube15.ucie-E.conn3 " in out


def test_short_names_are_on_sip0(runner):
    """A name without its SIP, from its cube or IO chiplet on, means SIP 0: cube1.pe0 is sip0.cube1.pe0, on
    either end; a name that names no cube or IO chiplet (pe0, r0c0) is refused, saying how to write it."""
    short = json.loads(run(runner, "topo", "route", "ahbm_2sip", "cube1.pe0", "cube0.hbm_ctrl.pe2",
                           "--format", "json").stdout)
    full = json.loads(run(runner, "topo", "route", "ahbm_2sip", "sip0.cube1.pe0", "sip0.cube0.hbm_ctrl.pe2",
                          "--format", "json").stdout)
    assert short == full and short["nodes"][0] == "sip0.cube1.pe0.pe_dma" and short["kind"] == "pe_dma"
    out = flat(run(runner, "topo", "route", "ahbm_2sip", "io0.pcie_ep", "cube1.pe0").stdout)
    assert "memory route sip0.io0.pcie_ep -> sip0.cube1.pe0.pe_dma" in out
    msg = run_error(runner, "topo", "route", "ahbm_2sip", "pe0", "cube0.hbm_ctrl.pe2")
    assert "unknown node 'pe0'" in msg and "(a name without its SIP, such as cube0.pe0, is on sip0)" in msg


def test_topo_route_pe_shorthand_as_destination(runner, monkeypatch):
    """sip0.cube1.pe0 names the PE's pe_dma on either end; the table (a node per row) fits 80 columns."""
    info = json.loads(run(runner, "topo", "route", "torus6", "sip0.cube0.pe0", "sip1.cube1.pe0",
                          "--format", "json").stdout)
    assert info["nodes"][0] == "sip0.cube0.pe0.pe_dma" and info["nodes"][-1] == "sip1.cube1.pe0.pe_dma"
    assert info["kind"] == "pe_dma"
    monkeypatch.setattr(common.console, "width", 80)
    out = run(runner, "topo", "route", "torus6", "sip0.cube0.pe0", "sip1.cube1.pe0").stdout
    assert "…" not in out and max(len(line) for line in out.splitlines()) <= 80
    for node in info["nodes"]:          # every node name whole, on its own row
        assert f" {node} " in out


def test_topo_route_kind_defaults_by_source(runner):
    info = json.loads(run(runner, "topo", "route", "ahbm_2sip", "sip0.io0.pcie_ep", "sip0.cube5.hbm_ctrl.pe1",
                          "--format", "json").stdout)
    assert info["kind"] == "memory"
    assert not any(n.endswith(("io_cpu", "m_cpu")) for n in info["nodes"])
    info = json.loads(run(runner, "topo", "route", "ahbm_2sip", "sip0.io0.io_cpu", "sip0.cube5.m_cpu",
                          "--format", "json").stdout)
    assert info["kind"] == "node" and info["nodes"][-1] == "sip0.cube5.m_cpu"
    info = json.loads(run(runner, "topo", "route", "ahbm_2sip", "sip0.cube5.m_cpu", "sip0.cube5.hbm_ctrl.pe3",
                          "--kind", "mcpu_dma", "--format", "json").stdout)
    assert info["kind"] == "mcpu_dma" and info["nodes"][:2] == ["sip0.cube5.m_cpu", "sip0.cube5.r2c0"]


def test_topo_route_cross_sip(runner):
    info = json.loads(run(runner, "topo", "route", "torus6", "sip0.cube0.pe0", "sip5.cube15.hbm_ctrl.pe7",
                          "--format", "json").stdout)
    nodes = info["nodes"]
    i = nodes.index("fabric.switch0")
    assert nodes[i - 1:i + 2] == ["sip0.io0.pcie_ep", "fabric.switch0", "sip5.io0.pcie_ep"]
    assert info["store_and_forward"] == ["sip0.io0.pcie_ep", "sip5.io0.pcie_ep"]
    assert [h["kind"] for h in info["hops"]].count("pcie") == 2
    finite = [h["bw_gbs"] for h in info["hops"] if h["bw_gbs"] is not None]
    assert info["bottleneck_bw_gbs"] == min(finite) <= 128.0  # at most one UCIe connection's 128 GB/s
    assert info["transit_overhead_ns"] >= 2 * 5.0 + 5.0       # two PCIe EPs and the switch at least


# ------------------------------------------------------------------ errors


@pytest.mark.parametrize("args,fragments", [
    (["--set", "sip.cube_mseh.w=2"], ["--set sip.cube_mseh.w=2: sip.cube_mseh.w: unknown key 'cube_mseh'",
                                      "hint: did you mean 'cube_mesh'?"]),
    (["--set", "sips.count=abc"], ["--set sips.count=abc: sips.count:", "not a whole number", "(got 'abc')",
                                   "hint: write a whole number"]),
    (["--set", "link.router_mesh.bw_gbs=0"], ["--set link.router_mesh.bw_gbs=0: link.router_mesh.bw_gbs:", "greater than 0",
                                              "(got 0)", "hint: bandwidths must be > 0 GB/s"]),
    (["--set", "link.router_mesh.bw_gbs=-1"], ["link.router_mesh.bw_gbs", "(got -1)", "hint:"]),
    (["--set", "hbm.pcs_per_pe=6"], ["hbm.pcs_per_pe: must be a power of two (got 6)", "hint: use 4 or 8"]),
    (["--set", "hbm.burst_bytes=300"], ["hbm.burst_bytes: must be a power of two (got 300)",
                                        "hint: use 256 or 512"]),
    (["--set", "sips.topology=torus_2d", "--set", "sips.count=6"],
     ["sips.count: non-square sips.count requires explicit sips.w/h for torus_2d (got 6)", "hint: set sips.w and"]),
    (["--set", "sips.topology=mesh_2d", "--set", "sips.count=6", "--set", "sips.w=4", "--set", "sips.h=2"],
     ["sips.w:", "4*2 = 8 != sips.count = 6", "(got 4)", "hint:"]),
    (["torus6", "--set", "sips.w=5"], ["--set sips.w=5: sips.w:", "5*3 = 15 != sips.count = 6"]),
    (["ahbm_2sp"], ["unknown topology preset 'ahbm_2sp'", "did you mean 'ahbm_2sip'?"]),
    (["no/such/file.yaml"], ["no/such/file.yaml: no such topology file", "hint: give a topology YAML, or a preset:"]),
    (["--set", "sip.cube_mesh.w"], ["an override must look like key.path=value", "hint: example:"]),
])
def test_topo_show_user_errors(runner, args, fragments):
    msg = run_error(runner, "topo", "show", *args)
    for fragment in fragments:
        assert fragment in msg


def test_user_errors_from_yaml_files(runner, tmp_path):
    p = tmp_path / "typo.yaml"
    p.write_text("base: ahbm_2sip\nlink:\n  router_mesh: {bw_gbz: 256}\n")
    msg = run_error(runner, "topo", "show", str(p))
    assert f"{p}: link.router_mesh.bw_gbz: unknown key 'bw_gbz'" in msg and "did you mean 'bw_gbs'?" in msg
    p.write_text("base: ahbm_2sip\nhbm: {burst_bytes: 300}\n")
    msg = run_error(runner, "topo", "show", str(p), "--format", "json")
    assert f"{p}: hbm.burst_bytes: must be a power of two (got 300)" in msg
    p.write_text("base: typo.yaml\n")
    assert "circular base chain" in run_error(runner, "topo", "show", str(p))


@pytest.mark.parametrize("args,fragment", [
    (["ahbm_2sip", "sip0.cube0.pe0", "sip0.cube16.hbm_ctrl.pe0"], "cube 16 does not exist"),
    (["ahbm_2sip", "sip2.cube0.pe0", "sip0.cube0.hbm_ctrl.pe0"], "SIP 2 does not exist"),
    (["ahbm_2sip", "sip0.cube0.pe0", "sip0.cube0.hbm_ctrl.pe9"], "unknown node 'sip0.cube0.hbm_ctrl.pe9': did you "
                                                                 "mean 'sip0.cube0.hbm_ctrl.pe7'"),
    # a PE shorthand is refused as typed, with the PEs a cube has; a short name's hints are short names too
    (["ahbm_2sip", "sip9.cube1.pe0", "sip0.cube0.pe0"], "unknown node 'sip9.cube1.pe0': SIP 9 does not exist"),
    (["ahbm_2sip", "cube1.pe9", "sip0.cube0.pe0"], "unknown node 'cube1.pe9': a cube has 8 PEs, pe0 to pe7"),
    (["ahbm_2sip", "io0.pcie_epp", "sip0.cube0.pe0"], "unknown node 'io0.pcie_epp': did you mean 'io0.pcie_ep'"),
    # nothing close: one name of each kind, not the cube's 150 names
    (["ahbm_2sip", "sip0.cube0.pe0", "sip0.cube1.foo"], "unknown node 'sip0.cube1.foo': names in a cube look like "
                                                        "hbm_ctrl.pe0, m_cpu, pe0.pe_cpu, r0c0, sram, ucie-E, "),
    (["ahbm_2sip", "sip0.cube0.pe0", "sip0.cube0.hbm_ctrl.pe2", "--kind", "bogus"], "--kind 'bogus'"),
    (["ahbm_2sip", "sip0.cube0.pe0", "sip0.cube0.hbm_ctrl.pe2", "--kind", "memory"], "no memory route"),
    (["ahbm_2sip", "fabric.switch0", "sip0.cube0.hbm_ctrl.pe2"], "transit node"),
    (["nosuch", "sip0.cube0.pe0", "sip0.cube0.hbm_ctrl.pe2"], "unknown topology preset"),
])
def test_topo_route_user_errors(runner, args, fragment):
    assert fragment in run_error(runner, "topo", "route", *args)


def test_no_args_prints_help(runner):
    result = runner.invoke(app, [])
    assert "topo" in result.output
    assert result.exit_code in (0, 2)
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit)


def test_plot_option_accepts_path(tmp_path: Path, runner):
    out = tmp_path / "sub" / "torus.png"
    out.parent.mkdir()
    run(runner, "topo", "show", "torus6", "--set", "cube.pe_layout.pe_pitch_mm=1.5", "--plot", str(out))
    assert out.read_bytes()[:8] == PNG_MAGIC


def cli_commands() -> list[str]:
    """Every command of the kbfast app, as typed: ``kbfast topo route``, ``kbfast run gemm``, ``kbfast probe``."""
    import typer.main

    def walk(cmd, words: list[str]) -> list[str]:
        if not hasattr(cmd, "list_commands"):
            return [" ".join(words)]
        ctx = typer.Context(cmd)
        return [name for key in sorted(cmd.list_commands(ctx)) for name in walk(cmd.get_command(ctx, key),
                                                                               [*words, key])]

    return walk(typer.main.get_command(app), ["kbfast"])


def test_the_docs_open_with_a_users_guide_listing_every_command() -> None:
    """docs/README.md puts what to run and a quick reference with an example of every command (run gemm, run
    model, check and topo export included) before the architecture."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "README.md").read_text(encoding="utf-8")
    quick, arch = text.index("## Quick reference"), text.index("## Architecture")
    assert text.index("## What to run") < quick < arch
    guide = text[quick:arch]
    commands = cli_commands()
    assert {"kbfast run gemm", "kbfast run model", "kbfast check", "kbfast topo export"} <= set(commands)
    missing = [c for c in commands if f"\n{c} " not in guide]
    assert not missing, missing
