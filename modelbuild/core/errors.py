"""The one error type a build step raises for a problem the user can fix."""

from __future__ import annotations


class BuildError(Exception):
    """A user-facing build failure: what went wrong, where, and what to do.

    ``file`` and ``workload`` name the input at fault; ``hint`` says how to fix it.
    """

    def __init__(self, message: str, *, file=None, workload: str | None = None,
                 hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.file = str(file) if file is not None else None
        self.workload = workload
        self.hint = hint

    def __str__(self) -> str:
        where = []
        if self.file:
            where.append(self.file)
        if self.workload:
            where.append(f"workload {self.workload}")
        head = f"{': '.join(where)}: " if where else ""
        text = f"error: {head}{self.message}"
        if self.hint:
            text += f"\n  hint: {self.hint}"
        return text


def unknown_model(model: str, known, where: str = "") -> BuildError:
    """The error for a model the project does not have (``where``: e.g. " in 'build:x'")."""
    return BuildError(f"unknown model '{model}'{where}. Known models: {', '.join(known) or '(none)'}.",
                      hint=f"declare it in models/{model}.toml, or drop models/{model}.onnx "
                           "into the project")


def no_workload(model: str, names, hint: str | None = None) -> BuildError:
    """The error for workload names (one, or several) the model does not have."""
    names = [names] if isinstance(names, str) else list(names)
    return BuildError(f"model '{model}' has no workload '{', '.join(names)}'",
                      hint=hint or f"`python -m modelbuild inspect {model}` lists them")


SHOWN_MAX = 80  # characters of a name from a file (a cache entry, a manifest) a message shows


def shown(name) -> str:
    """``name`` as a message shows a name read from a file another may have written: as repr
    writes it (quoted, escaped: a NUL, an escape sequence or a newline is never printed
    raw), and when long, its start and length (a 100 KB name is not echoed whole)."""
    text = repr(name)
    if len(text) <= SHOWN_MAX:
        return text
    return f"{text[:SHOWN_MAX]}... ({len(name) if isinstance(name, str) else len(text)} characters)"


def summarize(err: BaseException, limit: int = 6) -> str:
    """The part of an exception a user needs, TVM's included: what failed and TVM's reason.

    A TVM ScheduleError carries the whole IR between the two; that is left out.
    """
    lines = [ln.strip() for ln in str(err).strip().splitlines() if ln.strip()]
    if not lines:
        return type(err).__name__
    if not lines[0].startswith(type(err).__name__):
        lines[0] = f"{type(err).__name__}: {lines[0]}"
    reason = next((i for i, ln in enumerate(lines) if ln.startswith("Error message:")), None)
    if reason is not None:
        return "\n    ".join([lines[0], *lines[reason:reason + limit]])
    return "\n    ".join(lines[:limit])
