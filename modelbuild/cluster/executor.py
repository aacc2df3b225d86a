"""Where lower and codegen run: in the doit process, or on the workers of a Dask scheduler.

    python -m modelbuild serve              # warm local workers; writes build/.executor.json
    [tool.modelbuild] executor = "tcp://host:8786"     # or $MODELBUILD_EXECUTOR: a cluster
    executor = "tls://host:8786" with executor-tls-ca/-cert/-key   # certificates: tls.py

With an executor, a step's action sends its inputs as bytes (the workload or
lowered TIR, the record and its helper modules, the target as this process
decided it) to a worker, which runs the same step function (worker.py) and
sends the output's bytes back; the cache, the stamp and the output file are
written here, as for a local step. No shared file system is assumed.

Finding the executor costs no import of distributed (a file read, a look at
serve's lock, a TCP connect); the client connects when the first step must run,
and a serve's scheduler must then say the serve's token (serve_proof.py), else
the steps run here. No TVM here.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from ..core import regular_file, settings
from ..core.errors import BuildError
from ..core.paths import Project
from . import serve_proof
from .tls import TlsFiles
from .tls import configured as tls_configured

ENV = settings.BY_KEY["executor"].env
CONNECT_TIMEOUT = 10.0


def address_file(project: Project):
    """Where `serve` writes its scheduler's address for the project's builds."""
    return project.build_dir / ".executor.json"


def reachable(address: str, timeout: float = 1.0) -> bool:
    parts = urlsplit(address)
    try:
        socket.create_connection((parts.hostname, parts.port), timeout=timeout).close()
        return True
    except (OSError, TypeError, ValueError):
        return False


def served(project: Project, say: Callable[[str], None] | None = None) -> dict | None:
    """What the running `serve` of this project wrote (address, pid, token, workers), or
    None: no file, a file that is not what serve writes (a pipe, a folder, other JSON:
    never a hang, never a traceback), or one whose serve does not hold its lock
    (serve_proof.py; removed when no process holds it). ``say(why)``: why a file there
    is not used."""
    path = address_file(project)
    try:
        raw = regular_file.read_limited(path, _MOST_BYTES)
    except FileNotFoundError:
        return None
    except OSError:
        raw = b""
    try:
        info = json.loads(raw)
    except (ValueError, RecursionError):
        info = None
    if not _well_formed(info):
        _say(say, f"{path} is not what `serve` writes")
        return None

    def remove():  # holding serve's lock: no serve can write a new file meanwhile
        try:
            if regular_file.read_limited(path, _MOST_BYTES) == raw:
                path.unlink()
        except OSError:
            pass

    lock = serve_proof.check(project, info["pid"], remove)
    if lock == serve_proof.HELD:
        return info
    _say(say, {
        serve_proof.FREE: f"serve is not running (stale {path}, pid {info['pid']}: removed)",
        serve_proof.OTHER: f"serve is not running as {path} says (pid {info['pid']} does not "
                           f"hold {serve_proof.lock_file(project)}: another serve starting?)",
        serve_proof.UNKNOWN: f"cannot tell whether serve runs: "
                             f"{serve_proof.lock_file(project)} cannot be locked",
    }[lock])
    return None


def _say(say, why: str) -> None:
    if say is not None:
        say(why)


_MOST_BYTES = 1024 * 1024  # serve's file names a few workers: kilobytes


def _well_formed(info) -> bool:
    """``info`` is what serve writes: a pid of a process (not 0 or negative), an address,
    its token (a serve of an older modelbuild wrote none), workers with their pids and
    runs, certificates (optional) as three paths."""
    if not isinstance(info, dict):
        return False
    pid, workers, tls = info.get("pid"), info.get("workers", {}), info.get("tls")
    return (type(pid) is int and 0 < pid < 2 ** 31 and isinstance(info.get("address"), str)
            and isinstance(info.get("token", ""), str)
            and isinstance(workers, dict)
            and all(isinstance(a, str) and isinstance(w, dict) and isinstance(w.get("runs"), str)
                    and type(w.get("pid")) is int for a, w in workers.items())
            and (tls is None or (isinstance(tls, dict) and sorted(tls) == ["ca", "cert", "key"]
                                 and all(isinstance(v, str) for v in tls.values()))))


def configured(project: Project, config: settings.Settings | None = None) -> "Executor | None":
    """The executor the project's builds use: $MODELBUILD_EXECUTOR, else ``executor`` in
    pyproject.toml (both must answer; a tls:// one with the project's certificates), else
    a running `serve` of the project (with the certificates it wrote), else None (steps
    run in the doit process)."""
    address = (config or settings.resolve(project.root)).get("executor")
    if address:
        address = str(address)
        if "://" not in address:
            address = f"tcp://{address}"
        files = _checked_tls(address, tls_configured(project.root))
        if not reachable(address):
            raise BuildError(f"the executor {address} does not answer",
                             hint=f"start the scheduler, or unset {ENV} / `executor` in "
                                  "pyproject.toml to build in this process")
        return Executor(address, files)
    info = served(project, say=_building_here)
    if info is None:
        return None
    if not info.get("token"):
        _building_here(f"serve's {address_file(project)} holds no token (a serve of an older "
                       "modelbuild? restart it)")
        return None
    if not reachable(info["address"]):
        _building_here(f"serve's scheduler at {info['address']} does not answer")
        return None
    tls = info.get("tls")
    files = TlsFiles(**tls) if tls is not None else None
    return Executor(info["address"], _checked_tls(info["address"], files), info["token"])


def _building_here(why: str) -> None:
    # the terminal's stderr: doit's json reporter keeps sys.stderr for its report's end
    (sys.__stderr__ or sys.stderr).write(f"modelbuild: {why}: building locally\n")


def _checked_tls(address: str, files: TlsFiles | None) -> TlsFiles | None:
    """``files`` when they fit ``address``: a tls:// address needs certificates, and
    certificates need a tls:// address (Dask would send them nowhere, or refuse)."""
    tls = address.startswith("tls://")
    if tls and files is None:
        raise BuildError(f"the executor {address} needs certificates",
                         hint="set executor-tls-ca, executor-tls-cert and executor-tls-key in "
                              "[tool.modelbuild] (or MODELBUILD_EXECUTOR_TLS_CA, _CERT, _KEY)")
    if files is not None and not tls:
        raise BuildError(f"executor certificates are set but the executor {address} is not "
                         "tls://", hint=f"use tls://{address.split('://', 1)[1]}, or unset "
                                        "executor-tls-ca, -cert and -key")
    return files


def not_dask(address: str, timeout: float) -> str | None:
    """Why the server at a tcp:// ``address`` is not a Dask scheduler, or None when it
    starts Dask's handshake (a scheduler sends its own first, a small framed message: the
    first 8 bytes are its size) or cannot be reached (Dask's client says why then). A
    Client of such a server waited forever (a silent one) or failed with a MemoryError
    (one that greets first: its bytes read as a size)."""
    parts = urlsplit(address)
    try:
        with socket.create_connection((parts.hostname, parts.port), timeout=timeout) as sock:
            data = b""
            while len(data) < 8:
                chunk = sock.recv(8 - len(data))
                if not chunk:
                    return "it closed the connection without a word"
                data += chunk
    except socket.timeout:
        return f"it accepts connections and said nothing in {timeout:.0f} s"
    except (OSError, TypeError, ValueError):
        return None
    (size,) = struct.unpack("<Q", data)
    if not 0 < size < 1 << 20:
        return f"it answers in another protocol (it began with {data!r})"
    return None


def _abandon_clients(tb) -> None:
    """Mark a Client whose making failed (found among the failed call's frames) closed, and
    stop its loop: else, freed at exit, it tries to close its connection for 20 s and
    prints a traceback ("Exception ignored in Client.__del__")."""
    try:
        from distributed import Client
    except ImportError:
        return
    while tb is not None:
        client = tb.tb_frame.f_locals.get("self")
        if isinstance(client, Client):
            try:
                client.status = "closed"
                client._loop_runner.stop()
            except Exception:  # noqa: BLE001 - a half-made client: nothing more to do
                pass
        tb = tb.tb_next


class NotOurs(BuildError):
    """The scheduler at a serve's address is not that serve: the steps run here."""


def _close_quietly(client) -> None:
    try:
        client.close(timeout=5)
    except Exception:  # noqa: BLE001 - another's scheduler: nothing more to ask of it
        pass


@dataclass
class Executor:
    """A Dask scheduler's address and, per process, a client of it (doit's `-n N` forks
    its workers: a client does not survive a fork, so each process makes its own)."""

    address: str
    tls: TlsFiles | None = None  # the certificates of a tls:// address
    token: str | None = field(default=None, repr=False)  # a serve's: its scheduler must know it
    _clients: dict = field(default_factory=dict, repr=False, compare=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def __getstate__(self):
        return {"address": self.address, "tls": self.tls, "token": self.token}

    def __setstate__(self, state):
        self.__init__(state["address"], state["tls"], state.get("token"))

    def client(self):
        pid = os.getpid()
        with self._lock:
            if pid not in self._clients:
                try:
                    self._clients[pid] = self._connect()
                except BuildError as err:
                    if self.token is not None:  # a serve's address: whatever is there, not it
                        err = NotOurs(f"the scheduler at {self.address} is not this project's "
                                      f"serve ({err.message})")
                        _building_here(err.message)  # once a process: every step then runs here
                    self._clients[pid] = err  # every step of this process: said at once
            found = self._clients[pid]
        if isinstance(found, BuildError):
            raise found
        return found

    def here(self) -> bool:
        """True when this process runs the steps itself after all: the scheduler at a
        serve's address did not prove to be that serve (said once, when found)."""
        if self.token is None:
            return False
        try:
            self.client()
        except NotOurs:
            return True
        return False

    def _connect(self):
        """A Dask client of the scheduler, made within CONNECT_TIMEOUT and a few seconds
        more whatever listens there: Dask's own timeout left a build waiting forever on a
        server that never answers its handshake (an HTTP server), and a server that talks
        first (an SSH banner) gave a MemoryError (its bytes read as a frame's length)."""
        try:
            from distributed import Client
        except ImportError:
            raise BuildError("building on an executor needs dask's distributed",
                             hint="python -m pip install 'modelbuild[cluster]'") from None
        hint = ("is `python -m modelbuild serve` (or the scheduler) running there?"
                + (f" Does it accept this certificate ({self.tls.cert})?" if self.tls else ""))
        if self.address.startswith("tcp://"):
            odd = not_dask(self.address, CONNECT_TIMEOUT)
            if odd:
                raise BuildError(f"the executor {self.address} is not a Dask scheduler: {odd}",
                                 hint=hint)
        made: list = []

        def connect():
            try:  # a certificate that cannot be read is an OSError too
                security = self.tls.security() if self.tls is not None else None
                client = Client(self.address, timeout=CONNECT_TIMEOUT, set_as_default=False,
                                security=security)
                # a serve's scheduler says its token before any step is sent there
                theirs = (client.get_metadata(serve_proof.TOKEN_KEY, None)
                          if self.token is not None else None)
                made.append((client, theirs))
            except BaseException as err:  # noqa: BLE001 - said in words below
                _abandon_clients(err.__traceback__)
                made.append(err)

        thread = threading.Thread(target=connect, name="modelbuild-executor-connect",
                                  daemon=True)
        thread.start()
        thread.join(CONNECT_TIMEOUT + 5)
        if not made:
            raise BuildError(f"the executor {self.address} accepts connections but does not "
                             f"answer as a Dask scheduler (waited {CONNECT_TIMEOUT + 5:.0f} s)",
                             hint=hint)
        if isinstance(made[0], BaseException):
            err = made[0]
            if isinstance(err, KeyboardInterrupt):
                raise err
            kind = "" if isinstance(err, OSError) else " (not a Dask scheduler?)"
            raise BuildError(f"cannot connect to the executor {self.address}{kind}: "
                             f"{type(err).__name__}: {str(err)[:200]}", hint=hint)
        client, theirs = made[0]
        if self.token is not None and theirs != self.token:
            _close_quietly(client)
            raise NotOurs("it does not know the token of build/.executor.json")
        return client

    def run(self, task: str, step: str, expected: dict, args: dict) -> bytes:
        """Run ``step`` on a worker; its output's bytes. Any failure is a BuildError naming
        ``task``; nothing is written here on failure."""
        from .worker import RemoteStepError, run_step

        client = self.client()
        error = None
        try:
            future = client.submit(run_step, step, expected, args, pure=False,
                                   key=f"{task}-{os.urandom(4).hex()}")
            return future.result()
        except RemoteStepError as err:
            # a worker of a modelbuild from before this step kind ran on workers
            older = err.message.endswith(f"KeyError: '{step}'")
            message = (f"the executor's worker runs an older modelbuild, which has no "
                       f"{step} step" if older else err.message)
            error = BuildError(f"{task}: {message}", hint=(
                "restart `python -m modelbuild serve` (or the cluster's workers) with this "
                "TVM and modelbuild") if err.mismatch or older else None)
        except BuildError:
            raise
        except Exception as err:  # noqa: BLE001 - a lost worker or scheduler, in words
            name = type(err).__name__
            why = ("its worker died running it twice (KilledWorker)" if name == "KilledWorker"
                   else f"{name}: {err}")
            error = BuildError(f"{task}: the executor {self.address} did not finish it: {why}",
                               hint="rerun the build; nothing of this step was stored")
        raise error
