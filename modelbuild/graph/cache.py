"""A content-addressed store of build artifacts (lowered TIR, object files).

An entry is named by the digest of everything that determines its content
(see fingerprint.py), so every model, variant and project on the machine can
share one store, and going back to an earlier schedule finds its artifacts.

    <root>/<kind>/<key[:2]>/<key>     header line + payload

The header carries the payload's sha256 and size: an entry that was
truncated or altered is detected when read, reported, deleted and rebuilt,
never handed to the link. Entries are written to a temporary file and
renamed, so two processes filling one entry at once both succeed.

Where the store lives: $MODELBUILD_CACHE, else ``cache-dir`` under
``[tool.modelbuild]`` in the project's pyproject.toml, else build/.cache.

Each doit run logs what the cache did to build/.cache-events (one line per
event: ``hit|miss|corrupt <kind> <key>``), read for the summary and by
``python -m modelbuild cache stats``. No TVM here.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from ..core import atomic, settings
from ..core.digest import bytes_digest
from ..core.layout import Project

ENV = "MODELBUILD_CACHE"
_MAGIC = b"modelbuild-cache/1"
EVENTS = ("hit", "miss", "corrupt")


def location(project: Project) -> Path:
    """The cache directory of ``project`` (absolute when configured, else under build/)."""
    configured = os.environ.get(ENV)
    if configured:
        return Path(configured).expanduser()
    table = settings.read(project.root)
    if "cache-dir" in table:
        return project.root / Path(str(table["cache-dir"])).expanduser()
    return project.build_dir / ".cache"


def events_file(project: Project) -> Path:
    return project.build_dir / ".cache-events"


@dataclass(frozen=True)
class Cache:
    root: Path
    events: Path | None = None  # where this run's hits and misses are logged

    @classmethod
    def of(cls, project: Project) -> "Cache":
        return cls(location(project), events_file(project))

    def path(self, kind: str, key: str) -> Path:
        return self.root / kind / key[:2] / key

    def log(self, event: str, kind: str, key: str) -> None:
        if self.events is None:
            return
        self.events.parent.mkdir(parents=True, exist_ok=True)
        # One short O_APPEND write per event: lines from parallel workers do not interleave.
        fd = os.open(self.events, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        try:
            os.write(fd, f"{event} {kind} {key}\n".encode())
        finally:
            os.close(fd)

    def peek(self, kind: str, key: str) -> tuple[bool, bytes | None]:
        """(entry exists, its payload if intact); reads only: no log, no repair."""
        try:
            raw = self.path(kind, key).read_bytes()
        except OSError:
            return False, None
        header, _, payload = raw.partition(b"\n")
        parts = header.split(b" ")
        intact = (len(parts) == 3 and parts[0] == _MAGIC and parts[2] == str(len(payload)).encode()
                  and parts[1].decode(errors="replace") == bytes_digest(payload))
        return True, payload if intact else None

    def get(self, kind: str, key: str) -> bytes | None:
        """The entry's payload, or None when absent or corrupt (a corrupt one is removed)."""
        exists, payload = self.peek(kind, key)
        if exists and payload is None:
            self.discard_corrupt(kind, key)
        elif payload is not None:
            self.touch(kind, key)
        return payload

    def touch(self, kind: str, key: str) -> None:
        """Mark an entry recently used: prune removes the least recently used first."""
        try:
            os.utime(self.path(kind, key))
        except OSError:
            pass

    def discard_corrupt(self, kind: str, key: str) -> None:
        """Report a damaged entry (the build's summary says so) and remove it."""
        self.log("corrupt", kind, key)
        self.path(kind, key).unlink(missing_ok=True)

    def put(self, kind: str, key: str, payload: bytes) -> None:
        path = self.path(kind, key)
        header = b"%s %s %d\n" % (_MAGIC, bytes_digest(payload).encode(), len(payload))
        atomic.write_bytes(path, header + payload)

    # -- maintenance ------------------------------------------------------------
    def entries(self) -> list[tuple[Path, int, float]]:
        """(path, size, last use) of every entry."""
        found = []
        if self.root.is_dir():
            for path in self.root.glob("*/??/*"):
                if path.is_file() and not path.name.startswith("."):
                    st = path.stat()
                    found.append((path, st.st_size, st.st_mtime))
        return found

    def prune(self, max_bytes: int) -> tuple[int, int]:
        """Remove least recently used entries until the cache holds at most ``max_bytes``.
        Returns (entries removed, bytes freed)."""
        entries = sorted(self.entries(), key=lambda e: e[2])
        total = sum(size for _, size, _ in entries)
        removed = freed = 0
        for path, size, _ in entries:
            if total <= max_bytes:
                break
            path.unlink(missing_ok=True)
            total -= size
            removed += 1
            freed += size
        return removed, freed

    def clear(self) -> tuple[int, int]:
        entries = self.entries()
        if self.root.is_dir():
            for child in self.root.iterdir():
                if child.is_dir():
                    shutil.rmtree(child, ignore_errors=True)
        return len(entries), sum(size for _, size, _ in entries)


def start_run(project: Project) -> None:
    """A doit run begins: the event log describes the last build only."""
    path = events_file(project)
    if path.parent.is_dir():
        atomic.write_bytes(path, b"")


def last_run(project: Project) -> dict[str, int] | None:
    """Counts of each event in the last build, or None when none was logged."""
    path = events_file(project)
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    counts = dict.fromkeys(EVENTS, 0)
    for line in lines:
        event = line.split(" ", 1)[0]
        if event in counts:
            counts[event] += 1
    return counts


def corrupt_entries(project: Project) -> list[str]:
    """``kind/key`` of each corrupt entry the last build found (and rebuilt)."""
    try:
        lines = events_file(project).read_text().splitlines()
    except OSError:
        return []
    return [f"{p[1]}/{p[2]}" for p in (ln.split(" ") for ln in lines)
            if len(p) == 3 and p[0] == "corrupt"]
