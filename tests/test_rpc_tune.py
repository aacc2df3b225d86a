"""Tuning over TVM's RPC tracker: a real tracker and two servers on 127.0.0.1."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import cli, tiny_conv_workload

from modelbuild.schedules import rpc

pytestmark = pytest.mark.slow  # an RPC tracker and servers: the full suite only
KEY = "modelbuild-test"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _bound_port(log: Path, proc: subprocess.Popen) -> int:
    """The port a TVM tracker or server logged that it bound to."""
    deadline = time.monotonic() + 120
    while not (bound := re.search(r"bind to 127\.0\.0\.1:(\d+)", log.read_text())):
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, "the RPC tracker did not start: " + log.read_text()
        time.sleep(0.2)
    return int(bound.group(1))


@pytest.fixture(scope="module")
def tracker(tmp_path_factory):
    """(port, server log files): a tracker and two servers under KEY, each in its own process
    group (a server's worker child would outlive a signal to its parent alone)."""
    logs = tmp_path_factory.mktemp("rpc")
    procs = []

    def spawn(args, log):
        out = open(logs / log, "wb")  # noqa: SIM115 - closed with the process
        procs.append(subprocess.Popen([sys.executable, "-m", *args], stdout=out,
                                      stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                      start_new_session=True))

    # each takes the first free port of a range below the ephemeral ports, and the tracker
    # says which it took: a port chosen here first could be gone before it binds it
    spawn(["tvm.exec.rpc_tracker", "--host", "127.0.0.1", "--port", "9190",
           "--port-end", "9990"], "tracker.log")
    port = _bound_port(logs / "tracker.log", procs[0])
    # each server its own range: TVM's server binds with SO_REUSEADDR, so two started at
    # once could both bind the first port, and the second then failed to listen on it
    for i in range(2):
        spawn(["tvm.exec.rpc_server", "--tracker", f"127.0.0.1:{port}", "--key", KEY,
               "--host", "127.0.0.1", "--port", str(10000 + 400 * i),
               "--port-end", str(10400 + 400 * i)], f"server{i}.log")
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if rpc.servers(rpc.summary("127.0.0.1", port, 1)).get(KEY) == 2:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "the RPC tracker and servers did not come up"
            time.sleep(0.3)
        yield port, [logs / "server0.log", logs / "server1.log"]
    finally:
        for p in reversed(procs):
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)


def test_tune_measures_on_the_trackers_servers_and_imports_records(tiny_copy, tracker):
    port, server_logs = tracker
    workload = tiny_conv_workload(tiny_copy)
    before = sum(len(p.read_bytes()) for p in server_logs)
    proc = cli(tiny_copy, "tune", "tiny", "--workload", workload, "--trials", "2",
               "--no-keep-if-faster", "--rpc", f"127.0.0.1:{port}", "--key", KEY, "--json")
    report = json.loads(proc.stdout)
    assert report["tuning"]["trials"] == {workload: 2}
    assert report["tuning"]["measured_on"] == f"rpc 127.0.0.1:{port} key {KEY}"
    assert report["written"] == [workload]
    record = json.loads((tiny_copy.root / "schedules" / "tiny" / f"{workload}.json").read_text())
    assert record["workload"] == workload and record["run_secs"]
    # the servers saw the measuring sessions
    assert sum(len(p.read_bytes()) for p in server_logs) > before
    assert tiny_copy.doit("build:tiny").ran >= {f"lower:tiny/{workload}", "link:tiny"}


def test_an_unknown_key_is_a_clear_error_within_seconds(tiny_copy, tracker):
    port, _ = tracker
    start = time.monotonic()
    proc = cli(tiny_copy, "tune", "tiny", "--trials", "2", "--rpc", f"127.0.0.1:{port}",
               "--key", "nosuchdevice", check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert (f"the RPC tracker at 127.0.0.1:{port} has no server with key 'nosuchdevice' "
            f"(keys there: {KEY} (2))") in proc.stderr
    assert time.monotonic() - start < 30


def test_an_unreachable_tracker_is_a_clear_error_within_seconds(tiny_copy):
    port = _free_port()
    start = time.monotonic()
    proc = cli(tiny_copy, "tune", "tiny", "--trials", "2", "--rpc", f"127.0.0.1:{port}",
               "--key", KEY, check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert f"no TVM RPC tracker answers at 127.0.0.1:{port}" in proc.stderr
    assert time.monotonic() - start < 30
    proc = cli(tiny_copy, "tune", "tiny", "--rpc", f"127.0.0.1:{port}", check=False)
    assert proc.returncode == 1 and "--rpc and --key go together" in proc.stderr
