"""Config tests: presets, base chains, overrides, validation messages (design §10, spec_fabric §1.3, §3.4)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from kbfast.config import DEFAULT_TOPOLOGY, load_system, parse_override, preset_names
from kbfast.config.loader import apply_overrides, deep_merge, load_raw, lookup, validate
from kbfast.errors import ConfigError, KbfastError
from kbfast.topology.builder import build_tables
from kbfast.topology.kinds import EdgeKind, NodeKind

PRESETS = ["ahbm_2sip", "mesh6", "ring6", "torus6", "torus16", "whatif_256", "whatif_1024"]   # numbers in order


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


# ---------------------------------------------------------------- defaults


def test_preset_names():
    assert preset_names() == PRESETS
    assert DEFAULT_TOPOLOGY == "ahbm_2sip"


def test_default_system_values(spec):
    assert spec.name == "ahbm_2sip"
    assert spec.n_sips == 2 and spec.sips.topology == "ring_1d"
    assert spec.sip_grid() == (0, 0)                       # ring_1d sentinel
    assert spec.n_cubes_per_sip == 16
    assert spec.hbm.pcs_per_pe == 8 and spec.hbm.burst_bytes == 256 == spec.fabric.flit_bytes
    assert spec.pc_bw_gbs == pytest.approx(32.0)           # 256 GB/s / 8 PCs, derived
    assert spec.hbm_slice_bytes == 6 * (1 << 30)           # 48 GiB / 8 slices
    assert spec.link.router_mesh.bw_gbs == 256 and spec.link.ucie_mesh.distance_mm == 1.0
    assert spec.overhead_ns.router == 2.0 and spec.overhead_ns.io_cpu == 10.0
    assert spec.cube.placement.m_cpu_mm == (1.5, 5.5)
    assert [p.phy for p in spec.sip.io_chiplets[0].cube_ports] == ["P0", "P1"]
    # Every uncalibrated entry names a real parameter.
    assert "fabric.ns_per_mm" in spec.uncalibrated
    assert all(lookup(spec, key) is not None for key in spec.uncalibrated)


def test_spec_is_frozen(spec):
    with pytest.raises(ValidationError):
        spec.sips.count = 4  # type: ignore[misc]


# ----------------------------------------------------------- presets, base


@pytest.mark.parametrize("name,count,topology,grid", [
    ("ahbm_2sip", 2, "ring_1d", (0, 0)),
    ("ring6", 6, "ring_1d", (0, 0)),
    ("torus6", 6, "torus_2d", (2, 3)),
    ("mesh6", 6, "mesh_2d_no_wrap", (2, 3)),
    ("torus16", 16, "torus_2d", (4, 4)),
    ("whatif_256", 256, "torus_2d", (16, 16)),
    ("whatif_1024", 1024, "torus_2d", (32, 32)),
])
def test_presets_load_and_inherit_the_base(spec, name, count, topology, grid):
    s = load_system(name)
    assert s.name == name
    assert (s.sips.count, s.sips.topology, s.sip_grid()) == (count, topology, grid)
    # Everything the preset does not set comes from base: ahbm_2sip.
    for key in ("link", "overhead_ns", "hbm", "cube", "sip", "fabric", "routing", "param_set", "uncalibrated"):
        assert getattr(s, key) == getattr(spec, key), key


def test_torus6_base_chain_raw():
    label, raw = load_raw("torus6")
    assert label == "torus6.yaml" and "base" not in raw
    assert raw["sips"] == {"count": 6, "topology": "torus_2d", "w": 2, "h": 3}
    assert raw["link"]["router_mesh"] == {"bw_gbs": 256}          # merged in from the base


def test_deep_merge_semantics():
    base = {"a": {"x": 1, "y": [1, 2]}, "b": 2}
    out = deep_merge(base, {"a": {"y": [3]}, "c": 3})
    assert out == {"a": {"x": 1, "y": [3]}, "b": 2, "c": 3}      # mappings merge, lists replace
    assert base == {"a": {"x": 1, "y": [1, 2]}, "b": 2}          # input untouched


def test_yaml_base_chain_of_files(tmp_path):
    write(tmp_path, "child.yaml", "base: ahbm_2sip\nname: child\nlink:\n  router_mesh: {bw_gbs: 128}\n"
                                  "sip:\n  cube_mesh: {w: 2}\n")
    grand = write(tmp_path, "grand.yaml", "base: child.yaml\nname: grand\nsips: {count: 4, topology: torus_2d}\n")
    s = load_system(grand)
    assert s.name == "grand"
    assert s.link.router_mesh.bw_gbs == 128                # from child
    assert s.link.router_hbm.bw_gbs == 256                 # sibling key kept from ahbm_2sip
    assert (s.sip.cube_mesh.w, s.sip.cube_mesh.h) == (2, 4)
    assert s.sips.count == 4 and s.sip_grid() == (2, 2)    # square fallback
    t = build_tables(s)
    assert int(np.count_nonzero(t.node_kind == NodeKind.PE_DMA)) == 4 * 8 * 8


def test_yaml_file_without_base_must_be_complete(tmp_path):
    p = write(tmp_path, "bare.yaml", "name: bare\n")
    with pytest.raises(ConfigError) as err:
        load_system(p)
    assert err.value.file == str(p) and "required key is missing" in str(err.value)
    assert err.value.hint


# --------------------------------------------------------------- overrides


@pytest.mark.parametrize("text,key,value", [
    ("sip.cube_mesh.w=8", "sip.cube_mesh.w", 8),
    ("sips.topology=torus_2d", "sips.topology", "torus_2d"),
    ("fabric.ns_per_mm=0.1", "fabric.ns_per_mm", 0.1),
    ("cube.placement.m_cpu_mm=[1.5, 2.0]", "cube.placement.m_cpu_mm", [1.5, 2.0]),
    (" sips.count = 4", "sips.count", 4),
])
def test_parse_override(text, key, value):
    assert parse_override(text) == (key, value)


def test_parse_override_needs_equals():
    with pytest.raises(ConfigError) as err:
        parse_override("sip.cube_mesh.w")
    assert "key.path=value" in str(err.value) and "--set sip.cube_mesh.w=8" in err.value.hint


def test_override_cube_mesh_width_changes_counts():
    s = load_system(overrides={"sip.cube_mesh.w": 2})
    assert s.n_cubes_per_sip == 8 and s.sip.cube_mesh.h == 4
    t = build_tables(s)
    kinds = np.bincount(t.node_kind, minlength=len(NodeKind))
    assert kinds[NodeKind.PE_DMA] == 2 * 8 * 8 == 128
    assert kinds[NodeKind.ROUTER] == 2 * 8 * 32
    assert kinds[NodeKind.M_CPU] == 16
    seams = (2 - 1) * 4 + 2 * (4 - 1)                     # E-W + S-N links of a 2 x 4 mesh
    assert int(np.count_nonzero(t.edge_kind == EdgeKind.UCIE_MESH)) == 2 * 2 * seams
    assert t.layout.nodes_per_sip == t.layout.io_nodes + 8 * t.layout.nodes_per_cube


def test_overrides_apply_after_base_merge():
    s = load_system("torus6", {"sips.w": 3, "sips.h": 2, "link.pcie.bw_gbs": 32})
    assert s.sip_grid() == (3, 2) and s.link.pcie.bw_gbs == 32 and s.link.pcie.distance_mm == 0.0
    s = load_system(overrides={"sips.topology": "torus_2d", "sips.count": 4})
    assert s.sip_grid() == (2, 2)


def test_override_into_a_mapping_the_file_does_not_set(tmp_path, spec):
    """A dotted --set reaches a free-form mapping (routing.weight_mm), also when the file leaves it out."""
    s = load_system(overrides={"routing.weight_mm.router_mesh": 1.0})
    assert s.routing.weight_mm == {**spec.routing.weight_mm, "router_mesh": 1.0}
    p = write(tmp_path, "noweights.yaml", "base: ahbm_2sip\nrouting: {policy: balanced}\n")
    label, raw = load_raw(p)
    raw["routing"].pop("weight_mm", None)
    s = validate(label, apply_overrides(raw, {"routing.weight_mm.pe_to_router": 3.0}))
    assert s.routing.weight_mm == {"pe_to_router": 3.0}
    with pytest.raises(ConfigError) as err:
        load_system(overrides={"routing.weight_mm.router_msh": 1.0})
    assert err.value.key == "routing.weight_mm.router_msh"
    assert "unknown edge kind" in str(err.value) and "router_mesh" in err.value.hint


# -------------------------------------------------------------- validation


@pytest.mark.parametrize("overrides,file,key,value,fragments,hint", [
    ({"sip.cube_mseh.w": 2}, "--set", "sip.cube_mseh.w", 2, ["unknown key 'cube_mseh'"], "did you mean 'cube_mesh'?"),
    ({"sips.count": "abc"}, "ahbm_2sip.yaml", "sips.count", "abc", ["not a whole number"], "whole number"),
    ({"link.pcie.distance_mm": "far"}, "ahbm_2sip.yaml", "link.pcie.distance_mm", "far", ["not a number"],
     "write a number"),
    ({"link.router_mesh.bw_gbs": 0}, "ahbm_2sip.yaml", "link.router_mesh.bw_gbs", 0, ["greater than 0"],
     "bandwidths must be > 0 GB/s"),
    ({"link.ucie_conn.bw_gbs": -128}, "ahbm_2sip.yaml", "link.ucie_conn.bw_gbs", -128, ["greater than 0"],
     "bandwidths must be > 0 GB/s"),
    ({"overhead_ns.router": -1}, "ahbm_2sip.yaml", "overhead_ns.router", -1, ["must be 0 or more"],
     "overheads >= 0"),
    ({"hbm.pcs_per_pe": 6}, "ahbm_2sip.yaml", "hbm.pcs_per_pe", 6, ["must be a power of two"], "use 4 or 8"),
    ({"hbm.burst_bytes": 300}, "ahbm_2sip.yaml", "hbm.burst_bytes", 300, ["must be a power of two"],
     "use 256 or 512"),
    ({"fabric.flit_bytes": 512}, "ahbm_2sip.yaml", "fabric.flit_bytes", 512, ["may not exceed the HBM burst"],
     "flit_bytes <= hbm.burst_bytes"),
    ({"sips.topology": "torus_2d", "sips.count": 6}, "ahbm_2sip.yaml", "sips.count", 6,
     ["non-square sips.count requires explicit sips.w/h", "torus_2d"], "w=2, h=3"),
    ({"sips.topology": "mesh_2d_no_wrap", "sips.count": 7}, "ahbm_2sip.yaml", "sips.count", 7,
     ["non-square"], "ring_1d"),
    ({"sips.topology": "torus_2d", "sips.count": 6, "sips.w": 2, "sips.h": 2}, "ahbm_2sip.yaml", "sips.w", 2,
     ["2*2 = 4 != sips.count = 6"], "product is sips.count"),
    ({"sips.w": 2, "sips.h": 1}, "ahbm_2sip.yaml", "sips.w", 2, ["only apply to torus_2d"], "remove sips.w"),
    ({"sips.topology": "torus_3d"}, "ahbm_2sip.yaml", "sips.topology", "torus_3d", ["must be one of"],
     "'torus_2d'"),
    ({"hbm.efficiency": 1.5}, "ahbm_2sip.yaml", "hbm.efficiency", 1.5, ["must be at most 1"], ""),
    # a rule across keys that fails at a key the file gave is blamed on the override that broke it
    ({"sip.cube_mesh.w": 1}, "--set sip.cube_mesh.w=1", "sip.io_chiplets.0.cube_ports.1.cube", [1, 0],
     ["outside the 1x4 cube mesh"], ""),
    ({"uncalibrated": ["fabric.ns_per_mm", "link.warp.bw_gbs"]}, "ahbm_2sip.yaml", "uncalibrated",
     "link.warp.bw_gbs", ["names no parameter"], ""),
])
def test_validation_errors(overrides, file, key, value, fragments, hint):
    with pytest.raises(ConfigError) as err:
        load_system(overrides=overrides)
    e = err.value
    if not file.startswith("--set") and key in overrides:   # a value the override gave is blamed on it
        v = overrides[key]
        file = f"--set {key}={v if isinstance(v, str) else json.dumps(v)}"
    assert isinstance(e, KbfastError) and e.exit_code == 2
    assert (e.file, e.key, e.value) == (file, key, value)
    msg = str(e)
    assert msg.startswith(f"{file}: {key}: ")
    assert f"(got {value!r})" in msg
    for fragment in fragments:
        assert fragment in msg
    assert hint in e.hint
    if hint:
        assert f"hint: {e.hint}" in msg


def test_yaml_unknown_key_names_the_file(tmp_path):
    p = write(tmp_path, "typo.yaml", "base: ahbm_2sip\nsip:\n  cube_mseh: {w: 2, h: 2}\n")
    with pytest.raises(ConfigError) as err:
        load_system(p)
    assert err.value.file == str(p) and err.value.key == "sip.cube_mseh"
    assert err.value.hint == "did you mean 'cube_mesh'?"
    assert str(err.value).startswith(f"{p}: sip.cube_mseh: unknown key 'cube_mseh'")


def test_yaml_bad_values_name_the_file(tmp_path):
    p = write(tmp_path, "bad.yaml", "base: ahbm_2sip\nhbm: {pcs_per_pe: 6}\n")
    with pytest.raises(ConfigError) as err:
        load_system(p)
    assert (err.value.file, err.value.key, err.value.value) == (str(p), "hbm.pcs_per_pe", 6)
    p = write(tmp_path, "grid.yaml", "base: ahbm_2sip\nsips: {count: 6, topology: torus_2d, w: 4, h: 2}\n")
    with pytest.raises(ConfigError) as err:
        load_system(p)
    assert err.value.key == "sips.w" and "4*2 = 8 != sips.count = 6" in str(err.value)


def test_bad_yaml_is_one_line_in_the_files_terms(tmp_path):
    """PyYAML's five lines ('in "<unicode string>", line 1, column 6', a caret under a copy of the line, a stray
    '()') become one: the problem, its line and column in the file, and what was being read."""
    p = write(tmp_path, "bad.yaml", "foo: [1, 2\n")
    with pytest.raises(ConfigError) as err:
        load_system(p)
    msg = str(err.value)
    assert msg.splitlines()[0] == (f"{p}: not valid YAML: expected ',' or ']', but got '<stream end>' at line 2, "
                                   "column 1 (parsing a flow sequence from line 1, column 6)")
    assert "<unicode string>" not in msg and "()" not in msg and "hint: check the brackets" in msg


@pytest.mark.parametrize("text,key,fragment", [
    ("a: [1,\n", "<yaml>", "not valid YAML"),
    ("- 1\n- 2\n", "<root>", "must be a mapping"),
    ("base: loop.yaml\n", "base", "circular base chain"),
    ("base: ahbm_2sp\n", "base", "unknown topology preset"),   # named in the file that refers to it
])
def test_yaml_structure_errors(tmp_path, text, key, fragment):
    p = write(tmp_path, "loop.yaml", text)
    with pytest.raises(ConfigError) as err:
        load_system(p)
    assert err.value.key == key and fragment in str(err.value)


def test_unknown_preset_name():
    with pytest.raises(ConfigError) as err:
        load_system("ahbm_2sp")
    assert (err.value.file, err.value.key, err.value.value) == ("ahbm_2sp", "<preset>", "ahbm_2sp")
    assert err.value.hint == "did you mean 'ahbm_2sip'?"
    with pytest.raises(ConfigError) as err:
        load_system("zzz")
    assert "torus6" in err.value.hint                      # falls back to listing the presets


def test_missing_file(tmp_path):
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as err:
        load_system(missing)
    assert err.value.file == str(missing) and "no such topology file" in str(err.value)
    assert "ahbm_2sip" in err.value.hint


def test_mutual_base_cycle_is_reported(tmp_path):
    """a.yaml -> b.yaml -> a.yaml, given by absolute path: a clear error, not a RecursionError."""
    write(tmp_path, "a.yaml", "base: b.yaml\n")
    write(tmp_path, "b.yaml", "base: a.yaml\n")
    with pytest.raises(ConfigError) as err:
        load_system(tmp_path / "a.yaml")
    assert err.value.key == "base" and "circular base chain" in str(err.value)
    assert err.value.file == str(tmp_path / "b.yaml") and err.value.value == "a.yaml"


@pytest.mark.parametrize("old,new,key,hint", [
    ("  count: 2\n", "  cuont: 2\n", "sips.cuont", "did you mean 'count'?"),
    ("fabric:", "fabirc:", "fabirc", "did you mean 'fabric'?"),
])
def test_misspelt_key_is_named_not_the_missing_one(tmp_path, old, new, key, hint):
    """A complete file with ``sips.cuont`` was 'sips.count: required key is missing', never naming cuont."""
    from importlib import resources

    text = resources.files("kbfast.topologies").joinpath("ahbm_2sip.yaml").read_text()
    assert old in text
    p = write(tmp_path, "typo.yaml", text.replace(old, new))
    with pytest.raises(ConfigError) as err:
        load_system(p)
    assert (err.value.file, err.value.key, err.value.hint) == (str(p), key, hint)
    assert f"unknown key {key.split('.')[-1]!r}" in str(err.value)
