"""Whole numbers as users and files write them."""

from __future__ import annotations


# Digits of the largest whole number anything here takes (a port, a pid, a count): more
# made Python's int() refuse the text (over 4300 digits) or a count run without end.
MAX_DIGITS = 18


def is_decimal(text: str, most: int = MAX_DIGITS) -> bool:
    """Whether ``text`` is one to ``most`` ASCII digits. ``str.isdigit`` also takes '²'
    (which ``int`` refuses) and '٣' (which ``int`` reads as 3): a variant file named
    ``٣.json`` was taken for variant 3."""
    return 0 < len(text) <= most and text.isascii() and text.isdigit()
