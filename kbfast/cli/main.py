"""The ``kbfast`` command line (design §9)."""

from __future__ import annotations

import importlib
import re
import sys
from difflib import get_close_matches
from functools import cache

import typer
import typer.core
import typer.main
import typer.rich_utils

from kbfast import __version__
from kbfast.errors import not_one_of

# the Click whose errors typer's commands raise: recent typer carries its own copy, older typer uses click
CLICK = getattr(typer.core, "_click", None) or importlib.import_module("click")
UsageError = importlib.import_module(f"{CLICK.__name__}.exceptions").UsageError


def _readable_value_types() -> None:
    """Help shows a flag (``--exact``) bare, a text value by its option's name (``--case <case>``) and a text
    argument by its name alone: recent typer prints a ``<bool>`` type beside every flag, as if it took a value,
    and ``<str>`` or ``<list[str]>`` beside text.  Flags are the options with ``is_flag``; every other option
    keeps its type.  The usage line names an argument the same way, ``<model>`` (typer writes ``{model}``)."""
    option = getattr(typer.core, "TyperOption", None)
    shown = getattr(option, "display_type_rich", None)
    if shown is None or getattr(shown, "_kbfast", False):
        return

    def display_type_rich(self, ctx):  # noqa: ANN001, ANN202
        if self.metavar is not None:
            return shown(self, ctx)
        if getattr(self, "is_flag", False):
            return ""
        text = shown(self, ctx)
        return f"<{max(self.opts, key=len).lstrip('-')}>" if text in ("<str>", "<list[str]>") else text

    display_type_rich._kbfast = True
    option.display_type_rich = display_type_rich
    argument = typer.core.TyperArgument            # an argument's name is shown beside it: no <str> type

    def argument_type(self, ctx):  # noqa: ANN001, ANN202
        text = shown(self, ctx)
        return "" if self.metavar is None and text == "<str>" else text

    argument.display_type_rich = argument_type
    if hasattr(argument, "_usage_display_name"):   # typer writes {model}; options read <case>: so does this

        def usage_display_name(self):  # noqa: ANN001, ANN202
            name = f"<{self.display_name_raw}>" + ("..." if self.nargs != 1 else "")
            return name if self.required else f"[{name}]"

        argument._usage_display_name = usage_display_name


_readable_value_types()

def _typed_value(param) -> str | None:  # noqa: ANN001 - a Click Parameter
    """The value the user gave ``param`` on the command line (``--n-slots abc`` or ``--n-slots=abc``), or None."""
    args = sys.argv[1:]
    for i in range(len(args) - 1, -1, -1):
        for opt in getattr(param, "opts", ()):
            if args[i] == opt and i + 1 < len(args):
                return args[i + 1]
            if args[i].startswith(opt + "="):
                return args[i][len(opt) + 1:]
    return None


def plain_usage_error(err) -> None:  # noqa: ANN001 - a ClickException
    """A mistake typer finds on the command line (an unknown option, a value of the wrong type or outside its
    choices) written as every other refusal: ``error: --format 'tabel' is not one of table, csv, json`` and the
    closest choice as the hint, ``--n-slots 'abc': not a whole number``, then where the command's help is; not
    typer's usage block and a boxed pydantic wording."""
    if err.__class__.__name__ == "NoArgsIsHelpError":
        return
    param = getattr(err, "param", None)
    hints = []
    if getattr(err, "option_name", None) and hasattr(err, "possibilities"):     # an unknown option
        text = f"no such option {err.option_name}"
        close = get_close_matches(err.option_name, sorted(err.possibilities or ()), n=2)
        hints += [f"did you mean {' or '.join(close)}?"] if close else []
    elif param is not None and getattr(err, "message", ""):
        from kbfast.config.validation import plain_message      # pydantic: loaded only for a refusal
        problem = plain_message(err.message.rstrip("."))
        name = max(param.opts, key=len) if getattr(param, "opts", None) and param.param_type_name == "option" \
            else f"<{param.name}>"
        choice = re.fullmatch(r"'(.*)' is not one of (.*)", problem)
        if choice:
            text, _, close = str(not_one_of(name, choice.group(1), re.findall(r"'([^']*)'", choice.group(2)))) \
                .partition("\n  hint: ")
            hints += [close] if close else []
        else:
            value = _typed_value(param)
            text = f"{name}{'' if value is None else f' {value!r}'}: {problem}"
    else:                           # a missing argument, an unknown command (with its close ones), ...
        text, _, close = err.format_message().rstrip(".?").partition(". Did you mean ")
        text = text[:1].lower() + text[1:]
        hints += [f"did you mean {close}?"] if close else []
    ctx = getattr(err, "ctx", None)
    if ctx is not None:
        listed = "commands" if hasattr(ctx.command, "list_commands") else "options"
        hints.append(f"{ctx.command_path} --help lists its {listed}")
    sys.stderr.write(f"error: {text}\n" + "".join(f"  hint: {h}\n" for h in hints))


typer.rich_utils.rich_format_error = plain_usage_error   # typer's handler looks it up when an error comes

# command -> (module, its function or Typer app, the one-line summary of the listing), in the listing's order.
# A command's module loads when the command runs or shows its own help, not when another runs or ``kbfast
# --help`` lists them all: together they import pandas, numba and every evaluator (about 1 s).
COMMANDS = {
    "sweep": ("kbfast.cli.sweep", "sweep", "Evaluate a sweep spec; write results, summary and plots."),
    "check": ("kbfast.cli.sweep", "check", "Cross-check random sweep points, fast against exact."),
    "plot": ("kbfast.cli.sweep", "plot", "Re-plot saved sweep results without recomputing."),
    "topo": ("kbfast.cli.topo", "topo_app", "Inspect topologies: summaries, floor plans and routes."),
    "probe": ("kbfast.cli.probe", "probe", "Run named traffic scenarios and check their invariants."),
    "bench": ("kbfast.cli.bench", "bench", "Measure speed and memory against the design targets."),
    "calibrate": ("kbfast.cli.calibrate", "calibrate", "Evaluate every reference figure, fast and exact."),
    "run": ("kbfast.cli.run", "run_app", "Run one point: an all-reduce, a transfer, a GEMM, a model."),
    "serve": ("kbfast.cli.serve", "serve_command", "Serve a model under a request load: TTFT, TPOT, tokens/s."),
    "search": ("kbfast.cli.search", "search_command", "Search layouts and parallelism for a model's decode step."),
}
_LISTING = "kbfast.listing"   # ctx.meta key: set while the top-level help lists the commands


@cache
def load_command(name: str) -> typer.core.TyperCommand | typer.core.TyperGroup:
    """The Click command ``name`` of :data:`COMMANDS`, its module imported: a function becomes a command as
    ``app.command(name)`` would make it, a Typer app a group; its listing summary is the table's."""
    module, attr, summary = COMMANDS[name]
    target = getattr(importlib.import_module(module), attr)
    if not isinstance(target, typer.Typer):
        one = typer.Typer(add_completion=False)
        one.command(name)(target)
        target = one
    cmd = typer.main.get_command(target)
    cmd.name, cmd.short_help = name, summary
    return cmd


class LazyGroup(typer.core.TyperGroup):
    """The top-level group: its commands load on demand (:func:`load_command`), and its help lists them from
    :data:`COMMANDS` without loading any (click's listing asks each command for its summary)."""

    def list_commands(self, ctx: typer.Context) -> list[str]:
        return [*super().list_commands(ctx), *COMMANDS]

    def get_command(self, ctx: typer.Context, name: str) -> typer.core.TyperCommand | typer.core.TyperGroup | None:
        if name not in COMMANDS:
            return super().get_command(ctx, name)
        if ctx.meta.get(_LISTING):
            return typer.core.TyperCommand(name, short_help=COMMANDS[name][2])
        return load_command(name)

    def resolve_command(self, ctx: typer.Context, args: list[str]) -> tuple:
        """Click's, and for a name that is no command the close ones, as Typer suggests among loaded commands."""
        try:
            return super().resolve_command(ctx, args)
        except UsageError as err:
            close = get_close_matches(args[0], self.list_commands(ctx)) if args else []
            if close and "Did you mean" not in err.message:
                err.message = f"{err.message.rstrip('.')}. Did you mean {', '.join(map(repr, close))}?"
            raise

    def format_help(self, ctx: typer.Context, formatter) -> None:  # noqa: ANN001 - Click's HelpFormatter
        ctx.meta[_LISTING] = True
        try:
            super().format_help(ctx, formatter)
        finally:
            del ctx.meta[_LISTING]


app = typer.Typer(
    name="kbfast",
    cls=LazyGroup,
    help="Fast performance model of the AHBM accelerator system: fast path plus exact flit-level replay.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


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
