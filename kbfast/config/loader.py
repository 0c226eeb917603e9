"""Load, override and validate system descriptions (design §10, §12).

A topology YAML may name a ``base`` preset; its keys are deep-merged over the
base.  When its ``param_set`` (or ``--set param_set=NAME``) names a saved
parameter set ``NAME.yaml`` in a parameter-set folder (:func:`param_set_dirs`;
written by ``kbfast calibrate --save``), the set's values are applied next.
``--set key.path=value`` overrides are applied last.  Every problem becomes a ``ConfigError`` naming
the file, the key path and the value.
"""

from __future__ import annotations

import copy
import json
import math
import os
import re
from importlib import resources
from pathlib import Path
from typing import Any, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError

from kbfast.config.schema import EDGE_KINDS, GRID_TOPOLOGIES, MAX_COUNT, SystemSpec
from kbfast.errors import ConfigError, did_you_mean

DEFAULT_TOPOLOGY = "ahbm_2sip"
PARAM_SET_DIR_ENV = "KBFAST_CALIBRATION_DIR"   # the user's parameter-set folder (user_param_set_dir)
_SET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def preset_names() -> list[str]:
    """Names of the topology presets shipped with kbfast."""
    folder = resources.files("kbfast.topologies")
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".yaml"))


def _resolve(name_or_path: str | Path) -> tuple[str, str]:
    """Return (label, text) for a preset name or a YAML path."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        if not path.is_file():
            raise ConfigError(str(path), "<file>", str(path), "no such topology file",
                              f"presets: {', '.join(preset_names())}")
        return str(path), read_text(path, str(path))
    name = str(name_or_path)
    if name not in preset_names():
        raise ConfigError(name, "<preset>", name, "unknown topology preset",
                          did_you_mean(name, preset_names(), "presets"))
    return f"{name}.yaml", read_text(resources.files("kbfast.topologies").joinpath(f"{name}.yaml"), f"{name}.yaml")


def read_text(path: Any, label: str) -> str:
    """The text of a YAML file, which must be UTF-8; anything else is a ConfigError naming the first bad byte."""
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise ConfigError(label, "<file>", str(path), f"cannot read the file ({err.strerror or err})") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        raise ConfigError(label, "<file>", f"byte 0x{raw[err.start]:02x} at line {line}",
                          "not UTF-8 text", "save the file as UTF-8 (most editors: 'Save with encoding')") from None


MAX_YAML_DEPTH = 64             # nesting levels of a YAML file (a description has fewer than 10)
MAX_YAML_ALIASES = 1_000        # alias references (*name) in a YAML file
MAX_YAML_VALUES = 1_000_000     # values a YAML file holds with its aliases expanded (an alias bomb holds billions)
_INT_TAG, _FLOAT_TAG = "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"


class _CappedLoader(yaml.SafeLoader):
    """PyYAML's SafeLoader, refusing (ConfigError naming ``label``) a file nested deeper than MAX_YAML_DEPTH
    levels (PyYAML would recurse into a RecursionError) or with more than MAX_YAML_ALIASES alias references."""

    def __init__(self, text: str, label: str) -> None:
        super().__init__(text)
        self.label, self.depth, self.aliases = label, 0, 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        line = event.start_mark.line + 1 if event.start_mark else 0
        if isinstance(event, yaml.AliasEvent):
            self.aliases += 1
            if self.aliases > MAX_YAML_ALIASES:
                raise ConfigError(self.label, f"line {line}", f"*{event.anchor}",
                                  f"more than {MAX_YAML_ALIASES:,} alias references",
                                  "write the values out; aliases are refused beyond this limit")
            return super().compose_node(parent, index)
        self.depth += 1
        try:
            if self.depth > MAX_YAML_DEPTH:
                raise ConfigError(self.label, f"line {line}", None, f"nested more than {MAX_YAML_DEPTH} levels "
                                  "deep", "a description nests a few levels; check the brackets")
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def _expanded_size(label: str, node: yaml.Node, sizes: dict[int, int]) -> int:
    """How many values ``node`` holds once its aliases are expanded (``sizes``: memo by node id, so a shared
    node is counted in one visit however often it is referred to); a value that contains itself is refused."""
    known = sizes.get(id(node))
    if known is not None:
        if known < 0:
            raise ConfigError(label, f"line {node.start_mark.line + 1}", None,
                              "an alias refers to a value that contains it", "write the value out")
        return known
    sizes[id(node)] = -1   # in progress
    n = 1
    if isinstance(node, yaml.MappingNode):
        n += sum(_expanded_size(label, k, sizes) + _expanded_size(label, v, sizes) for k, v in node.value)
    elif isinstance(node, yaml.SequenceNode):
        n += sum(_expanded_size(label, item, sizes) for item in node.value)
    sizes[id(node)] = n
    return n


def _check_nodes(label: str, node: yaml.Node, path: str = "", seen: set[int] | None = None) -> None:
    """Refuse a mapping that gives a key twice (YAML would keep the last one silently), a float that
    overflows to infinity (``1.0e+400``; ``.inf`` is written as such) and a whole number too long to read."""
    seen = set() if seen is None else seen
    if id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node, yaml.ScalarNode):
        if node.tag == _FLOAT_TAG and "inf" not in node.value.lower() and "nan" not in node.value.lower():
            try:
                overflow = math.isinf(float(node.value.replace("_", "")))
            except ValueError:   # sexagesimal 1:30.5, which PyYAML reads itself
                overflow = False
            if overflow:
                raise ConfigError(label, path or "<root>", node.value, "the number is too large: it would become "
                                  "infinity", "write a smaller number (inf, written .inf, is allowed only where "
                                  "it means no serialization: link.<class>.bw_gbs)")
        elif node.tag == _INT_TAG and len(node.value) > 1000:
            raise ConfigError(label, path or "<root>", node.value, f"a whole number of {len(node.value):,} "
                              "characters is too large", "counts and sizes have at most a dozen digits")
    elif isinstance(node, yaml.MappingNode):
        lines: dict[tuple[str, str], int] = {}
        for key, value in node.value:
            if key.tag == "tag:yaml.org,2002:merge":
                continue
            name = str(key.value) if isinstance(key, yaml.ScalarNode) else yaml.serialize(key).strip()
            where = f"{path}.{name}" if path else name
            line = key.start_mark.line + 1
            if (key.tag, name) in lines:
                raise ConfigError(label, where, None,
                                  f"the key is given twice, on lines {lines[key.tag, name]} and {line}",
                                  "keep one of them (YAML would silently use the last)")
            lines[key.tag, name] = line
            _check_nodes(label, value, where, seen)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _check_nodes(label, item, f"{path}.{i}" if path else str(i), seen)


def load_yaml(label: str, text: str) -> Any:
    """The value a YAML text holds, read with the checks of :func:`parse_yaml` (any root); a limit or a check
    that fails is a ConfigError naming ``label``, bad YAML a ``yaml.YAMLError``."""
    loader = _CappedLoader(text, label)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        values = _expanded_size(label, node, {})
        if values > MAX_YAML_VALUES:
            raise ConfigError(label, "<yaml>", None, f"the file holds {values:,} values with its aliases expanded, "
                              f"more than the limit of {MAX_YAML_VALUES:,}",
                              "an alias repeated inside aliases multiplies; write the values out")
        _check_nodes(label, node)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def parse_yaml(label: str, text: str, what: str = "topology") -> dict[str, Any]:
    """The mapping a ``what`` file holds; bad YAML, a key given twice, another root, or a file beyond the caps
    (nesting, aliases, values with aliases expanded) is a ConfigError naming ``label``."""
    try:
        data = load_yaml(label, text)
    except yaml.YAMLError as err:
        raise ConfigError(label, "<yaml>", "", f"not valid YAML: {err}") from None
    if not isinstance(data, dict):
        raise ConfigError(label, "<root>", data, f"a {what} file must be a mapping")
    return data


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """Return ``base`` with ``over`` merged in; mappings merge, everything else replaces."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _identity(name_or_path: str | Path) -> str:
    """What a base chain compares to detect cycles: the resolved file path, or the preset name."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        return str(path.resolve())
    return str(name_or_path)


def load_raw(name_or_path: str | Path, _seen: tuple[str, ...] = ()) -> tuple[str, dict[str, Any]]:
    """Load a topology (following ``base`` chains) into a plain dict."""
    label, text = _resolve(name_or_path)
    data = parse_yaml(label, text)
    base = data.pop("base", None)
    if base is None:
        return label, data
    if not isinstance(base, str) or not base.strip():
        raise ConfigError(label, "base", base, "base names one preset or topology YAML",
                          f"e.g. base: {DEFAULT_TOPOLOGY}; presets: {', '.join(preset_names())}")
    base_arg: str | Path = base
    if base.endswith((".yaml", ".yml")) and Path(label).parent.joinpath(base).exists():
        base_arg = Path(label).parent / base
    seen = _seen + (_identity(name_or_path),)
    if _identity(base_arg) in seen:
        raise ConfigError(label, "base", base, "circular base chain")
    try:
        _, base_data = load_raw(base_arg, seen)
    except ConfigError as err:
        if err.file == str(base_arg) and err.key in ("<file>", "<preset>"):   # the base itself is missing
            raise ConfigError(label, "base", base, err.problem, err.hint) from None
        raise
    return label, deep_merge(base_data, data)


def _model_at(path: list[str], root: type[BaseModel] = SystemSpec) -> type[BaseModel] | None:
    """The pydantic model class found by walking ``path`` from ``root`` (default SystemSpec)."""
    model: Any = root
    for key in path:
        if key.isdigit():
            continue  # an item of a list of models
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            return None
        field = model.model_fields.get(key)
        if field is None:
            return None
        model = field.annotation
        while get_origin(model) is not None and not (isinstance(model, type) and issubclass(model, BaseModel)):
            inner = [a for a in get_args(model) if isinstance(a, type) and issubclass(a, BaseModel)]
            model = inner[0] if inner else None
            if model is None:
                return None
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _is_mapping_field(path: list[str]) -> bool:
    """Whether the field at ``path`` holds a free-form mapping (e.g. ``routing.weight_mm``)."""
    if not path:
        return False
    parent = _model_at(path[:-1])
    field = parent.model_fields.get(path[-1]) if parent is not None else None
    return field is not None and get_origin(field.annotation) is dict


def parse_override(text: str) -> tuple[str, Any]:
    """Parse ``key.path=value`` (the value is read as YAML: ``8``, ``torus_2d``, ``[0, 0]``)."""
    if "=" not in text:
        raise ConfigError("--set", text, text, "an override must look like key.path=value",
                          "example: --set sip.cube_mesh.w=8")
    key, _, value = text.partition("=")
    key = key.strip()
    try:
        return key, load_yaml(f"--set {text}", value)
    except yaml.YAMLError:
        return key, value
    except ConfigError as err:   # a number too large, a value nested too deep: named by its key
        where = key if err.key in ("<root>", "<yaml>") else f"{key}.{err.key}"
        raise ConfigError(err.file, where, err.value, err.problem, err.hint) from None


def parse_overrides(texts: list[str] | None,
                    flags: dict[str, str] | None = None) -> tuple[dict[str, Any], dict[str, str]]:
    """``--set`` texts -> ({key path: value}, {key path: what set it, as typed: ``--set fabric.ns_per_mm=.inf``}).
    A key given twice is refused, naming both (the last would silently win).  ``flags`` names the option behind
    a key that a command appended after the user's ``--set``s (``{"ipcq.n_slots": "--n-slots 4"}``), the last
    text with that key."""
    texts = [t.strip() for t in texts or []]
    parsed = [parse_override(t) for t in texts]
    last = {key: i for i, (key, _) in enumerate(parsed)}

    def name(i: int) -> str:
        key = parsed[i][0]
        return flags[key] if flags and key in flags and last[key] == i else f"--set {texts[i]}"

    out: dict[str, Any] = {}
    first: dict[str, int] = {}
    for i, (key, value) in enumerate(parsed):
        if key in first:
            raise ConfigError(name(i), key, None, f"the key is given twice, as {name(first[key])} and {name(i)}",
                              "give each key once (the last would silently win)")
        first[key] = i
        out[key] = value
    return out, {key: name(i) for key, i in first.items()}


def check_key_path(label: str, dotted: str) -> None:
    """Raise ``ConfigError`` (with did-you-mean) unless ``dotted`` names a key of the system schema."""
    parts = dotted.split(".")
    for depth, key in enumerate(parts):
        model = _model_at(parts[:depth])
        if key.isdigit() or (model is None and _is_mapping_field(parts[:depth])):
            continue
        if model is None:
            raise ConfigError(label, dotted, None, f"{'.'.join(parts[:depth])} has no sub-keys")
        if key not in model.model_fields:
            raise ConfigError(label, dotted, None, f"unknown key {key!r}", did_you_mean(key, list(model.model_fields)))


def apply_overrides(data: dict[str, Any], overrides: dict[str, Any], label: str = "--set") -> dict[str, Any]:
    """Set dotted key paths in a raw config dict; unknown paths get a did-you-mean hint."""
    out = copy.deepcopy(data)
    for dotted, value in overrides.items():
        parts = dotted.split(".")
        node = out
        for depth, key in enumerate(parts):
            model = _model_at(parts[:depth])
            known = list(model.model_fields) if model is not None else list(node)
            free = model is None and _is_mapping_field(parts[:depth])  # any key; validated later
            if not free and key not in known and key not in node:
                raise ConfigError(label, dotted, value, f"unknown key {key!r}", did_you_mean(key, known))
            if depth == len(parts) - 1:
                node[key] = value
            else:
                sub = parts[:depth + 1]
                if node.get(key) is None and (_model_at(sub) is not None or _is_mapping_field(sub)):
                    node[key] = {}  # a mapping the file leaves at its default
                if not isinstance(node.get(key), dict):
                    raise ConfigError(label, dotted, value, f"{'.'.join(parts[:depth + 1])} is not a mapping")
                node = node[key]
    return out


_TYPE_HINTS = {"int": "write a whole number, e.g. 4", "float": "write a number, e.g. 2.5",
               "bool": "write true or false", "string": "write a string",
               "list": "write a YAML list", "tuple": "write a YAML list, e.g. [1.5, 5.5]",
               "dict": "write a mapping, e.g. {w: 4, h: 4}", "model": "write a mapping, e.g. {w: 4, h: 4}"}


def _field_type(loc: list[str], root: type[BaseModel]) -> Any:
    """The base type of the field at ``loc`` (``int`` for a PositiveInt), or None."""
    parent = _model_at(loc[:-1], root)
    field = parent.model_fields.get(loc[-1]) if parent is not None and loc else None
    return None if field is None else field.annotation


def format_validation(label: str, err: ValidationError, root: type[BaseModel] = SystemSpec,
                      first: dict[str, Any] | None = None) -> ConfigError:
    """The first problem of ``err`` (or ``first``, one of ``err.errors()``) as a ConfigError naming file, key
    and value, with a hint.  An unknown key comes first: a misspelt ``cuont`` also leaves ``count`` missing,
    and the misspelling is what to fix."""
    errors = err.errors()
    chosen = first is not None
    first = first or next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    loc = [str(p) for p in first["loc"]]
    key = ".".join(loc)
    value = first.get("input")
    kind = first["type"]
    if kind == "extra_forbidden":
        parent = _model_at(loc[:-1], root)
        known = list(parent.model_fields) if parent is not None else []
        return ConfigError(label, key, value, f"unknown key {loc[-1]!r}", did_you_mean(loc[-1], known))
    if kind == "missing":
        return ConfigError(label, key, None, "required key is missing", "add it, or set a base preset")
    hint = ""
    if kind in ("greater_than", "greater_than_equal") and _field_type(loc, root) is int:
        hint = "a count must be a whole number >= 1"
    elif kind == "less_than_equal" and _field_type(loc, root) is int:
        hint = f"a count must be a whole number from 1 to {MAX_COUNT:,}"
    elif kind in ("greater_than", "greater_than_equal"):
        hint = "bandwidths must be > 0 GB/s; lengths and overheads >= 0 (units: GB/s, ns, mm)"
    elif kind == "finite_number":
        hint = "write a finite number; inf is allowed only where it means no serialization (link.<class>.bw_gbs)"
    elif kind == "literal_error":
        hint = first["msg"].replace("Input should be", "use")
        if key == "routing.policy" and value == "mm":
            hint = "'mm' is now 'balanced' (the previous default); the default is 'kernbench', the original router"
    elif kind.startswith(("int_", "float_", "bool_", "string_", "list_", "tuple_", "dict_", "model_")):
        hint = _TYPE_HINTS.get(kind.split("_")[0], "")
    more = 0 if chosen else len(errors) - 1
    if more:
        hint = (hint + "; " if hint else "") + f"{more} more problem(s) after this one"
    return ConfigError(label, key, value, first["msg"], hint)


def _is_pow2(n: int) -> bool:
    return n > 0 and (n & (n - 1)) == 0


def check_cross_fields(label: str, spec: SystemSpec) -> None:
    """Rules that span several keys (spec_fabric §1.3, §3.4)."""
    for key, n in (("hbm.pcs_per_pe", spec.hbm.pcs_per_pe), ("hbm.burst_bytes", spec.hbm.burst_bytes),
                   ("fabric.flit_bytes", spec.fabric.flit_bytes)):
        if not _is_pow2(n):
            lo = 1 << (n.bit_length() - 1)
            raise ConfigError(label, key, n, "must be a power of two", f"use {lo} or {lo * 2}")
    if spec.fabric.flit_bytes > spec.hbm.burst_bytes:
        raise ConfigError(label, "fabric.flit_bytes", spec.fabric.flit_bytes,
                          f"a flit may not exceed the HBM burst ({spec.hbm.burst_bytes} B)",
                          "set fabric.flit_bytes <= hbm.burst_bytes")
    sips = spec.sips
    if sips.topology in GRID_TOPOLOGIES:
        if (sips.w is None) != (sips.h is None):
            missing = "sips.h" if sips.h is None else "sips.w"
            raise ConfigError(label, missing, None, "sips.w and sips.h must be given together")
        if sips.w is not None and sips.w * sips.h != sips.count:
            raise ConfigError(label, "sips.w", sips.w,
                              f"sips.w * sips.h = {sips.w}*{sips.h} = {sips.w * sips.h} != sips.count = {sips.count}",
                              "choose w and h whose product is sips.count")
        side = round(sips.count**0.5)
        if sips.w is None and side * side != sips.count:
            raise ConfigError(label, "sips.count", sips.count,
                              f"non-square sips.count requires explicit sips.w/h for {sips.topology}",
                              _grid_hint(sips.count))
    elif sips.w is not None or sips.h is not None:
        raise ConfigError(label, "sips.w", sips.w, f"sips.w/h only apply to {', '.join(GRID_TOPOLOGIES)}",
                          "remove sips.w and sips.h")
    mesh = spec.sip.cube_mesh
    phys: set[str] = set()
    for ci, chip in enumerate(spec.sip.io_chiplets):
        for pi, port in enumerate(chip.cube_ports):
            key = f"sip.io_chiplets.{ci}.cube_ports.{pi}"
            x, y = port.cube
            if not (0 <= x < mesh.w and 0 <= y < mesh.h):
                raise ConfigError(label, f"{key}.cube", list(port.cube),
                                  f"cube is outside the {mesh.w}x{mesh.h} cube mesh")
            edge_ok = {"N": y == 0, "S": y == mesh.h - 1, "W": x == 0, "E": x == mesh.w - 1}[port.side]
            if not edge_ok:
                raise ConfigError(label, f"{key}.side", port.side,
                                  f"cube {list(port.cube)} has no free {port.side} shoreline port",
                                  "IO chiplets attach to the SIP edge")
            if port.phy in phys:
                raise ConfigError(label, f"{key}.phy", port.phy, "duplicate PHY name")
            phys.add(port.phy)
    n_pe = 4 * spec.cube.pe_layout.pe_per_corner
    if spec.hbm.slices_per_cube != n_pe:
        raise ConfigError(label, "hbm.slices_per_cube", spec.hbm.slices_per_cube,
                          f"every PE owns one HBM slice, and a cube has {n_pe} PEs (4 corners x pe_per_corner)",
                          f"set hbm.slices_per_cube={n_pe}")
    geo, pe = spec.cube.geometry, spec.cube.pe_layout
    span = 2 * pe.corner_inset_mm + 2 * (pe.pe_per_corner - 1) * pe.pe_pitch_mm
    if span >= geo.w_mm:
        raise ConfigError(label, "cube.geometry.w_mm", geo.w_mm,
                          f"PE columns need more than {span:g} mm", "widen the cube or reduce pe_pitch_mm")
    kinds = list(EDGE_KINDS)
    for kind in spec.routing.weight_mm:
        if kind not in kinds:
            raise ConfigError(label, f"routing.weight_mm.{kind}", kind, "unknown edge kind", did_you_mean(kind, kinds))
    for key in spec.uncalibrated:
        try:
            _lookup(spec, key)
        except KeyError:
            raise ConfigError(label, "uncalibrated", key, "names no parameter") from None


def _grid_hint(count: int) -> str:
    pairs = [(w, count // w) for w in range(1, count + 1) if count % w == 0 and 1 < w < count]
    if pairs:
        return "set sips.w and sips.h, e.g. " + " or ".join(f"w={w}, h={h}" for w, h in pairs[:2])
    return "use ring_1d for a prime SIP count, or set sips.w/h (e.g. w=1)"


def _lookup(spec: SystemSpec, dotted: str) -> Any:
    node: Any = spec
    for part in dotted.split("."):
        if isinstance(node, BaseModel) and part in type(node).model_fields:
            node = getattr(node, part)
        else:
            raise KeyError(dotted)
    return node


def lookup(spec: SystemSpec, dotted: str) -> Any:
    """Value at a dotted key path of a validated spec."""
    return _lookup(spec, dotted)


def validate(label: str, data: dict[str, Any]) -> SystemSpec:
    """Validate a raw dict; raise ``ConfigError`` on the first problem."""
    try:
        spec = SystemSpec.model_validate(data)
    except ValidationError as err:
        raise format_validation(label, err) from None
    check_cross_fields(label, spec)
    return spec


# ----------------------------------------------------------------------------------------------------------------
# Parameter sets (design §12): NAME.yaml = {name, values: {dotted key: value}, provenance: {...}}, in the user's
# folder or the packaged calibration/ (param_set_dirs).

def user_param_set_dir() -> Path:
    """The user's parameter-set folder: ``$KBFAST_CALIBRATION_DIR`` when set, else
    ``$XDG_CONFIG_HOME/kbfast/calibration`` (``~/.config/kbfast/calibration``); ``kbfast calibrate --save``
    writes there, never into the package (docs/calibration.md, "Parameter sets")."""
    if os.environ.get(PARAM_SET_DIR_ENV):
        return Path(os.environ[PARAM_SET_DIR_ENV])
    config = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config) / "kbfast" / "calibration"


def param_set_dirs() -> list[Path]:
    """Folders holding parameter sets, searched in order: the user's (:func:`user_param_set_dir`), then the
    packaged ``calibration/`` folder (``kbfast.calibration``, the sets shipped with kbfast)."""
    return [user_param_set_dir(), Path(str(resources.files("kbfast.calibration")))]


def param_sets_stamp() -> tuple:
    """What the saved sets' contents depend on: the folders searched and each set file's mtime and size.
    Caches of loaded systems compare it to notice a set that was written or edited (cheap: a few stats)."""
    return tuple((str(d), tuple(sorted((f.name, f.stat().st_mtime_ns, f.stat().st_size) for f in d.glob("*.yaml"))))
                 for d in param_set_dirs() if d.is_dir())


class FileCaches:
    """``functools.lru_cache``s of what was read from topology and parameter-set files, forgotten when a saved
    set is written or edited (a notebook, or a long-lived worker, that saves a set between two sweeps)."""

    def __init__(self, *caches: Any) -> None:
        self.caches = caches
        self.stamp: tuple | None = None

    def refresh(self) -> None:
        stamp = param_sets_stamp()
        if stamp != self.stamp:
            self.stamp = stamp
            for cached in self.caches:
                cached.cache_clear()


def param_set_names() -> list[str]:
    """Names of the saved parameter sets (``*.yaml`` in :func:`param_set_dirs`)."""
    return sorted({p.stem for d in param_set_dirs() if d.is_dir() for p in d.glob("*.yaml")})


def check_param_set_name(label: str, key: str, name: object) -> str:
    """A set name is a plain file stem: letters, digits, ``.``, ``_``, ``-``."""
    if not (isinstance(name, str) and _SET_NAME.fullmatch(name)):
        raise ConfigError(label, key, name, "a parameter set name is letters, digits, '.', '_' and '-'",
                          "e.g. fit-2026-06")
    return name


def param_set_path(name: str) -> Path | None:
    """The file of parameter set ``name``, or None when no folder holds one."""
    if not (isinstance(name, str) and _SET_NAME.fullmatch(name)):
        return None
    return next((d / f"{name}.yaml" for d in param_set_dirs() if (d / f"{name}.yaml").is_file()), None)


def read_param_set(path: Path) -> dict[str, Any]:
    """The ``values`` mapping of a parameter set file: dotted key -> value (checked against the schema)."""
    label = str(path)
    data = parse_yaml(label, read_text(path, label))
    values = data.get("values")
    if not isinstance(values, dict) or not values:
        raise ConfigError(label, "values", values, "a parameter set needs a mapping of dotted key -> value",
                          "write values: {fabric.ns_per_mm: 0.0}")
    for key in values:
        check_key_path(label, str(key))
        if str(key) == "param_set":
            raise ConfigError(label, "values.param_set", values[key], "a parameter set cannot name another set")
    return dict(values)


def applied_param_set(label: str, data: dict[str, Any], overrides: dict[str, Any] | None = None,
                      override_label: str = "--set") -> str | None:
    """The saved set that applies to a raw topology: ``--set param_set`` if given, else the topology's own
    ``param_set``; None when no folder holds ``NAME.yaml``.  A name given by ``--set`` must be a saved
    set or the topology's own label, else ``ConfigError`` lists the sets."""
    own = data.get("param_set")
    chosen = (overrides or {}).get("param_set", own)
    path = param_set_path(chosen) if isinstance(chosen, str) else None
    if path is None and chosen != own:
        names = param_set_names()
        hint = (f"saved sets: {', '.join(names)}; " if names else "no saved sets; ") + \
            f"the topology's own label: {own!r}; save one with kbfast calibrate --fit ... --save NAME"
        raise ConfigError(override_label, "param_set", chosen,
                          f"no parameter set {chosen}.yaml in {', '.join(map(str, param_set_dirs()))}", hint)
    return chosen if path is not None else None


def resolve(label: str, data: dict[str, Any], overrides: dict[str, Any] | None = None,
            override_label: str = "--set", flags: dict[str, str] | None = None) -> SystemSpec:
    """Raw topology -> spec: the saved parameter set (if any), then the overrides, then validation.  A value an
    override gave that fails is blamed on ``{override_label} key=value``, or on ``flags[key]`` (the flag that
    set it, e.g. ``--n-slots 0``)."""
    name = applied_param_set(label, data, overrides, override_label)
    layers: list[tuple[str, dict[str, Any]]] = []   # (where the values come from, the values), in order
    if name is not None:
        path = param_set_path(name)
        layers.append((str(path), read_param_set(path)))
    if overrides:
        layers.append((override_label, overrides))
    raw = data
    for source, values in layers:
        try:
            data = apply_overrides(data, values, label=source)
        except ConfigError as err:   # an unknown key: named as the user gave it (--set sips.cuont=4)
            if source != override_label or err.key not in (flags or {}):
                raise
            raise ConfigError(flags[err.key], err.key, None, err.problem, err.hint) from None
    try:
        return validate(label, data)
    except ConfigError as err:
        raise blame(err, label, layers, flags, raw) from None


def override_error(label: str, data: dict[str, Any], overrides: dict[str, Any]) -> ConfigError | None:
    """The first of ``overrides`` whose own value the schema refuses (its type or its limits) when applied to the
    raw topology ``data`` of file ``label``, as a ConfigError keyed by the failing path (a ``param_set`` that
    names no saved set included); None when every value passes.  Rules that tie keys together, and keys left
    missing, are not judged: other overrides may still set them."""
    try:
        applied_param_set(label, data, overrides, label)
        raw = apply_overrides(data, overrides, label)
    except ConfigError as err:
        return err
    try:
        SystemSpec.model_validate(raw)
    except ValidationError as err:
        for e in err.errors():
            loc = ".".join(str(p) for p in e["loc"])
            if e["type"] != "missing" and any(loc == k or loc.startswith(k + ".") for k in overrides):
                return format_validation(label, err, first=e)
    return None


def _value_text(value: Any) -> str:
    """A value as the user would write it after ``key=``."""
    return value if isinstance(value, str) else json.dumps(value, default=str)


def blame(err: ConfigError, label: str, layers: list[tuple[str, dict[str, Any]]],
          flags: dict[str, str] | None = None, raw: dict[str, Any] | None = None) -> ConfigError:
    """``err`` (raised for file ``label``) blamed on the override that set its key, when one did: the last of
    ``layers`` ((source, {dotted key: value}), in the order applied) whose key is, holds or is inside the key
    that failed.  ``--set sips.count=0`` is then named as ``--set sips.count=0``, not as the topology file.
    A rule across keys can fail at a key no override set (``--set sips.topology=torus_2d`` makes the file's
    ``sips.count: 6`` non-square): given the file's ``raw`` values, when they validate alone, the override after
    which they stop validating is named."""
    if err.file != label:
        return err

    def named(source: str, dotted: str, value: Any) -> ConfigError:
        name = (flags or {}).get(dotted) if source == layers[-1][0] else None
        return ConfigError(name or f"{source} {dotted}={_value_text(value)}", err.key, err.value, err.problem,
                           err.hint)

    for source, values in reversed(layers):
        for dotted, value in values.items():
            if err.key == dotted or err.key.startswith(dotted + ".") or dotted.startswith(err.key + "."):
                return named(source, dotted, value)
    if raw is None or not layers or not _valid(label, raw):
        return err
    for source, values in layers:
        for dotted, value in values.items():
            raw = apply_overrides(raw, {dotted: value}, label=source)
            if not _valid(label, raw):
                return named(source, dotted, value)
    return err


def _valid(label: str, data: dict[str, Any]) -> bool:
    """Whether a raw topology validates."""
    try:
        validate(label, data)
    except ConfigError:
        return False
    return True


def load_system(name_or_path: str | Path = DEFAULT_TOPOLOGY, overrides: dict[str, Any] | None = None,
                flags: dict[str, str] | None = None) -> SystemSpec:
    """Load a preset or YAML file, apply its parameter set and the overrides, validate.

    >>> spec = load_system("ahbm_2sip", {"fabric.ns_per_mm": 0.1})
    >>> spec.sips.count, spec.fabric.ns_per_mm
    (2, 0.1)
    """
    label, data = load_raw(name_or_path)
    return resolve(label, data, overrides, flags=flags)
