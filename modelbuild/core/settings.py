"""A project's settings, each resolved in one place: its environment variable, else its key
in the ``[tool.modelbuild]`` table of the project's pyproject.toml, else its default.

    [tool.modelbuild]
    cache-dir = "/var/cache/modelbuild"   # the artifact cache (default build/.cache)
    targets = ["my_targets"]               # modules that register extra targets
    remote-cache = "s3://bucket/prefix"    # a shared cache tier (cache/remote.py)
    remote-cache-mode = "read"             # or "read-write"
    remote-cache-timeout = 10              # seconds per remote request
    remote-cache-public-key = "keys/remote-cache.pub"  # verify remote entries (cache/signing.py)
    executor = "tcp://host:8786"           # a Dask scheduler running lower and codegen

Every setting is one ``Setting`` in ``SETTINGS`` (its key, its environment variable, its
default, how its value is checked, an example for the hint); nothing else reads the
environment or the table for them. To add one, add a ``Setting`` line there (and a row
to README.md and docs/configuration.md), then read it where it is used with
``config.get(key)`` (``config.path(key)`` for a file) on the ``Settings`` passed in. ``resolve(root)`` reads the table once; a value is
checked when it is asked for, so a bad value of a setting that is not used is no error.
Reading it is plain file work, no TVM. A missing file or table means defaults; an
unreadable one, or an unknown key, is an error naming the file.
"""

from __future__ import annotations

import os
import re
from urllib.parse import unquote, urlsplit
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from . import regular_file, toml
from .digits import is_decimal
from .errors import BuildError

ENV, PYPROJECT, DEFAULT = "environment", "pyproject", "default"   # where a value came from


def _text(value) -> str:
    """Text, as TOML gives it or the environment: not a number, a list, empty or holding NUL
    (`cache-dir = 5` made a folder named 5; a NUL, an internal error)."""
    if not isinstance(value, str) or not value.strip() or "\0" in value:
        raise ValueError(f"must be non-empty text, not {value!r}")
    return value


def without_credentials(text: str) -> str:
    """``text`` (a URL, well-formed or not) with whatever comes before its last ``@`` after
    the scheme shown as ``***`` (a password may hold a ``/``, as AWS secret keys do)."""
    if "@" not in text:
        return text
    scheme = re.match(r"[A-Za-z][A-Za-z0-9+.-]*:/*", text)
    start = scheme.end() if scheme else 0
    return text[:start] + "***@" + text.rpartition("@")[2]


def _url(value) -> str:
    """A URL with a scheme (s3://bucket/prefix, file:///path): fsspec opens it. A file://
    URL names a folder of this machine (``file://localhost/path`` is ``file:///path``;
    fsspec would take ``file://host/path`` for a folder ``host/path`` under the current
    one); a ``memory://`` store does not outlive the process. Never echoes a password."""
    text = _text(value)
    shown = without_credentials(text)
    scheme, sep, rest = text.partition("://")
    try:
        split = urlsplit(text)  # a host such as "[" raises here
        if "@" not in text:  # a password may hold a "/", which urlsplit ends the host at
            split.port  # a port past 65535 raises here
    except ValueError:
        sep = ""
    if not (sep and scheme.replace("+", "").isalnum() and rest):
        raise ValueError(f"must be a URL such as s3://bucket/prefix or file:///path, not {shown!r}")
    known = _store_schemes()
    if known is not None and scheme.lower() not in known:
        # said on every build as "unavailable" instead: the setting is what is wrong
        raise ValueError(f"names a kind of store fsspec does not know ({scheme}://), not one "
                         "such as s3://bucket/prefix, gs://bucket/prefix or file:///path")
    if scheme.lower() == "memory":
        raise ValueError("must be a store that outlives one process: memory:// keeps nothing "
                         "after the build")
    if scheme.lower() in ("file", "local"):
        host, slash, path = rest.partition("/")
        if host.lower() not in ("", "localhost") or not path or "?" in path or "#" in path:
            raise ValueError(f"must be file:///path/to/folder (a folder of this machine), "
                             f"not {shown!r}")
        return f"file:///{unquote(path)}"
    return text


def _store_schemes() -> set[str] | None:
    """The URL schemes fsspec opens (None without fsspec: the remote says it is needed)."""
    try:
        import fsspec
    except ImportError:
        return None
    return {p.lower() for p in fsspec.available_protocols()}


def _key_file(value) -> str:
    """The path of a private key's file: never the key itself (a CI secret handed over as
    the variable's value), which an error would otherwise print."""
    if isinstance(value, str) and ("\n" in value or value.lstrip().startswith("-----BEGIN")):
        raise ValueError("must be the path of the key's file; it holds a key itself (not "
                         "shown): write it to a file and give that file's path")
    return _text(value)


def _address(value) -> str:
    """A scheduler's address: [tcp:// or tls://]host:port."""
    text = _text(value)
    rest = text.split("://", 1)[1] if "://" in text else text
    host, _, port = rest.rpartition(":")
    if not (host and is_decimal(port) and 0 < int(port) < 65536):
        raise ValueError(f"must be host:port (tcp://host:8786), not {value!r}")
    return text


def _modules(value) -> list[str]:
    """Python module names: a list of text."""
    if not (isinstance(value, list) and all(isinstance(v, str) and v.strip() for v in value)):
        raise ValueError(f"must be a list of module names, e.g. [\"my_targets\"], not {value!r}")
    return value


def _one_of(*choices: str) -> Callable[[Any], str]:
    def check(value) -> str:
        if value not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}, not '{value}'")
        return str(value)
    return check


def _positive_seconds(value) -> float:
    try:
        seconds = 0.0 if isinstance(value, bool) else float(value)  # true is no duration
    except (TypeError, ValueError):
        seconds = 0.0
    if not 0 < seconds <= 3600:
        raise ValueError(f"must be a positive number of seconds (an hour at most), not {value!r}")
    return seconds


@dataclass(frozen=True)
class Setting:
    """One setting: ``key`` (its name under [tool.modelbuild]), ``env`` (its environment
    variable; None: pyproject only), the ``default``, ``check`` (value -> parsed value,
    ValueError with the reason when bad), ``example`` (the value the error's hint
    suggests) and ``in_pyproject`` (False: environment only, e.g. a secret; the key is
    then only its name, and an error in the table)."""

    key: str
    env: str | None
    default: Any
    check: Callable[[Any], Any] = _text
    example: str = ""
    in_pyproject: bool = True


REMOTE_CACHE_MODES = ("read", "read-write")

SETTINGS: tuple[Setting, ...] = (
    Setting("cache-dir", "MODELBUILD_CACHE", None, _text, "/var/cache/modelbuild"),
    Setting("targets", None, None, _modules, '["my_targets"]'),
    Setting("remote-cache", "MODELBUILD_REMOTE_CACHE", None, _url, "s3://bucket/prefix"),
    Setting("remote-cache-mode", "MODELBUILD_REMOTE_CACHE_MODE", "read",
            _one_of(*REMOTE_CACHE_MODES), "read or read-write"),
    Setting("remote-cache-timeout", "MODELBUILD_REMOTE_CACHE_TIMEOUT", 10.0, _positive_seconds,
            "10"),
    # verify remote entries with this public key (cache/signing.py); pyproject only: committed
    Setting("remote-cache-public-key", None, None, _text, "keys/remote-cache.pub"),
    # sign uploads with this private key: environment only, never in the committed pyproject
    Setting("remote-cache-signing-key", "MODELBUILD_REMOTE_CACHE_SIGNING_KEY", None, _key_file,
            "/path/to/remote-cache.key", in_pyproject=False),
    Setting("executor", "MODELBUILD_EXECUTOR", None, _address, "tcp://host:8786"),
    Setting("executor-tls-ca", "MODELBUILD_EXECUTOR_TLS_CA", None, _text, "certs/ca.pem"),
    Setting("executor-tls-cert", "MODELBUILD_EXECUTOR_TLS_CERT", None, _text, "certs/client.pem"),
    Setting("executor-tls-key", "MODELBUILD_EXECUTOR_TLS_KEY", None, _key_file,
            "certs/client.key"),
)
BY_KEY = {s.key: s for s in SETTINGS}
KNOWN = tuple(s.key for s in SETTINGS if s.in_pyproject)   # the keys [tool.modelbuild] may hold


def hint(key: str) -> str:
    """Where the user sets ``key``: its environment variable and its pyproject key."""
    setting = BY_KEY[key]
    places = [setting.env] if setting.env else []
    if setting.in_pyproject:
        places.append(f"`{key}` under [tool.modelbuild] in pyproject.toml")
    where = " or ".join(places)
    return f"set {where}" + (f", e.g. {setting.example}" if setting.example else "")


@dataclass(frozen=True)
class Settings:
    """The settings of the project at ``root``: the table read once, the environment as
    it was when resolved."""

    root: Path
    table: Mapping[str, Any] = field(default_factory=dict)
    environ: Mapping[str, str] = field(default_factory=dict)

    def origin(self, key: str) -> str:
        """Where ``key``'s value comes from: ENV, PYPROJECT or DEFAULT. An empty
        environment variable counts as unset."""
        setting = BY_KEY[key]
        if setting.env and self.environ.get(setting.env):
            return ENV
        return PYPROJECT if setting.in_pyproject and key in self.table else DEFAULT

    def raw(self, key: str):
        """``key``'s value as given, unchecked."""
        origin = self.origin(key)
        if origin == ENV:
            return self.environ[BY_KEY[key].env]
        return self.table[key] if origin == PYPROJECT else BY_KEY[key].default

    def get(self, key: str):
        """``key``'s checked value (its default, unchecked, when it is not set); a bad
        value is one error line naming the setting and where to set it."""
        if self.origin(key) == DEFAULT:
            return BY_KEY[key].default
        value = self.raw(key)
        try:
            return BY_KEY[key].check(value)
        except ValueError as err:
            raise BuildError(f"{key} {err}", hint=hint(key)) from None


    def path(self, key: str) -> Path | None:
        """``key``'s value as a path (None when not set): from the environment as given,
        from pyproject.toml relative to the project root."""
        value = self.get(key)
        if value is None:
            return None
        try:
            path = Path(str(value)).expanduser()
        except RuntimeError:  # ~user of no user (Python cannot find that home)
            raise BuildError(f"{key} = {value!r}: no such user's home folder",
                             file=self.root / "pyproject.toml" if self.origin(key) == PYPROJECT
                             else None, hint=hint(key)) from None
        return self.root / path if self.origin(key) == PYPROJECT else path


def resolve(root: Path, environ: Mapping[str, str] | None = None) -> Settings:
    """The settings of the project at ``root`` (``environ``: os.environ when not given)."""
    env = dict(os.environ if environ is None else environ)
    return Settings(Path(root), read(root), {s.env: env[s.env] for s in SETTINGS
                                            if s.env and s.env in env})
# never settings: pyproject.toml is committed, a private key must not be
SECRETS = ("remote-cache-signing-key", "remote-cache-private-key")
_MOST_BYTES = 16 * 1024 * 1024  # a project's pyproject.toml: kilobytes


def read(root: Path) -> dict:
    """The ``[tool.modelbuild]`` table of the project at ``root`` ({} when there is none)."""
    path = Path(root) / "pyproject.toml"
    if not path.exists():
        return {}
    try:
        document = toml.loads(regular_file.read_limited(path, _MOST_BYTES).decode("utf-8"))
    except (toml.DecodeError, UnicodeDecodeError, RecursionError) as err:
        raise BuildError(f"not valid TOML: {err}", file=path) from None
    except OSError as err:  # a folder, a pipe, a link to nothing or to /dev/zero: said
        raise BuildError(f"cannot be read as the project's settings: "
                         f"{err.strerror or type(err).__name__}", file=path,
                         hint="pyproject.toml is a TOML file (or none at all)") from None
    tool = document.get("tool", {})
    if not isinstance(tool, dict):
        raise BuildError("`tool` must be a table ([tool.modelbuild], [tool.doit], ...)",
                         file=path)
    table = tool.get("modelbuild", {})
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
