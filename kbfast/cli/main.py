"""The ``kbfast`` command line (design §9)."""

from __future__ import annotations

import typer
import typer.core

from kbfast import __version__
from kbfast.cli.bench import bench
from kbfast.cli.calibrate import calibrate
from kbfast.cli.probe import probe
from kbfast.cli.run import run_app
from kbfast.cli.search import search_command
from kbfast.cli.serve import serve_command
from kbfast.cli.sweep import check, plot, sweep
from kbfast.cli.topo import topo_app

def _flags_take_no_value() -> None:
    """Help shows a flag (``--exact``) bare: recent typer prints a ``<bool>`` type beside every flag, as if
    it took a value.  Flags are the options with ``is_flag``; every other option keeps its type."""
    option = getattr(typer.core, "TyperOption", None)
    shown = getattr(option, "display_type_rich", None)
    if shown is None or getattr(shown, "_kbfast", False):
        return

    def display_type_rich(self, ctx):  # noqa: ANN001, ANN202
        return "" if getattr(self, "is_flag", False) and self.metavar is None else shown(self, ctx)

    display_type_rich._kbfast = True
    option.display_type_rich = display_type_rich


_flags_take_no_value()

app = typer.Typer(
    name="kbfast",
    help="Fast performance model of the AHBM accelerator system: fast path plus exact flit-level replay.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command("sweep", short_help="Evaluate a sweep spec; write results, summary and plots.")(sweep)
app.command("check", short_help="Cross-check random sweep points, fast against exact.")(check)
app.command("plot", short_help="Re-plot saved sweep results without recomputing.")(plot)
app.add_typer(topo_app, name="topo")
app.command("probe", short_help="Run named traffic scenarios and check their invariants.")(probe)
app.command("bench", short_help="Measure speed and memory against the design targets.")(bench)
app.command("calibrate", short_help="Evaluate every reference figure, fast and exact.")(calibrate)
app.add_typer(run_app, name="run", short_help="Run one point: an all-reduce, a transfer, a GEMM, a model.")
app.command("serve", short_help="Serve a model under a request load: TTFT, TPOT, tokens/s.")(serve_command)
app.command("search", short_help="Search layouts and parallelism for a model's decode step.")(search_command)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"kbfast {__version__}")
        raise typer.Exit()


@app.callback()
def main(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                      help="Print the version and exit.")) -> None:
    """kbfast: sweep, cross-check and explain AHBM performance."""


if __name__ == "__main__":  # pragma: no cover
    app()
