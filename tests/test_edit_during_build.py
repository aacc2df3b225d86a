"""A record edited while a build runs (issue 19, item 1): each step reads each input once,
so the key and the output come from the same bytes; an edit during a build is either
built or not, never filed under the other edit's key."""

from __future__ import annotations

import functools
import json
import os
import shutil
import threading
from pathlib import Path

import pytest
from conftest import (assert_close, cli, make_project, model_inputs, patched_env,
                      run_library, tiny_conv_workload)
from onnx_models import tiny_model

from modelbuild.core import regular_file
from modelbuild.core.paths import Project as Layout
from modelbuild.decision import fingerprint
from modelbuild.cache.store import Cache
from modelbuild.decision.cached_step import Step
from modelbuild.schedules import records


class Toggler:
    """Makes the record of ``workload`` each of ``variants`` in turn, every ``period`` seconds
    (an editor's autosave, an edit and its undo in watch mode), until stopped."""

    def __init__(self, project, workload: str, variants, period: float = 0.02):
        self.project, self.workload, self.variants, self.period = project, workload, variants, period
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.writes = 0

    def _run(self):
        while not self.stop.is_set():
            self.project.set_record("tiny", self.workload, self.variants[self.writes % 2])
            self.writes += 1
            self.stop.wait(self.period)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


def _lowered(project, workload: str) -> bytes:
    return (project.root / "build" / "tiny" / "lowered" / f"{workload}.json").read_bytes()


@pytest.fixture(scope="module")
def clean_builds(tiny_built, tiny_variants, tmp_path_factory):
    """variant index -> (objects, lowered TIR of the toggled workload) of a clean build of
    the tiny model with that variant as its record, in a fresh project."""
    workload, variants = tiny_variants
    project = make_project(tmp_path_factory.mktemp("clean") / "p", {"tiny": tiny_model()})
    out = {}
    for k in (0, 1):
        shutil.rmtree(project.root / "build", ignore_errors=True)  # its cache too: clean
        project.set_record("tiny", workload, variants[k])
        project.doit("build:tiny")
        out[k] = (project.objects("tiny"), _lowered(project, workload))
    assert out[0][0] != out[1][0], "the two variants must compile to different objects"
    return out


@pytest.mark.slow
@pytest.mark.parametrize("jobs", [[], ["-n", "2"]], ids=["serial", "parallel"])
def test_a_record_toggled_during_builds_never_files_one_variant_under_the_other(
        tiny_copy, tiny_variants, clean_builds, tmp_path, jobs):
    workload, variants = tiny_variants
    for round_ in range(3):
        # a cache outside build/, kept when build/ is removed; fresh each round, so that
        # the toggled builds compute (a restore reads nothing it could mix up)
        env = {**os.environ, "MODELBUILD_CACHE": str(tmp_path / f"cache{round_}")}
        shutil.rmtree(tiny_copy.root / "build", ignore_errors=True)
        with Toggler(tiny_copy, workload, variants) as toggler:
            for _ in range(2):
                run = tiny_copy.doit(*jobs, "build:tiny", env=env, check=False)
                assert run.returncode == 0, run.output  # both variants are valid
        assert toggler.writes > 10
        for k in (0, 1):
            tiny_copy.set_record("tiny", workload, variants[k])
            tiny_copy.doit("build:tiny", env=env)
            assert _lowered(tiny_copy, workload) == clean_builds[k][1], (round_, k)
            assert tiny_copy.objects("tiny") == clean_builds[k][0], (round_, k)
        for k in (0, 1):  # what the cache holds, restored into an empty build/
            shutil.rmtree(tiny_copy.root / "build")
            tiny_copy.set_record("tiny", workload, variants[k])
            tiny_copy.doit("build:tiny", env=env)
            assert _lowered(tiny_copy, workload) == clean_builds[k][1], (round_, k, "restored")
            assert tiny_copy.objects("tiny") == clean_builds[k][0], (round_, k, "restored")


# -- unit level: one read makes the key and what the step computes from ------------------

def _record_json(workload: str, workload_hash: str) -> str:
    return json.dumps({"format": records.FORMAT, "workload": workload,
                       "workload_hash": workload_hash, "target": {"kind": "llvm"},
                       "trace": [[], []]})


@pytest.fixture
def lower_project(tmp_path):
    layout = Layout(tmp_path).model("m")
    layout.workload("w").parent.mkdir(parents=True)
    layout.workload("w").write_text('{"tir": 1}')
    layout.record("w").parent.mkdir(parents=True)
    layout.record("w").write_text(_record_json("w", "1"))
    return tmp_path, layout


def test_lower_reads_its_workload_and_record_once_and_is_given_what_it_read(
        lower_project, monkeypatch):
    _, layout = lower_project
    reads: list[str] = []
    read_bytes = Path.read_bytes

    def counting(path):
        data = read_bytes(path)
        reads.append(f"{path.parent.name}/{path.name}")
        return data

    read_limited = regular_file.read_limited

    def counting_limited(path, limit):
        data = read_limited(path, limit)
        reads.append(f"{path.parent.name}/{path.name}")
        return data

    monkeypatch.setattr(Path, "read_bytes", counting)
    # built files (the workload's TIR) are read through regular_file, records through its
    # bounded reader: counted the same
    monkeypatch.setattr(regular_file, "read_bytes", counting)
    monkeypatch.setattr(regular_file, "read_limited", counting_limited)
    monkeypatch.setattr(Path, "read_text", lambda *a, **k: pytest.fail("read as text"))
    monkeypatch.setattr(records, "parse", functools.partial(_counted, records.parse, reads))
    inputs = fingerprint.lower_inputs({"c": 1}, layout, "w")
    assert sorted(reads) == ["m/w.json", "parse", "workloads/w.json"]  # one read each, one parse
    workload, record = inputs.given
    assert workload == b'{"tir": 1}' and record.data == _record_json("w", "1").encode()
    assert record.identity() == inputs["record"]
    assert inputs["record"]["canonical"] == json.dumps(
        {"target": {"kind": "llvm"}, "trace": [[], []], "workload_hash": "1"},
        sort_keys=True, separators=(",", ":"))


def _counted(fn, log, *args, **kwargs):
    log.append("parse")
    return fn(*args, **kwargs)


def test_an_edit_while_a_step_computes_is_not_filed_under_the_key_of_what_it_read(
        lower_project):
    root, layout = lower_project
    step = Step("lower:m/w", "lowered", Cache.of(Layout(root)), layout.lowered("w"),
                functools.partial(fingerprint.lower_inputs, {"c": 1}, layout, "w"))
    key_v1 = fingerprint.key(step.inputs())

    def compute(workload, record):
        # an edit and its undo while the step runs: the record read for the key is built
        layout.record("w").write_text(_record_json("w", "2"))
        layout.lowered("w").parent.mkdir(parents=True, exist_ok=True)
        layout.lowered("w").write_bytes(record.data)
        layout.record("w").write_text(_record_json("w", "1"))

    step.build(compute)
    assert step.cache.get("lowered", key_v1) == _record_json("w", "1").encode()
    assert fingerprint.read_stamp(layout.lowered("w"))["key"] == key_v1


TILING = "FACTOR = {factor}\n"
SCHEDULE = '''
from _tiling import FACTOR


def schedule(sch):
    block = sch.get_sblock("conv2d_NCHWc")
    n, f, y, x, fb, rc, ry, rx = sch.get_loops(block)
    outer, inner = sch.split(x, factors=[None, FACTOR])
    sch.reorder(n, f, y, rc, ry, rx, outer, inner, fb)
    sch.vectorize(fb)
'''


def test_a_python_schedule_runs_from_the_bytes_read_locally_and_on_a_worker(tiny_copy):
    """The record object holds the schedule's and its helper's bytes: applied from them
    (an edit after the read is the next build's), and shipped as is to a worker, which
    lowers to the same bytes without the files."""
    import pickle

    from modelbuild.cluster import worker
    from modelbuild.schedules.active import Python, active
    from modelbuild.steps import lower
    from modelbuild.targets import registry

    workload = tiny_conv_workload(tiny_copy)
    layout = Layout(tiny_copy.root).model("tiny")
    layout.records_dir.mkdir(parents=True, exist_ok=True)
    (layout.records_dir / "_tiling.py").write_text(TILING.format(factor=8))
    layout.python_record(workload).write_text(SCHEDULE)
    spec, tir = registry.resolve("llvm"), layout.workload(workload).read_bytes()
    record = active(layout, workload)
    assert isinstance(record, Python) and set(record.files()) == {
        layout.python_record(workload), layout.records_dir / "_tiling.py"}
    # edited after the read: the helper, and the schedule into one that fails
    (layout.records_dir / "_tiling.py").write_text(TILING.format(factor=4))
    built = lower.lowered(tir, record, spec, workload)
    edited = lower.lowered(tir, active(layout, workload), spec, workload)
    assert built != edited  # the helper's edit matters, and was not read by ``built``
    layout.python_record(workload).write_text("raise SystemExit('read again')\n")
    assert lower.lowered(tir, record, spec, workload) == built
    shipped = pickle.loads(pickle.dumps(record))
    args = {"workload": tir, "record": shipped, "target": spec, "name": workload}
    assert worker.run_step("lower", worker.identity("lower", spec.sources), args) == built


# -- partition's inputs: the model's files and its declaration ---------------------------

@pytest.mark.slow
def test_an_onnx_edit_and_its_undo_during_partition_build_the_bytes_keyed(tiny_built, tmp_path):
    """The edit lands after partition's key was taken and is undone before its check: the
    library (and the cache entry) must be the keyed model's, not the edit's."""
    import onnx

    project = make_project(tmp_path / "p", {"tiny": tiny_model(seed=0)})
    model, edit, kept = (project.root / "models" / "tiny.onnx", tmp_path / "B.onnx",
                         tmp_path / "A.onnx")
    onnx.save(tiny_model(seed=1), str(edit))
    env = patched_env(tmp_path / "site", f"""
import shutil
from modelbuild.steps import partition
_import = partition.import_model_traced
def import_model_traced(*args, **kwargs):  # an edit just before the import, undone after
    shutil.copyfile({str(model)!r}, {str(kept)!r})
    shutil.copyfile({str(edit)!r}, {str(model)!r})
    try:
        return _import(*args, **kwargs)
    finally:
        shutil.copyfile({str(kept)!r}, {str(model)!r})
partition.import_model_traced = import_model_traced
""")
    project.doit("build:tiny", env=env)
    inputs = model_inputs(tiny_built.root, "tiny")
    clean = run_library(tiny_built.library("tiny"), inputs)
    assert_close(run_library(project.library("tiny"), inputs), clean, rel=0)
    # nor was the edit's graph filed under the model's key: a build from the cache alone
    shutil.rmtree(project.root / "build" / "tiny")
    again = project.doit("build:tiny")
    assert "partition:tiny" in again.from_cache, again
    assert_close(run_library(project.library("tiny"), inputs), clean, rel=0)


@pytest.mark.slow
def test_a_declaration_edited_after_doit_read_it_is_built_by_the_next_run(tmp_path):
    """doit parses models/<m>.toml when it loads the tasks; an edit saved before partition
    hashes the file was built with the shapes parsed before it, and stamped with the edit's
    digest: every later build called it current. Now the next build partitions again."""
    import onnx

    declared = 'onnx = "tiny.onnx"\n[inputs]\nx = [1, 3, {0}, {0}]\n'
    project = make_project(tmp_path / "p", {"tiny": declared.format(16)})
    onnx.save(tiny_model(), str(project.root / "models" / "tiny.onnx"))
    toml, done = project.root / "models" / "tiny.toml", tmp_path / "edited"
    env = patched_env(tmp_path / "site", f"""
from pathlib import Path
from modelbuild.decision import step_builders
_inputs = step_builders.partition_inputs_of
def partition_inputs_of(*args, **kwargs):  # the user saves 24x24 once doit has parsed 16x16
    if not Path({str(done)!r}).exists():
        Path({str(done)!r}).touch()
        Path({str(toml)!r}).write_text({declared.format(24)!r})
    return _inputs(*args, **kwargs)
step_builders.partition_inputs_of = partition_inputs_of
""")
    project.doit("build:tiny", env=env)
    assert done.exists()

    why = cli(project, "why", "tiny")
    assert "partition:tiny" in why.stdout and "edited while it ran" in why.stdout, why.stdout
    again = project.doit("build:tiny")
    assert "partition:tiny" in again.ran, again
    assert model_inputs(project.root, "tiny")[0].shape == (1, 3, 24, 24)
    assert project.doit("build:tiny").ran == set()
