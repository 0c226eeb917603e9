"""``python -m kbfast``: the same command line as ``kbfast``."""

from kbfast.cli.main import app

app(prog_name="kbfast")
