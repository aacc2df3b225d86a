"""Byte sizes as people write and read them (binary units: 1K = 1024)."""

from __future__ import annotations

import math


def format_size(n: float) -> str:
    """1536 -> '1.5 KiB'."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def parse_size(text: str) -> int:
    """'500M', '2G', '1024' -> bytes."""
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    number, unit = (t[:-1], t[-1]) if t and t[-1] in units else (t, "")
    try:
        value = float(number)
    except ValueError:
        raise ValueError(f"not a size: '{text}' (examples: 500M, 2G, 1048576)") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"not a size: '{text}' (a finite, non-negative number)")
    return int(value * units[unit])
