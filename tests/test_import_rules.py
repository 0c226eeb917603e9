"""The import rules of docs/README.md ("Architecture"), read from the source's own import statements.

Every ``import kbfast...`` and ``from kbfast... import`` in a package module, at any depth (function-level
imports included), must name a package the importing layer may use.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "kbfast"

BASE = {"kbfast.errors", "kbfast.config", "kbfast.topology", "kbfast.ir"}
EVALUATORS = {"kbfast.sim", "kbfast.fast", "kbfast.exact"}
# what the report may read of the measuring layer: the registry's kind descriptions and the pure definitions
# of a row (never a module that evaluates)
MEASURE_DEFINITIONS = {"kbfast.measure.registry", "kbfast.measure.kind", "kbfast.measure.rows", "kbfast.measure.methods"}
# the modules of the public API (kbfast.__init__), which the command line may call as any user does
PUBLIC_API = {"kbfast.config", "kbfast.topology", "kbfast.workloads", "kbfast.fast.evaluate", "kbfast.exact",
              "kbfast.measure.compare"}
# what the command line uses of the measuring layer: the registry and what presents or prepares a
# measurement (docs/README.md)
CLI_MEASURE = {"kbfast.measure.registry", "kbfast.measure.rows", "kbfast.measure.methods", "kbfast.measure.warmup",
               "kbfast.measure.bottleneck", "kbfast.measure.routing_compare", "kbfast.measure.probe_table",
               "kbfast.measure.sensitivity"}      # measures through the registry on derived systems
# layer -> the kbfast packages (besides itself) it may import; every package and root module is named
RULES = {
    "kbfast.errors": set(),
    "kbfast.config": {"kbfast.errors"},                      # system descriptions, model files, memory limits
    "kbfast.topology": {"kbfast.errors", "kbfast.config"},
    "kbfast.ir": {"kbfast.errors", "kbfast.config", "kbfast.topology"},   # the Program IR and GEMM tiling
    "kbfast.sim": BASE,
    "kbfast.fast": BASE | {"kbfast.sim"},
    "kbfast.exact": BASE | {"kbfast.sim"},
    "kbfast.workloads": BASE,
    "kbfast.reference": BASE | {"kbfast.sim", "kbfast.exact"},            # checks exact mode
    "kbfast.measure": BASE | EVALUATORS | {"kbfast.workloads"},
    "kbfast.report": BASE | {"kbfast.workloads"} | MEASURE_DEFINITIONS,   # never runs an evaluator
    "kbfast.sweep": BASE | {"kbfast.workloads", "kbfast.measure.registry", "kbfast.measure.rows",
                            "kbfast.report"},       # measures through the registry only
    "kbfast.calibrate": BASE | {"kbfast.workloads", "kbfast.report", "kbfast.measure.registry",   # through the
                                "kbfast.measure.methods", "kbfast.measure.probe_table"},        # registry only
    # the model step through the registry; kernel rows time an evaluator or a kernel by name on purpose: the
    # batched all-reduce points (kbfast.measure.collective), the batched max-plus GEMMs (kbfast.measure.gemm)
    # and one exact model layer (kbfast.measure.model)
    "kbfast.bench": BASE | EVALUATORS | {"kbfast.workloads", "kbfast.measure.registry", "kbfast.measure.collective",
                                         "kbfast.measure.gemm", "kbfast.measure.model", "kbfast.report",
                                         "kbfast.sweep", "kbfast.reference", "kbfast.serving", "kbfast.search"},
    # a serving run: model steps through kbfast.measure.model, its loop and figures (docs/serving.md)
    "kbfast.serving": BASE | {"kbfast.workloads", "kbfast.measure.model", "kbfast.report", "kbfast.sweep"},
    # the search: candidates compiled through kbfast.measure.model, evaluated as a sweep (docs/search.md)
    "kbfast.search": BASE | {"kbfast.workloads", "kbfast.measure.model", "kbfast.report", "kbfast.sweep"},
    "kbfast.cli": BASE | PUBLIC_API | CLI_MEASURE | {"kbfast.report", "kbfast.sweep", "kbfast.calibrate",
                                                     "kbfast.bench", "kbfast.serving", "kbfast.search"},
    "kbfast.__main__": {"kbfast.cli"},
    "kbfast": set(),                                         # the public API names its modules lazily
}


def layer_of(module: str) -> str | None:
    """The layer of ``module``: its package (or itself, for a root module); None when no rule names it."""
    for layer in RULES:
        if module == layer or (layer != "kbfast" and module.startswith(layer + ".")):
            return layer
    return None


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def kbfast_imports(path: Path) -> list[tuple[int, str]]:
    """(line, imported module) for every kbfast import in ``path``, including ``from kbfast import x``."""
    out = []
    tree = ast.parse(path.read_text(), str(path))
    type_only = {id(n) for guard in ast.walk(tree) if isinstance(guard, ast.If) and _is_type_checking(guard.test)
                 for stmt in guard.body for n in ast.walk(stmt)}
    for node in ast.walk(tree):
        if id(node) in type_only:        # ``if TYPE_CHECKING:`` imports name types only, never run
            continue
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "kbfast"]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "kbfast":
                out += [(node.lineno, f"kbfast.{a.name}") for a in node.names]
            elif node.module.startswith("kbfast."):
                out.append((node.lineno, node.module))
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def violations() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        me = module_name(path)
        layer = layer_of(me)
        if layer is None:
            found.append(f"{path.relative_to(PACKAGE.parent)}: {me} is in no layer: name it in RULES")
            continue
        allowed = RULES[layer] | ({layer} if layer != "kbfast" else set())
        for line, target in kbfast_imports(path):
            if target == "kbfast.__version__":
                continue
            if not any(target == a or target.startswith(a + ".") for a in allowed):
                found.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {me} imports {target} "
                             f"({layer} may import only {', '.join(sorted(allowed))})")
    return found


def test_every_layer_imports_only_what_its_rule_allows() -> None:
    assert violations() == []


def test_the_rules_see_function_level_imports(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text("def g():\n    from kbfast.exact import run_exact\n    import kbfast.workloads.probe_catalogue\n")
    assert kbfast_imports(f) == [(2, "kbfast.exact"), (3, "kbfast.workloads.probe_catalogue")]


@pytest.mark.parametrize("module, layer", [("kbfast.fast.rescale", "kbfast.fast"), ("kbfast.sim", "kbfast.sim"),
                                           ("kbfast.simulate", None), ("kbfast.cli.run", "kbfast.cli"),
                                           ("kbfast", "kbfast"), ("kbfast.measure.rows", "kbfast.measure")])
def test_layers_are_matched_by_package_not_by_prefix(module: str, layer: str | None) -> None:
    assert layer_of(module) == layer


def test_type_only_imports_are_not_dependencies(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from kbfast.exact import ExactResult\n"
                 "from kbfast.ir import Op\n")
    assert kbfast_imports(f) == [(4, "kbfast.ir")]


def test_the_package_root_holds_only_the_api_the_entry_point_and_the_errors() -> None:
    """Every other module lives in the package of its layer (docs/README.md "Architecture")."""
    assert sorted(p.name for p in PACKAGE.glob("*.py")) == ["__init__.py", "__main__.py", "errors.py"]
