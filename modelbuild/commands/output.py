"""Where commands print: results to stdout, progress and errors to stderr; paths never cut."""

from __future__ import annotations

from rich.console import Console

console = Console(highlight=False, soft_wrap=True, emoji=False)
errors = Console(stderr=True, highlight=False, soft_wrap=True, emoji=False)
