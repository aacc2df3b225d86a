"""TOML reading on every supported Python: tomllib from 3.11, the tomli backport before."""

from __future__ import annotations

import sys

if sys.version_info >= (3, 11):
    import tomllib as _toml
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as _toml

DecodeError = _toml.TOMLDecodeError


def loads(text: str) -> dict:
    return _toml.loads(text)
