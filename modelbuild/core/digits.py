"""Whole numbers as users and files write them."""

from __future__ import annotations


def is_decimal(text: str) -> bool:
    """Whether ``text`` is one or more ASCII digits. ``str.isdigit`` also takes '²' (which
    ``int`` refuses) and '٣' (which ``int`` reads as 3): a variant file named ``٣.json``
    was taken for variant 3."""
    return text.isascii() and text.isdigit()
