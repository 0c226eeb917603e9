"""The workload registry (kbfast/measure/registry.py): every kind builds from its defaults, the sweep
spec accepts exactly its fields, and the CLI's defaults are the registry's."""

from __future__ import annotations

import pytest

from kbfast.config import load_system
from kbfast.config.units import parse_size
from kbfast.errors import ConfigError
from kbfast.sweep.spec import parse_spec
from kbfast.topology.builder import build_tables
from kbfast.topology.routing import Router
from kbfast.measure.registry import WORKLOADS, build


@pytest.mark.parametrize("kind", list(WORKLOADS))
def test_every_kind_builds_a_program_from_its_defaults(kind: str) -> None:
    t = build_tables(load_system("ring6") if kind == "allreduce" else load_system())
    fields = {**WORKLOADS[kind].fields, "kind": kind}
    if "size" in fields:
        fields["size"] = parse_size(fields["size"])
    built = build(t, Router(t), fields)
    assert built.program.n_ops > 0
    # measured from a launch, as a probe case, as a GEMM or as a model step: exactly one
    assert [built.collective, built.case, built.gemm, built.model].count(None) == 3
    assert WORKLOADS[kind].batched <= (built.collective is not None or built.gemm is not None or built.model is not None)


@pytest.mark.parametrize("kind", list(WORKLOADS))
def test_a_sweep_spec_takes_the_registry_fields_and_defaults(kind: str) -> None:
    spec = parse_spec({"name": "t", "workload": {"kind": kind}, "axes": []}, "t.yaml")
    assert set(spec.workload) == {"kind", *WORKLOADS[kind].fields}
    with pytest.raises(ConfigError, match="unknown"):
        parse_spec({"name": "t", "workload": {"kind": kind, "colour": 1}, "axes": []}, "t.yaml")


@pytest.mark.parametrize("kind", [k for k, w in WORKLOADS.items() if w.bool_fields])
def test_boolean_fields_refuse_other_values(kind: str) -> None:
    field = WORKLOADS[kind].bool_fields[0]
    with pytest.raises(ConfigError, match="true or false"):
        parse_spec({"name": "t", "workload": {"kind": kind, field: "yes"}, "axes": []}, "t.yaml")
