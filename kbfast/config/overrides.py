"""``--set key.path=value`` overrides: parse them, apply them to a raw description (unknown keys refused with a
did-you-mean), and blame a failure on the override that caused it (``--set sips.count=0``, not the file)."""

from __future__ import annotations

import copy
import json
from typing import Any

import yaml
from kbfast.config.validation import is_mapping_field, model_at, validate
from kbfast.config.yaml_reading import load_yaml
from kbfast.errors import ConfigError, did_you_mean


def parse_override(text: str) -> tuple[str, Any]:
    """Parse ``key.path=value`` (the value is read as YAML: ``8``, ``torus_2d``, ``[0, 0]``)."""
    key, eq, value = text.partition("=")
    key = key.strip()
    if not eq or not key or any(not part for part in key.split(".")):     # no =, or an empty key or part
        raise ConfigError("--set", text, text, "an override must look like key.path=value",
                          "example: --set sip.cube_mesh.w=8")
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
        model = model_at(parts[:depth])
        if key.isdigit() or (model is None and is_mapping_field(parts[:depth])):
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
            model = model_at(parts[:depth])
            known = list(model.model_fields) if model is not None else list(node)
            free = model is None and is_mapping_field(parts[:depth])  # any key; validated later
            if not free and key not in known and key not in node:
                raise ConfigError(label, dotted, value, f"unknown key {key!r}", did_you_mean(key, known))
            if depth == len(parts) - 1:
                node[key] = value
            else:
                sub = parts[:depth + 1]
                if node.get(key) is None and (model_at(sub) is not None or is_mapping_field(sub)):
                    node[key] = {}  # a mapping the file leaves at its default
                if not isinstance(node.get(key), dict):
                    raise ConfigError(label, dotted, value, f"{'.'.join(parts[:depth + 1])} is not a mapping")
                node = node[key]
    return out


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
