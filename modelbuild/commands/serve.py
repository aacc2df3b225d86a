"""`python -m modelbuild serve`: warm build workers on this machine for the project's builds.

Starts a ``distributed.LocalCluster`` (scheduler and N worker processes, on
127.0.0.1) whose workers import TVM once, and writes its address to
build/.executor.json, where `doit build:<model>` finds it: while it runs, lower
and codegen run on those workers. Runs in the foreground until Ctrl-C (or
`serve --stop` from another shell); the address file goes with it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time

from ..core import atomic
from ..core.errors import BuildError
from ..graph import executor
from ..graph.worker import describe
from . import options
from .output import console
from .workspace import project_of


def _status(project) -> int:
    info = executor.served(project)
    if info is None:
        console.print("no `modelbuild serve` runs for this project")
        return 1
    console.print(f"serve (pid {info['pid']}) at {info['address']}: "
                  f"{len(info.get('workers', {}))} worker(s)")
    for address, worker in sorted(info.get("workers", {}).items()):
        console.print(f"  {address} (pid {worker['pid']}): {worker['runs']}")
    return 0


def _stop(project) -> int:
    info = executor.served(project)
    if info is None:
        console.print("no `modelbuild serve` runs for this project")
        return 0
    os.kill(int(info["pid"]), signal.SIGTERM)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and executor.served(project) is not None:
        time.sleep(0.1)
    if executor.served(project) is not None:
        raise BuildError(f"serve (pid {info['pid']}) did not stop within 30 s")
    console.print(f"stopped serve (pid {info['pid']})")
    return 0


def _worker_identity() -> dict:
    from ..graph.worker import identity

    return {"pid": os.getpid(), "runs": describe(identity("codegen", ()))}


HELP = "warm build workers (Dask) for this project's builds, until Ctrl-C"


def arguments(p: argparse.ArgumentParser) -> None:
    """This command's arguments (``python -m modelbuild serve --help``)."""
    p.add_argument("--workers", type=options.positive, default=2,
                   help="worker processes (default 2)")
    p.add_argument("--port", type=options.natural, default=0,
                   help="the scheduler's port on 127.0.0.1 (default: any free one)")
    p.add_argument("--stop", action="store_true", help="stop the serve of this project")
    p.add_argument("--status", action="store_true", help="is one running, with which workers")


def run(args) -> int:
    project = project_of(args)
    if args.stop:
        return _stop(project)
    if args.status:
        return _status(project)
    running = executor.served(project)
    if running is not None:
        raise BuildError(f"serve already runs for this project (pid {running['pid']}, "
                         f"{running['address']})", hint="`python -m modelbuild serve --stop` ends it")
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
    })
    console.print(f"starting {args.workers} worker(s); each imports TVM once ...")
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    path = executor.address_file(project)
    with LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                      host="127.0.0.1", scheduler_port=args.port, dashboard_address=None,
                      preload=["modelbuild.graph.warm_worker"]) as cluster, \
            Client(cluster, set_as_default=False) as client:
        workers = client.run(_worker_identity)
        atomic.write_text(path, json.dumps({"address": cluster.scheduler_address,
                                            "pid": os.getpid(), "workers": workers}, indent=1))
        try:
            console.print(f"serving {project.root} at {cluster.scheduler_address} "
                          f"({len(workers)} warm worker(s)); builds of this project now run "
                          "lower and codegen there. Ctrl-C to stop.")
            sys.stdout.flush()
            while not stop.wait(1.0):
                pass
        finally:
            path.unlink(missing_ok=True)
    console.print("serve stopped")
    return 0
