"""Parameter sets (design §12): ``NAME.yaml`` = {name, values: {dotted key: value}, provenance: {...}}, in the
user's folder or the packaged ``calibration/`` (:func:`param_set_dirs`); written by ``kbfast calibrate --save``,
applied by a topology's ``param_set`` or ``--set param_set=NAME``."""

from __future__ import annotations

import os
import re
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from kbfast.config.overrides import check_key_path
from kbfast.config.yaml_reading import parse_yaml, read_text
from kbfast.errors import ConfigError

PARAM_SET_DIR_ENV = "KBFAST_CALIBRATION_DIR"   # the user's parameter-set folder (user_param_set_dir)
_SET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


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
        """Clear every cache when the saved sets changed since the last call (:func:`param_sets_stamp`)."""
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
    """The ``values`` mapping of a parameter set file: dotted key -> value (checked against the schema).  Read
    once per version of the file (its path, mtime and size): a sweep resolves one system per distinct set of
    overrides, and the provenance makes a set slow to parse."""
    try:
        st = path.stat()
    except OSError:                  # read_text names the file and the error
        return dict(_read_values.__wrapped__(str(path), 0, 0))
    return dict(_read_values(str(path), st.st_mtime_ns, st.st_size))


@lru_cache(maxsize=32)
def _read_values(label: str, mtime_ns: int, size: int) -> dict[str, Any]:
    path = Path(label)
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
