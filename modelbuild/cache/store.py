"""A content-addressed store of build artifacts (lowered TIR, object files).

An entry is named by the digest of everything that determines its content
(see decision/fingerprint.py), so every model, variant and project on the machine can
share one store, and going back to an earlier schedule finds its artifacts.

    <root>/<kind>/<key[:2]>/<key>     header line + payload (entry_format.py)

An entry that was truncated, altered or moved to another entry's place is detected
when read, reported, deleted and rebuilt, never handed to the link.
Every payload is also checked to be what its step makes (the step's
``check``: decision/cache_entries.py, partition_output.entry_problem) before it is
used; one that is not is "corrupt: not used", like a damaged one. Entries
are written to a temporary file and renamed, so two processes filling one
entry at once both succeed. A cache that cannot be written is said once and
the build goes on without storing.

Trust: this local tier trusts the entries this machine built. An entry downloaded
from a remote is trusted as the project reading it trusts that remote: a project with
``remote-cache-public-key`` uses only the local entries built here and those whose
signature its key verifies (remote.py), whichever project's build downloaded them (one
local cache serves projects of other remotes and other keys; a key rotated after a
leak stops trusting what the old key signed). A project without a public key trusts
every entry.

Where the store lives: $MODELBUILD_CACHE, else ``cache-dir`` under
``[tool.modelbuild]`` in the project's pyproject.toml, else build/.cache.

A remote tier (remote.py) may stand behind it: a lookup that misses here asks
the remote, verifies what comes back the same way and keeps a local copy; an
entry built here is uploaded when the remote is in read-write mode.

Each doit run logs what the cache did (``log``; the log's files and readers:
events.py). No TVM here.
"""

from __future__ import annotations

import os
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ..core import atomic, regular_file, settings
from ..core.digest import bytes_digest
from ..core.errors import BuildError
from ..core.paths import Project
from ..steps import kinds
from . import entry_file
from .entry_format import (DAMAGED, INVALID, damage, earlier_format, frame, header_vouches,
                           known_reason, unframe_signed)
from .events import events_file
from .remote import FORGED, PUBLIC_KEY_SETTING, UNSIGNED, RemoteStore

ENV = settings.BY_KEY["cache-dir"].env
UNSIGNED_DOWNLOAD = "-"  # the origin a local copy of an unsigned remote entry records
UNVERIFIABLE = b""  # the trusted key when the one configured cannot be read: none verifies
LOCAL, REMOTE = "local", "remote"
UNKNOWN_ORIGIN = "unknown-origin"  # an output whose stamp does not say where it came from


@dataclass(frozen=True)
class Found:
    """What a lookup found: the payload and where (LOCAL or REMOTE), and entries not used.
    ``corrupt_*`` is False, or why the entry there is not used (a key of REASONS)."""

    payload: bytes | None = None
    source: str | None = None
    corrupt_local: bool | str = False    # the local entry exists but is not used
    corrupt_remote: bool | str = False   # the remote entry exists but is not used
    # where the payload came from: None, built on this machine; else a download, with its
    # signature or UNSIGNED_DOWNLOAD (REMOTE: now; LOCAL: what the local entry records)
    origin: str | None = None


def _invalid(check, payload: bytes) -> bool:
    """Whether ``check`` (payload -> problem or None) finds a problem; a check that fails
    counts as one: nothing read from a cache is used unchecked."""
    if check is None:
        return False
    try:
        return check(payload) is not None
    except Exception:  # noqa: BLE001 - a malformed entry must not stop the build
        return True


def location(project: Project, config: settings.Settings | None = None) -> Path:
    """The cache directory of ``project``: $MODELBUILD_CACHE as given, else ``cache-dir``
    relative to the project root, else build/.cache."""
    configured = (config or settings.resolve(project.root)).path("cache-dir")
    return configured if configured is not None else project.build_dir / ".cache"


@dataclass(frozen=True)
class Cache:
    """The local tier trusts its own entries' origin (it is the user's own disk, written by
    the user's builds and by downloads verified before they were kept), but every entry of
    either tier is checked (``check``) before it is used."""

    root: Path
    events: Path | None = None  # where this run's hits and misses are logged
    remote: RemoteStore | None = None  # the remote tier, if the project has one
    trusted_key: bytes | None = None  # remote-cache-public-key: downloads it verifies only
    _said: set = field(default_factory=set, compare=False, repr=False)  # warnings given

    @classmethod
    def of(cls, project: Project, config: settings.Settings | None = None) -> "Cache":
        """The cache of ``project`` with its settings (resolved here when not given)."""
        from .remote import configured, public_key

        config = config or settings.resolve(project.root)
        remote = configured(project, config)
        if remote is not None:
            trusted = remote.public_key
        else:  # no remote now: its key only judges what an earlier one sent (kept here)
            try:
                trusted = public_key(config)
            except BuildError:  # unreadable: no download kept here is verified, or used
                trusted = UNVERIFIABLE
        return cls(location(project, config), events_file(project), remote, trusted)

    def path(self, kind: str, key: str) -> Path:
        return self.root / kind / key[:2] / key

    def log(self, event: str, kind: str, key: str, source: str = LOCAL, why: str = "") -> None:
        if self.events is None:
            return
        line = (f"{event} {kind} {key}" + (f" {why}" if why else "")
                + (" remote" if source == REMOTE else "") + "\n")
        # One short O_APPEND write per event: lines from parallel workers do not interleave.
        # The log only feeds the summary: one that cannot be written (a full disk, a folder
        # or a pipe in its place) is left out, never the step's failure or a wait.
        try:
            self.events.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.events, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK,
                         0o666)
        except OSError:
            return
        try:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                os.write(fd, line.encode())
        except OSError:
            pass
        finally:
            os.close(fd)

    def peek(self, kind: str, key: str, remote: bool = True, check=None) -> Found:
        """Look the entry up, here then (unless ``remote`` is False) in the remote tier.
        ``check(payload)`` says what is wrong with a payload (None: nothing); an entry it
        refuses, like a damaged one or (remote) one without a trusted signature, is not used.
        Writes nothing, logs nothing."""
        try:  # an entry whose size is not its header's: its header only, damaged
            raw = entry_file.read(self.path(kind, key))
        except OSError:
            raw = None
        if earlier_format(raw):
            raw = None
        found = unframe_signed(raw, kind, key) if raw is not None else None
        payload = found[0] if found is not None else None
        corrupt_local: bool | str = False
        if payload is not None and (distrusted := self._distrusted(kind, key, *found)):
            payload, corrupt_local = None, distrusted
        elif payload is not None and _invalid(check, payload):
            payload, corrupt_local = None, INVALID
        elif raw is not None and payload is None:
            corrupt_local = damage(raw, kind, key)
        if payload is not None:
            return Found(payload, LOCAL, origin=found[1])
        if self.remote is None or not remote:
            return Found(corrupt_local=corrupt_local)
        raw = self.remote.get(kind, key)
        if raw is None or earlier_format(raw):
            return Found(corrupt_local=corrupt_local)
        found = unframe_signed(raw, kind, key)
        if found is None:
            return Found(corrupt_local=corrupt_local, corrupt_remote=damage(raw, kind, key))
        payload, signature = found
        refused = self.remote.refusal(kind, key, bytes_digest(payload), signature)
        if refused is None and _invalid(check, payload):
            refused = INVALID
        if refused is not None:
            return Found(corrupt_local=corrupt_local, corrupt_remote=refused)
        return Found(payload, REMOTE, corrupt_local, origin=signature or UNSIGNED_DOWNLOAD)

    def _distrusted(self, kind: str, key: str, payload: bytes, origin: str | None) -> str | None:
        """Why a local entry must not be used here (UNSIGNED, FORGED), None to use it: with
        a public key, a download kept here is used only when that key verifies its signature
        (another project's build, trusting another remote or none, may have kept it)."""
        if self.trusted_key is None or origin is None:
            return None  # no key: every entry is trusted; no origin: built on this machine
        return origin_refusal(self.trusted_key, kind, key, bytes_digest(payload), origin)

    def output_distrusted(self, kind: str, key: str, provenance) -> str | None:
        """Why an output in build/ whose stamp records ``provenance`` (see ``provenance``)
        must not be kept as current here (UNSIGNED, FORGED, UNKNOWN_ORIGIN), None to keep
        it. Without a public key every output is kept; with one, an output restored from a
        download is kept only when the key verifies the signature it came with: a key set
        (or changed) after a build distrusts what that build took from the store unverified.
        A signature is checked only for an output that came from the remote (one Ed25519
        verification; nothing is hashed)."""
        if self.trusted_key is None or provenance is None:
            return None
        if not isinstance(provenance, dict):
            return UNKNOWN_ORIGIN  # a stamp of an earlier modelbuild, which did not record it
        signature, digest = provenance.get("signature"), provenance.get("payload_sha256")
        if not isinstance(digest, str) or not isinstance(signature, (str, type(None))):
            return UNKNOWN_ORIGIN
        return origin_refusal(self.trusted_key, kind, key, digest,
                              signature or UNSIGNED_DOWNLOAD)

    def report_damage(self, kind: str, key: str, found: Found) -> None:
        """Log the entries a lookup did not use; a local one is removed (the build replaces
        it), a remote one is left to be replaced by the next read-write upload."""
        if found.corrupt_local:
            self.discard_corrupt(kind, key, known_reason(found.corrupt_local))
        if found.corrupt_remote:
            self.log("corrupt", kind, key, REMOTE, known_reason(found.corrupt_remote))

    def get(self, kind: str, key: str) -> bytes | None:
        """The entry's payload (see ``lookup``), None when there is none intact."""
        return self.lookup(kind, key).payload

    def lookup(self, kind: str, key: str) -> Found:
        """Look the entry up and keep it: a remote payload is stored here too, a local one
        marked used; damaged entries are reported."""
        found = self.peek(kind, key)
        self.report_damage(kind, key, found)
        if found.source == REMOTE:
            self.put_local(kind, key, found.payload, found.origin)
        elif found.source == LOCAL:
            self.touch(kind, key)
        return found

    def touch(self, kind: str, key: str) -> None:
        """Mark an entry recently used: prune removes the least recently used first."""
        try:
            os.utime(self.path(kind, key))
        except OSError:
            pass

    def discard_corrupt(self, kind: str, key: str, why: str = DAMAGED) -> None:
        """Report an entry not used (the build's summary says so) and remove it."""
        self.log("corrupt", kind, key, LOCAL, why)
        try:
            self.path(kind, key).unlink(missing_ok=True)
        except OSError:
            pass  # a cache that cannot be written: the entry stays unused

    def put_local(self, kind: str, key: str, payload: bytes, origin: str | None = None) -> None:
        """Keep a payload here (``origin``: None, built here; a download's signature, or
        UNSIGNED_DOWNLOAD); a cache that cannot be written is said once (stderr) and the
        build goes on without storing."""
        try:
            atomic.write_bytes(self.path(kind, key), frame(payload, kind, key, origin))
        except OSError as err:
            self.say_once("unwritable", f"warning: cache {self.root} cannot be written "
                          f"({err.strerror or type(err).__name__}); building without storing "
                          "artifacts in it")

    def say_once(self, what: str, message: str) -> None:
        """Print a warning on stderr once per doit run (the event log remembers it across
        doit's worker processes)."""
        if what in self._said:
            return
        self._said.add(what)
        if self.events is not None:
            try:
                if f"said {what} -" in regular_file.read_text(self.events).splitlines():
                    return
            except OSError:
                pass
            self.log("said", what, "-")
        print(message, file=sys.stderr)

    def put(self, kind: str, key: str, payload: bytes) -> None:
        """Store a payload built here; upload it too when the remote tier takes uploads
        (signed when the project has a signing key)."""
        self.put_local(kind, key, payload)
        if self._uploads():
            self._upload(kind, key, payload)

    def used_local(self, kind: str, key: str, payload: bytes, origin: str | None = None) -> None:
        """A local entry was used: marked recently used; in read-write mode, uploaded too
        when the remote lacks it, holds other bytes, or (with a public key) an entry its key
        does not verify: a CI whose local cache is warm fills a store emptied, or signed with
        a rotated key, as a cold one would (the header and the entry's size are read to
        tell: a payload cut short or padded after its header is replaced too).

        Only what this machine built, or verified with the project's public key, goes up
        (``origin``: the entry's, None for built here): a signing CI never puts its
        signature on an entry it downloaded unverified, which a store writer may have
        placed (and removed from the store since)."""
        self.touch(kind, key)
        if not self._uploads():
            return
        if origin is not None and (self.remote.public_key is None or origin_refusal(
                self.remote.public_key, kind, key, bytes_digest(payload), origin)):
            self.say_once("not-reuploaded", "note: entries this build took from its local "
                          "cache that an earlier build downloaded unverified (no "
                          f"{PUBLIC_KEY_SETTING} then) are not uploaded: this machine did "
                          "not build them, so it does not sign them")
            return
        head = self.remote.head(kind, key)
        if head is None or b"\n" not in head or not header_vouches(
                head, kind, key, bytes_digest(payload), self.remote.public_key) \
                or self.remote.size(kind, key) != head.index(b"\n") + 1 + len(payload):
            self._upload(kind, key, payload)

    def _uploads(self) -> bool:
        """Whether this build uploads (read-write, and signed where readers verify)."""
        if self.remote is None or not self.remote.writes or self.remote.down:
            return False
        refused = self.remote.upload_refusal()
        if refused is not None:
            shown = settings.without_credentials(self.remote.url)
            self.say_once("no-upload", f"warning: remote cache {shown} is read-write but "
                          f"{refused}: nothing is uploaded")
            return False
        return True

    def _upload(self, kind: str, key: str, payload: bytes) -> None:
        signature = self.remote.signature(kind, key, bytes_digest(payload))
        if self.remote.put(kind, key, frame(payload, kind, key, signature)):
            self.log("upload", kind, key, REMOTE)
        elif self.remote.linked:
            self.say_once("remote-link", f"warning: remote cache "
                          f"{settings.without_credentials(self.remote.url)}: {self.remote.linked}"
                          " is a symbolic link, not a folder of the store; nothing is uploaded "
                          "through it")

    # -- maintenance ------------------------------------------------------------
    def entries(self) -> list[tuple[Path, int, float]]:
        """(path, size, last use) of every entry: a file named by its key (64 hex digits)
        in its shard (the key's first two) of a step's section, and nothing else: the cache
        may be a folder other files live in too (`MODELBUILD_CACHE=.`, ~/.cache), and
        prune and clear remove only what this lists. A section that is a link to a folder
        (moved to a larger disk) is the cache's too: builds read and write through it."""
        found = []
        for section in SECTIONS:
            folder = self.root / section
            if not folder.is_dir():
                continue
            for path in folder.glob("??/*"):
                if _is_key(path.name) and path.parent.name == path.name[:2] \
                        and path.is_file() and not path.is_symlink():
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
        """Remove every entry (and the folders they leave empty); nothing else."""
        entries = self.entries()
        for path, _, _ in entries:
            path.unlink(missing_ok=True)
        for folder in {p.parent for p, _, _ in entries}:
            for empty in (folder, folder.parent):
                try:
                    empty.rmdir()
                except OSError:
                    pass  # not empty: another writer's temporary file, or not ours
        return len(entries), sum(size for _, size, _ in entries)


def origin_refusal(public_key: bytes, kind: str, key: str, payload_digest: str,
                   origin: str) -> str | None:
    """Why a download of ``origin`` (its signature, or UNSIGNED_DOWNLOAD) is not the
    public key's owner's: UNSIGNED, FORGED; None when the key verifies it."""
    if origin == UNSIGNED_DOWNLOAD:
        return UNSIGNED
    from . import signing

    return None if signing.verify(public_key, kind, key, payload_digest, origin) else FORGED


def provenance(origin: str | None, payload: bytes) -> dict | None:
    """What a step's stamp records of where its output came from: None, built on this
    machine (or restored from an entry built here); else the download's signature (None:
    unsigned) and its payload's sha256, which the signature covers."""
    if origin is None:
        return None
    return {"signature": None if origin == UNSIGNED_DOWNLOAD else origin,
            "payload_sha256": bytes_digest(payload)}


SECTIONS = tuple(k.cache for k in kinds.PIPELINE if k.cache)  # the cache's own folders
_HEX = frozenset("0123456789abcdef")


def _is_key(name: str) -> bool:
    return len(name) == 64 and set(name) <= _HEX
