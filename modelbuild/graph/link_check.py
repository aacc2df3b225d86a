"""The link's library, checked by content: its stamp records the library's sha256 and the
sha256 of every input it was linked from (the workloads' objects, the graph's files). The
link's ``uptodate`` check fails when the file no longer holds those bytes (truncated,
edited, replaced) or when the inputs now are not those it was linked from, so the next
build relinks it. ``why`` names the same problems.

The stamp is the record of what the library is made of, not doit's state: doit saves its
state when a run ends, so a run killed after a link (or two builds of one project at
once, the last to end saving its view) could leave doit believing the library was linked
from other objects than it was.

A file is hashed only when its size, mtime, ctime or inode changed since it was last
checked (core/filecheck.py): a no-op build of a large model does not hash ~100 MB.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..core import atomic, filecheck
from ..core.digest import file_digest
from ..core.errors import BuildError
from ..decision import fingerprint
from . import doit_state


def linked(run, artifacts: list[Path], graph: list[Path], library: Path, target_spec,
           config: dict, checked: Path | None = None) -> None:
    """Link (``run``, steps/link.py) and stamp the library with its digest and its inputs'.
    The inputs are read before the link; one replaced while the link ran (another build of
    the project at the same time) leaves the library unstamped, so the next build relinks.
    ``checked``: the memo of files partition's check verified (the graph's objects), whose
    digests are taken as the library's own records are, for files still as they were."""
    inputs = [*artifacts, *graph]
    previous = (fingerprint.read_stamp(library) or {}).get("linked_from")
    verified = filecheck.read_checked(checked) if checked is not None else {}
    before = _state(inputs, previous if isinstance(previous, dict) else {}, verified)
    fingerprint.stamp_path(library).unlink(missing_ok=True)
    run(artifacts, graph, library, target_spec)
    # another build of the project may have replaced an input meanwhile: with the same bytes
    # (the same step, run twice at once) the library is still the one recorded
    after = _state(inputs, before)
    changed = [p for p in inputs if after[str(p)][1] != before[str(p)][1]]
    if changed:
        raise BuildError(f"{changed[0]} changed while the link read it (another build of this "
                         "project at the same time?)", hint="run the build again")
    record(library, config, after)


def _state(inputs: list[Path], *known: dict) -> dict:
    """{path: [signature, sha256]} of ``inputs`` now; one whose signature a ``known`` map
    recorded keeps the digest recorded with it, unread."""
    out = {}
    for path in inputs:
        sig = filecheck.signature(path)
        if sig is None:
            raise BuildError(f"the link's input {path} is missing",
                             hint="run the build again: the step that makes it reruns")
        same = (entry for memo in known
                if _digest(entry := memo.get(str(path))) and entry[0] == sig)
        out[str(path)] = next(same, None) or [sig, file_digest(path)]
    return out


def record(library: Path, config: dict, inputs: dict) -> None:
    """The stamp beside the library: its digest, and ``inputs`` ({path: [signature,
    sha256]} of what it was linked from)."""
    digest = file_digest(library)
    _write(library, {"key": fingerprint.key(config), "output_sha256": digest, "inputs": config,
                     "checked": [filecheck.signature(library), digest], "linked_from": inputs})


def _write(library: Path, stamp: dict) -> None:
    atomic.write_text(fingerprint.stamp_path(library), json.dumps(stamp, sort_keys=True, indent=1))


def linked_digests(library: Path) -> dict:
    """{input path: sha256} of what the library was last linked from, as its stamp records
    it ({} without one)."""
    linked_from = (fingerprint.read_stamp(library) or {}).get("linked_from")
    if not isinstance(linked_from, dict):
        return {}
    return {path: _digest(entry) for path, entry in linked_from.items() if _digest(entry)}


def _digest(entry) -> str | None:
    """The sha256 of a ``linked_from`` entry ([signature, sha256]), None if it is not one."""
    ok = isinstance(entry, list) and len(entry) == 2 and isinstance(entry[1], str)
    return entry[1] if ok else None


def problems(library: Path, inputs: list[Path], refresh: bool = False,
             will_be: dict | None = None) -> list[str]:
    """Why the library is not the one its last link made from ``inputs`` as they are now
    ([] when it is). ``refresh``: remember successful checks in the stamp (the build does;
    ``why`` writes nothing). ``will_be``: {path: sha256} of inputs an earlier step puts
    back before the link runs (``why``'s prediction), taken as they will be."""
    stamp = fingerprint.read_stamp(library)
    digest = (stamp or {}).get("output_sha256")
    linked_from = (stamp or {}).get("linked_from")
    if not isinstance(digest, str) or not isinstance(linked_from, dict):
        return [f"no digest of {library} or of its inputs in its stamp (built by an older "
                "modelbuild, or interrupted)"]
    previous = stamp.get("checked")
    checked = {str(library): previous} if previous else {}
    ok = filecheck.matches(library, digest, checked)
    if ok is None:
        return [f"output missing: {library}"]
    if not ok:
        return [f"output modified since it was built: {library} (not the bytes the link wrote)"]
    found = _inputs_problem(inputs, linked_from, checked, will_be or {})
    if found:
        return [found]
    memo = {k: checked[k] for k in linked_from if k in checked}
    if refresh and (checked.get(str(library)) != previous or memo != linked_from):
        try:
            _write(library, {**stamp, "checked": checked[str(library)], "linked_from": memo})
        except OSError:
            pass  # a memo only: the files are hashed again next time
    return []


def _inputs_problem(inputs: list[Path], linked_from: dict, checked: dict,
                    will_be: dict) -> str | None:
    """Why ``inputs`` now are not those the library was linked from (``linked_from``, as
    the stamp recorded them; ``checked`` gets what was verified); None when they are."""
    if sorted(linked_from) != sorted(map(str, inputs)):
        return "the link's inputs are not those it was linked from (workloads came or went)"
    for path in inputs:
        recorded = linked_from[str(path)]
        if _digest(recorded) is None:
            return f"no digest of the link's input {path} in the library's stamp"
        if str(path) in will_be:
            if will_be[str(path)] != recorded[1]:
                return f"the link's input {path} will not be the one the library was linked from"
            continue
        checked[str(path)] = recorded
        if not filecheck.matches(path, recorded[1], checked):
            return f"the link's input {path} is not the one the library was linked from"
    return None


@dataclass(frozen=True)
class LibraryIntact:
    """doit ``uptodate`` check of a link task: the library is the one the link wrote, from
    the inputs there are now."""

    library: Path
    inputs: tuple

    def __call__(self) -> bool:
        return not problems(self.library, list(self.inputs), refresh=True)


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
