"""Errors that kbfast reports to users.

Every user mistake becomes a ``KbfastError``: the CLI prints its message and
exits with code 2, without a traceback (design §10).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class KbfastError(Exception):
    """A user-facing error; the CLI prints ``str(err)`` and exits with ``exit_code``."""

    exit_code = 2


class ConfigError(KbfastError):
    """A bad configuration value: names the file, the key path and the value."""

    def __init__(self, file: str, key: str, value: object, problem: str, hint: str = ""):
        self.file, self.key, self.value, self.problem, self.hint = file, key, value, problem, hint
        if key in ("<preset>", "<model>"):      # a name that names nothing: "unknown model 'llama3_7b'"
            msg = f"{problem} {shown(file)}"
        elif key.startswith("<"):               # the file itself ("<file>", "<yaml>"), not a key in it
            msg = f"{clip(file)}: {problem}"
            if value is not None and str(value) != file:
                msg += f" ({clip(str(value))})"
        else:
            msg = f"{clip(file)}: {clip(key)}: {problem}"
            if value is not None:   # None: there is no value to show (a missing or repeated key)
                msg += f" (got {shown(value)})"
        if hint:
            msg += f"\n  hint: {hint}"
        super().__init__(msg)


class RoutingError(KbfastError):
    """No route exists between two nodes under the requested policy."""


class UnknownNodeError(KbfastError):
    """A node name that the topology does not contain."""


ECHO_LIMIT = 200   # characters of a user's value that a message repeats
LISTED = 12        # choices a hint lists in full; beyond, the first ten and the count


def clip(text: str, limit: int = ECHO_LIMIT) -> str:
    """``text`` as a message repeats it: at most ``limit`` characters, then "… (N chars)"."""
    text = str(text)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} chars)"


_CONTAINERS = {list: "[]", tuple: "()", dict: "{}"}
_SHOWN_DEPTH = 20   # nesting levels :func:`shown` writes out; deeper containers are written as […]


def _pieces(value: object, limit: int, depth: int = 0):
    """The text of ``repr(value)``, piece by piece, so that a caller can stop early; a scalar is clipped, and a
    numpy one written as the number it holds (``-5``, not ``np.int64(-5)``: a value read from a CSV)."""
    if type(value).__module__ == "numpy" and getattr(value, "ndim", None) == 0:
        value = value.item()
    kind = next((k for k in _CONTAINERS if isinstance(value, k)), None)
    if kind is None:
        try:
            yield clip(repr(value), limit)
        except ValueError:   # an int beyond Python's digit limit for str()
            yield f"<a whole number of {value.bit_length():,} bits>"   # type: ignore[attr-defined]
        return
    left, right = _CONTAINERS[kind]
    if depth >= _SHOWN_DEPTH:
        yield f"{left}…{right}"
        return
    yield left
    for i, item in enumerate(value.items() if kind is dict else value):   # type: ignore[attr-defined]
        if i:
            yield ", "
        if kind is dict:
            yield from _pieces(item[0], limit, depth + 1)
            yield ": "
            item = item[1]
        yield from _pieces(item, limit, depth + 1)
    if kind is tuple and len(value) == 1:   # type: ignore[arg-type]
        yield ","
    yield right


def shown(value: object, limit: int = ECHO_LIMIT) -> str:
    """``repr(value)`` as a message repeats it: at most ``limit`` characters, then "… (N chars)" or, for a
    list, tuple or mapping, "… (a list of N items)".  A container is written only up to the limit, so a huge
    value (a YAML alias bomb expands to billions of items) costs no more than a small one."""
    out: list[str] = []
    size = 0
    for piece in _pieces(value, limit):
        out.append(piece)
        size += len(piece)
        if size > limit and len(out) > 1:
            return f"{''.join(out)[:limit]}… (a {type(value).__name__} of {len(value):,} items)"  # type: ignore[arg-type]
    return "".join(out)


def not_one_of(what: str, value: object, choices: Iterable[object]) -> KbfastError:
    """The refusal of ``value`` for ``what`` (``--layout``, ``phase``): ``{what} 'tp_pe' is not one of tp_pes,
    tp_cubes``, and the closest choice as the hint (``did you mean 'tp_pes'?``) when one is close."""
    names = [str(c) for c in choices]
    close = closest(str(value), names)
    return KbfastError(f"{what} {shown(value)} is not one of {', '.join(names)}" + (f"\n  hint: {close}" if close else ""))


def closest(word: str, choices: Iterable[str], prefix: str = "") -> str:
    """``did you mean 'x'?`` for the choices close to ``word`` (compared without case: ``remote_sip`` finds
    ``REMOTE_SIP``; each shown after ``prefix``, the part of a name the user typed before ``word``), or ''."""
    folded = {c.casefold(): c for c in choices}
    close = ([folded[c] for c in difflib.get_close_matches(word.casefold(), list(folded), n=3, cutoff=0.5)]
             if len(word) <= ECHO_LIMIT else [])
    return "did you mean " + " or ".join(repr(prefix + c) for c in close) + "?" if close else ""


def did_you_mean(word: str, choices: Iterable[str], noun: str = "valid keys", prefix: str = "") -> str:
    """:func:`closest`, else the ``choices`` listed after ``noun`` (the first ten and their count beyond
    ``LISTED``), or ''."""
    choices = list(choices)
    close = closest(word, choices, prefix)
    if close:
        return close
    if len(choices) > LISTED:      # a long list helps nobody on one line: its first names and how many
        return f"{noun}: " + ", ".join(sorted(choices)[:LISTED - 2]) + f", … ({len(choices):,} in all)"
    if choices:
        return f"{noun}: " + ", ".join(sorted(choices))
    return ""
