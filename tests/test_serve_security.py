"""Who can talk to `python -m modelbuild serve` (a real LocalCluster on 127.0.0.1):
with --tls only a holder of its certificate, byte-identical objects all the same;
no dashboard or other HTTP port unless --dashboard."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest
from conftest import DoitRun, sha256
from test_executor import DOIT_REPORTING_TVM

pytestmark = pytest.mark.slow  # Dask build workers over TLS: the full suite only
CONNECT = 5  # seconds a refused client tries
ADMITTED = 60  # seconds a client that must get in may take (a loaded CI machine)


class Serve:
    """`serve ARGS` in the project, started and waited for; stop() ends its process group."""

    def __init__(self, project, *args: str, env: dict | None = None):
        self.file = project.root / "build" / ".executor.json"
        self.log = project.root / "serve.log"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "modelbuild", "serve", "--workers", "1", *args],
            cwd=project.root, stdout=open(self.log, "wb"), stderr=subprocess.STDOUT,  # noqa: SIM115
            start_new_session=True, env=env)
        deadline = time.monotonic() + 180
        while not self.file.is_file():
            assert self.proc.poll() is None, self.log.read_text()
            assert time.monotonic() < deadline, "serve did not start"
            time.sleep(0.2)
        self.info = json.loads(self.file.read_text())

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()

    def listening(self) -> set[tuple[str, int]]:
        """Every (host, port) the serve's processes listen on."""
        procs = [psutil.Process(self.proc.pid)]
        procs += procs[0].children(recursive=True)
        return {(c.laddr.ip, c.laddr.port) for p in procs for c in p.net_connections("inet")
                if c.status == psutil.CONN_LISTEN}


@pytest.fixture
def serve():
    started = []

    def start(project, *args, **kw) -> Serve:
        started.append(Serve(project, *args, **kw))
        return started[-1]

    yield start
    for s in started:
        s.stop()


def _build(project, env=None) -> DoitRun:
    """`doit build:tiny`, reporting whether its process imported TVM."""
    return DoitRun(subprocess.run([sys.executable, "-c", DOIT_REPORTING_TVM, "build:tiny"],
                                  cwd=project.root, capture_output=True, text=True, env=env))


def _forget_compiled(project) -> None:
    """Keep partition; drop every lowered file, object, the library and the cache."""
    for sub in ("lowered", "objects"):
        shutil.rmtree(project.root / "build" / "tiny" / sub, ignore_errors=True)
    project.library("tiny").unlink(missing_ok=True)
    shutil.rmtree(project.root / "build" / ".cache", ignore_errors=True)


def _connects(address: str, security=None, timeout: float = CONNECT) -> bool:
    """Whether a Dask client gets through to the scheduler at ``address`` and its worker
    answers."""
    from distributed import Client

    try:
        with Client(address, timeout=timeout, security=security, set_as_default=False) as c:
            return c.run(os.getpid) != {}
    except Exception:  # noqa: BLE001 - refused, in whichever way Dask says it
        return False


def test_a_tls_serve_builds_the_local_objects_and_refuses_clients_without_its_certificate(
        tiny_copy, serve):
    from distributed.security import Security

    from modelbuild.cluster.tls import TlsFiles

    local_objects, local_lib = tiny_copy.objects("tiny"), sha256(tiny_copy.library("tiny"))
    _forget_compiled(tiny_copy)
    served = serve(tiny_copy, "--tls")
    address = served.info["address"]
    assert address.startswith("tls://127.0.0.1:"), served.info
    folder = tiny_copy.root / "build" / ".executor-tls"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE((folder / "key.pem").stat().st_mode) == 0o600
    # the address file holds the serve's token, which builds ask of its scheduler
    assert stat.S_IMODE(served.file.stat().st_mode) == 0o600

    run = _build(tiny_copy)
    assert run.returncode == 0, run.output
    assert run.ran_kind("lower") and run.ran_kind("codegen"), run.output
    assert "tvm imported: False" in run.stderr, run.output  # they ran on the workers
    assert tiny_copy.objects("tiny") == local_objects
    assert sha256(tiny_copy.library("tiny")) == local_lib

    files = TlsFiles(**served.info["tls"])
    assert _connects(address, files.security(), ADMITTED)  # the certificate's holder gets in
    assert not _connects(address)  # no certificate
    # trusting the serve's CA but showing a certificate it did not sign: the serve refuses
    other = Security.temporary()
    stranger = Security(require_encryption=True, tls_ca_file=files.ca,
                        tls_client_cert=other.tls_client_cert, tls_client_key=other.tls_client_key)
    assert not _connects(address, stranger)
    assert not _connects(address.replace("tls://", "tcp://"))  # plain TCP
    for host, _ in served.listening():
        assert host == "127.0.0.1"


def test_a_tls_executor_without_certificates_is_one_clear_line(tiny_copy, tmp_path):
    env = {**os.environ, "MODELBUILD_EXECUTOR": "tls://127.0.0.1:9"}
    run = DoitRun(subprocess.run([sys.executable, "-m", "doit", "build:tiny"], env=env,
                                 cwd=tiny_copy.root, capture_output=True, text=True))
    assert run.returncode != 0 and "Traceback" not in run.output
    assert "the executor tls://127.0.0.1:9 needs certificates" in run.output
    assert "executor-tls-ca" in run.output

    env["MODELBUILD_EXECUTOR_TLS_CA"] = str(tmp_path / "ca.pem")
    half = DoitRun(subprocess.run([sys.executable, "-m", "doit", "build:tiny"], env=env,
                                  cwd=tiny_copy.root, capture_output=True, text=True))
    assert half.returncode != 0 and "Traceback" not in half.output
    assert "needs executor-tls-cert, executor-tls-key too" in half.output


def _free_port() -> int:
    """A port free now, below the ephemeral range: a port the kernel handed out could be
    taken by any outgoing connection before the process it is meant for binds it."""
    for port in random.sample(range(20000, 30000), 200):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError("no free port in 20000-30000")


def test_serve_opens_no_dashboard_unless_asked(tiny_project, serve):
    from distributed import Client

    plain = serve(tiny_project)
    with Client(plain.info["address"], timeout=ADMITTED, set_as_default=False) as client:
        info = client.scheduler_info()
    assert info["services"] == {}
    assert [w["services"] for w in info["workers"].values()] == [{}]
    # the scheduler, and the worker and its nanny: nothing else listens
    assert len(plain.listening()) == 3, plain.listening()
    assert {host for host, _ in plain.listening()} == {"127.0.0.1"}
    assert "no TLS: any user of this machine can submit work to it" in plain.log.read_text()
    plain.stop()

    port = _free_port()
    asked = serve(tiny_project, "--dashboard", str(port))
    with Client(asked.info["address"], timeout=ADMITTED, set_as_default=False) as client:
        assert client.scheduler_info()["services"] == {"dashboard": port}
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10) as answer:
        assert answer.read() == b"ok"
    assert f"HTTP, any local user can read it): http://127.0.0.1:{port}/status" in \
        asked.log.read_text()
    assert ("127.0.0.1", port) in asked.listening()


CERTIFICATES = """
openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj /CN=modelbuild-ca -keyout ca-key.pem -out ca.pem
for who in cluster me; do
  openssl req -newkey rsa:2048 -nodes -subj /CN=$who -keyout $who-key.pem -out $who.csr
  openssl x509 -req -in $who.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 30 -out $who.pem
done
chmod 600 *-key.pem
"""


def _until_a_worker(address: str, security) -> dict:
    """The scheduler's info once a worker joined it."""
    from distributed import Client

    with Client(address, timeout=60, security=security, set_as_default=False) as client:
        client.wait_for_workers(1, timeout=180)
        return client.scheduler_info()


def _scheduler_address(file: Path, proc: subprocess.Popen, log: Path) -> str:
    """The address a `dask scheduler --scheduler-file FILE` listens on, once it does."""
    deadline = time.monotonic() + 180
    while True:
        try:
            return json.loads(file.read_text())["address"]
        except (OSError, ValueError, KeyError):
            pass
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, "the scheduler did not start: " + log.read_text()
        time.sleep(0.2)


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_a_tls_cluster_of_your_own_builds_with_the_projects_certificates(tiny_copy):
    from modelbuild.cluster.tls import TlsFiles

    certs = tiny_copy.root / "certs"
    certs.mkdir()
    subprocess.run(["sh", "-ec", CERTIFICATES], cwd=certs, check=True, capture_output=True)
    tls = ["--tls-ca-file", "ca.pem", "--tls-cert", "cluster.pem", "--tls-key", "cluster-key.pem"]
    env = {**os.environ, "DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION": "True"}
    dask = str(Path(sys.executable).with_name("dask"))
    # the scheduler picks its own port and says which in its file: a port chosen here first
    # could be taken, before the scheduler binds it, by any client's outgoing connection
    procs = [subprocess.Popen(
        [dask, "scheduler", "--protocol", "tls", "--host", "127.0.0.1", "--port", "0",
         "--scheduler-file", "scheduler.json", "--dashboard-address", "127.0.0.1:0",
         "--preload", "modelbuild.cluster.no_http", *tls], cwd=certs, env=env,
        start_new_session=True,
        stdout=open(certs / "scheduler.log", "wb"), stderr=subprocess.STDOUT)]  # noqa: SIM115
    try:
        address = _scheduler_address(certs / "scheduler.json", procs[0], certs / "scheduler.log")
        procs.append(subprocess.Popen(
            [dask, "worker", "--scheduler-file", "scheduler.json", "--nthreads", "1",
             "--no-nanny", "--host", "127.0.0.1", "--preload", "modelbuild.cluster.warm_worker",
             "--preload", "modelbuild.cluster.no_http", *tls],
            cwd=certs, env=env, start_new_session=True,
            stdout=open(certs / "worker.log", "wb"), stderr=subprocess.STDOUT))  # noqa: SIM115
        mine = TlsFiles(str(certs / "ca.pem"), str(certs / "me.pem"), str(certs / "me-key.pem"))
        try:
            info = _until_a_worker(address, mine.security())
        except (OSError, TimeoutError) as exc:
            pytest.fail(f"{exc}\nscheduler: {(certs / 'scheduler.log').read_text()}\n"
                        f"worker: {(certs / 'worker.log').read_text()}")
        # the no_http preload closed the HTTP servers of the scheduler and the worker
        assert info["services"] == {}
        assert [w["services"] for w in info["workers"].values()] == [{}]
        local_objects = tiny_copy.objects("tiny")
        _forget_compiled(tiny_copy)
        (tiny_copy.root / "pyproject.toml").write_text(
            f'[tool.modelbuild]\nexecutor = "{address}"\nexecutor-tls-ca = "certs/ca.pem"\n'
            'executor-tls-cert = "certs/me.pem"\nexecutor-tls-key = "certs/me-key.pem"\n')
        run = _build(tiny_copy)
        assert run.returncode == 0, run.output
        assert run.ran_kind("codegen") and "tvm imported: False" in run.stderr, run.output
        assert tiny_copy.objects("tiny") == local_objects
        assert not _connects(address.replace("tls://", "tcp://"))

        # a certificate the cluster's CA did not sign: one line naming it, nothing stored
        from distributed.security import Security

        stranger = Security.temporary()
        (certs / "stranger.pem").write_text(stranger.tls_client_cert)
        (certs / "stranger-key.pem").write_text(stranger.tls_client_key)
        _forget_compiled(tiny_copy)
        env = {**os.environ, "MODELBUILD_EXECUTOR_TLS_CERT": "certs/stranger.pem",
               "MODELBUILD_EXECUTOR_TLS_KEY": "certs/stranger-key.pem"}
        refused = _build(tiny_copy, env)
        assert refused.returncode != 0 and "Traceback" not in refused.output, refused.output
        assert f"cannot connect to the executor {address}" in refused.output
        assert str(certs / "stranger.pem") in refused.output
        assert not (tiny_copy.root / "build" / "tiny" / "objects").is_dir() or not list(
            (tiny_copy.root / "build" / "tiny" / "objects").glob("*.o"))
    finally:
        for proc in reversed(procs):
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_serve_tls_uses_the_projects_certificates(tiny_project, serve):
    from modelbuild.cluster.tls import TlsFiles

    certs = tiny_project.root / "certs"
    certs.mkdir()
    subprocess.run(["sh", "-ec", CERTIFICATES], cwd=certs, check=True, capture_output=True)
    (tiny_project.root / "pyproject.toml").write_text(
        '[tool.modelbuild]\nexecutor-tls-ca = "certs/ca.pem"\n'
        'executor-tls-cert = "certs/cluster.pem"\nexecutor-tls-key = "certs/cluster-key.pem"\n')
    served = serve(tiny_project, "--tls")
    assert served.info["address"].startswith("tls://127.0.0.1:")
    assert served.info["tls"]["cert"] == str(certs / "cluster.pem")
    assert not (tiny_project.root / "build" / ".executor-tls").exists()
    # another certificate of the same CA gets in; a stranger's does not (the other test)
    me = TlsFiles(str(certs / "ca.pem"), str(certs / "me.pem"), str(certs / "me-key.pem"))
    assert _connects(served.info["address"], me.security(), ADMITTED)
