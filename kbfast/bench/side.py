"""Run kbfast from a given source tree, whatever kbfast this environment has installed (the launcher of
kbfast.bench.pairing): ``python side.py ROOT ARGS...`` runs ``kbfast ARGS...``, and ``python side.py ROOT -c
CODE`` runs ``CODE``, with ROOT's packages first on the path and its package-dir folders (``kbfast.topologies``
and the like, as ROOT's pyproject.toml maps them) found in ROOT.  An editable install maps those folders to
its own checkout, so without this a revision in a worktree would read this tree's topologies.

It is run as a file, never imported: importing it would import kbfast from this tree first.
"""

import importlib.machinery
import importlib.util
import runpy
import sys
import tomllib
from pathlib import Path


class _TreeFinder:
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


def main() -> None:
    root = Path(sys.argv[1]).resolve()
    config = tomllib.loads((root / "pyproject.toml").read_text())
    dirs = config.get("tool", {}).get("setuptools", {}).get("package-dir", {})
    sys.meta_path.insert(0, _TreeFinder(root, {k: v for k, v in dirs.items() if k}))
    sys.path.insert(0, str(root))
    if sys.argv[2:3] == ["-c"]:
        exec(compile(sys.argv[3], "<side -c>", "exec"), {"__name__": "__main__"})
        return
    sys.argv = ["kbfast", *sys.argv[2:]]
    runpy.run_module("kbfast", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
