"""Fitted parameter sets: their files, names and documents (kbfast.calibrate)."""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path
from typing import Any

import yaml

from kbfast import __version__
from kbfast.calibrate.fits import FitResult
from kbfast.calibrate.systems import reference_csv
from kbfast.config.loader import (PARAM_SET_DIR_ENV, check_param_set_name, load_raw, param_set_path, preset_names,
                                  user_param_set_dir)
from kbfast.config.schema import SystemSpec
from kbfast.errors import ConfigError, KbfastError

def topology_labels(topology: str | Path | None = None) -> dict[str, list[str]]:
    """``param_set`` label -> the topologies that name it: every preset, and ``topology`` (a preset name or a
    YAML file) when given."""
    names = [*preset_names(), *([str(topology)] if topology is not None else [])]
    out: dict[str, list[str]] = {}
    for name in dict.fromkeys(names):
        label = load_raw(name)[1].get("param_set")
        if isinstance(label, str):
            out.setdefault(label, []).append(name)
    return out


def param_set_file(name: str, overwrite: bool = False, topology: str | Path | None = None) -> Path:
    """Where ``--save NAME`` writes: ``NAME.yaml`` in the user's parameter-set folder (``$KBFAST_CALIBRATION_DIR``
    or ``~/.config/kbfast/calibration``, :func:`kbfast.config.loader.user_param_set_dir`), checked before any
    fit runs: a plain name; a folder that is one and can be written (created when missing); and, unless
    ``overwrite``, neither the name of a saved set (in any folder searched) nor a label that a topology's
    ``param_set`` uses (the presets' and ``topology``'s): a set under that label would change every later
    run of those topologies."""
    check_param_set_name("--save", "param_set", name)
    folder = user_param_set_dir()
    hint = f"set {PARAM_SET_DIR_ENV} to a writable folder"
    if folder.exists() and not folder.is_dir():
        raise ConfigError("--save", "param_set", name, f"{folder} is a file, not a parameter-set folder", hint)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".kbfast-write-test-"):
            pass
    except OSError as err:
        raise ConfigError("--save", "param_set", name, f"cannot write parameter sets to {folder} "
                          f"({err.strerror or err})", hint) from None
    if not overwrite:
        users = topology_labels(topology).get(name)
        if users:
            raise ConfigError("--save", "param_set", name,
                              f"it is the param_set label of {', '.join(users)}: saved under it, the fitted "
                              "values would change every later run of them",
                              "give another name and load it with --set param_set=NAME; --overwrite saves "
                              "under the label all the same")
        existing = param_set_path(name)
        if existing is not None:
            raise ConfigError("--save", "param_set", name, f"a parameter set of that name exists: {existing}",
                              "give another name, or add --overwrite to replace it")
    return folder / f"{name}.yaml"


def param_set_document(name: str, result: FitResult, spec: SystemSpec, topology: str,
                       overrides: dict[str, Any]) -> dict[str, Any]:
    """The YAML document of a saved set: the values of the system the fit ran on (the ``--set`` overrides, then
    the fitted values) and their provenance (no clock time: the same fit writes the same file).  The
    overrides are values of the set because the fitted values hold only with them: a set fitted on the
    14 mm floor plan brings that floor plan along (docs/calibration.md, "Parameter sets")."""
    csv = reference_csv()
    given = {k: v for k, v in overrides.items() if k != "param_set"}
    return {
        "name": name,
        "description": f"fitted by kbfast calibrate on {topology}"
                       + (f" with {', '.join(f'{k}={v}' for k, v in given.items())}" if given else ""),
        "values": {**given, **result.fitted_values},
        "provenance": {
            "kbfast_version": __version__,
            "topology": topology,
            "topology_param_set": spec.param_set,
            "overrides": {k: v for k, v in overrides.items()},
            "reference": {"file": csv.name, "sha256": hashlib.sha256(csv.read_bytes()).hexdigest()},
            "rows": list(result.cases),
            "mode": "fast",
            "method": "scipy.optimize.least_squares trf on u = (p - lo) / (hi - lo), bounded forward differences",
            "parameters": {p.key: {"start": p.start, "lo": p.lo, "hi": p.hi, "step": p.step,
                                   "fitted": p.key in result.fitted, "value": result.values[p.key]}
                           for p in result.params},
            "residuals": {c: {"reference": result.reference[c], "before": result.before[c], "after": result.after[c]}
                          for c in result.cases},
            "sensitivity": result.sensitivity,
        },
    }


def save_param_set(name: str, result: FitResult, spec: SystemSpec, topology: str,
                   overrides: dict[str, Any], overwrite: bool = False) -> Path:
    """Write ``NAME.yaml`` in the user's parameter-set folder (:func:`param_set_file`, see
    :func:`param_set_document`); a topology loads it by ``param_set``."""
    if not result.fitted:
        raise KbfastError(f"--save {name}: no parameter was fitted (none moves a row), nothing to save")
    path = param_set_file(name, overwrite, topology)
    doc = param_set_document(name, result, spec, topology, overrides)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("# kbfast parameter set, written by `kbfast calibrate --fit ... --save`\n"
                        + yaml.safe_dump(doc, sort_keys=False, default_flow_style=False))
    except OSError as err:
        raise ConfigError("--save", "param_set", name, f"cannot write {path}: {err.strerror}",
                          f"set {PARAM_SET_DIR_ENV} to a writable folder") from None
    return path
