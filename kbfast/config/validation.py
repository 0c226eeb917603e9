"""Validate a raw system description against the schema, and word what fails: ``ConfigError`` naming the file,
the key path and the value, with a hint (design §10).  Also the rules that span several keys, and the walk of a
dotted key path through the schema's models."""

from __future__ import annotations

import re
from typing import Any, get_args, get_origin

from pydantic import BaseModel, ValidationError

from kbfast.config.schema import EDGE_KINDS, GRID_TOPOLOGIES, MAX_COUNT, SystemSpec
from kbfast.errors import ConfigError, closest, did_you_mean


def model_at(path: list[str], root: type[BaseModel] = SystemSpec) -> type[BaseModel] | None:
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


def is_mapping_field(path: list[str]) -> bool:
    """Whether the field at ``path`` holds a free-form mapping (e.g. ``routing.weight_mm``)."""
    if not path:
        return False
    parent = model_at(path[:-1])
    field = parent.model_fields.get(path[-1]) if parent is not None else None
    return field is not None and get_origin(field.annotation) is dict


_TYPE_HINTS = {"int": "write a whole number, e.g. 4", "float": "write a number, e.g. 2.5",
               "bool": "write true or false", "string": "write a string",
               "list": "write a YAML list", "tuple": "write a YAML list, e.g. [1.5, 5.5]",
               "dict": "write a mapping, e.g. {w: 4, h: 4}", "model": "write a mapping, e.g. {w: 4, h: 4}"}


def _field_type(loc: list[str], root: type[BaseModel]) -> Any:
    """The base type of the field at ``loc`` (``int`` for a PositiveInt), or None."""
    parent = model_at(loc[:-1], root)
    field = parent.model_fields.get(loc[-1]) if parent is not None and loc else None
    return None if field is None else field.annotation


# pydantic's wording of a problem -> kbfast's ("sips.count: not a whole number (got 'two')"), by error type
_PLAIN = {"int_parsing": "not a whole number", "int_from_float": "not a whole number", "int_type": "not a whole number",
          "float_parsing": "not a number", "float_type": "not a number", "bool_parsing": "not true or false",
          "bool_type": "not true or false", "string_type": "not text", "list_type": "not a list",
          "tuple_type": "not a list", "dict_type": "not a mapping", "model_type": "not a mapping",
          "greater_than": "must be greater than {gt}", "greater_than_equal": "must be {ge} or more",
          "less_than": "must be less than {lt}", "less_than_equal": "must be at most {le:,}"}


# pydantic's wording as text -> kbfast's, for a message without its error type (typer's conversions)
_PLAIN_WORDS = (("Input should be a valid integer, unable to parse string as an integer", "not a whole number"),
                ("Input should be a valid integer, got a number with a fractional part", "not a whole number"),
                ("Input should be a valid number, unable to parse string as a number", "not a number"),
                ("Value error, ", ""), ("Input should be ", "must be "))


def plain_message(msg: str) -> str:
    """A pydantic message in plain words, by its text: ``not a whole number``, ``must be …``."""
    for old, new in _PLAIN_WORDS:
        msg = msg.replace(old, new)
    return msg


def plain_problem(error: dict[str, Any]) -> str:
    """A pydantic error's problem in plain words: ``not a whole number``, ``must be greater than 0``, ``must be
    one of 'ring_1d', ...``; kbfast's own checks (kbfast.config.schema) are worded already (``must be a whole
    number, not true/false``)."""
    kind, msg, ctx = error["type"], error["msg"], error.get("ctx") or {}
    if kind in _PLAIN and "true/false" not in msg:
        try:
            return _PLAIN[kind].format(**ctx)
        except (KeyError, ValueError):      # a bound of another type: pydantic's own words
            pass
    if kind == "literal_error":
        return "must be one of " + msg.removeprefix("Input should be ")
    return plain_message(msg)


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
        parent = model_at(loc[:-1], root)
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
        choices = [c.strip(" '") for c in re.split(r",| or ", str((first.get("ctx") or {}).get("expected", "")))]
        hint = closest(str(value), [c for c in choices if c])
        if key == "routing.policy" and value == "mm":
            hint = "'mm' is now 'balanced' (the previous default); the default is 'kernbench', the original router"
    elif kind.startswith(("int_", "float_", "bool_", "string_", "list_", "tuple_", "dict_", "model_")):
        hint = _TYPE_HINTS.get(kind.split("_")[0], "")
    more = 0 if chosen else len(errors) - 1
    if more:
        hint = (hint + "; " if hint else "") + f"{more} more problem{'s' if more > 1 else ''} after this one"
    return ConfigError(label, key, value, plain_problem(first), hint)


def _is_pow2(n: int) -> bool:
    """Whether ``n`` is a power of two (1, 2, 4, ...)."""
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
            lookup(spec, key)
        except KeyError:
            raise ConfigError(label, "uncalibrated", key, "names no parameter") from None


def _grid_hint(count: int) -> str:
    """How to give ``sips.w`` and ``sips.h`` for a SIP count that is not a square."""
    pairs = [(w, count // w) for w in range(1, count + 1) if count % w == 0 and 1 < w < count]
    if pairs:
        return "set sips.w and sips.h, e.g. " + " or ".join(f"w={w}, h={h}" for w, h in pairs[:2])
    return "use ring_1d for a prime SIP count, or set sips.w/h (e.g. w=1)"


def lookup(spec: SystemSpec, dotted: str) -> Any:
    """Value at a dotted key path of a validated spec; ``KeyError`` when the path names no parameter."""
    node: Any = spec
    for part in dotted.split("."):
        if isinstance(node, BaseModel) and part in type(node).model_fields:
            node = getattr(node, part)
        else:
            raise KeyError(dotted)
    return node


def validate(label: str, data: dict[str, Any]) -> SystemSpec:
    """Validate a raw dict; raise ``ConfigError`` on the first problem."""
    try:
        spec = SystemSpec.model_validate(data)
    except ValidationError as err:
        raise format_validation(label, err) from None
    check_cross_fields(label, spec)
    return spec
