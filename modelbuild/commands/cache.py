"""`python -m modelbuild cache stats|prune|clear|keygen`: the artifact cache."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.markup import escape

from ..cache import events, signing
from ..cache.store import Cache
from ..core import settings
from ..core.errors import BuildError
from ..core.units import format_size, parse_size
from . import options
from .output import console
from .workspace import project_of

HELP = "the artifact cache: stats, prune --max-size SIZE, clear, keygen DIR (a key pair signing the remote cache)"


def arguments(p: argparse.ArgumentParser) -> None:
    """This command's arguments (``python -m modelbuild cache --help``)."""
    p.add_argument("action", choices=("stats", "prune", "clear", "keygen"))
    p.add_argument("folder", nargs="?", help="keygen: where to write the key pair")
    p.add_argument("--max-size", help="prune: keep at most this much (e.g. 500M, 2G)")
    options.json_output(p, "stats: machine-readable output")


def keygen(folder: str | None) -> int:
    """A key pair for signing the remote cache: the private key for CI, the public for the repo."""
    if not folder:
        raise BuildError("cache keygen needs a folder", hint="e.g. cache keygen keys/")
    private, public = signing.keygen(Path(folder))
    console.print(escape(f"wrote {private} (private, mode 0600: a secret file for CI only, "
                         "named by MODELBUILD_REMOTE_CACHE_SIGNING_KEY; never commit it)"))
    console.print(escape(f"wrote {public} (public: commit it and set remote-cache-public-key = "
                         f"\"<its path from the project root>\" under [tool.modelbuild])"))
    return 0


def run(args) -> int:
    if args.folder is not None and args.action != "keygen":  # `cache clear models` cleared all
        raise BuildError(f"cache {args.action} takes no folder ({args.folder!r}): only keygen does",
                         hint=f"python -m modelbuild cache {args.action}")
    if args.max_size is not None and args.action != "prune":
        raise BuildError(f"--max-size is for cache prune, not cache {args.action}")
    if args.action == "keygen":
        return keygen(args.folder)
    project = project_of(args)
    store = Cache.of(project)
    if store.root.exists() and not store.root.is_dir():
        raise BuildError("not a folder: the artifact cache cannot be there", file=store.root,
                         hint="point MODELBUILD_CACHE (or cache-dir) at a folder, or move "
                              "the file away")
    if args.action == "clear":
        count, size = store.clear()
        console.print(f"cache {store.root}: removed {count} entries ({format_size(size)})")
        return 0
    if args.action == "prune":
        if args.max_size is None:
            raise BuildError("cache prune needs --max-size", hint="e.g. --max-size 500M")
        try:
            limit = parse_size(args.max_size)
        except ValueError as err:
            raise BuildError(str(err)) from None
        count, size = store.prune(limit)
        console.print(f"cache {store.root}: removed {count} least recently used entries "
                      f"({format_size(size)}); limit {format_size(limit)}")
        return 0
    entries = store.entries()
    kinds: dict[str, list[int]] = {}
    for path, size, _ in entries:
        kinds.setdefault(path.parent.parent.name, []).append(size)
    last = events.last_run(project)
    stats = {"location": str(store.root), "entries": len(entries),
             "remote": ({"url": settings.without_credentials(store.remote.url),
                         "mode": store.remote.mode,
                         "verifies_signatures": store.remote.public_key is not None,
                         "signs_uploads": store.remote.signing_key is not None}
                        if store.remote is not None else None),
             "bytes": sum(size for _, size, _ in entries),
             "kinds": {k: {"entries": len(v), "bytes": sum(v)} for k, v in sorted(kinds.items())},
             "last_build": last}
    if args.json:
        print(json.dumps(stats, indent=2))
        return 0
    console.print(f"cache {stats['location']}: {stats['entries']} entries, {format_size(stats['bytes'])}")
    for kind, info in stats["kinds"].items():
        console.print(f"  {kind}: {info['entries']} entries, {format_size(info['bytes'])}")
    if last is None:
        console.print("last build: no record of one in this project")
    else:
        console.print(f"last build: {last['hit']} hits ({last['remote_hit']} from the remote), "
                      f"{last['miss']} misses, {last['corrupt']} corrupt local entries rebuilt, "
                      f"{last['remote_corrupt']} corrupt remote entries not used, "
                      f"{last['upload']} uploaded")
    if store.remote is not None:
        trust = ("only entries signed by remote-cache-public-key's owner"
                 if store.remote.public_key is not None else "trusts every writer")
        shown = settings.without_credentials(store.remote.url)
        console.print(f"remote: {shown} ({store.remote.mode}; {trust})")
    return 0
