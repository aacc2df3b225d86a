"""`python -m modelbuild serve`: warm build workers on this machine for the project's builds.

Starts a ``distributed.LocalCluster`` (scheduler and N worker processes, on
127.0.0.1) whose workers import TVM once, and writes its address to
build/.executor.json, where `doit build:<model>` finds it: while it runs, lower
and codegen run on those workers. Runs in the foreground until Ctrl-C (or
`serve --stop` from another shell); the address file goes with it.

Who can submit work to it: without --tls, anyone who can reach its ports on
this machine (any local user); with --tls, only who holds a certificate signed
by its CA (tls.py). No dashboard or other HTTP port unless --dashboard.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

from ..core import atomic
from ..core.errors import BuildError
from ..cluster import executor, serve_proof, tls
from ..cluster.worker import describe
from ..graph import build_lock
from . import options
from .output import console
from .workspace import project_of


def _running(project) -> dict | None:
    """What the running serve of the project wrote, or None. serve holds its lock while it
    runs: an address file without it is one a serve killed outright left, whose pid may be
    another program's now (removed, and said: executor.served)."""
    return executor.served(project, say=lambda why: console.print(f"({why})"))


def _status(project) -> int:
    info = _running(project)
    if info is None:
        console.print("no `modelbuild serve` runs for this project")
        return 1
    console.print(f"serve (pid {info['pid']}) at {info['address']}: "
                  f"{len(info.get('workers', {}))} worker(s)")
    for address, worker in sorted(info.get("workers", {}).items()):
        console.print(f"  {address} (pid {worker['pid']}): {worker['runs']}")
    return 0


def _stop(project) -> int:
    info = _running(project)
    if info is None:
        console.print("no `modelbuild serve` runs for this project")
        return 0
    os.kill(info["pid"], signal.SIGTERM)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and executor.served(project) is not None:
        time.sleep(0.1)
    if executor.served(project) is not None:
        raise BuildError(f"serve (pid {info['pid']}) did not stop within 30 s")
    console.print(f"stopped serve (pid {info['pid']})")
    return 0


def _worker_identity() -> dict:
    from ..cluster.worker import identity

    return {"pid": os.getpid(), "runs": describe(identity("codegen", ()))}


def _follow_workers(client, info: dict, path: Path) -> None:
    """Keep the address file's workers those the scheduler has: one that died (killed, out
    of memory) is replaced by Dask, and `serve --status` showed the dead one's pid. A new
    worker says which code it runs (it loads modelbuild as it is on disk now)."""
    try:
        now = set(client.scheduler_info().get("workers", {}))
        if now == set(info["workers"]):
            return
        known = {a: w for a, w in info["workers"].items() if a in now}
        new = sorted(now - set(known))
        if new:
            known.update(client.run(_worker_identity, workers=new, on_error="ignore") or {})
        info["workers"] = {a: w for a, w in known.items() if isinstance(w, dict)}
        atomic.write_text(path, json.dumps(info, indent=1), private=True)
    except Exception:  # noqa: BLE001 - a worker starting or stopping: the next second's look
        return


def _tls_files(project) -> tls.TlsFiles:
    """The project's executor certificates, else a fresh self-signed one for this serve."""
    files = tls.configured(project.root)
    if files is None:
        files = tls.generate(project.build_dir / ".executor-tls")
        console.print(f"made a self-signed certificate for this serve in {Path(files.key).parent} "
                      "(the key readable by you only)")
    return files


def _cluster_options(args, files) -> dict:
    """LocalCluster's arguments: on 127.0.0.1; TLS with certificates when ``files``; the
    scheduler's HTTP server (dashboard) only with --dashboard, the workers' never."""
    kw = dict(n_workers=args.workers, threads_per_worker=1, processes=True,
              host="127.0.0.1", scheduler_port=args.port,
              preload=["modelbuild.cluster.warm_worker", "modelbuild.cluster.no_http"])
    if args.dashboard is None:
        # Dask opens the scheduler's HTTP server anyway: on a free port (not 8787), closed
        # at once by the preload
        kw.update(dashboard_address=None, scheduler_kwargs={
            "dashboard_address": "127.0.0.1:0", "preload": ["modelbuild.cluster.no_http"]})
    else:
        kw.update(dashboard_address=f"127.0.0.1:{args.dashboard}")
    if files is not None:
        kw.update(protocol="tls://", security=files.security())
    return kw


def _announce(project, cluster, workers: int, files, dashboard) -> None:
    console.print(f"serving {project.root} at {cluster.scheduler_address} ({workers} warm "
                  "worker(s)); builds of this project now run partition, lower and codegen there. "
                  "Ctrl-C to stop.")
    if files is None:
        console.print("no TLS: any user of this machine can submit work to it, which runs "
                      "as you; `serve --tls` asks a certificate of every client")
    if dashboard is not None:
        console.print("dashboard (plain HTTP, any local user can read it): "
                      f"{cluster.dashboard_link}")
    sys.stdout.flush()


HELP = "warm build workers (Dask) for this project's builds, until Ctrl-C"


def arguments(p: argparse.ArgumentParser) -> None:
    """This command's arguments (``python -m modelbuild serve --help``)."""
    p.add_argument("--workers", type=options.positive, default=2,
                   help="worker processes (default 2)")
    p.add_argument("--port", type=options.port, default=0,
                   help="the scheduler's port on 127.0.0.1 (default: any free one)")
    p.add_argument("--stop", action="store_true", help="stop the serve of this project")
    p.add_argument("--status", action="store_true", help="is one running, with which workers")
    p.add_argument("--tls", action="store_true",
                   help="TLS with certificates (executor-tls-* settings, else a self-signed one "
                        "made in build/.executor-tls/): only holders of the key can submit work")
    p.add_argument("--dashboard", type=options.port, nargs="?", const=8787, metavar="PORT",
                   help="start Dask's dashboard on 127.0.0.1:PORT (default 8787); none without")


def run(args) -> int:
    project = project_of(args)
    if args.stop:
        return _stop(project)
    if args.status:
        return _status(project)
    running = _running(project)
    if running is not None:
        raise BuildError(f"serve already runs for this project (pid {running['pid']}, "
                         f"{running['address']})", hint="`python -m modelbuild serve --stop` ends it")
    # one serve a project, held until it exits: two started together both passed the check
    # above (the address file comes last), and the first ran on where nothing could find it
    lock = serve_proof.lock_file(project)
    try:
        build_lock.hold(lock)  # held until serve exits
    except build_lock.Busy:
        raise BuildError(f"serve already runs for this project{build_lock.holder(lock) or ''} "
                         "(it is still starting)",
                         hint="`python -m modelbuild serve --status` says when it is ready") from None
    try:
        import dask
        from distributed import Client, LocalCluster
    except ImportError:
        raise BuildError("serve needs dask's distributed",
                         hint="python -m pip install 'modelbuild[cluster]'") from None

    dask.config.set({
        # a step that kills its worker is tried on one other worker, then fails the build
        "distributed.scheduler.allowed-failures": 1,
        "distributed.worker.profile.enabled": False,
        "distributed.admin.system-monitor.interval": "5s",
        "distributed.worker.daemon": False,
        # a tuning worker that dies while measuring frees its machine's lock within seconds
        "distributed.scheduler.locks.lease-timeout": "10s",
        "distributed.scheduler.locks.lease-validation-interval": "2s",
    })
    files = _tls_files(project) if args.tls else None
    console.print(f"starting {args.workers} worker(s); each imports TVM once ...")
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    path = executor.address_file(project)
    token = serve_proof.new_token()  # builds check it is this serve they talk to
    with LocalCluster(**_cluster_options(args, files)) as cluster, \
            Client(cluster, set_as_default=False) as client:
        client.set_metadata(serve_proof.TOKEN_KEY, token)
        workers = client.run(_worker_identity)
        _announce(project, cluster, len(workers), files, args.dashboard)
        info = {"address": cluster.scheduler_address, "pid": os.getpid(), "token": token,
                "workers": workers}
        if files is not None:
            info["tls"] = files.as_dict()
        try:  # the address file last (its owner's alone: the token): who waits for it
            # finds everything said
            atomic.write_text(path, json.dumps(info, indent=1), private=True)
            while not stop.wait(1.0):
                _follow_workers(client, info, path)
        finally:
            path.unlink(missing_ok=True)
    console.print("serve stopped")
    return 0
