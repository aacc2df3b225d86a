"""A project's settings: the ``[tool.modelbuild]`` table of its pyproject.toml.

    [tool.modelbuild]
    cache-dir = "/var/cache/modelbuild"   # the artifact cache (default build/.cache)
    targets = ["my_targets"]               # modules that register extra targets
    remote-cache = "s3://bucket/prefix"    # a shared cache tier (graph/remote.py)
    remote-cache-mode = "read"             # or "read-write"
    remote-cache-timeout = 10              # seconds per remote request
    remote-cache-public-key = "keys/remote-cache.pub"  # verify remote entries (core/signing.py)
    executor = "tcp://host:8786"           # a Dask scheduler running lower and codegen

Reading it is plain file work, no TVM. A missing file or table means defaults;
an unreadable one is an error naming the file.
"""

from __future__ import annotations

from pathlib import Path

from . import toml
from .errors import BuildError

KNOWN = ("cache-dir", "targets", "remote-cache", "remote-cache-mode", "remote-cache-timeout",
         "remote-cache-public-key", "executor")
# never settings: pyproject.toml is committed, a private key must not be
SECRETS = ("remote-cache-signing-key", "remote-cache-private-key")


def read(root: Path) -> dict:
    """The ``[tool.modelbuild]`` table of the project at ``root`` ({} when there is none)."""
    path = root / "pyproject.toml"
    if not path.is_file():
        return {}
    try:
        table = toml.loads(path.read_text()).get("tool", {}).get("modelbuild", {})
    except (toml.DecodeError, UnicodeDecodeError) as err:
        raise BuildError(f"not valid TOML: {err}", file=path) from None
    if not isinstance(table, dict):
        raise BuildError("[tool.modelbuild] must be a table", file=path)
    secret = sorted(set(table) & set(SECRETS))
    if secret:
        raise BuildError(f"{secret[0]} is never read from pyproject.toml (it is committed, and "
                         "the private key must stay with the writers)", file=path,
                         hint="remove it; in CI set MODELBUILD_REMOTE_CACHE_SIGNING_KEY to the "
                              "private key's file")
    unknown = sorted(set(table) - set(KNOWN))
    if unknown:
        raise BuildError(f"unknown keys in [tool.modelbuild]: {', '.join(unknown)}; "
                         f"known: {', '.join(KNOWN)}", file=path)
    return table
