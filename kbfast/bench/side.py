"""Make a Python process run kbfast from a given source tree, whatever kbfast this environment has installed
(kbfast.bench.pairing): kbfast.bench.pairing copies this file as ``sitecustomize.py`` into a folder it puts
first on ``PYTHONPATH``, with the tree in ``KBFAST_BENCH_TREE``, so that every process of one side (the
bench, and the processes it starts, such as the cold-start run) imports that tree's kbfast and finds its
package-dir folders (``kbfast.topologies`` and the like, as the tree's pyproject.toml maps them) in the tree.
An editable install maps those folders to its own checkout, so without this a revision in a worktree would
read this tree's topologies.

It imports nothing of kbfast: it runs before kbfast is imported.
"""

import importlib.machinery
import importlib.util
import os
import sys
import tomllib
from pathlib import Path

TREE = "KBFAST_BENCH_TREE"


class TreeFinder:
    """Finds the mapped packages of one source tree (``dirs``: package name -> folder)."""

    def __init__(self, root: Path, dirs: dict[str, str]):
        self.root, self.dirs = root, dirs

    def find_spec(self, name, path=None, target=None):
        if name not in self.dirs:
            return None
        where = self.root / self.dirs[name]
        init = where / "__init__.py"
        if init.exists():
            return importlib.util.spec_from_file_location(name, init, submodule_search_locations=[str(where)])
        spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
        spec.submodule_search_locations = [str(where)]
        return spec


def install(root: Path) -> None:
    """Find kbfast and its package-dir folders in ``root`` first, in this process."""
    config = tomllib.loads((root / "pyproject.toml").read_text())
    dirs = config.get("tool", {}).get("setuptools", {}).get("package-dir", {})
    sys.meta_path.insert(0, TreeFinder(root, {"kbfast": "kbfast", **{k: v for k, v in dirs.items() if k}}))
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))


if os.environ.get(TREE):
    install(Path(os.environ[TREE]).resolve())
