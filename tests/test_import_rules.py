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
# layer -> the kbfast packages (besides itself) it may import
RULES = {
    "kbfast.config": {"kbfast.errors"},                      # system descriptions, model files, memory limits
    "kbfast.topology": {"kbfast.errors", "kbfast.config"},
    "kbfast.ir": {"kbfast.errors", "kbfast.config", "kbfast.topology"},   # the Program IR and GEMM tiling
    "kbfast.sim": BASE,
    "kbfast.fast": BASE | {"kbfast.sim"},
    "kbfast.exact": BASE | {"kbfast.sim"},
    "kbfast.workloads": BASE,
}


def layer_of(module: str) -> str | None:
    for layer in RULES:
        if module == layer or module.startswith(layer + "."):
            return layer
    return None


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def kbfast_imports(path: Path) -> list[tuple[int, str]]:
    """(line, imported module) for every kbfast import in ``path``, including ``from kbfast import x``."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "kbfast"]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "kbfast":
                out += [(node.lineno, f"kbfast.{a.name}") for a in node.names]
            elif node.module.startswith("kbfast."):
                out.append((node.lineno, node.module))
    return out


def violations() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        me = module_name(path)
        layer = layer_of(me)
        if layer is None:
            continue
        allowed = RULES[layer] | {layer}
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
                                           ("kbfast.simulate", None), ("kbfast.cli.run", None)])
def test_layers_are_matched_by_package_not_by_prefix(module: str, layer: str | None) -> None:
    assert layer_of(module) == layer
