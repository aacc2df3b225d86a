"""The link as a decided step, checked by content: its stamp records the library's sha256
and the sha256 of every input it was linked from (the workloads' objects, the graph's
files). ``Link.decide`` is its decision, as ``Step.decide`` is the other steps' (the same
protocol: cached_step.Uptodate acts on it in the build, ``why`` reports it): the library
is current when its stamp's settings are the link's settings now, the file holds the
bytes the link wrote, and the inputs now are those it was linked from; else the link
runs. The link has no cache entry: there is nothing to restore.

The stamp is the record of what the library is made of, not doit's state: doit saves its
state when a run ends, so a run killed after a link (or two builds of one project at
once, the last to end saving its view) could leave doit believing the library was linked
from other objects than it was. doit's state plays no part in the decision.

A file is hashed only when its size, mtime, ctime or inode changed since it was last
checked (core/filecheck.py): a no-op build of a large model does not hash ~100 MB.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from ..core import atomic, filecheck
from ..core.digest import file_digest
from ..core.errors import BuildError
from . import fingerprint
from .cached_step import CURRENT, RUN, Decision


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
        same = (entry for memo in known if _verified(entry := memo.get(str(path)), sig))
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


def _verified(entry, sig: list[int]) -> bool:
    """Whether ``entry`` ([signature, sha256]) records the digest of a file whose signature
    is ``sig`` now."""
    return _digest(entry) is not None and entry[0] == sig


@dataclass(frozen=True)
class Link:
    """The link of one model, decided as cached_step.Step decides the other steps (the
    same protocol: ``decide(explain)`` returns a Decision, CURRENT or RUN, with its
    reasons when asked). Its inputs: the link's settings and the sha256 of every file it
    links; its output: the library; its stamp: the one ``record`` writes beside it."""

    task: str
    output: Path                 # the library
    config: dict                 # the link's settings (Context.link_config)
    objects: tuple               # the workloads' objects, in the manifest's order
    graph: tuple                 # the graph's files
    verified: Path | None = None  # partition's memo of the graph files it verified
    # `why`'s prediction, {path: sha256 once the steps before the link ran}: an input an
    # earlier step puts in place, taken as it will be (None: an earlier step may change it,
    # and its reason says so; not judged here)
    will_be: dict | None = None
    refresh: bool = False        # the build's check: remember the files it verified
    why: Callable | None = None  # (step, stamp, decision) -> list of reasons (reasons.link)

    @property
    def files(self) -> tuple:
        return (*self.objects, *self.graph)

    def current_inputs(self, stamp: dict | None) -> dict | None:
        """The link's settings and {path: [signature, sha256]} of each file it links now
        (None when one is missing). A file whose signature the library's stamp or
        partition's memo recorded keeps the digest recorded with it, unread; one in
        ``will_be`` is taken as it will be, [None, sha256 or None]."""
        known, will_be, verified, state = _linked_from(stamp), self.will_be or {}, None, {}
        for path in map(str, self.files):
            if path in will_be:
                state[path] = [None, will_be[path]]
                continue
            sig = filecheck.signature(path)
            if sig is None:
                return None
            entry = known.get(path)
            if not _verified(entry, sig):  # partition's memo, read once, when it is needed
                verified = verified if verified is not None else (
                    filecheck.read_checked(self.verified) if self.verified else {})
                entry = verified.get(path)
            if not _verified(entry, sig):
                try:
                    digest, stable = filecheck.hashed(Path(path))
                except OSError:
                    return None
                entry = [stable, digest]
            state[path] = entry
        return {"config": self.config, "linked_from": state}

    def decide(self, explain: bool = False) -> Decision:
        """Current (the stamp's settings are the link's now, the library is the one the
        link wrote, from the inputs there are now) or run. Nothing is written, but for the
        build's check (``refresh``) the memo of what it verified."""
        stamp = fingerprint.read_stamp(self.output)
        inputs = self.current_inputs(stamp)
        checked: dict = {}
        if not self.problems(stamp, inputs, checked) and stamp["key"] == fingerprint.key(
                self.config):
            if self.refresh:
                _remember(self.output, stamp, inputs["linked_from"], checked)
            return Decision(CURRENT, inputs)
        decision = Decision(RUN, inputs)
        if not explain or self.why is None:
            return decision
        return replace(decision, reasons=tuple(self.why(self, stamp, decision)))

    def problems(self, stamp: dict | None, inputs: dict | None,
                 checked: dict | None = None) -> list[str]:
        """Why the library is not the one its last link made from ``inputs``
        (``current_inputs``), in words ([] when it is); the settings aside. ``checked``
        gets the library's signature once verified."""
        library, checked = self.output, {} if checked is None else checked
        digest = (stamp or {}).get("output_sha256")
        linked_from = (stamp or {}).get("linked_from")
        if not isinstance(digest, str) or not isinstance(linked_from, dict):
            return [*([] if library.exists() else [f"output missing: {library}"]),
                    f"no digest of {library} or of its inputs in its stamp (built by an older "
                    "modelbuild, or interrupted)"]
        if stamp.get("checked"):
            checked[str(library)] = stamp["checked"]
        ok = filecheck.matches(library, digest, checked)
        if ok is None:
            return [f"output missing: {library}"]
        if not ok:
            return [f"output modified since it was built: {library} (not the bytes the link "
                    "wrote)"]
        found = self._inputs_problem(inputs, linked_from)
        return [found] if found else []

    def _inputs_problem(self, inputs: dict | None, linked_from: dict) -> str | None:
        """Why ``inputs`` are not those the library was linked from (``linked_from``, as
        the stamp recorded them); None when they are."""
        if inputs is None:
            missing = next((p for p in self.files if filecheck.signature(p) is None
                            and str(p) not in (self.will_be or {})), None)
            return (f"the link's input {missing} is missing" if missing is not None
                    else "an input of the link could not be read")
        now = inputs["linked_from"]
        if linked_from.keys() != now.keys():
            return "the link's inputs are not those it was linked from (workloads came or went)"
        for path, (_, digest) in now.items():
            recorded = _digest(linked_from[path])
            if recorded is None:
                return f"no digest of the link's input {path} in the library's stamp"
            if digest is not None and digest != recorded:
                will = "will not be" if path in (self.will_be or {}) else "is not"
                return f"the link's input {path} {will} the one the library was linked from"
        return None


def _linked_from(stamp: dict | None) -> dict:
    linked_from = (stamp or {}).get("linked_from")
    return linked_from if isinstance(linked_from, dict) else {}


def _remember(library: Path, stamp: dict, linked_from: dict, checked: dict) -> None:
    """Keep the signatures of the files just verified in the library's stamp: a no-op
    build after a copy (or a `touch`) hashes them once, not every time."""
    memo = {**stamp["linked_from"],
            **{path: entry for path, entry in linked_from.items() if entry[0] is not None}}
    if checked.get(str(library)) == stamp.get("checked") and memo == stamp["linked_from"]:
        return
    try:
        _write(library, {**stamp, "checked": checked[str(library)], "linked_from": memo})
    except OSError:
        pass  # a memo only: the files are hashed again next time


def problems(library: Path, inputs: list[Path]) -> list[str]:
    """Why the library is not the one its last link made from ``inputs`` as they are now
    ([] when it is), its settings aside; read only."""
    step = Link(f"link of {library}", library, {}, tuple(inputs), ())
    stamp = fingerprint.read_stamp(library)
    return step.problems(stamp, step.current_inputs(stamp))
