"""The remote tier of the artifact cache: the same entries, on any fsspec store.

    [tool.modelbuild]
    remote-cache = "s3://bucket/prefix"     # or gs://..., file:///mnt/shared/...
    remote-cache-mode = "read"              # or "read-write" (CI fills it, laptops read)
    remote-cache-timeout = 10               # seconds per request
    remote-cache-public-key = "keys/remote-cache.pub"   # only entries signed by its owner

($MODELBUILD_REMOTE_CACHE, $MODELBUILD_REMOTE_CACHE_MODE and
$MODELBUILD_REMOTE_CACHE_TIMEOUT override them.) Entries are stored exactly as in
the local cache, ``<url>/<kind>/<key[:2]>/<key>``, header and all, so a download
is verified like a local read before it is used.

With a public key configured (signing.py), a download is used only when
its header carries a signature of (kind, key, payload sha256) by the matching
private key; uploads are signed with the private key in the file
$MODELBUILD_REMOTE_CACHE_SIGNING_KEY names (never a setting in pyproject.toml,
which is committed), and without it a read-write store gets no uploads. Without
a public key, every entry with a correct sha256 is trusted: whoever can write
the store decides what readers link.

A store that is down, slow or refuses us never fails a build: the first
failure is reported once (to stderr) and the store is not asked again by this
process; the build goes on locally. Each request runs in a thread of its own that
the process does not wait for at exit: a store that trickles bytes, or a pipe in
a shared folder, cannot keep a finished build from ending. A download reads the
entry's header line first (entry_file.py): an entry whose size on the store is not its
header's plus the payload size it declares is damaged, found without reading its
payload, and one declaring more than ``limit(kind)`` bytes is a miss (no step makes
one; it runs here): a workload's lowered TIR or object is at most megabytes, so 64 MB;
a partition entry, which holds the model's weights, 1 GB. A read from a shared folder
stops when its request is given up (the timeout), so what it read is not kept past it.

A shared folder (file://) is written as a tree of plain folders: a kind or shard folder
that is a symbolic link gets no upload (``linked`` names it; the cache says so once per
run), so a link planted in the store cannot send a read-write build's entries elsewhere.

Credentials and endpoints come the way the store's own tools take them (for S3: AWS_*
environment variables, ~/.aws); a URL's user and password, if any, are never printed.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from urllib.parse import urlsplit

from ..core import regular_file, settings
from ..core.errors import BuildError
from ..core.paths import Project
from . import entry_file, signing
from .entry_format import declared_size
from .entry_format import FORGED, HEADER_BYTES, UNSIGNED  # noqa: F401 - store.py's words too

MODES = settings.REMOTE_CACHE_MODES
DEFAULT_TIMEOUT = settings.BY_KEY["remote-cache-timeout"].default
SIGNING_KEY_ENV = settings.BY_KEY["remote-cache-signing-key"].env
PUBLIC_KEY_SETTING = "remote-cache-public-key"
WORKLOAD_ENTRY_LIMIT = 64 << 20  # a lowered or object entry: kilobytes to a few megabytes
# A partition entry holds the model's weights, its workloads and graph: about 100 MB
# for resnet50, 570 MB for vgg19. Its file sizes cannot bound it (the onnx package's models
# make their weights from a few bytes each). A larger entry only costs a partition here.
PARTITION_ENTRY_LIMIT = 1 << 30
# An object store's entry is asked for in one request of this many first bytes (most
# entries whole), then the rest once its header line vouches for the size.
_FIRST_READ = 1 << 20


class RemoteStore:
    """One remote cache, as this process sees it: usable until its first failure."""

    def __init__(self, url: str, mode: str = "read", timeout: float = DEFAULT_TIMEOUT,
                 public_key: bytes | None = None, signing_key: bytes | None = None):
        if mode not in MODES:
            raise BuildError(f"remote-cache-mode must be one of {', '.join(MODES)}, not '{mode}'",
                             hint=settings.hint("remote-cache-mode"))
        self.url = url.rstrip("/")
        self.mode = mode
        self.timeout = timeout
        self._fs = None
        self._root = ""
        self._down: str | None = None   # why the store is not used any more
        self._pid = os.getpid()         # the process self._fs was made in
        self.public_key = public_key    # raw Ed25519 key: only entries it verifies are used
        self.signing_key = signing_key  # raw Ed25519 private key: uploads are signed with it
        self.linked: str | None = None  # a folder of a shared folder's tree found to be a link

    # a store crosses into doit's worker processes: its connection does not
    def __getstate__(self):
        return {"url": self.url, "mode": self.mode, "timeout": self.timeout,
                "public_key": self.public_key, "signing_key": self.signing_key}

    def __setstate__(self, state):
        self.__init__(state["url"], state["mode"], state["timeout"], state.get("public_key"),
                      state.get("signing_key"))

    def __repr__(self) -> str:
        return f"RemoteStore({settings.without_credentials(self.url)!r}, {self.mode!r})"

    @property
    def writes(self) -> bool:
        return self.mode == "read-write"

    @property
    def down(self) -> str | None:
        return self._down

    def refusal(self, kind: str, key: str, payload_digest: str, signature: str | None) -> str | None:
        """Why an intact downloaded entry must not be used (UNSIGNED, FORGED), None to use it."""
        if self.public_key is None:
            return None  # no public key configured: every writer is trusted
        if not signature:
            return UNSIGNED
        return None if signing.verify(self.public_key, kind, key, payload_digest, signature) else FORGED

    def signature(self, kind: str, key: str, payload_digest: str) -> str | None:
        """The signature an upload carries (None without a signing key)."""
        if self.signing_key is None:
            return None
        return signing.sign(self.signing_key, kind, key, payload_digest)

    def upload_refusal(self) -> str | None:
        """Why this read-write store must not get uploads from here (None: it may): its
        readers verify signatures and there is no matching signing key."""
        if self.public_key is None:
            return None
        if self.signing_key is None:
            return (f"{SIGNING_KEY_ENV} is not set, and readers verify entries with "
                    f"{PUBLIC_KEY_SETTING}")
        if signing.public_of(self.signing_key) != self.public_key:
            return f"the key {SIGNING_KEY_ENV} names does not match {PUBLIC_KEY_SETTING}"
        return None

    def _filesystem(self):
        if self._fs is None or self._pid != os.getpid():
            # a connection made before doit forked its workers is not the child's to use
            # (s3fs: "This class is not fork-safe"): each process makes its own
            self._pid = os.getpid()
            try:
                import fsspec
            except ImportError:
                raise BuildError("a remote cache needs fsspec (and s3fs for s3://)",
                                 hint="python -m pip install 'modelbuild[remote]'") from None
            options = {}
            if urlsplit(self.url).scheme in ("s3", "s3a"):
                # one bounded attempt per request: a dead endpoint costs seconds, not minutes
                options["config_kwargs"] = {"connect_timeout": self.timeout,
                                            "read_timeout": self.timeout,
                                            "retries": {"max_attempts": 1}}
            self._fs, self._root = fsspec.core.url_to_fs(self.url, skip_instance_cache=True,
                                                         **options)
        return self._fs

    def _path(self, kind: str, key: str) -> str:
        return f"{self._root.rstrip('/')}/{kind}/{key[:2]}/{key}"

    def _call(self, what: str, fn, on_timeout=None):
        """``fn(fs)`` within the timeout; None after reporting the store down on failure.
        The request runs in a daemon thread, made for it (in this process: doit's workers
        are forked), which a request past the timeout keeps, and the process's exit does
        not wait for (``on_timeout()`` tells it to stop where it can)."""
        if self._down is not None:
            return None
        outcome: list = []

        def request():
            try:
                outcome.append((True, fn(self._filesystem())))
            except BaseException as err:  # noqa: BLE001 - handed to the caller's thread
                outcome.append((False, err))

        thread = threading.Thread(target=request, name="modelbuild-remote", daemon=True)
        thread.start()
        thread.join(self.timeout)
        if not outcome:
            if on_timeout is not None:
                on_timeout()
            self._give_up(f"{what} took more than {self.timeout:g} s")
            return None
        ok, value = outcome[0]
        if ok:
            return value
        if isinstance(value, FileNotFoundError):
            raise value
        if isinstance(value, BuildError):
            self._give_up(str(value).removeprefix("error: "))
        elif isinstance(value, Exception):  # any store failure: build locally instead
            first = (str(value).strip().splitlines() or [""])[0][:200]
            self._give_up(f"{what} failed: {type(value).__name__}: {first}")
        else:
            raise value  # KeyboardInterrupt, SystemExit: not the store's failure
        return None

    def _give_up(self, reason: str) -> None:
        if self._down is None:
            self._down = reason
            print(f"warning: remote cache {settings.without_credentials(self.url)} unavailable "
                  f"({reason}); building locally without it for the rest of this run",
                  file=sys.stderr)

    def get(self, kind: str, key: str) -> bytes | None:
        """The stored entry (header and payload, unverified), None when absent or unreachable,
        not a regular file of a shared folder (a pipe would never end), or declaring more
        payload than its kind has (``limit``). An entry whose size on the store is not what
        its header says is read no further than its header: those bytes, damaged."""
        most = limit(kind)
        given_up = threading.Event()

        def download(fs):
            path = self._path(kind, key)
            if _local(fs):
                return entry_file.read(Path(path), most, given_up)
            return _download(fs, path, most)

        try:
            return self._call("a download", download, on_timeout=given_up.set)
        except FileNotFoundError:
            return None

    def head(self, kind: str, key: str) -> bytes | None:
        """The first bytes of the stored entry (its header line), None when absent or
        unreachable."""
        try:
            return self._call("a download",
                              lambda fs: _first_bytes(fs, self._path(kind, key), HEADER_BYTES))
        except FileNotFoundError:
            return None

    def size(self, kind: str, key: str) -> int | None:
        """The stored entry's size in bytes, None when absent or unreachable."""
        try:
            return self._call("a download", lambda fs: fs.size(self._path(kind, key)))
        except FileNotFoundError:
            return None

    def put(self, kind: str, key: str, entry: bytes) -> bool:
        """Upload an entry (read-write mode only); whether it was stored."""
        if not self.writes:
            return False

        def upload(fs):
            if _local(fs):  # a shared folder: through plain folders only, renamed in place
                try:
                    return entry_file.write(self._root, kind, key, entry)
                except entry_file.Linked as err:
                    self.linked = err.component
                    return False
            fs.pipe_file(self._path(kind, key), entry)  # an object store replaces objects whole
            return True

        try:
            return bool(self._call("an upload", upload))
        except FileNotFoundError:
            return False


def _download(fs, path: str, most: int) -> bytes:
    """An object store's entry: its first bytes in one request (a small entry whole); of a
    larger one, the rest only when its header line declares a payload of at most ``most``
    bytes that, with the header, makes up the object's size."""
    head = _first_bytes(fs, path, _FIRST_READ)
    sizes = declared_size(head)
    if len(head) < _FIRST_READ or sizes is None:
        return head  # the whole entry, or no header line of this format: damaged
    line, payload = sizes
    size = fs.size(path)
    if size != line + payload:
        return head[:line + (payload == 0)]  # damaged: no more of it is read
    if payload > most:
        raise entry_file.TooLarge(f"a {payload}-byte payload")
    return head + fs.cat_file(path, start=len(head), end=size)


def _first_bytes(fs, path: str, count: int) -> bytes:
    """At most ``count`` bytes from the start of an entry: in a shared folder, of a regular
    file only (a pipe would never answer: NotRegular, a miss); elsewhere one ranged
    request, an empty object b"" (S3 answers a range of one with 416, which read as the
    store failing)."""
    if _local(fs):
        with regular_file.opened(Path(path)) as f:
            return f.read(count)
    try:
        return fs.cat_file(path, start=0, end=count)
    except FileNotFoundError:
        raise
    except OSError as err:
        try:
            empty = fs.size(path) == 0
        except FileNotFoundError:  # no answer about it either (HTTP: a refused connection
            raise err from None    # reads as "not found"): the store failed, said once
        if empty:
            return b""
        raise


def _local(fs) -> bool:
    """Whether ``fs`` is this machine's file system (a file:// store: a shared folder)."""
    protocols = fs.protocol if isinstance(fs.protocol, (tuple, list)) else (fs.protocol,)
    return "file" in protocols or "local" in protocols


def limit(kind: str) -> int:
    """The most payload bytes a downloaded ``kind`` entry may have (half this machine's
    memory at most: an entry is held whole, and its files are written from it)."""
    return min(entry_limit(), PARTITION_ENTRY_LIMIT if kind == "partition"
               else WORKLOAD_ENTRY_LIMIT)


def entry_limit() -> int:
    """Half this machine's memory."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2
    except (ValueError, OSError):
        return 8 << 30


def configured(project: Project, config: settings.Settings | None = None) -> RemoteStore | None:
    """The project's remote cache, or None when none is configured (``config``: the
    project's settings, resolved here when not given)."""
    config = config or settings.resolve(project.root)
    url = config.get("remote-cache")
    if not url:
        return None
    return RemoteStore(str(url), config.get("remote-cache-mode"), config.get("remote-cache-timeout"),
                       *_keys(config))


def public_key(config: settings.Settings) -> bytes | None:
    """The raw public key of ``remote-cache-public-key`` (None: not set), also when no
    remote is configured now: the local cache may hold what an earlier one sent."""
    path = config.path(PUBLIC_KEY_SETTING)
    return None if path is None else signing.load_public(
        path, f"`{PUBLIC_KEY_SETTING}` under [tool.modelbuild]")


def _keys(config: settings.Settings) -> tuple[bytes | None, bytes | None]:
    """(public key, signing key) of the project's remote cache, raw; None where not set.
    The signing key comes only from the environment: pyproject.toml is committed."""
    private_path = config.path("remote-cache-signing-key")
    private = None if private_path is None else signing.load_private(private_path, SIGNING_KEY_ENV)
    return public_key(config), private
