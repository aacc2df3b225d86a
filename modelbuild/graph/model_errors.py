"""Declarations in models/ that are refused (an unusable name, a bad [inputs] table, two
files for one model): each is reported on its own, and the other models build.

A refused model is named, one line each, when its own tasks are asked for (an error)
or when a command covers every model (``doit list``, ``doit``, ``doit build``: a warning);
``doit build:<other>`` says nothing of it.
"""

from __future__ import annotations

import sys

from ..core.errors import BuildError


def _names_a_model(arg: str) -> bool:
    base, sep, rest = arg.partition(":")
    return bool(sep and rest and not arg.startswith("-"))


def check(requested: list[str], refused: dict[str, BuildError], basenames) -> BuildError | None:
    """The error of a refused model that ``requested`` names a task of (None: none)."""
    for arg in requested:
        base, sep, rest = arg.partition(":")
        if sep and base in basenames and not arg.startswith("-"):
            model = rest.partition("/")[0]
            if model in refused:
                return refused[model]
    return None


def warn(requested: list[str], refused: dict[str, BuildError], stream=None) -> None:
    """One warning line per refused model, when the command covers every model."""
    if not refused or any(_names_a_model(arg) for arg in requested):
        return
    stream = stream or sys.stderr
    for name, err in refused.items():
        text = str(err).removeprefix("error: ").replace("\n  hint: ", " (hint: ", 1)
        text += ")" if err.hint else ""
        stream.write(f"warning: model '{name}' skipped: {text}\n")
