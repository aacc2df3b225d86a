"""Shared test fixtures: small real projects, real doit runs in a subprocess."""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import numpy as np
import pytest
from onnx_models import randomized_light, tiny_model

REPO = Path(__file__).resolve().parent.parent
# each test project uses its own build/.cache, and no remote tier unless the test sets one
for _name in ("MODELBUILD_CACHE", "MODELBUILD_REMOTE_CACHE", "MODELBUILD_REMOTE_CACHE_MODE",
              "MODELBUILD_REMOTE_CACHE_TIMEOUT", "MODELBUILD_EXECUTOR"):
    os.environ.pop(_name, None)
# Tests interrupt their subprocesses (sweep, watch, tune) with SIGINT, as Ctrl-C does. A
# suite started with SIGINT ignored (a background job of a non-interactive shell, nohup)
# would pass that on: an ignored signal stays ignored across exec, and Python then leaves
# it so. Caught here, it is back to the default in every process the tests start.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


# A test that takes a minute or more is named as it ends, with its seconds (setup, call and
# teardown together), so a run that is stopped for time, as CI stops one, still says where
# its time went; pytest's --durations table comes only at the end.
SLOW_TEST_S = 60.0


class _SlowTestLines:
    def __init__(self, config):
        self.config = config
        self.seconds: dict[str, float] = {}

    def pytest_runtest_logreport(self, report):
        self.seconds[report.nodeid] = self.seconds.get(report.nodeid, 0.0) + report.duration
        if report.when == "teardown":
            total = self.seconds.pop(report.nodeid)
            reporter = self.config.pluginmanager.get_plugin("terminalreporter")
            if total >= SLOW_TEST_S and reporter is not None:
                reporter.write("\n")  # off the line of dots (-q), which write_line leaves
                reporter.write_line(f"[{total:.0f} s] {report.nodeid}")


def pytest_configure(config):
    config.pluginmanager.register(_SlowTestLines(config), "modelbuild-slow-test-lines")
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        # xdist's controller: the run's id, which the workers name their locks by, chosen
        # here so that the locks can be removed when the run ends
        config.option.testrunuid = config.option.testrunuid or uuid.uuid4().hex


# The files whose tests take minutes (a tune, the declared models), run first: xdist hands
# out whole files in collection order (--no-loadscope-reorder in addopts; its default puts the
# files with the most tests first), so a run does not end on one long file while the other
# worker waits. The rest keep pytest's order.
LONG_FILES = ("test_tune.py", "test_cluster_tune.py", "test_compute_variants.py",
              "test_declared_models.py", "test_targets.py", "test_cli_records.py",
              "test_edit_during_build.py", "test_rpc_tune.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONG_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


def pytest_unconfigure(config):
    run = getattr(config.option, "testrunuid", None)
    if run and not hasattr(config, "workerinput"):
        for path in _machine_locks(run):
            path.unlink(missing_ok=True)


def _machine_locks(run: str) -> tuple[Path, Path]:
    base = Path(tempfile.gettempdir()) / f"modelbuild-tests-{run}"
    return Path(f"{base}.gate"), Path(f"{base}.room")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Under pytest-xdist (the README's `-n 2`), a test marked ``alone`` runs while no other
    test does: it compares timings, which a build on the other core would skew. Each test
    holds a lock over its whole protocol (so over module and session fixtures set up for it
    too): a shared one, an ``alone`` one the exclusive one; a gate taken before either keeps
    an exclusive request from waiting behind a stream of shared ones. Without xdist, one
    test runs at a time anyway: nothing is locked."""
    run = getattr(item.config, "workerinput", {}).get("testrunuid")
    if run is None:
        return (yield)
    gate_path, room_path = _machine_locks(run)
    alone = item.get_closest_marker("alone") is not None
    with open(gate_path, "a") as gate, open(room_path, "a") as room:
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(room, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            return (yield)
        finally:
            fcntl.flock(room, fcntl.LOCK_UN)


class DoitRun:
    """A finished `doit` subprocess: exit code, output, and which tasks ran."""

    def __init__(self, proc: subprocess.CompletedProcess):
        self.returncode = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr
        self.output = proc.stdout + proc.stderr
        lines = self.stdout.splitlines()
        self.ran = {ln[3:].split()[0] for ln in lines if ln.startswith(".  ")}
        self.uptodate = {ln[3:].split()[0] for ln in lines if ln.startswith("-- ")}
        self.from_cache = {ln[3:].split()[0] for ln in lines
                           if ln.startswith("-- ") and ln.endswith("(from cache)")}
        self.from_remote = {ln[3:].split()[0] for ln in lines
                            if ln.startswith("-- ") and ln.endswith("(from remote cache)")}

    def ran_kind(self, kind: str) -> set[str]:
        return {t for t in self.ran if t.startswith(kind + ":")}

    def __repr__(self):
        return f"DoitRun(rc={self.returncode})\n{self.output}"


class Project:
    def __init__(self, root: Path):
        self.root = root

    def doit(self, *args: str, check: bool = True, env: dict | None = None,
             timeout: float | None = None) -> DoitRun:
        proc = subprocess.run([sys.executable, "-m", "doit", *args], cwd=self.root,
                              capture_output=True, text=True, env=env, timeout=timeout)
        run = DoitRun(proc)
        if check and run.returncode != 0:
            raise AssertionError(f"doit {' '.join(args)} failed:\n{run.output}")
        return run

    def library(self, model: str) -> Path:
        return self.root / "build" / model / f"{model}.so"

    def record(self, model: str, workload: str) -> Path:
        return self.root / "schedules" / model / f"{workload}.json"

    def set_record(self, model: str, workload: str, rec) -> None:
        """Make ``rec`` the active record of ``workload``."""
        from modelbuild.schedules import records

        self.record(model, workload).parent.mkdir(parents=True, exist_ok=True)
        records.save(self.record(model, workload), rec)

    def workload_file(self, model: str, workload: str) -> Path:
        return self.root / "build" / model / "partition" / "workloads" / f"{workload}.json"

    def objects(self, model: str) -> dict[str, bytes]:
        return {p.name: p.read_bytes() for p in sorted((self.root / "build" / model / "objects").glob("*.o"))}


def cli(project, *args, check=True) -> subprocess.CompletedProcess:
    """`python -m modelbuild ARGS` in the project; raises with its output when it fails."""
    proc = subprocess.run([sys.executable, "-m", "modelbuild", *args], cwd=project.root,
                          capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise AssertionError(f"modelbuild {' '.join(args)} failed:\n{proc.stdout}{proc.stderr}")
    return proc


@pytest.fixture
def cli_main(capfd, monkeypatch):
    """cli_main(project, *args, check=True): `python -m modelbuild ARGS` run in this process,
    as modelbuild/__main__.py runs it (``sys.exit(cli.main())``), in the project folder: the
    same exit status, stdout and stderr as ``cli`` gives (file descriptors captured, so what
    C++ writes is there too), without the seconds a new interpreter spends importing TVM.
    For argument errors and refusals, where the process itself is not what a test is about."""
    from modelbuild.commands.cli import main

    def run(project, *args, check=True) -> subprocess.CompletedProcess:
        monkeypatch.chdir(project.root)  # and back after the test, even if a command moved
        capfd.readouterr()  # only this command's output
        environ = dict(os.environ)  # what a command sets (TVM_NUM_THREADS) ends with it
        try:
            code = main(list(args))
        except SystemExit as stop:  # argparse's refusals: sys.exit(2) after the usage
            code = stop.code
        finally:
            for name in set(os.environ) - set(environ):
                del os.environ[name]
            os.environ.update(environ)
        if code is None:
            code = 0
        elif not isinstance(code, int):  # as sys.exit("message") ends an interpreter
            print(code, file=sys.stderr)
            code = 1
        out, err = capfd.readouterr()
        proc = subprocess.CompletedProcess([sys.executable, "-m", "modelbuild", *args], code, out,
                                           err)
        if check and proc.returncode != 0:
            raise AssertionError(f"modelbuild {' '.join(args)} failed:\n"
                                 f"{proc.stdout}{proc.stderr}")
        return proc

    return run


def make_project(root: Path, models: dict) -> Project:
    """A project directory with the repo's dodo.py and the given models.

    ``models`` maps a name to an onnx ModelProto (saved as models/<name>.onnx)
    or to the text of a models/<name>.toml declaration.
    """
    import onnx

    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "dodo.py", root / "dodo.py")
    (root / "models").mkdir(exist_ok=True)
    (root / "schedules").mkdir(exist_ok=True)
    for name, model in models.items():
        if isinstance(model, str):
            (root / "models" / f"{name}.toml").write_text(model)
        else:
            onnx.save(model, str(root / "models" / f"{name}.onnx"))
    return Project(root)


def patched_env(folder: Path, source: str) -> dict:
    """An environment whose Python processes first run ``source`` (a sitecustomize.py in
    ``folder``): a test's way to plant a failure inside a doit subprocess."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(source)
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")])}


def held_env(folder: Path, module: str, name: str, flag: Path, go: Path | None = None) -> dict:
    """An environment (patched_env) in which ``module.name`` (a step's function) touches
    ``flag`` when called, then waits: until ``go`` exists (at most 600 s), then runs; without
    ``go``, until a signal ends the process. A test acts on the build while it is held
    there, however slow the machine, instead of on a line of its output."""
    wait = (f"    deadline = time.monotonic() + 600\n"
            f"    while not Path({str(go)!r}).exists() and time.monotonic() < deadline:\n"
            f"        time.sleep(0.02)\n" if go is not None else "    time.sleep(600)\n")
    return patched_env(folder, f"""
import time
from pathlib import Path
from {module} import {name} as _held
import {module} as _module
def {name}(*args, **kwargs):
    Path({str(flag)!r}).touch()
{wait}    return _held(*args, **kwargs)
_module.{name} = {name}
""")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def model_inputs(project_root: Path, model: str, seed: int = 0) -> list[np.ndarray]:
    from modelbuild.core import manifest

    man = manifest.read(project_root / "build" / model / "partition" / "manifest.msgpack")
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(dtype) for _, shape, dtype in man.inputs]


def load_library(path) -> "tvm.runtime.Module":
    """The library at ``path`` as it is now: loaded from a private copy, because the
    dynamic loader hands back the library it already loaded from the same path, even
    after a rebuild replaced the file (a test comparing two builds would compare one)."""
    import tempfile

    import tvm

    fd, copy = tempfile.mkstemp(prefix="lib-", suffix=".so")
    os.close(fd)
    try:
        shutil.copyfile(path, copy)
        return tvm.runtime.load_module(copy)
    finally:
        os.unlink(copy)  # the loader keeps its mapping


def run_library(lib_or_path, inputs: list[np.ndarray]) -> np.ndarray:
    import tvm
    from tvm import relax

    lib = load_library(lib_or_path) if isinstance(lib_or_path, (str, Path)) else lib_or_path
    vm = relax.VirtualMachine(lib, tvm.cpu())
    out = vm["main"](*[tvm.runtime.tensor(x) for x in inputs])
    return out.numpy()


def onnx_output(project_root: Path, model: str, inputs: list[np.ndarray]) -> np.ndarray:
    """The model's output from onnxruntime: an oracle outside TVM, which shares none of
    modelbuild's import, fusion or input renaming (models/<model>.onnx, its first output)."""
    return onnx_file_output(project_root / "models" / f"{model}.onnx", inputs)


def onnx_file_output(path: Path, inputs: list[np.ndarray]) -> np.ndarray:
    """onnxruntime's first output of the ONNX file at ``path``, inputs in the model's order."""
    import onnx
    import onnxruntime

    graph = onnx.load(str(path), load_external_data=False).graph
    initializers = {i.name for i in graph.initializer}
    names = [v.name for v in graph.input if v.name not in initializers]
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3  # errors only
    session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return session.run(None, dict(zip(names, inputs)))[0]


def assert_close(actual: np.ndarray, expected: np.ndarray, rel: float = 1e-5) -> None:
    scale = max(float(np.abs(expected).max()), 1e-30)
    diff = float(np.abs(actual - expected).max())
    assert diff <= rel * scale, f"max abs diff {diff} > {rel} x {scale}"


@pytest.fixture
def tiny_project(tmp_path) -> Project:
    return make_project(tmp_path / "proj", {"tiny": tiny_model()})


@pytest.fixture(scope="session")
def tiny_built(tmp_path_factory) -> Project:
    """One clean build of the tiny model, shared read-only by tests that copy it."""
    project = make_project(tmp_path_factory.mktemp("tiny") / "proj", {"tiny": tiny_model()})
    project.doit("build:tiny")
    return project


@pytest.fixture
def keys(tmp_path):
    """A key pair from `python -m modelbuild cache keygen`: the folder holding
    remote-cache.key (CI's, private) and remote-cache.pub."""
    proc = subprocess.run([sys.executable, "-m", "modelbuild", "cache", "keygen",
                           str(tmp_path / "ci-keys")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return tmp_path / "ci-keys"


@pytest.fixture
def tiny_copy(tiny_built, tmp_path) -> Project:
    """A private copy of the built tiny project (build state included)."""
    dest = tmp_path / "proj"
    shutil.copytree(tiny_built.root, dest, symlinks=True)
    return Project(dest)


@pytest.fixture(scope="session")
def declared_partitioned(tmp_path_factory):
    """declared_partitioned(name): a project with the declared model ``name`` given random
    weights (same architecture, as models/<name>.onnx), partitioned once per session.

    Shared: a test may build it or add records, but must not change its model.
    """
    made: dict[str, Project] = {}

    def get(name: str) -> Project:
        if name not in made:
            from modelbuild.core import models

            light = models.discover(REPO / "models")[name].onnx_path.stem.removeprefix("light_")
            project = make_project(tmp_path_factory.mktemp(name) / "p", {name: randomized_light(light)})
            project.doit(f"partition:{name}")
            made[name] = project
        return made[name]

    return get


def sampled_records(project: Project, model: str, workload: str, count: int, seed: int = 1):
    """``count`` valid records for one workload of a built/partitioned project."""
    import tvm

    from modelbuild.schedules import sample as sampling
    from modelbuild.targets import registry as targets

    func = tvm.ir.load_json(project.workload_file(model, workload).read_text())
    return sampling.sample_records(func, workload, targets.resolve("llvm"), count, seed=seed,
                                   model=model)


def reference_output(project: Project, model: str, inputs) -> np.ndarray:
    """tvm.compile of the project's model with its records, run on ``inputs``."""
    from modelbuild.core import models
    from modelbuild.steps import reference
    from modelbuild.targets import registry as targets

    spec = models.discover(project.root / "models")[model]
    ex = reference.compile_model(spec, project.root / "schedules" / model, targets.resolve("llvm"))
    return run_library(ex, inputs)


@pytest.fixture(scope="session")
def tiny_variants(tiny_built):
    """Three sampled records of the tiny model's first convolution (with its bias add and relu)."""
    workload = tiny_conv_workload(tiny_built)
    return workload, sampled_records(tiny_built, "tiny", workload, 3)


def tiny_conv_workload(project: Project) -> str:
    from modelbuild.core import manifest

    man = manifest.read(project.root / "build" / "tiny" / "partition" / "manifest.msgpack")
    convs = [w.name for w in man.workloads if "conv2d" in w.name and "add" in w.name]
    assert convs, [w.name for w in man.workloads]
    return sorted(convs)[-1]


def other_tvm_ffi_env(folder: Path, version: str = "9.9") -> dict:
    """An environment in which apache-tvm-ffi reports ``version``: a distribution earlier on
    the path (its metadata only; nothing of it is imported)."""
    info = folder / f"apache_tvm_ffi-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: apache-tvm-ffi\nVersion: {version}\n")
    (info / "RECORD").write_text("")
    return {**os.environ, "PYTHONPATH": str(folder)}
