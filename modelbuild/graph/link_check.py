"""The link's library, checked by content: its stamp records the library's sha256, and the
link's ``uptodate`` check fails when the file no longer holds those bytes (truncated,
edited, replaced), so the next build relinks it. ``why`` names the same problem.

The library is hashed only when its size, mtime or ctime changed since it was last
checked (core/filecheck.py): a no-op build of a large model does not hash ~100 MB.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..core import atomic, filecheck
from ..core.digest import file_digest
from . import doit_state, fingerprint


def record(library: Path, config: dict) -> None:
    """The link's last action: the stamp beside the library, with its digest."""
    digest = file_digest(library)
    _write(library, {"key": fingerprint.key(config), "output_sha256": digest, "inputs": config,
                     "checked": [filecheck.signature(library), digest]})


def _write(library: Path, stamp: dict) -> None:
    atomic.write_text(fingerprint.stamp_path(library), json.dumps(stamp, sort_keys=True, indent=1))


def problems(library: Path, refresh: bool = False) -> list[str]:
    """Why the library is not the one its last link made ([] when it is). ``refresh``:
    remember a successful check in the stamp (the build does; ``why`` writes nothing)."""
    stamp = fingerprint.read_stamp(library)
    digest = (stamp or {}).get("output_sha256")
    if not isinstance(digest, str):
        return [f"no digest of {library} in its stamp (built by an older modelbuild, "
                "or interrupted)"]
    previous = stamp.get("checked")
    checked = {str(library): previous} if previous else {}
    ok = filecheck.matches(library, digest, checked)
    if ok is None:
        return [f"output missing: {library}"]
    if not ok:
        return [f"output modified since it was built: {library} (not the bytes the link wrote)"]
    if refresh and checked.get(str(library)) != previous:
        try:
            _write(library, {**stamp, "checked": checked[str(library)]})
        except OSError:
            pass  # a memo only: the library is hashed again next time
    return []


@dataclass(frozen=True)
class LibraryIntact:
    """doit ``uptodate`` check of a link task: the library is the one the link wrote."""

    library: Path

    def __call__(self) -> bool:
        return not problems(self.library, refresh=True)


def relinks_after_restore(db: Path, layout, payload: bytes, graph_objects) -> bool:
    """Whether restoring partition's cache entry ``payload`` gives the link other graph
    objects than it last linked (doit compares their md5 with its state in ``db``)."""
    import hashlib

    import msgpack
    from doit.dependency import Dependency, MD5Checker, SqliteDB

    files = msgpack.unpackb(payload)
    rels = [str((layout.graph_dir / name).relative_to(layout.partition_dir))
            for name in graph_objects]
    if (not db.is_file() or doit_state.problem(db) is not None
            or not all(isinstance(files.get(rel), bytes) for rel in rels)):
        return True
    dep = Dependency(SqliteDB, str(db), checker_cls=MD5Checker)
    try:
        for rel in rels:
            state = dep._get(f"link:{layout.name}", str(layout.partition_dir / rel))
            if not state or state[2] != hashlib.md5(files[rel]).hexdigest():
                return True
    finally:
        dep.close()
    return False
