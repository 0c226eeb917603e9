"""The public API (``kbfast/__init__.py``): every name resolves, and every docstring example runs."""

from __future__ import annotations

import doctest

import pytest

import kbfast


@pytest.mark.parametrize("name", [n for n in kbfast.__all__ if n != "__version__"])
def test_public_name_has_a_docstring_example_that_runs(name: str) -> None:
    obj = getattr(kbfast, name)
    tests = doctest.DocTestFinder(recurse=False).find(obj, name, globs={name: obj})
    examples = [e for t in tests for e in t.examples]
    assert examples, f"kbfast.{name} has no docstring example"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for t in tests:
        runner.run(t)
    assert runner.summarize(verbose=False).failed == 0


def test_module_docstring_example_runs() -> None:
    assert doctest.testmod(kbfast, optionflags=doctest.ELLIPSIS).failed == 0


def test_unknown_attribute_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'run_fastest'"):
        kbfast.run_fastest  # noqa: B018
