"""Sweep specs (kbfast.sweep.spec): axis expansion, sizes, config hashes and validation; nothing is evaluated."""

from __future__ import annotations

import hashlib
import itertools
import re
from pathlib import Path
from typing import Any

import pytest

from kbfast import __version__
from kbfast.config.units import parse_geom
from kbfast.errors import ConfigError, KbfastError
from kbfast.sweep.spec import (
    Point,
    SweepSpec,
    _saved_set,
    _topology_digest,
    config_hash,
    example_specs,
    load_spec,
    overrides_key,
    parse_spec,
)
from conftest import flat

MiB = 1 << 20


def make(axes: list[dict[str, Any]] | None = None, **extra: Any) -> SweepSpec:
    """A spec on torus6 running the lrab all-reduce, with ``axes`` and any other top-level keys."""
    data: dict[str, Any] = {"topology": "torus6", "workload": {"kind": "allreduce", "algorithm": "lrab"}}
    if axes is not None:
        data["axes"] = axes
    return parse_spec({**data, **extra}, "test.yaml")


def values(points: list[Point], *keys: str) -> list[tuple]:
    return [tuple(p.params[k] for k in keys) for p in points]


# ----------------------------------------------------------------------------------------------------------------
def test_grid_is_cartesian_first_key_slowest() -> None:
    pts = make([{"grid": {"ipcq.buffer_kind": ["tcm", "sram", "hbm"], "workload.size": [16, 1024]}}]).points()
    assert [p.index for p in pts] == list(range(6))
    assert values(pts, "ipcq.buffer_kind", "workload.size") == [
        ("tcm", 16), ("tcm", 1024), ("sram", 16), ("sram", 1024), ("hbm", 16), ("hbm", 1024)]
    # a system key is an override, a workload key goes into the workload
    assert pts[2].overrides == {"ipcq.buffer_kind": "sram"}
    assert pts[2].workload["size"] == 16 and pts[2].workload["kind"] == "allreduce"


def test_zip_pairs_equal_length_lists() -> None:
    pts = make([{"zip": {"topology": ["ring6", "torus6", "mesh6"], "ipcq.n_slots": [1, 2, 4]}}]).points()
    assert values(pts, "topology", "ipcq.n_slots") == [("ring6", 1), ("torus6", 2), ("mesh6", 4)]
    assert [p.topology for p in pts] == ["ring6", "torus6", "mesh6"]
    assert "topology" not in pts[0].overrides and pts[0].overrides == {"ipcq.n_slots": 1}


def test_zip_rows_may_set_different_keys() -> None:
    s = make([{"zip": [{"sips.topology": "ring_1d", "sips.count": 4},
                       {"sips.topology": "torus_2d", "sips.count": 4, "sips.w": 2, "sips.h": 2}]}])
    pts = s.points()
    assert len(pts) == 2
    assert pts[0].overrides == {"sips.topology": "ring_1d", "sips.count": 4}
    assert pts[1].overrides == {"sips.topology": "torus_2d", "sips.count": 4, "sips.w": 2, "sips.h": 2}
    assert "sips.w" not in pts[0].params
    assert s.axis_keys == ["sips.topology", "sips.count", "sips.w", "sips.h"]


def _random(seed: int | None = 7, n: int = 40, spec_seed: int = 0) -> list[Point]:
    group: dict[str, Any] = {"n": n, "axes": {
        "link.ucie_conn.bw_gbs": {"uniform": [32, 256]},
        "hbm.efficiency": {"uniform": [0.5, 0.9]},
        "workload.size": {"log_uniform": ["1KiB", "1MiB"]},
        "ipcq.buffer_kind": ["tcm", "sram", "hbm"]}}
    if seed is not None:
        group["seed"] = seed
    return make([{"random": group}], seed=spec_seed).points()


def test_random_is_reproducible() -> None:
    keys = ("link.ucie_conn.bw_gbs", "workload.size", "ipcq.buffer_kind")
    a, b, other = _random(7), _random(7), _random(8)
    assert values(a, *keys) == values(b, *keys)
    assert [p.config_hash for p in a] == [p.config_hash for p in b]
    assert values(a, *keys) != values(other, *keys)
    # without a group seed the spec seed decides
    assert values(_random(None, spec_seed=1), *keys) == values(_random(None, spec_seed=1), *keys)
    assert values(_random(None, spec_seed=1), *keys) != values(_random(None, spec_seed=2), *keys)


def test_random_respects_bounds_and_kinds() -> None:
    pts = _random(3, n=60)
    assert len(pts) == 60
    bw = [p.params["link.ucie_conn.bw_gbs"] for p in pts]
    assert all(type(v) is int and 32 <= v <= 256 for v in bw)            # integer bounds stay whole
    eff = [p.params["hbm.efficiency"] for p in pts]
    assert all(isinstance(v, float) and 0.5 <= v <= 0.9 for v in eff)
    assert len(set(eff)) == 60
    sizes = [p.workload["size"] for p in pts]
    assert all(type(v) is int and 1024 <= v <= MiB for v in sizes)       # size strings: whole bytes
    assert sizes == [p.params["workload.size"] for p in pts]
    assert min(sizes) < 32 * 1024 < max(sizes)                           # log-uniform: both decades are hit
    kinds = [p.params["ipcq.buffer_kind"] for p in pts]
    assert set(kinds) == {"tcm", "sram", "hbm"}                          # a list is chosen from


def test_geom_endpoints_and_count() -> None:
    sizes = parse_geom("geom(16B, 64MiB, x2)")
    assert sizes[0] == 16 and sizes[-1] == 64 * MiB and len(sizes) == 23
    assert all(b == 2 * a for a, b in itertools.pairwise(sizes))
    assert parse_geom("geom(16B, 100B, x2)") == [16, 32, 64]             # stops at or below STOP
    assert parse_geom(" geom( 1KiB , 1MiB , x4 ) ") == [1 << k for k in range(10, 21, 2)]
    pts = make([{"grid": {"workload.size": "geom(16B, 64MiB, x2)"}}]).points()
    assert [p.workload["size"] for p in pts] == sizes


def test_groups_combine_as_product() -> None:
    pts = make([{"zip": {"topology": ["ring6", "torus6", "mesh6"]}},
                {"grid": {"ipcq.n_slots": [1, 4], "workload.size": ["1KiB", "4KiB"]}}]).points()
    assert len(pts) == 3 * 4
    assert [p.topology for p in pts] == ["ring6"] * 4 + ["torus6"] * 4 + ["mesh6"] * 4   # first group slowest
    assert values(pts[:4], "ipcq.n_slots", "workload.size") == [(1, 1024), (1, 4096), (4, 1024), (4, 4096)]
    assert len({p.config_hash for p in pts}) == 12


def test_sizes_with_suffixes_become_bytes() -> None:
    s = make([{"grid": {"workload.size": ["1KiB", "1.5KiB", 4096, "2KB", "1MiB"]}}])
    assert [p.workload["size"] for p in s.points()] == [1024, 1536, 4096, 2000, MiB]
    assert [p.params["workload.size"] for p in s.points()] == [1024, 1536, 4096, 2000, MiB]
    base = parse_spec({"workload": {"kind": "allreduce", "size": "96KiB"}}, "test.yaml")
    (only,) = base.points()
    assert only.workload["size"] == 96 * 1024 and only.params == {}
    with pytest.raises(ConfigError, match="4XB"):
        make([{"grid": {"workload.size": ["4XB"]}}]).points()


def test_spec_defaults() -> None:
    s = make()
    assert s.name == "test" and s.mode == "fast" and s.seed == 0
    assert s.workload == {"kind": "allreduce", "algorithm": "lrab", "size": "96KiB", "ranks": None, "tile_io": True,
                          "method": "fluid"}
    assert len(s.points()) == 1                                           # no axes: the base point
    off = make([{"grid": {"workload.tile_io": [True, False]}}]).points()
    assert [p.workload["tile_io"] for p in off] == [True, False]
    assert off[0].config_hash == make().points()[0].config_hash != off[1].config_hash
    pe = parse_spec({"workload": {"kind": "pe2pe"}}, "p.yaml")
    assert pe.topology == "ahbm_2sip" and pe.points()[0].workload["size"] == 4096


# ----------------------------------------------------------------------------------------------------------------
def test_config_hash_is_deterministic() -> None:
    axes = [{"zip": {"topology": ["ring6", "torus6"]}}, {"grid": {"workload.size": ["1KiB", "4KiB"]}}]
    a, b = make(axes).points(), make(axes).points()
    assert [p.config_hash for p in a] == [p.config_hash for p in b]
    assert all(re.fullmatch(r"[0-9a-f]{16}", p.config_hash) for p in a)
    assert len({p.config_hash for p in a}) == 4
    # the same bytes written differently are the same point
    assert make([{"grid": {"workload.size": ["1KiB"]}}]).points()[0].config_hash == \
        make([{"grid": {"workload.size": [1024]}}]).points()[0].config_hash


def test_config_hash_is_the_digest_of_the_documented_text() -> None:
    """Results on disk are resumed by hash: the text behind it must not change with how it is built."""
    work = {"kind": "allreduce", "algorithm": "lrab", "size": 1024, "ranks": None}
    over = {"ipcq.n_slots": 4, "ipcq.buffer_kind": "tcm", "sip.io_chiplets": [{"id": "io0", "n": 4}]}
    text = repr([_topology_digest("torus6"), sorted(over.items()), sorted(work.items()), "fast", __version__])
    saved = _saved_set("torus6", None)          # the shipped set every preset loads: its name and values digest
    assert saved is not None and saved[0] == "kernbench-2026-11"
    want = hashlib.sha256(f"{text} {saved!r}".encode()).hexdigest()[:16]
    assert config_hash("torus6", over, work, "fast") == want
    assert config_hash("torus6", over, work, "fast", overrides_key(over)) == want
    assert make().points()[0].overrides_key == overrides_key(make().points()[0].overrides)


def test_config_hash_changes_with_every_input() -> None:
    work = {"kind": "allreduce", "algorithm": "lrab", "size": 1024, "ranks": None}
    over = {"ipcq.buffer_kind": "tcm", "ipcq.n_slots": 4}
    ref = config_hash("torus6", over, work, "fast")
    assert ref == config_hash("torus6", dict(reversed(over.items())), dict(work), "fast")   # key order is irrelevant
    changed = [
        config_hash("torus6", {**over, "ipcq.n_slots": 2}, work, "fast"),
        config_hash("torus6", {**over, "ipcq.buffer_kind": "sram"}, work, "fast"),
        config_hash("torus6", {**over, "link.ucie_conn.bw_gbs": 64}, work, "fast"),
        config_hash("torus6", over, {**work, "size": 2048}, "fast"),
        config_hash("torus6", over, {**work, "algorithm": "ring"}, "fast"),
        config_hash("torus6", over, work, "exact"),
        config_hash("ring6", over, work, "fast"),
    ]
    assert ref not in changed and len(set(changed)) == len(changed)
    # the spec's fixed `set` overrides count too
    assert make(set={"ipcq.n_slots": 2}).points()[0].config_hash != make().points()[0].config_hash


# ----------------------------------------------------------------------------------------------------------------
W = {"kind": "allreduce"}


@pytest.mark.parametrize(("data", "key", "hint"), [
    pytest.param({"workload": W, "axis": []}, "axis", "did you mean 'axes'", id="top-level-key"),
    pytest.param({"workload": {"kind": "allreduse"}}, "workload.kind", "did you mean 'allreduce'", id="workload-kind"),
    pytest.param({"workload": {"kind": "allreduce", "sise": 4096}}, "workload.sise", "did you mean 'size'",
                 id="workload-field"),
    pytest.param({"workload": W, "axes": [{"grid": {"workload.algoritm": ["lrab"]}}]}, "workload.algoritm",
                 "did you mean 'algorithm'", id="workload-axis-field"),
    pytest.param({"workload": W, "axes": [{"grid": {"sips.cont": [2, 4]}}]}, "sips.cont", "did you mean 'count'",
                 id="axis-key-path"),
    pytest.param({"workload": W, "set": {"ipcq.bufer_kind": "sram"}}, "ipcq.bufer_kind", "did you mean 'buffer_kind'",
                 id="set-key-path"),
    pytest.param({"workload": W, "axes": [{"grd": {"sips.count": [2, 4]}}]}, "axes.0.grd", "did you mean 'grid'",
                 id="group-kind"),
    pytest.param({"workload": W, "axes": [{"zip": {"sips.count": [2, 4], "ipcq.n_slots": [1]}}]}, "axes.0.zip",
                 "same number of values", id="zip-lengths"),
    pytest.param({"workload": W, "axes": [{"grid": {"ipcq.n_slots": [1, 2]}}, {"zip": {"ipcq.n_slots": [4]}}]},
                 "axes", "ipcq.n_slots", id="key-in-two-groups"),
    pytest.param({"workload": W, "axes": [{"grid": {"workload.size": "geom(16B, 64KiB)"}}]},
                 "axes.0.grid.workload.size", "geom(START, STOP, xFACTOR)", id="geom-syntax"),
    pytest.param({"workload": W, "axes": [{"grid": {"workload.size": "geom(64KiB, 16B, x2)"}}]},
                 "axes.0.grid.workload.size", "START <= STOP", id="geom-range"),
    pytest.param({"workload": W, "axes": [{"random": {"n": 4, "axes": {"ipcq.n_slots": {"normal": [1, 8]}}}}]},
                 "axes.0.random.axes.ipcq.n_slots", "log_uniform", id="random-distribution"),
    pytest.param({"workload": W, "axes": [{"random": {"n": 4, "axes": {"ipcq.n_slots": {"unifrom": [1, 8]}}}}]},
                 "axes.0.random.axes.ipcq.n_slots", "did you mean 'uniform'", id="random-typo"),
    pytest.param({"workload": W, "axes": [{"random": {"n": 4, "axes": {"ipcq.n_slots": {"uniform": [8, 1]}}}}]},
                 "axes.0.random.axes.ipcq.n_slots.uniform", "lo <= hi", id="random-bounds"),
    pytest.param({"workload": W, "axes": [{"random": {"n": 0, "axes": {"ipcq.n_slots": [1]}}}]},
                 "axes.0.random.n", "whole number > 0", id="random-n"),
    pytest.param({"workload": W, "mode": "exakt"}, "mode", "did you mean 'exact'", id="mode"),
    pytest.param({"workload": W, "axes": [{"random": {"n": 4, "sed": 3, "axes": {"ipcq.n_slots": [1]}}}]},
                 "axes.0.random.sed", "did you mean 'seed'", id="random-key-typo"),
    pytest.param({"workload": {"kind": "allreduce", "tile_io": "no"}}, "workload.tile_io", "expected true or false",
                 id="tile-io-value"),
    pytest.param({"workload": W, "axes": [{"grid": {"workload.tile_io": [True, 1]}}]}, "workload.tile_io",
                 "tile_io: false", id="tile-io-axis-value"),
    pytest.param({"workload": {"kind": "pe2pe", "tile_io": False}}, "workload.tile_io", "unknown pe2pe field",
                 id="tile-io-not-pe2pe"),
    pytest.param({"workload": W, "name": "../../escape"}, "name", "give --out", id="name-with-folders"),
    pytest.param({"workload": W, "name": "/tmp/abs"}, "name", "a plain file name", id="name-absolute"),
    pytest.param({"workload": W, "name": ".."}, "name", "a plain file name", id="name-dots"),
    pytest.param({"workload": W, "seed": -1}, "seed", "whole number >= 0", id="seed-negative"),
    pytest.param({"workload": W, "seed": True}, "seed", "whole number >= 0", id="seed-bool"),
    pytest.param({"workload": W, "axes": [{"random": {"n": 2, "seed": -4, "axes": {"ipcq.n_slots": [1]}}}]},
                 "axes.0.random.seed", "whole number >= 0", id="random-seed-negative"),
])
def test_validation_errors(data: dict[str, Any], key: str, hint: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_spec(data, "bad.yaml").points()          # some problems only show when the axes are expanded
    err = info.value
    assert err.file == "bad.yaml" and err.key == key
    text = str(err)
    assert text.startswith(f"bad.yaml: {key}:") and hint in text


def test_bundled_name_loads() -> None:
    s = load_spec("seed36")
    pts = s.points()
    assert s.name == "seed36" and len(pts) == 36
    assert [p.topology for p in pts[::12]] == ["ring6", "torus6", "mesh6"]
    assert sorted({p.workload["size"] for p in pts}) == [16, 64, 128, 256, 1024, 2048, 4096, 8192, 16384, 32768,
                                                        65536, 98304]


def test_missing_spec(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such sweep spec"):
        load_spec(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError) as info:
        load_spec("seed63")
    assert "did you mean 'seed36'" in str(info.value)


def test_spec_file_with_relative_topology(tmp_path: Path) -> None:
    """A topology YAML named in a spec is found beside the spec, whatever the working directory."""
    (tmp_path / "mine.yaml").write_text("base: torus6\nipcq: {n_slots: 2}\n")
    (tmp_path / "spec.yaml").write_text("topology: mine.yaml\nworkload: {kind: pe2pe, hop: h1}\n"
                                        "axes:\n  - grid: {workload.size: [1KiB, 2KiB]}\n")
    s = load_spec(tmp_path / "spec.yaml")
    assert s.name == "spec"
    pts = s.points()
    assert [Path(p.topology) for p in pts] == [tmp_path / "mine.yaml"] * 2
    # the hash follows the file's content, not its name
    assert pts[0].config_hash != make().points()[0].config_hash
    (tmp_path / "bad.yaml").write_text("topology: torus6\nworkload: {kind: allreduce}\naxes: [{grid: {sips.cont: [2]}}]\n")
    with pytest.raises(KbfastError) as info:
        load_spec(tmp_path / "bad.yaml")
    assert str(tmp_path / "bad.yaml") in str(info.value) and "did you mean 'count'" in flat(str(info.value))


# a misspelt value of each field a kind checks by name, and a value it accepts (kbfast.measure.kind.checks)
MISSPELT = {"algorithm": ("rign", "ring"), "ranks": ("all_pe", "all_pes"), "op": ("all_redce", "all_reduce"),
            "hop": ("h9", "h3"), "method": ("fluud", "fluid"), "pattern": ("randm", "random"),
            "staging": ("load_rf", "load_ref"), "layout": ("tp_pe", "tp_pes"), "phase": ("decod", "decode"),
            "collective": ("rign", "lrab"), "overlap": ("prefech", "none"), "bounds": ("lowr", "lower")}


def _checked_fields():
    from kbfast.measure.registry import WORKLOADS
    return [(kind.name, name) for kind in WORKLOADS.values() for name, _ in kind.checks]


@pytest.mark.parametrize(("kind", "field"), _checked_fields(), ids=lambda x: x)
@pytest.mark.parametrize("where", ["workload", "grid", "zip", "random"])
def test_misspelt_names_are_refused_at_load(tmp_path: Path, kind: str, field: str, where: str) -> None:
    """Every field a workload kind checks by name is checked for every value a spec gives it, wherever it gives
    it, at load; the key named is the one that gave the bad value, and a good value in its place loads."""
    bad, good = MISSPELT[field]
    base = {"kind": kind, "model": "tp_mlp"} if kind == "model" and field not in ("phase", "overlap") else {"kind": kind}
    groups = {"workload": "", "grid": "  - grid: {workload.%s: [%s, %s]}\n",
              "zip": "  - zip: {workload.%s: [%s, %s], workload.size: [1KiB, 2KiB]}\n",
              "random": "  - random: {n: 3, axes: {workload.%s: [%s, %s]}}\n"}
    for value, refused_ in ((bad, True), (good, False)):
        workload = {**base, field: value} if where == "workload" else base
        axes = "" if where == "workload" else "axes:\n" + groups[where] % (field, good, value)
        if kind == "model" or kind == "gemm":
            axes = axes.replace(", workload.size: [1KiB, 2KiB]", ", workload.batch: [1, 2]" if kind == "model" else
                                ", workload.m: [32, 64]")
        text = "topology: ring6\nworkload: {%s}\n%s" % (", ".join(f"{k}: {v}" for k, v in workload.items()), axes)
        path = tmp_path / f"{where}.yaml"
        path.write_text(text)
        if not refused_:
            load_spec(path)
            continue
        with pytest.raises(ConfigError) as info:
            load_spec(path)
        key = f"workload.{field}" if where == "workload" else \
            f"axes.0.{where}{'.axes' if where == 'random' else ''}.workload.{field}"
        assert info.value.key == key and repr(bad) in str(info.value), str(info.value)


KNOWN_SIZES = {"seed36": 36, "buffer_kinds": 48, "scaling": 150, "ucie_whatif": 30, "gemm": 2250, "llama70b": 54}


@pytest.mark.parametrize("path", example_specs(), ids=lambda p: Path(p).stem)
def test_bundled_specs_expand(path: str) -> None:
    s = load_spec(path)
    pts = s.points()
    assert s.name == Path(path).stem and s.description
    assert [p.index for p in pts] == list(range(len(pts)))
    sized = [k for k in ("size", "m", "n", "k") if k in pts[0].workload]    # a GEMM has dimensions, no size
    assert sized or pts[0].workload["kind"] == "model"                      # a model step has neither
    assert all(isinstance(p.workload[k], int) and p.workload[k] > 0 for p in pts for k in sized)
    if s.name in KNOWN_SIZES:
        assert len(pts) == KNOWN_SIZES[s.name]
        assert len({p.config_hash for p in pts}) == len(pts)


def test_bundled_specs_are_shipped() -> None:
    assert set(KNOWN_SIZES) <= {Path(p).stem for p in example_specs()}
