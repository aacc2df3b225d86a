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
