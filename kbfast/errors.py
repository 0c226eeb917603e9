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
        msg = f"{clip(file)}: {clip(key)}: {problem}"
        if value is not None:   # None: there is no value to show (a missing or repeated key)
            msg += f" (got {clip(repr(value))})"
        if hint:
            msg += f"\n  hint: {hint}"
        super().__init__(msg)


class RoutingError(KbfastError):
    """No route exists between two nodes under the requested policy."""


class UnknownNodeError(KbfastError):
    """A node name that the topology does not contain."""


ECHO_LIMIT = 200   # characters of a user's value that a message repeats


def clip(text: str, limit: int = ECHO_LIMIT) -> str:
    """``text`` as a message repeats it: at most ``limit`` characters, then "… (N chars)"."""
    text = str(text)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} chars)"


def did_you_mean(word: str, choices: Iterable[str], noun: str = "valid keys") -> str:
    """Return a 'did you mean ...?' hint for ``word`` among ``choices``, or ''."""
    choices = list(choices)
    close = difflib.get_close_matches(word, choices, n=3, cutoff=0.5) if len(word) <= ECHO_LIMIT else []
    if close:
        return "did you mean " + " or ".join(repr(c) for c in close) + "?"
    if choices:
        return f"{noun}: " + ", ".join(sorted(choices))
    return ""
