"""Load, override and validate system descriptions (design §10, §12).

A topology YAML may name a ``base`` preset; its keys are deep-merged over the
base.  When its ``param_set`` (or ``--set param_set=NAME``) names a saved
parameter set ``NAME.yaml`` in a parameter-set folder (:func:`param_set_dirs`;
written by ``kbfast calibrate --save``), the set's values are applied next.
``--set key.path=value`` overrides are applied last.  Every problem becomes a ``ConfigError`` naming
the file, the key path and the value.

The steps live by job: :mod:`~kbfast.config.yaml_reading` (safe YAML), :mod:`~kbfast.config.param_sets`,
:mod:`~kbfast.config.overrides` and :mod:`~kbfast.config.validation` (the schema, the rules across keys and the
wording of what fails).  This module chains them, and re-exports what commands and sweeps import.
"""

from __future__ import annotations

import copy
import re
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from kbfast.config.overrides import (apply_overrides, blame, check_key_path, parse_override,  # noqa: F401
                                     parse_overrides)
from kbfast.config.param_sets import (PARAM_SET_DIR_ENV, FileCaches, applied_param_set,  # noqa: F401
                                      check_param_set_name, param_set_dirs, param_set_names, param_set_path,
                                      read_param_set, user_param_set_dir)
from kbfast.config.schema import SystemSpec
from kbfast.config.validation import format_validation, lookup, validate  # noqa: F401
from kbfast.config.yaml_reading import parse_yaml, read_text  # noqa: F401
from kbfast.errors import ConfigError, did_you_mean

DEFAULT_TOPOLOGY = "ahbm_2sip"


def preset_names() -> list[str]:
    """Names of the topology presets shipped with kbfast, numbers in order (torus6 before torus16)."""
    folder = resources.files("kbfast.topologies")
    names = [p.name[:-5] for p in folder.iterdir() if p.name.endswith(".yaml")]
    return sorted(names, key=lambda n: [int(x) if x.isdigit() else x for x in re.split(r"(\d+)", n)])


def is_path(name_or_path: str | Path) -> bool:
    """Whether a topology or model argument names a file rather than a bundled name: a YAML name, a folder in
    it (``/nonexist``, ``./t``), or anything that exists."""
    path = Path(name_or_path)
    return path.suffix in (".yaml", ".yml") or "/" in str(name_or_path) or path.exists()


def no_file(path: Path, what: str) -> str:
    """Why ``path``, given for a ``what`` file, cannot be read as one: a folder, or nothing there."""
    return f"a folder, not a {what} file" if path.is_dir() else f"no such {what} file"


def _resolve(name_or_path: str | Path) -> tuple[str, str]:
    """Return (label, text) for a preset name or a YAML path."""
    path = Path(name_or_path)
    if is_path(name_or_path):
        if not path.is_file():
            raise ConfigError(str(path), "<file>", str(path), no_file(path, "topology"),
                              f"give a topology YAML, or a preset: {', '.join(preset_names())}")
        return str(path), read_text(path, str(path))
    name = str(name_or_path)
    if name not in preset_names():
        raise ConfigError(name, "<preset>", name, "unknown topology preset",
                          did_you_mean(name, preset_names(), "presets"))
    return f"{name}.yaml", read_text(resources.files("kbfast.topologies").joinpath(f"{name}.yaml"), f"{name}.yaml")


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
    if is_path(name_or_path):
        return str(Path(name_or_path).resolve())
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


def load_system(name_or_path: str | Path = DEFAULT_TOPOLOGY, overrides: dict[str, Any] | None = None,
                flags: dict[str, str] | None = None) -> SystemSpec:
    """Load a preset or YAML file, apply its parameter set and the overrides, validate.

    >>> spec = load_system("ahbm_2sip", {"fabric.ns_per_mm": 0.1})
    >>> spec.sips.count, spec.fabric.ns_per_mm
    (2, 0.1)
    """
    label, data = load_raw(name_or_path)
    return resolve(label, data, overrides, flags=flags)
