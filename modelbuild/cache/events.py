"""The cache's event log: what the cache did in a doit run, read for the build's summary.

Each doit run logs what the cache did to build/.cache-events (one line per
event: ``hit|miss|corrupt|upload <kind> <key> [remote]``), read for the summary
and by ``python -m modelbuild cache stats``. No TVM here.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from ..core import atomic, regular_file
from ..core.digits import is_decimal
from ..core.paths import Project
from .entry_format import DAMAGED, FORGED, REASONS, UNSIGNED, known_reason

EVENTS = ("hit", "miss", "corrupt", "upload")


def events_file(project: Project) -> Path:
    """The event log of the last doit run that finished (``modelbuild cache`` reads it)."""
    return project.build_dir / ".cache-events"


def run_events_file(project: Project, run: int) -> Path:
    """The event log of one doit run (``run``: its main process's pid; its workers log
    there too): two runs of one project at once (other models, other layouts) each count
    their own hits and misses."""
    return project.build_dir / f".cache-events.{run}"


# A run's own log outlives it this long (``modelbuild sweep`` reads it after the run).
_RUN_LOG_KEPT_S = 600.0


def start_run(project: Project, run: int) -> None:
    """Doit run ``run`` begins: its own event log, empty. Logs of runs that ended a while
    ago (or were killed) are removed."""
    path = run_events_file(project, run)
    if not path.parent.is_dir():
        return
    for old in path.parent.glob(".cache-events.*"):
        pid = old.name.rsplit(".", 1)[-1]
        if old != path and is_decimal(pid) and not _alive(int(pid)) and _older(old):
            try:
                old.unlink(missing_ok=True)
            except OSError:
                pass  # a folder there, a read-only build/: left, the run goes on
    try:
        atomic.write_bytes(path, b"")
    except OSError:
        pass  # a folder in its place, a full disk: the summary goes without the counts


def end_run(project: Project, run: int) -> None:
    """Run ``run`` ended: its log becomes the last build's (events_file); one it could not
    write leaves the last build with no events, not an earlier build's."""
    try:
        logged = regular_file.read_text(run_events_file(project, run)).encode()
    except OSError:
        logged = b""
    try:
        atomic.write_bytes(events_file(project), logged)
    except OSError:
        pass  # a folder in its place, a full disk: cache stats says nothing of this run


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False  # no such process (or no pid this system can have)
    except OSError:
        return True  # another user's process
    return True


def _older(path: Path) -> bool:
    try:
        return time.time() - path.stat().st_mtime > _RUN_LOG_KEPT_S
    except OSError:
        return False


def _events(project: Project, run: int | None = None) -> list[list[str]] | None:
    path = events_file(project) if run is None else run_events_file(project, run)
    try:
        lines = regular_file.read_text(path).splitlines()
    except OSError:
        return None
    return [line.split(" ") for line in lines if line.count(" ") >= 2]


def last_run(project: Project, run: int | None = None) -> dict[str, int] | None:
    """Counts of each event in the last build (``run``: in that doit run), or None when none
    was logged. ``hit`` counts every restore; ``remote_hit`` those that came from the remote
    tier, ``remote_corrupt`` the damaged remote entries met, ``upload`` the entries sent to
    it."""
    events = _events(project, run)
    if events is None:
        return None
    counts = dict.fromkeys((*EVENTS, "remote_hit", "remote_corrupt"), 0)
    for e in events:
        event, remote = e[0], e[-1] == "remote"
        if event == "corrupt" and remote:
            counts["remote_corrupt"] += 1
        elif event in counts:
            counts[event] += 1
            if event == "hit" and remote:
                counts["remote_hit"] += 1
    return counts


def _corrupt(project: Project, run: int | None) -> list[tuple[str, bool, str]]:
    out = []
    for e in _events(project, run) or []:
        if e[0] == "corrupt":
            words = [w for w in e[3:] if w != "remote"]
            out.append((f"{e[1]}/{e[2]}", e[-1] == "remote", known_reason(words[0] if words
                                                                           else DAMAGED)))
    return out


LOCAL_COPY, REMOTE_ENTRY, BOTH = "local", "remote", "both"  # where an entry not used was
# the reasons a changed remote-cache-public-key gives every entry: said in one line
UNTRUSTED = frozenset(REASONS[r] for r in (UNSIGNED, FORGED))


def refused_entries(project: Project, run: int | None = None) -> list[tuple[str, str, str]]:
    """(``kind/key``, where: LOCAL_COPY, REMOTE_ENTRY or BOTH, why in words), once per entry
    and reason, of the entries the last build (``run``: that doit run) did not use: a copy
    kept here refused for the reason its remote entry was (a changed public key) is one."""
    where: dict[tuple[str, str], set[bool]] = {}
    for entry, remote, reason in _corrupt(project, run):
        where.setdefault((entry, reason), set()).add(remote)
    return [(entry, BOTH if len(tiers) == 2 else REMOTE_ENTRY if True in tiers else LOCAL_COPY,
             REASONS[reason]) for (entry, reason), tiers in where.items()]
