"""Every input that changes an artifact is in its key or stamp: change only that input, and
the steps it feeds run again (and `why` says why); change nothing, and nothing runs."""

import json
import os
import shutil

import pytest
import stat
import subprocess
import sys

import onnx
from conftest import (
    other_tvm_ffi_env,
    assert_close,
    make_project,
    model_inputs,
    onnx_output,
    run_library,
    sha256,
    tiny_conv_workload,
)
from onnx_models import tiny_model

from modelbuild.core import manifest
from modelbuild.steps import code, environment

SHELL_CC = """#!/bin/sh
# A C compiler of another name and version: gcc underneath.
if [ "$1" = "--version" ]; then echo "othercc (Example) 99.1"; exit 0; fi
exec gcc "$@"
"""


def _why(project, *args, env=None) -> list[dict]:
    proc = subprocess.run([sys.executable, "-m", "modelbuild", "why", "tiny", "--json", *args],
                          cwd=project.root, capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _reasons(verdicts) -> str:
    return " | ".join(r for v in verdicts for r in v["reasons"])


def _all_steps(project) -> set[str]:
    man = manifest.read(project.root / "build/tiny/partition/manifest.msgpack")
    return ({"partition:tiny", "link:tiny"}
            | {f"{k}:tiny/{w.name}" for w in man.workloads for k in ("lower", "codegen")})


@pytest.mark.slow
def test_the_c_compiler_is_an_input_of_c_builds_and_of_every_link(tiny_copy, tmp_path):
    other = tmp_path / "othercc"
    other.write_text(SHELL_CC)
    other.chmod(other.stat().st_mode | stat.S_IEXEC)
    env = {**os.environ, "CXX": str(other), "CC": str(other)}
    # llvm objects do not depend on the C compiler; the link does.
    assert "C compiler changed" in _reasons(_why(tiny_copy, env=env))
    assert tiny_copy.doit("build:tiny", env=env).ran == {"link:tiny"}
    # target c compiles every workload with it: all of a c build depends on it.
    first = tiny_copy.doit("build:tiny", "target=c", env=env)
    assert first.ran == _all_steps(tiny_copy)
    verdicts = _why(tiny_copy, "--target", "c")  # back to the default compiler, gcc
    assert "othercc (Example) 99.1" in _reasons(verdicts)
    again = tiny_copy.doit("build:tiny", "target=c")
    assert again.ran_kind("codegen") == first.ran_kind("codegen")  # no gcc/othercc sharing
    x = model_inputs(tiny_copy.root, "tiny")
    assert_close(run_library(tiny_copy.library("tiny"), x), onnx_output(tiny_copy.root, "tiny", x))


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


@pytest.mark.slow
def test_a_python_schedules_helper_module_is_part_of_its_record(tiny_copy):
    workload = tiny_conv_workload(tiny_copy)
    folder = tiny_copy.root / "schedules" / "tiny"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "_tiling.py").write_text(TILING.format(factor=8))
    (folder / f"{workload}.py").write_text(SCHEDULE)
    tiny_copy.doit("build:tiny")
    obj8 = tiny_copy.objects("tiny")[f"{workload}.o"]
    (folder / "_tiling.py").write_text(TILING.format(factor=4))
    verdicts = _why(tiny_copy)
    assert f"helper module _tiling of Python schedule schedules/tiny/{workload}.py changed" \
        in _reasons(verdicts)
    run = tiny_copy.doit("build:tiny")
    assert run.ran == {f"lower:tiny/{workload}", f"codegen:tiny/{workload}", "link:tiny"}
    assert tiny_copy.objects("tiny")[f"{workload}.o"] != obj8
    x = model_inputs(tiny_copy.root, "tiny")
    assert_close(run_library(tiny_copy.library("tiny"), x), onnx_output(tiny_copy.root, "tiny", x))
    # a helper is not a record: check and inspect do not take it for one
    proc = subprocess.run([sys.executable, "-m", "modelbuild", "check", "tiny"],
                          cwd=tiny_copy.root, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr



@pytest.mark.slow
@pytest.mark.parametrize("where", ["package", "root"])
def test_a_helper_package_or_a_module_beside_dodo_is_part_of_the_record(tiny_copy, where):
    """A schedule could import a package in schedules/ or a module beside dodo.py: editing
    it rebuilt nothing, exit 0, and the library differed from a clean build's."""
    workload = tiny_conv_workload(tiny_copy)
    folder = tiny_copy.root / "schedules" / "tiny"
    folder.mkdir(parents=True, exist_ok=True)
    if where == "package":
        package = tiny_copy.root / "schedules" / "common"
        (package / "sub").mkdir(parents=True)
        (package / "__init__.py").write_text("")
        (package / "sub" / "__init__.py").write_text("")
        (package / "sub" / "tiling.py").write_text("from .factors import FACTOR  # noqa\n")
        helper, imports = package / "sub" / "factors.py", "from common.sub.tiling import FACTOR"
    else:
        helper, imports = tiny_copy.root / "tiling_factors.py", "from tiling_factors import FACTOR"
    helper.write_text(TILING.format(factor=8))
    (folder / f"{workload}.py").write_text(SCHEDULE.replace("from _tiling import FACTOR", imports))
    tiny_copy.doit("build:tiny")
    obj8 = tiny_copy.objects("tiny")[f"{workload}.o"]
    helper.write_text(TILING.format(factor=4))
    run = tiny_copy.doit("build:tiny")
    assert run.ran == {f"lower:tiny/{workload}", f"codegen:tiny/{workload}", "link:tiny"}, run
    incremental = tiny_copy.objects("tiny")
    assert incremental[f"{workload}.o"] != obj8
    shutil.rmtree(tiny_copy.root / "build")
    tiny_copy.doit("build:tiny")
    assert tiny_copy.objects("tiny") == incremental

def test_tvm_ffis_version_is_an_input_of_every_step(tiny_copy, tmp_path):
    """Another apache-tvm-ffi (a distribution earlier on the path) changes every key."""
    env = other_tvm_ffi_env(tmp_path / "site")
    reasons = _reasons(_why(tiny_copy, env=env))
    assert "TVM changed (" in reasons and "apache-tvm-ffi 9.9)" in reasons, reasons
    assert tiny_copy.doit("build:tiny", env=env).ran == _all_steps(tiny_copy)


def test_a_tvm_library_rebuilt_under_the_same_version_changes_the_identity(tmp_path, monkeypatch):
    """A source build (no wheel RECORD to read a digest from): its library's size and time."""
    import importlib.metadata
    import importlib.util

    package = tmp_path / "tvm"
    (package / "lib").mkdir(parents=True)
    lib = package / "lib" / "libtvm_compiler.so"
    lib.write_bytes(b"built from commit A")
    real_find_spec = importlib.util.find_spec

    class SourceTree:  # what find_spec says of a package: where it is
        submodule_search_locations = [str(package)]

    def find_spec(name, *args):
        return SourceTree() if name == "tvm" else real_find_spec(name, *args)

    def distribution(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(environment.importlib.util, "find_spec", find_spec)
    monkeypatch.setattr(environment.importlib.metadata, "distribution", distribution)
    before = environment.tvm_identity()
    lib.write_bytes(b"built from commit B, a little longer")
    after = environment.tvm_identity()
    assert before != after
    assert before["apache-tvm"]["version"] == after["apache-tvm"]["version"]
    from modelbuild.decision.plan import config_changes

    assert config_changes({"tvm": before}, {"tvm": after}, "lower") == [
        "TVM's libraries changed (apache-tvm not installed as a package, apache-tvm-ffi "
        "not installed as a package: same versions, other builds)"]


@pytest.mark.slow
def test_external_data_files_of_the_model_are_inputs_of_partition(tmp_path):
    project = make_project(tmp_path / "p", {})
    path = project.root / "models" / "tiny.onnx"
    onnx.save_model(tiny_model(seed=1), str(path), save_as_external_data=True,
                    all_tensors_to_one_file=True, location="tiny.weights", size_threshold=0)
    project.doit("build:tiny")
    x = model_inputs(project.root, "tiny")
    assert_close(run_library(project.library("tiny"), x), onnx_output(project.root, "tiny", x))
    # New weights in the data file only: the .onnx file is byte-identical.
    model_bytes = path.read_bytes()
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    onnx.save_model(tiny_model(seed=2), str(scratch / "tiny.onnx"), save_as_external_data=True,
                    all_tensors_to_one_file=True, location="tiny.weights", size_threshold=0)
    assert (scratch / "tiny.onnx").read_bytes() == model_bytes
    shutil.copy(scratch / "tiny.weights", project.root / "models" / "tiny.weights")
    assert "models/tiny.weights changed" in _reasons(_why(project))
    run = project.doit("build:tiny")
    assert run.ran == {"partition:tiny", "link:tiny"}
    assert_close(run_library(project.library("tiny"), x), onnx_output(project.root, "tiny", x))
    # gone: a source file, which no step makes (the hint said "the step that makes it reruns")
    (project.root / "models" / "tiny.weights").unlink()
    gone = project.doit("build:tiny", check=False)
    assert gone.returncode != 0 and "models/tiny.weights is missing" in gone.output
    assert "a source file of the model, which no step makes" in gone.output, gone.output


@pytest.mark.slow
def test_a_deleted_or_truncated_partition_output_restores_or_reruns_partition(tiny_copy):
    workload = tiny_conv_workload(tiny_copy)
    library = sha256(tiny_copy.library("tiny"))
    tiny_copy.workload_file("tiny", workload).unlink()
    verdicts = _why(tiny_copy)
    assert [(v["task"], v["action"]) for v in verdicts] == [("partition:tiny", "restore")]
    assert f"output missing: build/tiny/partition/workloads/{workload}.json" in _reasons(verdicts)
    run = tiny_copy.doit("build:tiny")
    assert run.ran == set() and run.from_cache == {"partition:tiny"}  # same files: nothing else
    assert tiny_copy.workload_file("tiny", workload).is_file()
    # without the cache entry, partition runs again
    shutil.rmtree(tiny_copy.root / "build" / ".cache" / "partition")
    graph = sorted((tiny_copy.root / "build/tiny/partition/graph").iterdir())[0]
    graph.write_bytes(graph.read_bytes()[:100])
    verdicts = _why(tiny_copy)
    assert [(v["task"], v["action"]) for v in verdicts] == [("partition:tiny", "run")]
    assert f"output damaged: build/tiny/partition/graph/{graph.name}" in _reasons(verdicts)
    assert tiny_copy.doit("build:tiny").ran == {"partition:tiny"}
    assert sha256(tiny_copy.library("tiny")) == library


def test_each_steps_key_covers_every_module_it_imports():
    lower = code.step_sources("lower")
    for module in ("steps/lower.py", "schedules/apply.py", "schedules/records.py",
                   "schedules/python_schedule.py", "schedules/active.py", "core/workloads.py"):
        assert module in lower, module
    assert "steps/partition.py" not in lower and "graph/tasks.py" not in lower
    partition = code.step_sources("partition")
    assert {"steps/provenance.py", "core/manifest.py", "targets/toolchain.py"} <= set(partition)
    # a target's hooks belong to the builds for that target only
    assert "targets/cuda.py" not in code.step_sources("codegen", ("targets/cpu.py",))
    assert "targets/libblob.py" in code.step_sources("codegen", ("targets/cuda.py",))
    for step in code.STEPS:  # closed: nothing a listed module imports is missing
        sources = set(code.step_sources(step))
        for module in sources - {"targets/registry.py"}:
            assert code.imports_of(module) <= sources, (step, module)


def _state(project) -> dict:
    build = project.root / "build"
    return {str(p.relative_to(build)): p.read_bytes() for p in sorted(build.rglob("*"))
            if p.is_file() and ".cache" not in p.parts}


@pytest.mark.slow
def test_read_only_commands_change_no_build_state(tiny_copy):
    tiny_copy.doit("build:tiny", "target=c")
    before = _state(tiny_copy)
    workload = tiny_conv_workload(tiny_copy)
    for args in (["inspect", "tiny", "--json"], ["explain", "tiny", "--json"],
                 ["explain", "tiny", workload], ["check", "tiny"],
                 ["export", "tiny", str(tiny_copy.root / "exported")]):
        proc = subprocess.run([sys.executable, "-m", "modelbuild", *args], cwd=tiny_copy.root,
                              capture_output=True, text=True)
        assert proc.returncode == 0, (args, proc.stdout, proc.stderr)
    assert _state(tiny_copy) == before
    assert tiny_copy.doit("build:tiny", "target=c").ran == set()


@pytest.mark.slow
def test_a_schedule_imports_its_helpers_and_installed_modules_and_no_other_project_code(tiny_copy):
    """A wave.py beside dodo.py is not the wave a schedule imports (taken for a
    helper, its bytes replaced Python's module in the build's process; left on the import
    path, it was imported and not in the key), and project code that is no helper (a
    namespace package) cannot be imported unseen by the key."""
    workload = tiny_conv_workload(tiny_copy)
    (tiny_copy.root / "wave.py").write_text("raise RuntimeError('not the wave module')\n")
    folder = tiny_copy.root / "schedules" / "tiny"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "_tiling.py").write_text(TILING.format(factor=8))
    schedule = folder / f"{workload}.py"
    schedule.write_text("import wave\nassert wave.Error\n" + SCHEDULE)
    assert f"lower:tiny/{workload}" in tiny_copy.doit("build:tiny").ran
    (tiny_copy.root / "wave.py").write_text("raise RuntimeError('still not wave')\n")
    assert tiny_copy.doit("build:tiny").ran == set()
    (tiny_copy.root / "nspkg").mkdir()
    (tiny_copy.root / "nspkg" / "tiles.py").write_text("FACTOR = 4\n")
    schedule.write_text("from nspkg.tiles import FACTOR as F\n" + SCHEDULE)
    run = tiny_copy.doit("build:tiny", check=False)
    assert run.returncode == 1 and "No module named 'nspkg'" in run.output, run
    assert "imports its helpers by their own names" in run.output, run
    # a helper by its package path through schedules/ (a namespace package of the root)
    schedule.write_text("from schedules.tiny._tiling import FACTOR as F\n" + SCHEDULE)
    run = tiny_copy.doit("build:tiny", check=False)
    assert run.returncode == 1 and "No module named 'schedules" in run.output, run
