"""lower and codegen on warm Dask workers (`python -m modelbuild serve`, a real LocalCluster
on 127.0.0.1): the same objects as a local build, and no TVM in the doit process."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, DoitRun, sha256

pytestmark = pytest.mark.slow  # Dask build workers: the full suite only

# doit, reporting on exit whether its process imported TVM
DOIT_REPORTING_TVM = """
import atexit, runpy, sys
atexit.register(lambda: print("tvm imported:", "tvm" in sys.modules, file=sys.stderr))
sys.argv = ["doit", *sys.argv[1:]]
runpy.run_module("doit", run_name="__main__", alter_sys=True)
"""


class Serve:
    def __init__(self, project, workers: int = 2, env: dict | None = None):
        self.project = project
        self.file = project.root / "build" / ".executor.json"
        self.log = project.root / "serve.log"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "modelbuild", "serve", "--workers", str(workers)],
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


@pytest.fixture
def serve():
    started = []

    def start(project, **kw) -> Serve:
        started.append(Serve(project, **kw))
        return started[-1]

    yield start
    for s in started:
        s.stop()


def doit(project, *args, env=None) -> DoitRun:
    return DoitRun(subprocess.run([sys.executable, "-c", DOIT_REPORTING_TVM, *args],
                                  cwd=project.root, capture_output=True, text=True, env=env))


def _forget_compiled(project) -> None:
    """Keep partition; drop every lowered file, object, the library and the cache."""
    for sub in ("lowered", "objects"):
        shutil.rmtree(project.root / "build" / "tiny" / sub, ignore_errors=True)
    project.library("tiny").unlink(missing_ok=True)
    shutil.rmtree(project.root / "build" / ".cache", ignore_errors=True)


def test_steps_on_warm_workers_give_the_local_objects_and_keep_tvm_out_of_doit(
        tiny_copy, tiny_variants, serve):
    local_objects, local_lib = tiny_copy.objects("tiny"), sha256(tiny_copy.library("tiny"))
    _forget_compiled(tiny_copy)
    serve(tiny_copy)
    run = doit(tiny_copy, "build:tiny")
    assert run.returncode == 0, run.output
    assert "tvm imported: False" in run.stderr, run.output
    assert run.ran_kind("lower") and run.ran_kind("codegen") and "link:tiny" in run.ran
    assert tiny_copy.objects("tiny") == local_objects
    assert sha256(tiny_copy.library("tiny")) == local_lib

    workload, variants = tiny_variants
    tiny_copy.set_record("tiny", workload, variants[1])
    edit = doit(tiny_copy, "build:tiny")
    assert edit.ran == {f"lower:tiny/{workload}", f"codegen:tiny/{workload}", "link:tiny"}
    assert "tvm imported: False" in edit.stderr, edit.output
    remote_object = tiny_copy.objects("tiny")[f"{workload}.o"]
    # the same edit built here, in the doit process, gives the same object
    shutil.rmtree(tiny_copy.root / "build" / ".cache")
    (tiny_copy.root / "build" / "tiny" / "objects" / f"{workload}.o").unlink()
    (tiny_copy.root / "build" / "tiny" / "lowered" / f"{workload}.json").unlink()
    tiny_copy.root.joinpath("build", ".executor.json").rename(tiny_copy.root / "away.json")
    local = doit(tiny_copy, "build:tiny")
    assert "tvm imported: True" in local.stderr, local.output
    assert tiny_copy.objects("tiny")[f"{workload}.o"] == remote_object


def test_a_clean_build_on_serve_partitions_on_a_worker_as_locally(tmp_path, serve):
    """A clean build with serve running: partition runs on a warm worker too, so the doit
    process never imports TVM (half a second of a clean build's critical path); its files,
    the library and what partition says on stderr (here: the layout's fallback note) are
    those of a local build."""
    import numpy as np
    from conftest import make_project
    from onnx import TensorProto as TP
    from onnx import helper as H
    from onnx import numpy_helper

    rng = np.random.default_rng(0)
    weights = numpy_helper.from_array((rng.standard_normal((16, 8, 3, 3)) * 0.2)
                                      .astype(np.float32), "w")
    graph = H.make_graph([H.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                          H.make_node("ReduceMean", ["c"], ["y"], axes=[1], keepdims=1)], "g",
                         [H.make_tensor_value_info("x", TP.FLOAT, [1, 8, 6, 6])],
                         [H.make_tensor_value_info("y", TP.FLOAT, None)], initializer=[weights])
    model = H.make_model(graph, opset_imports=[H.make_opsetid("", 13)], ir_version=8)
    local, remote = (make_project(tmp_path / name, {"m": model}) for name in ("local", "remote"))
    here = local.doit("build:m")
    serve(remote)
    run = doit(remote, "build:m")
    assert run.returncode == 0, run.output
    assert "partition:m" in run.ran and run.ran_kind("codegen"), run.output
    assert "tvm imported: False" in run.stderr, run.output
    note = "note: TVM cannot legalize this graph in NCHW"
    assert note in here.stderr and note in run.stderr, run.output

    def files(project):
        folder = project.root / "build" / "m" / "partition"
        return {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*")
                if p.is_file() and not p.name.endswith(".stamp")}

    assert files(remote) == files(local)
    assert sha256(remote.library("m")) == sha256(local.library("m"))
    assert doit(remote, "build:m").ran == set()


def test_a_worker_killed_during_a_build_leaves_a_correct_build(tiny_copy, serve):
    local_lib = sha256(tiny_copy.library("tiny"))
    _forget_compiled(tiny_copy)
    served = serve(tiny_copy)
    victim = min(w["pid"] for w in served.info["workers"].values())
    proc = subprocess.Popen([sys.executable, "-m", "doit", "build:tiny"], cwd=tiny_copy.root,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    first = proc.stdout.readline()
    while first and not first.startswith(".  lower:"):
        first = proc.stdout.readline()
    os.kill(victim, signal.SIGKILL)  # as its first step is sent
    out = first + proc.stdout.read()
    proc.wait(300)
    if proc.returncode == 0:
        assert sha256(tiny_copy.library("tiny")) == local_lib
    else:  # the step is named, and nothing half-done was kept
        assert "did not finish it" in out and "Traceback" not in out, out
    again = DoitRun(subprocess.run([sys.executable, "-m", "doit", "build:tiny"],
                                   cwd=tiny_copy.root, capture_output=True, text=True))
    assert again.returncode == 0, again.output
    assert sha256(tiny_copy.library("tiny")) == local_lib
    # Dask replaced the dead worker: --status lists the workers there are (it kept listing
    # the dead one, from the address file written at start)
    deadline = time.monotonic() + 90
    while True:
        status = subprocess.run([sys.executable, "-m", "modelbuild", "serve", "--status"],
                                cwd=tiny_copy.root, capture_output=True, text=True).stdout
        if f"(pid {victim})" not in status and "2 worker(s)" in status:
            break
        assert time.monotonic() < deadline, status
        time.sleep(1)


def test_workers_running_other_code_fail_the_build_naming_both(tiny_copy, serve, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(REPO / "modelbuild", other / "modelbuild",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for step in ("lower", "codegen"):
        with open(other / "modelbuild" / "steps" / f"{step}.py", "a") as f:
            f.write("\n# another version of this step\n")
    _forget_compiled(tiny_copy)
    serve(tiny_copy, env={**os.environ, "PYTHONPATH": str(other)})
    run = doit(tiny_copy, "build:tiny")
    assert run.returncode != 0 and "Traceback" not in run.output
    assert "the executor's worker runs other code than this build: worker: apache-tvm" in run.output
    assert "restart `python -m modelbuild serve`" in run.output
    assert not list((tiny_copy.root / "build" / ".cache").glob("lowered/*/*"))
    assert not (tiny_copy.root / "build" / "tiny" / "lowered").is_dir() or not list(
        Path(tiny_copy.root / "build" / "tiny" / "lowered").glob("*.json"))


def test_an_executor_that_does_not_answer_is_a_clear_error(tiny_copy):
    run = doit(tiny_copy, "build:tiny",
               env={**os.environ, "MODELBUILD_EXECUTOR": "tcp://127.0.0.1:9"})
    assert run.returncode != 0 and "Traceback" not in run.output
    assert "the executor tcp://127.0.0.1:9 does not answer" in run.output



def _listener(greeting: bytes):
    """A TCP server on 127.0.0.1 that is no Dask scheduler: it accepts, sends ``greeting``
    (an SSH server's banner; nothing, as a server waiting for a request), then holds the
    connection. (port, stop)."""
    import socket
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held = []

    def serve():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            held.append(conn)
            try:
                conn.sendall(greeting)
            except OSError:
                pass

    threading.Thread(target=serve, daemon=True).start()

    def stop():
        server.close()
        for conn in held:
            conn.close()

    return server.getsockname()[1], stop


@pytest.mark.parametrize("greeting", [b"", b"SSH-2.0-OpenSSH_9.6p1 Ubuntu-3ubuntu13\r\n" * 4,
                                      (64).to_bytes(8, "little") + b"\xff" * 64],
                         ids=["silent", "banner", "plausible-size-then-garbage"])
def test_an_executor_address_where_no_dask_scheduler_listens_is_a_clear_error(tiny_copy, greeting):
    """A silent server (an HTTP server waiting for its request) kept the build waiting
    forever; one that talks first was an internal error (MemoryError: its banner read as a
    frame's length) with a traceback."""
    port, stop = _listener(greeting)
    try:
        _forget_compiled(tiny_copy)
        start = time.monotonic()
        run = DoitRun(subprocess.run(
            [sys.executable, "-m", "doit", "build:tiny"], cwd=tiny_copy.root, capture_output=True,
            text=True, timeout=240, env={**os.environ, "MODELBUILD_EXECUTOR": f"tcp://127.0.0.1:{port}"}))
        took = time.monotonic() - start
    finally:
        stop()
    assert run.returncode == 1 and "Traceback" not in run.output, run.output
    assert "internal error" not in run.output, run.output
    if greeting.startswith(b"SSH") or not greeting:
        assert f"the executor tcp://127.0.0.1:{port} is not a Dask scheduler: it " in run.output, run
        assert ("said nothing" if not greeting else "it began with b'SSH-2.0") in run.output, run
    else:  # past the probe: Dask's own refusal, and no 20 s wait and traceback at exit
        assert f"cannot connect to the executor tcp://127.0.0.1:{port} (not a Dask" in run.output
        assert "Exception ignored" not in run.output, run
    assert took < 120, took  # one wait for the whole build, not one per step

def test_a_second_serve_started_while_the_first_starts_is_refused(tiny_copy):
    """Two serve started a second apart both passed the 'already runs' check (the address
    file is written last): the first ran on, unauthenticated, where nothing could find or
    stop it."""
    first = subprocess.Popen([sys.executable, "-m", "modelbuild", "serve", "--workers", "1"],
                             cwd=tiny_copy.root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             start_new_session=True, text=True)
    try:
        assert "starting 1 worker" in first.stdout.readline()  # past the check, still starting
        second = subprocess.run([sys.executable, "-m", "modelbuild", "serve", "--workers", "1"],
                                cwd=tiny_copy.root, capture_output=True, text=True, timeout=120)
        assert second.returncode == 1, second.stdout + second.stderr
        assert "serve already runs for this project (pid" in second.stderr, second.stderr
    finally:
        os.killpg(first.pid, signal.SIGTERM)
        first.wait(60)


@pytest.mark.parametrize("lock", [True, False], ids=["lock-file-left", "no-lock-file"])
@pytest.mark.parametrize("command", ["--stop", "--status"])
def test_serve_stop_leaves_another_program_on_a_dead_serves_pid_alone(tiny_project, lock,
                                                                      command):
    """A serve killed with SIGKILL leaves its address file; once its pid is another
    program's, `serve --stop` sent that program SIGTERM (and --status said serve ran). Now
    both see that no serve holds the project's lock, remove the stale file and signal
    nothing; a build goes on locally."""
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        build = tiny_project.root / "build"
        build.mkdir(exist_ok=True)
        if lock:
            (build / ".serve-lock").write_text(str(other.pid))  # as the dead serve left it
        (build / ".executor.json").write_text(json.dumps(
            {"address": "tcp://127.0.0.1:9", "pid": other.pid, "workers": {}}))
        stop = subprocess.run([sys.executable, "-m", "modelbuild", "serve", command],
                              cwd=tiny_project.root, capture_output=True, text=True, timeout=60)
        assert stop.returncode == (0 if command == "--stop" else 1), stop.stdout + stop.stderr
        assert "no `modelbuild serve` runs" in stop.stdout and str(other.pid) in stop.stdout
        assert other.poll() is None, "serve --stop signalled a program that is not serve"
        assert not (build / ".executor.json").exists()
        tiny_project.doit("build:tiny")  # no executor: built here
    finally:
        other.kill()
        other.wait()


class _Bystander:
    """A Dask scheduler that is no serve's (a LocalCluster on 127.0.0.1, its worker a thread of
    this process), counting the tasks that reach it."""

    def __init__(self):
        from distributed import LocalCluster
        from distributed.diagnostics.plugin import SchedulerPlugin

        self.keys: list = []
        seen = self.keys

        class Count(SchedulerPlugin):
            def transition(self, key, start, finish, *args, **kwargs):
                seen.append(key)

        self.cluster = LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                    host="127.0.0.1", protocol="tcp://", dashboard_address=None)
        self.cluster.scheduler.add_plugin(Count())
        self.address = self.cluster.scheduler_address

    def close(self):
        self.cluster.close()


@pytest.mark.parametrize("lock", ["free", "held"])
def test_a_dead_serves_address_file_sends_nothing_to_the_scheduler_now_there(tiny_copy, lock):
    """serve SIGKILLed: its address file stays, its pid is another program's (here: this
    test's), another Dask scheduler listens on its port. A pid check trusted the file and
    sent every step to that scheduler's worker. Now the build checks serve's lock (free:
    the file is removed) and, where a process holds it, that the scheduler knows the
    file's token: it builds here, saying why in one line, and makes the local library."""
    local_lib = sha256(tiny_copy.library("tiny"))
    _forget_compiled(tiny_copy)
    build = tiny_copy.root / "build"
    bystander = _Bystander()
    held = None
    try:
        if lock == "held":  # a process (this one) holds serve's lock with the file's pid
            from modelbuild.graph import build_lock
            held = build_lock.hold(build / ".serve-lock")
        else:
            (build / ".serve-lock").write_text(str(os.getpid()))  # as the dead serve left it
        (build / ".executor.json").write_text(json.dumps(
            {"address": bystander.address, "pid": os.getpid(), "token": "0123456789abcdef",
             "workers": {}}))
        run = doit(tiny_copy, "build:tiny")
        sent = list(bystander.keys)
    finally:
        bystander.close()
        if held is not None:
            os.close(held)
    assert run.returncode == 0, run.output
    assert run.ran_kind("lower") and run.ran_kind("codegen"), run.output
    assert sent == [], sent
    assert "tvm imported: True" in run.stderr, run.output
    assert sha256(tiny_copy.library("tiny")) == local_lib
    said = [ln for ln in run.stderr.splitlines() if "building locally" in ln]
    why = ("serve is not running (stale build/.executor.json" if lock == "free" else
           f"the scheduler at {bystander.address} is not this project's serve")
    assert len(said) == 1 and why in said[0], run.output
    assert "Traceback" not in run.output, run.output
    assert (build / ".executor.json").exists() == (lock == "held")


@pytest.mark.parametrize("content", [
    '{"address": "tcp://127.0.0.1:9", "pid": 99999999999999999999999, "workers": {}}',
    '{"address": "tcp://127.0.0.1:9", "pid": 0, "workers": {}}',
    '{"address": "tcp://127.0.0.1:9", "pid": -1, "workers": {}}',
    '{"address": "tcp://127.0.0.1:9", "pid": true, "workers": {}}',
    '{"address": 5, "pid": 1, "workers": {}}',
    '{"address": "tcp://127.0.0.1:9", "pid": 1, "workers": {"w": {"pid": 1}}}',
    "[" * 100000,
    "fifo",
])
def test_a_malformed_serve_address_file_means_no_serve(tiny_project, content):
    """What is not serve's own file (a huge pid, pid 0 or -1, which os.kill takes for
    process groups, wrong types, deep nesting, a pipe) is no serve: --status, --stop and a
    build answer without a traceback, a hang or a signal sent anywhere."""
    path = tiny_project.root / "build" / ".executor.json"
    path.parent.mkdir(exist_ok=True)
    if content == "fifo":
        os.mkfifo(path)
    else:
        path.write_text(content)
    for args in (["--status"], ["--stop"]):
        done = subprocess.run([sys.executable, "-m", "modelbuild", "serve", *args],
                              cwd=tiny_project.root, capture_output=True, text=True, timeout=60)
        assert "Traceback" not in done.stderr, done.stderr
        assert "no `modelbuild serve` runs" in done.stdout, done.stdout + done.stderr
    tiny_project.doit("build:tiny")


@pytest.mark.parametrize("sent", [b"\xc1 not msgpack", b"\x93\x01\x02\x03",
                                  b"\x82\xa6output\x01\xa6stderr\xa0"])
def test_a_worker_s_partition_that_is_no_bundle_writes_nothing(tiny_copy, sent):
    """What a worker sends back for partition is checked before anything is written: bytes
    that are no bundle are one error naming the task, not an internal error."""
    import msgpack  # noqa: F401 - the bundle's format

    from modelbuild.core.errors import BuildError
    from modelbuild.core.paths import Project as Layouts
    from modelbuild.cluster.executor_steps import partition_on_worker
    from modelbuild.targets import registry

    class Answers:  # an executor whose worker answers ``sent``
        address = "tcp://127.0.0.1:1"

        def here(self):
            return False

        def run(self, task, step, expected, args):
            return sent

    layout = Layouts(tiny_copy.root).model("tiny")
    before = {p: p.read_bytes() for p in layout.partition_dir.rglob("*") if p.is_file()}
    with pytest.raises(BuildError, match="partition:tiny: the executor's worker sent back no "
                                         "partition output"):
        partition_on_worker(Answers(), None, None, layout, registry.resolve("llvm"))
    assert {p: p.read_bytes() for p in layout.partition_dir.rglob("*") if p.is_file()} == before


def test_a_worker_whose_code_changed_on_disk_since_it_loaded_it_refuses_steps(tiny_project,
                                                                              tmp_path):
    """serve started, then modelbuild upgraded (or edited) in place under it: the step's
    code digest is read from disk, so the workers passed the check and ran the code they
    had loaded, filing its output under the new code's key. Now they refuse, naming what
    changed, and nothing is stored."""
    code = tmp_path / "code"
    shutil.copytree(REPO / "modelbuild", code / "modelbuild",
                    ignore=shutil.ignore_patterns("__pycache__"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(code), str(REPO / "tests")])}
    served = Serve(tiny_project, workers=1, env=env)
    try:
        partition = code / "modelbuild" / "steps" / "partition.py"
        partition.write_text(partition.read_text() + "\n# edited while serve runs\n")
        run = tiny_project.doit("build:tiny", check=False, env=env)
        assert run.returncode != 0 and "Traceback" not in run.output, run.output
        assert "loaded modelbuild's code before its files changed on disk " \
               "(steps/partition.py)" in run.output, run.output
        assert "restart `python -m modelbuild serve`" in run.output
        assert not list((tiny_project.root / "build" / ".cache").glob("partition/??/*"))
    finally:
        served.stop()
