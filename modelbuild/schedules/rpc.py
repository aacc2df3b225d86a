"""Measuring tuning candidates on the devices of a TVM RPC tracker.

    python -m tvm.exec.rpc_tracker --host 0.0.0.0 --port 9190
    python -m tvm.exec.rpc_server --tracker HOST:9190 --key mydevice     # on each device
    python -m modelbuild tune resnet50 --rpc HOST:9190 --key mydevice

Candidates are built here and measured by MetaSchedule's RPCRunner on a server the
tracker hands out. TVM's own session request waits forever for a key no server
has, and retries a refused tracker for a minute: ``check`` asks the tracker first
(its wire protocol, no TVM, bounded by a timeout), and ``create_session`` bounds
every request, so a missing piece is one clear error within seconds.
"""

from __future__ import annotations

import json
import socket
import struct

from ..core.digits import is_decimal
from ..core.errors import BuildError

_MAGIC = 0x2F271  # tvm/rpc/base.py RPC_TRACKER_MAGIC
_SUMMARY, _SUCCESS = 6, 0  # tvm/rpc/tracker.py TrackerCode
SESSION_TIMEOUT = 60


def parse_address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not is_decimal(port) or not 0 < int(port) < 65536:
        raise BuildError(f"--rpc expects HOST:PORT (the tracker's; a port from 1 to 65535), "
                         f"not '{text}'")
    return host, int(port)


def _recv(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("the connection closed")
        data += chunk
    return data


def summary(host: str, port: int, timeout: float = 5.0) -> dict:
    """The tracker's summary (its servers and queues), by its own protocol."""
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.settimeout(timeout)
        sock.sendall(struct.pack("<i", _MAGIC))
        if struct.unpack("<i", _recv(sock, 4))[0] != _MAGIC:
            raise ConnectionError("it is not a TVM RPC tracker")
        request = json.dumps([_SUMMARY]).encode()
        sock.sendall(struct.pack("<i", len(request)) + request)
        code, value = json.loads(_recv(sock, struct.unpack("<i", _recv(sock, 4))[0]))
        if code != _SUCCESS:
            raise ConnectionError(f"the tracker answered code {code}")
        return value


def servers(info: dict) -> dict[str, int]:
    """key -> number of servers registered under it."""
    out: dict[str, int] = {}
    for server in info.get("server_info", []):
        key = str(server.get("key", "")).split(":", 1)[-1]
        out[key] = out.get(key, 0) + 1
    return out


def check(host: str, port: int, key: str, timeout: float = 5.0) -> int:
    """How many servers the tracker has for ``key``; a BuildError when it does not answer
    or has none."""
    try:
        info = summary(host, port, timeout)
    except (OSError, ConnectionError, ValueError, struct.error) as err:
        raise BuildError(f"no TVM RPC tracker answers at {host}:{port} ({err})",
                         hint="start one: python -m tvm.exec.rpc_tracker --host 0.0.0.0 "
                              f"--port {port}") from None
    count = servers(info).get(key, 0)
    if not count:
        known = ", ".join(f"{k} ({n})" for k, n in sorted(servers(info).items())) or "none"
        raise BuildError(f"the RPC tracker at {host}:{port} has no server with key '{key}' "
                         f"(keys there: {known})",
                         hint=f"on the device: python -m tvm.exec.rpc_server --tracker "
                              f"{host}:{port} --key {key}")
    return count


def create_session(rpc_config):
    """MetaSchedule's f_create_session, bounded: a refused tracker fails at once, a key no
    server takes after ``session_timeout_sec``, instead of hanging the tuning."""
    from tvm import rpc

    host, port = rpc_config.tracker_host, rpc_config.tracker_port
    timeout = rpc_config.session_timeout_sec
    socket.create_connection((host, port), timeout=5).close()
    tracker = rpc.connect_tracker(host, port)
    tracker._sock.settimeout(timeout)
    try:
        return tracker.request(rpc_config.tracker_key, priority=rpc_config.session_priority,
                               session_timeout=timeout, max_retry=1)
    finally:
        tracker.close()


def runner(host: str, port: int, key: str, session_timeout: int = SESSION_TIMEOUT):
    """A MetaSchedule RPCRunner measuring on the tracker's ``key`` servers, one at a time
    (concurrent measurements on one device disturb each other)."""
    from tvm.s_tir import meta_schedule as ms

    return ms.runner.RPCRunner(
        rpc_config=ms.runner.RPCConfig(tracker_host=host, tracker_port=port, tracker_key=key,
                                       session_timeout_sec=session_timeout),
        evaluator_config=ms.runner.EvaluatorConfig(),
        f_create_session=create_session, max_workers=1)
