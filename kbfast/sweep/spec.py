"""Sweep specs: a base topology, a workload and parameter axes, expanded into points (design §1, §8).

A spec is a YAML mapping::

    name: seed36
    topology: torus6                 # preset or topology YAML (an axis may vary it)
    workload: {kind: allreduce, algorithm: lrab, size: 96KiB}   # tile_io: true (the default)
    set: {ipcq.buffer_kind: tcm}     # fixed overrides for every point
    seed: 0
    axes:
      - zip:  {topology: [ring6, torus6, mesh6]}
      - grid: {workload.size: geom(16B, 64KiB, x4)}
      - random: {n: 100, seed: 7, axes: {link.ucie_conn.bw_gbs: {uniform: [32, 256]}}}

Axis groups combine as a cartesian product, in order; inside a group, ``grid``
is cartesian, ``zip`` pairs equal-length lists and ``random`` draws ``n``
samples (``uniform``, ``log_uniform`` or a list to choose from) from a seeded
generator.  An axis key is ``topology``, ``workload.<field>`` or any key path of
the system schema.  An axis value that makes a point invalid is not checked here:
the point is evaluated and records its error.  What would fail every point is
refused when the spec is loaded (:func:`load_spec`): a topology or model that
cannot be read, a value in ``set:`` outside its key's type or limits.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import re
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from kbfast import __version__
from kbfast.config import budget
from kbfast.config import DEFAULT_TOPOLOGY
from kbfast.config.loader import (FileCaches, applied_param_set, check_key_path, load_raw, override_error,
                                  param_set_path, parse_yaml, read_param_set, read_text)
from kbfast.config.units import _GEOM, MAX_BYTES, is_geom, parse_geom, parse_size
from kbfast.errors import ConfigError, KbfastError, did_you_mean
from kbfast.workloads.gemm import parse_dim
from kbfast.measure.registry import MODES, WORKLOADS

SPEC_KEYS = ("name", "description", "topology", "workload", "set", "axes", "seed", "mode")
GROUPS = ("grid", "zip", "random")
CONFIRM_POINTS = 1_000_000      # a sweep with more points runs only with --yes
POINT_BYTES = 2048              # an expanded point and its rows (about 1.2 KB measured for mixed_1e5's points)
POINT_SECONDS = 25e-6           # to expand one point (2.4 s for mixed_1e5's 10^5)
DISTRIBUTIONS = ("uniform", "log_uniform")
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")    # a spec name is one plain file-name component


@dataclass(frozen=True)
class Point:
    """One configuration point: where it came from and everything needed to evaluate it."""

    index: int
    params: dict[str, Any]        # the axis values, by axis key
    topology: str                 # preset name or topology YAML path
    overrides: dict[str, Any]     # dotted key path -> value (spec ``set`` plus topology axes)
    workload: dict[str, Any]      # kind and fields; ``size`` in bytes
    config_hash: str
    overrides_key: str = ""       # repr(sorted(overrides.items())): built once, keys the point's system


@dataclass(frozen=True)
class SweepSpec:
    """A validated sweep spec; ``points()`` expands its axes."""

    label: str
    name: str
    description: str
    topology: str
    workload: dict[str, Any]
    fixed: dict[str, Any]
    axes: list[dict[str, Any]] = field(default_factory=list)
    seed: int = 0
    mode: str = "fast"

    @property
    def axis_keys(self) -> list[str]:
        """Every axis key of the spec, in group order."""
        return [k for group in self.axes for k in _group_values(group)]

    @property
    def digest(self) -> str:
        """16 hex digits of what decides the points and how they are evaluated: the topology, workload,
        ``set``, axes, seed and mode (not the name, the description or where the file is)."""
        text = json.dumps([self.topology, self.workload, self.fixed, self.axes, self.seed, self.mode],
                          sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def evaluated(self, exact: bool) -> SweepSpec:
        """The spec as a run evaluates it: in exact mode with ``exact`` (``--exact``), else as written."""
        return replace(self, mode="exact") if exact else self

    def count_points(self) -> int:
        """How many points :meth:`points` gives, counted from the axes without expanding them."""
        n = 1
        for group in self.axes:
            n *= _count_group(group)
        return n

    def check_size(self, yes: bool = False) -> int:
        """The point count, refused when expanding it would not fit in memory (kbfast.config.budget) or, without
        ``yes`` (``--yes``), when it exceeds ``CONFIRM_POINTS``."""
        n = self.count_points()
        budget.check(f"{self.label}: expanding its {n:,} points", n * POINT_BYTES,
                     "narrow the axes (fewer values per grid axis, a smaller random n)")
        if n > CONFIRM_POINTS and not yes:
            raise KbfastError(f"{self.label}: the axes give {n:,} points, more than {CONFIRM_POINTS:,}; "
                              f"expanding them alone takes about {budget.fmt_bytes(n * POINT_BYTES)} and "
                              f"{budget.fmt_seconds(n * POINT_SECONDS)}.\n  hint: pass --yes to run them all, or "
                              "narrow the axes (fewer values per grid axis, a smaller random n)")
        return n

    def points(self) -> list[Point]:
        """Every point, in a fixed order (the product of the groups, the first varying slowest); the count is
        checked against the memory budget first (:meth:`check_size`, without the --yes threshold)."""
        self.check_size(yes=True)
        rows: list[dict[str, Any]] = [{}]
        for gi, group in enumerate(self.axes):
            expanded = _expand(self.label, gi, group, self.seed)
            rows = [{**a, **b} for a in rows for b in expanded]
        folder = str(Path(self.label).parent)
        return [self._point(i, row, folder) for i, row in enumerate(rows)]

    def _point(self, index: int, params: dict[str, Any], folder: str) -> Point:
        topology = resolve_topology(str(params.get("topology", self.topology)), folder)
        overrides = dict(self.fixed)
        workload = dict(self.workload)
        for key, value in params.items():
            if key.startswith("workload."):
                workload[key.split(".", 1)[1]] = value
            elif key != "topology":
                overrides[key] = value
        if workload.get("size") is not None:
            workload["size"] = _size(self.label, "workload.size", workload["size"])
            if "workload.size" in params:
                params = {**params, "workload.size": workload["size"]}
        kind = WORKLOADS[workload["kind"]]
        for name in kind.bool_fields:
            _bool(self.label, f"workload.{name}", workload[name])
        for name in kind.dim_fields:
            workload[name] = _dim(self.label, f"workload.{name}", workload[name])
            if f"workload.{name}" in params:
                params = {**params, f"workload.{name}": workload[name]}
        if kind.resolve is not None:
            workload = kind.resolve(self.label, workload)
        key = overrides_key(overrides)
        return Point(index, params, topology, overrides, workload,
                     config_hash(topology, overrides, workload, self.mode, key), key)


def _size(label: str, key: str, value: Any) -> Any:
    if type(value) is int and 0 <= value <= MAX_BYTES:
        return value
    try:
        return parse_size(value)
    except KbfastError as err:
        raise ConfigError(label, key, value, str(err)) from None


def _dim(label: str, key: str, value: Any) -> int:
    try:
        return parse_dim(key, value)
    except KbfastError as err:
        raise ConfigError(label, key, value, str(err)) from None


def _bool(label: str, key: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise ConfigError(label, key, value, "expected true or false",
                          f"write {key.split('.')[-1]}: true or {key.split('.')[-1]}: false (YAML booleans, unquoted)")


def overrides_key(overrides: dict[str, Any]) -> str:
    """Text key of a point's overrides, equal for equal overrides in any order."""
    return repr(sorted(overrides.items()))


def config_hash(topology: str, overrides: dict[str, Any], workload: dict[str, Any], mode: str,
                key: str | None = None) -> str:
    """A digest of everything that determines a point's result: the resolved base topology, overrides,
    workload, mode and the kbfast version (16 hex digits): sha256 of ``repr([base digest, sorted overrides,
    sorted workload, mode, version])``, built from ``key`` (:func:`overrides_key`) when given, followed by
    the saved parameter set's name and values digest when the point's system loads one."""
    base = _topology_digest(topology)
    text = f"[{base!r}, {key or overrides_key(overrides)}, {sorted(workload.items())!r}, {mode!r}, {__version__!r}]"
    saved = _saved_set(topology, _set_choice(overrides))
    if saved is not None:
        text += f" {saved!r}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _set_choice(overrides: dict[str, Any]) -> str | None:
    value = overrides.get("param_set")
    return None if value is None else str(value)


@lru_cache(maxsize=256)
def _saved_set(topology: str, chosen: str | None) -> tuple[str, str] | None:
    """(name, digest of its values) of the saved parameter set the point's system loads, else None
    (also when the topology or the set is bad: the point records that error)."""
    try:
        label, data = load_raw(topology)
        name = applied_param_set(label, data, None if chosen is None else {"param_set": chosen})
        if name is None:
            return None
        values = read_param_set(param_set_path(name))
    except KbfastError:
        return None
    return name, hashlib.sha256(json.dumps(values, sort_keys=True, default=str).encode()).hexdigest()


def param_set_label(p: Point) -> str | None:
    """The parameter set of a point's system: the one it names (``param_set`` in ``set:`` or an axis), else
    the saved set its topology loads (``NAME.yaml``, kbfast.config.loader.param_set_path), else its topology's own ``param_set`` label;
    None when the topology cannot be read (the point records that error)."""
    chosen = _set_choice(p.overrides)
    if chosen is not None:
        return chosen
    saved = _saved_set(p.topology, None)
    return saved[0] if saved else _own_label(p.topology)


@lru_cache(maxsize=256)
def _own_label(topology: str) -> str | None:
    try:
        _, data = load_raw(topology)
    except KbfastError:
        return None
    label = data.get("param_set")
    return None if label is None else str(label)


@lru_cache(maxsize=256)
def _topology_digest(topology: str) -> str:
    try:
        _, data = load_raw(topology)
    except KbfastError:
        return f"unresolved:{topology}"   # the point will record the error
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


_FILE_CACHES = FileCaches(_saved_set, _own_label, _topology_digest)


@lru_cache(maxsize=1024)
def resolve_topology(topology: str, folder: str) -> str:
    """A topology path in a spec is relative to the spec's folder; preset names stay as they are."""
    if topology.endswith((".yaml", ".yml")) and not Path(topology).is_absolute():
        candidate = Path(folder) / topology
        if candidate.exists():
            return str(candidate)
    return topology


def _group_values(group: dict[str, Any]) -> dict[str, Any]:
    """The group's axis keys (and their values, except for a zip written as rows)."""
    kind = next(iter(group))
    body = group[kind]
    if isinstance(body, list):   # zip rows
        return {k: None for row in body for k in row}
    return body.get("axes", {}) if kind == "random" else body


def _values(label: str, key: str, raw: Any) -> list[Any]:
    """An axis's values: a list, one scalar, or ``geom(START, STOP, xFACTOR)``."""
    if is_geom(raw):
        try:
            return list(parse_geom(raw))
        except KbfastError as err:
            raise ConfigError(label, key, raw, str(err)) from None
    values = raw if isinstance(raw, list) else [raw]
    if not values:
        raise ConfigError(label, key, raw, "an axis needs at least one value")
    return values


def _count_values(raw: Any) -> int:
    """How many values ``_values`` gives for ``raw``, without listing a geometric range (an invalid one counts
    1: expanding it reports the error)."""
    if is_geom(raw):
        m = _GEOM.fullmatch(raw)
        try:
            start, stop, factor = parse_size(m.group(1)), parse_size(m.group(2)), float(m.group(3))
        except (AttributeError, KbfastError, ValueError):
            return 1
        if start <= 0 or stop < start or factor <= 1:
            return 1
        return int(math.floor(math.log(stop * (1 + 1e-12) / start) / math.log(factor))) + 1
    return len(raw) if isinstance(raw, list) else 1


def _count_group(group: dict[str, Any]) -> int:
    """How many rows ``_expand`` gives for one axis group (grid: the product; zip: the longest list or the
    rows; random: n), counted arithmetically."""
    kind = next(iter(group))
    body = group[kind]
    if kind == "grid":
        return math.prod(_count_values(v) for v in body.values())
    if kind == "zip":
        if isinstance(body, list):
            return len(body)
        return max((_count_values(v) for v in body.values()), default=0)
    return int(body["n"])


def _expand(label: str, gi: int, group: dict[str, Any], seed: int) -> list[dict[str, Any]]:
    kind = next(iter(group))
    body = group[kind]
    where = f"axes.{gi}.{kind}"
    if kind == "grid":
        keys = list(body)
        lists = [_values(label, f"{where}.{k}", body[k]) for k in keys]
        return [dict(zip(keys, combo)) for combo in itertools.product(*lists)]
    if kind == "zip" and isinstance(body, list):
        return [dict(row) for row in body]
    if kind == "zip":
        lists = {k: _values(label, f"{where}.{k}", v) for k, v in body.items()}
        lengths = {k: len(v) for k, v in lists.items()}
        if len(set(lengths.values())) > 1:
            raise ConfigError(label, where, lengths, "zip axes must have equal lengths",
                              "give every key the same number of values, or use grid")
        n = next(iter(lengths.values()))
        return [{k: lists[k][i] for k in lists} for i in range(n)]
    rng = np.random.default_rng(int(body.get("seed", seed)))
    n = int(body["n"])
    columns = {k: _draw(label, f"{where}.axes.{k}", v, n, rng) for k, v in body["axes"].items()}
    return [{k: columns[k][i] for k in columns} for i in range(n)]


def _draw(label: str, key: str, raw: Any, n: int, rng: np.random.Generator) -> list[Any]:
    """``n`` samples: a list is chosen from; ``{uniform|log_uniform: [lo, hi]}`` is drawn (whole numbers stay whole)."""
    if not isinstance(raw, dict):
        values = _values(label, key, raw)
        return [values[i] for i in rng.integers(0, len(values), n)]
    dist, bounds = next(iter(raw.items()))
    if len(raw) != 1 or dist not in DISTRIBUTIONS:
        raise ConfigError(label, key, raw, "a random axis is a list to choose from or one distribution",
                          f"write {{uniform: [lo, hi]}} or {{log_uniform: [lo, hi]}}; {did_you_mean(str(dist), DISTRIBUTIONS)}")
    if not (isinstance(bounds, list) and len(bounds) == 2):
        raise ConfigError(label, f"{key}.{dist}", bounds, "bounds must be a list [lo, hi]")
    whole = all(isinstance(b, int) or (isinstance(b, str) and not is_geom(b)) for b in bounds)
    lo, hi = (_size(label, f"{key}.{dist}", b) if isinstance(b, str) else float(b) for b in bounds)
    if not 0 <= lo <= hi or (dist == "log_uniform" and lo <= 0):
        raise ConfigError(label, f"{key}.{dist}", bounds, "need 0 <= lo <= hi (lo > 0 for log_uniform)")
    u = rng.random(n)
    x = lo + u * (hi - lo) if dist == "uniform" else np.exp(np.log(lo) + u * (np.log(hi) - np.log(lo)))
    return [int(round(v)) for v in x] if whole else [float(v) for v in x]


def _check_key(label: str, key: str, workload_kind: str) -> None:
    if key == "topology":
        return
    if key.startswith("workload."):
        name = key.split(".", 1)[1]
        fields = WORKLOADS[workload_kind].fields
        if name == "kind":
            raise ConfigError(label, key, None, "the workload kind is fixed per spec", "write one spec per workload")
        if name not in fields:
            raise ConfigError(label, key, None, f"unknown {workload_kind} field {name!r}",
                              did_you_mean(name, list(fields)))
        return
    check_key_path(label, key)


def _check_group(label: str, gi: int, group: Any, workload_kind: str) -> None:
    where = f"axes.{gi}"
    if not (isinstance(group, dict) and len(group) == 1):
        raise ConfigError(label, where, group, "an axis group is a mapping with one key: grid, zip or random")
    kind, body = next(iter(group.items()))
    if kind not in GROUPS:
        raise ConfigError(label, f"{where}.{kind}", None, "unknown axis group", did_you_mean(kind, GROUPS))
    if kind == "zip" and isinstance(body, list):
        for ri, row in enumerate(body):
            if not isinstance(row, dict) or not row:
                raise ConfigError(label, f"{where}.zip.{ri}", row, "a zip row is a mapping of axis key -> value")
        if not body:
            raise ConfigError(label, f"{where}.zip", body, "a zip needs at least one row")
        keys = _group_values(group)
    elif not isinstance(body, dict) or not body:
        raise ConfigError(label, f"{where}.{kind}", body, "expected a mapping of axis key -> values")
    elif kind == "random":
        extra = sorted(map(str, set(body) - {"n", "seed", "axes"}))
        if extra:
            raise ConfigError(label, f"{where}.random.{extra[0]}", None, "unknown key",
                              did_you_mean(extra[0], ["n", "seed", "axes"], "a random group takes"))
        if not isinstance(body.get("n"), int) or body["n"] <= 0:
            raise ConfigError(label, f"{where}.random.n", body.get("n"), "the sample count must be a whole number > 0")
        if "seed" in body:
            _seed(label, f"{where}.random.seed", body["seed"])
        if not isinstance(body.get("axes"), dict) or not body["axes"]:
            raise ConfigError(label, f"{where}.random.axes", body.get("axes"), "expected a mapping of axis key -> values")
        keys = body["axes"]
    else:
        keys = body
    for key in keys:
        _check_key(label, str(key), workload_kind)


def parse_spec(data: Any, label: str = "<spec>") -> SweepSpec:
    """Validate a spec mapping; every problem is a ``ConfigError`` naming ``label`` and the key path."""
    _FILE_CACHES.refresh()
    if not isinstance(data, dict):
        raise ConfigError(label, "<root>", data, "a sweep spec must be a mapping")
    for key in data:
        if key not in SPEC_KEYS:
            raise ConfigError(label, str(key), data[key], "unknown key", did_you_mean(str(key), SPEC_KEYS))
    workload = data.get("workload")
    if not isinstance(workload, dict) or "kind" not in workload:
        raise ConfigError(label, "workload", workload, "a workload with a kind is required",
                          f"e.g. workload: {{kind: allreduce, algorithm: lrab}}; kinds: {', '.join(WORKLOADS)}")
    kind = workload["kind"]
    if kind not in WORKLOADS:
        raise ConfigError(label, "workload.kind", kind, "unknown workload kind", did_you_mean(str(kind), WORKLOADS))
    for key in workload:
        if key != "kind" and key not in WORKLOADS[kind].fields:
            raise ConfigError(label, f"workload.{key}", workload[key], f"unknown {kind} field",
                              did_you_mean(str(key), list(WORKLOADS[kind].fields)))
    for key in WORKLOADS[kind].bool_fields:
        if key in workload:
            _bool(label, f"workload.{key}", workload[key])
    fixed = data.get("set") or {}
    if not isinstance(fixed, dict):
        raise ConfigError(label, "set", fixed, "expected a mapping of key path -> value")
    for key in fixed:
        check_key_path(label, str(key))
    axes = data.get("axes") or []
    if not isinstance(axes, list):
        raise ConfigError(label, "axes", axes, "expected a list of axis groups", "e.g. axes: [{grid: {workload.size: [16B, 1KiB]}}]")
    for gi, group in enumerate(axes):
        _check_group(label, gi, group, kind)
    keys = [k for g in axes for k in _group_values(g)]
    dup = sorted({k for k in keys if keys.count(k) > 1})
    if dup:
        raise ConfigError(label, "axes", dup[0], "the key appears in more than one axis", "put it in one group")
    mode = data.get("mode", "fast")
    if mode not in MODES:
        raise ConfigError(label, "mode", mode, "unknown mode", did_you_mean(str(mode), MODES))
    seed = _seed(label, "seed", data.get("seed", 0))
    return SweepSpec(label=label, name=_name(label, data.get("name")), description=str(data.get("description", "")),
                     topology=_topology_name(label, data.get("topology", DEFAULT_TOPOLOGY)),
                     workload={**WORKLOADS[kind].fields, **workload}, fixed=dict(fixed), axes=axes, seed=seed, mode=mode)


def _seed(label: str, key: str, value: Any) -> int:
    """A seed is a whole number >= 0 (numpy's generators take no negative seed)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(label, key, value, "a seed is a whole number >= 0", f"e.g. {key.split('.')[-1]}: 0")
    return value


def _name(label: str, value: Any) -> str:
    """The spec's name (default: the file name without its suffix): one plain file-name component, as it
    names the output folder ``results/<name>``."""
    if value is None or value == "":
        return Path(label).stem
    if not NAME.fullmatch(str(value)):
        raise ConfigError(label, "name", value, "a sweep name is a plain file name: letters, digits, '.', '_' "
                          "and '-', starting with a letter or digit",
                          "the name picks the output folder results/<name>; to write elsewhere, give --out")
    return str(value)


def _topology_name(label: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(label, "topology", value, "a topology is a preset name or a topology YAML path",
                          f"e.g. topology: {DEFAULT_TOPOLOGY}")
    return value


def load_spec(path: str | Path) -> SweepSpec:
    """Read and validate a sweep spec YAML (a path, or the name of a bundled spec such as ``seed36``); every
    topology it names must exist and read (:func:`check_topologies`)."""
    path = Path(path)
    bundled = {Path(p).stem: p for p in example_specs()}
    if not path.exists() and str(path) in bundled:
        path = Path(bundled[str(path)])
    if not path.is_file():
        raise ConfigError(str(path), "<file>", str(path), "no such sweep spec",
                          did_you_mean(str(path), bundled, "bundled specs"))
    data = parse_yaml(str(path), read_text(path, str(path)), "sweep spec")
    spec = parse_spec(data, str(path))
    check_topologies(spec)
    check_set(spec)
    check_files(spec)
    check_names(spec)
    return spec


def _axis_values(spec: SweepSpec, axis: str) -> list[tuple[str, list[Any]]]:
    """(key path, values) of every axis of ``spec`` that sets ``axis`` (a zip row gives one value)."""
    out: list[tuple[str, list[Any]]] = []
    for gi, group in enumerate(spec.axes):
        kind, body = next(iter(group.items()))
        if kind == "zip" and isinstance(body, list):
            out += [(f"axes.{gi}.zip.{ri}.{axis}", [row[axis]]) for ri, row in enumerate(body) if axis in row]
            continue
        values = body.get("axes", {}) if kind == "random" else body
        if axis in values:
            raw = values[axis]
            where = f"axes.{gi}.{kind}{'.axes' if kind == 'random' else ''}.{axis}"
            out.append((where, raw if isinstance(raw, list) else [raw]))
    return out


def _readable(spec: SweepSpec, key: str, value: str, what: str, read) -> None:
    """``read(value)`` succeeds, else a ConfigError naming the spec, ``key`` and the ``what`` (topology, model)
    that cannot be read, with the reader's problem and hint."""
    try:
        read(value)
    except ConfigError as err:
        missing = err.file == value and err.key in ("<file>", "<preset>", "<model>") and err.problem.startswith(
            ("no such", "unknown"))
        if missing:
            raise ConfigError(spec.label, key, value, f"the {what} cannot be read: {err.problem}", err.hint) from None
        raise ConfigError(spec.label, key, None, f"{what} {value!r} cannot be read: " + str(err).split("\n")[0],
                          err.hint) from None


def check_topologies(spec: SweepSpec) -> None:
    """Every topology the spec names (``topology`` and each topology axis) exists and reads (its file, YAML and
    base chain); else a ConfigError naming the spec, the key and the topology, before any point runs.  (A
    topology whose values are bad still reaches its points, which record the error.)"""
    folder = str(Path(spec.label).parent)
    for key, values in [("topology", [spec.topology]), *_axis_values(spec, "topology")]:
        for value in values:
            if not isinstance(value, str) or not value.strip():
                raise ConfigError(spec.label, key, value, "a topology is a preset name or a topology YAML path",
                                  f"e.g. {DEFAULT_TOPOLOGY} or my_topology.yaml")
            _readable(spec, key, value, "topology", lambda v: load_raw(resolve_topology(v, folder)))


def check_set(spec: SweepSpec) -> None:
    """Every value of the spec's ``set:`` passes its key's type and limits (``ipcq.n_slots: 0`` does not), and
    a ``param_set`` there names a saved set; else a ConfigError naming the spec and ``set.<key>``, before any
    point runs.  Rules that tie several keys together are left to the points, whose axes may still change
    the other keys."""
    if not spec.fixed:
        return
    label, data = load_raw(resolve_topology(spec.topology, str(Path(spec.label).parent)))
    err = override_error(label, data, spec.fixed)
    if err is not None:
        raise ConfigError(spec.label, f"set.{err.key}", err.value, err.problem, err.hint)


def check_files(spec: SweepSpec) -> None:
    """Every field of the spec's workload kind that names a file (the kind's ``file_fields``: a model workload's
    model, say) reads and validates, in ``workload.<field>`` unless an axis sets it and in every value of its
    axis; else a ConfigError naming the spec, the key and the value, before any point runs."""
    for name, load in WORKLOADS[spec.workload["kind"]].file_fields:
        key = f"workload.{name}"
        places = _axis_values(spec, key)
        if key not in spec.axis_keys:
            places.insert(0, (key, [spec.workload[name]]))
        for where, values in places:
            for value in values:
                _readable(spec, where, str(value), name, load)


def _named_part(group: dict[str, Any], keys: set[str]) -> dict[str, Any] | None:
    """The part of an axis group that sets ``keys``, as a group of its own (None: it sets none): a grid or zip
    of those keys only, and a random group's lists as a grid, every value it may draw (nothing is drawn: a
    random group may ask for 10^12 points)."""
    kind, body = next(iter(group.items()))
    if kind == "zip" and isinstance(body, list):
        rows = [{k: v for k, v in row.items() if k in keys} for row in body]
        return {"zip": rows} if any(rows) else None
    values = body.get("axes", {}) if kind == "random" else body
    kept = {k: v for k, v in values.items() if k in keys}
    return {"grid" if kind == "random" else kind: kept} if kept else None


def check_names(spec: SweepSpec) -> None:
    """Every combination of values the points give the fields their workload kind checks by name (the kind's
    ``checks``: an algorithm, a layout, a fast method) names something; else a ConfigError naming the spec,
    the key that gave the value and the kind's refusal, before any point runs.  Only those fields are
    expanded (:func:`_named_part`: a few rows a group), not the points."""
    kind = WORKLOADS[spec.workload["kind"]]
    if not kind.checks:
        return
    keys = {f"workload.{name}" for name, _ in kind.checks}
    combos: list[dict[str, Any]] = [{}]
    for gi, group in enumerate(spec.axes):
        named = _named_part(group, keys)
        if named is None:
            continue
        rows = {repr(sorted(r.items())): r for r in _expand(spec.label, gi, named, spec.seed)}
        combos = [{**a, **b} for a in combos for b in rows.values()]
    for combo in combos:
        workload = {**spec.workload, **{k.split(".", 1)[1]: v for k, v in combo.items()}}
        bad = kind.misnamed(workload)
        if bad is not None:
            name, err = bad
            key = f"workload.{name}"
            where = next((w for w, values in _axis_values(spec, key) if workload[name] in values), key)
            problem, _, hint = str(err).partition("\n  hint: ")
            raise ConfigError(spec.label, where, None, problem, hint)


def example_specs() -> list[str]:
    """Paths of the sweep specs shipped with kbfast."""
    from importlib import resources

    folder = resources.files("kbfast.topologies").joinpath("sweeps")
    return sorted(str(p) for p in folder.iterdir() if p.name.endswith(".yaml"))
