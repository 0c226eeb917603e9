"""The ``kbfast`` command line (design §9)."""

from __future__ import annotations

import typer

from kbfast import __version__
from kbfast.cli.bench import bench
from kbfast.cli.calibrate import calibrate
from kbfast.cli.probe import probe
from kbfast.cli.run import run_app
from kbfast.cli.sweep import check, plot, sweep
from kbfast.cli.topo import topo_app

app = typer.Typer(
    name="kbfast",
    help="Fast performance model of the AHBM accelerator system: fast path plus exact flit-level replay.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command("sweep")(sweep)
app.command("check")(check)
app.command("plot")(plot)
app.add_typer(topo_app, name="topo")
app.command("probe")(probe)
app.command("bench")(bench)
app.command("calibrate")(calibrate)
app.add_typer(run_app, name="run")


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
