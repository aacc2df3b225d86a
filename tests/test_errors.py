"""Bad input: a clear message naming the file and workload, a non-zero exit, nothing lost."""

import json
import os

import pytest
from conftest import sha256

from modelbuild.schedules import records


def _write(project, workload, rec):
    path = project.record("tiny", workload)
    path.parent.mkdir(parents=True, exist_ok=True)
    records.save(path, rec)
    return path


@pytest.fixture
def good(tiny_copy, tiny_variants):
    """A tiny project built with one good record; returns (project, workload, record path, lib hash)."""
    workload, variants = tiny_variants
    path = _write(tiny_copy, workload, variants[0])
    tiny_copy.doit("build:tiny")
    return tiny_copy, workload, path, sha256(tiny_copy.library("tiny"))


def _failed(project, *args):
    run = project.doit(*args, check=False)
    assert run.returncode != 0, run
    return run


def test_invalid_json(good):
    project, workload, path, lib_hash = good
    path.write_text(path.read_text()[:-20])
    run = _failed(project, "build:tiny")
    assert f"schedules/tiny/{workload}.json" in run.output
    assert f"workload {workload}" in run.output and "invalid JSON at line" in run.output
    assert "Traceback" not in run.output
    assert sha256(project.library("tiny")) == lib_hash


@pytest.mark.parametrize("run_secs", ["[1e10]", *[
    pytest.param(run_secs, marks=pytest.mark.slow)
    for run_secs in ["[2e300]", "[-1]", "[NaN]", "[0.001, 1e10]"]]])
def test_a_run_time_that_marks_a_failed_run_is_a_record_error(good, run_secs):
    """TVM's database drops a record whose run time is MetaSchedule's mark of a failed run
    (1e10): a clean build ignored the record while an incremental one (run_secs is no part
    of lower's key) kept the object the record made, so the two differed."""
    project, workload, path, lib_hash = good
    path.write_text(path.read_text().replace('"run_secs": null', f'"run_secs": {run_secs}'))
    assert run_secs in path.read_text()
    run = _failed(project, "build:tiny")
    assert f"schedules/tiny/{workload}.json: workload {workload}: run_secs" in run.output, run
    assert "is no measured time" in run.output and "Traceback" not in run.output
    assert sha256(project.library("tiny")) == lib_hash


@pytest.mark.slow
def test_a_split_without_its_bounds_check_is_a_record_error(good):
    """Split(disable_predication=True) with a factor that does not divide the loop built,
    exit 0, into a library that wrote past its output (heap corruption when it ran)."""
    project, workload, path, lib_hash = good
    data = json.loads(path.read_text())
    insts = data["trace"][0]
    index = next(k for k, inst in enumerate(insts) if inst[0] == "Split")
    insts[index][2] = [True, True]
    path.write_text(json.dumps(data))
    run = _failed(project, "build:tiny")
    assert f"instruction {index} (Split) turns off the split's bounds check" in run.output, run
    assert f"workload {workload}" in run.output and "Traceback" not in run.output
    assert sha256(project.library("tiny")) == lib_hash


def _nested(depth: int):
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.slow
@pytest.mark.parametrize("edit, said", [
    (lambda d: d["target"].__setitem__("bogus", 1), "is not one TVM can make"),
    (lambda d: d.__setitem__("source", {"a": 1}), "source must be a string or null"),
    (lambda d: d["trace"][0].append(["Annotate", ["b0", _nested(900)], ["k"], []]),
     "the trace is nested more than 64 deep"),
])
def test_a_record_field_tvm_cannot_take_is_a_record_error(good, edit, said):
    """An unknown target option and a value nested 900 deep were internal errors in lower
    (and `check` said the first was ok); a source that is an object broke `inspect`."""
    project, workload, path, lib_hash = good
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))
    run = _failed(project, "build:tiny")
    assert f"workload {workload}: " in run.output and said in run.output, run
    assert "internal error" not in run.output and "Traceback" not in run.output
    from conftest import cli

    checked = cli(project, "check", "tiny", check=False)
    assert checked.returncode == 1 and said in checked.stdout + checked.stderr, checked
    inspected = cli(project, "inspect", "tiny", check=False)
    assert "internal error" not in inspected.stderr, inspected
    assert sha256(project.library("tiny")) == lib_hash


def _perfect_tile_decision(trace):
    insts, decisions = trace
    for index, value in decisions:
        if insts[index][0] == "SamplePerfectTile":
            return index, value
    raise AssertionError("no SamplePerfectTile decision")


@pytest.mark.slow
def test_trace_that_does_not_apply(good):
    project, workload, path, lib_hash = good
    data = json.loads(path.read_text())
    index, factors = _perfect_tile_decision(data["trace"])
    bad = [factors[0] * 3, *factors[1:]]  # product no longer equals the loop extent
    for decision in data["trace"][1]:
        if decision[0] == index:
            decision[1] = bad
    path.write_text(json.dumps(data, indent=2))
    run = _failed(project, "build:tiny")
    assert f"schedules/tiny/{workload}.json" in run.output and f"workload {workload}" in run.output
    assert "the schedule trace does not apply" in run.output
    assert f"decision for instruction {index} (SamplePerfectTile) is {bad}" in run.output
    assert "multiply to the loop extent" in run.output
    assert sha256(project.library("tiny")) == lib_hash


def _categorical_decision(trace):
    insts, decisions = trace
    return next(k for k, (index, _) in enumerate(decisions)
                if insts[index][0] == "SampleCategorical")


@pytest.mark.slow
@pytest.mark.parametrize("mutate, message", [
    (lambda d, k: d[k].__setitem__(1, None), "must be an integer or a list of integers, not null"),
    (lambda d, k: d[k].__setitem__(0, 9999), "a decision names instruction 9999; the trace has"),
    (lambda d, k: d[k].__setitem__(0, -1), "a decision names instruction -1;"),
    (lambda d, k: d[k].__setitem__(1, 99), "must pick one of its"),
    (lambda d, k: d[k].__setitem__(1, True), "must be an integer or a list of integers, not true"),
    (lambda d, k: d.append(list(d[k])), "two decisions for instruction"),
])
def test_a_decision_tvm_would_crash_on_is_a_record_error(good, mutate, message):
    """A null decision or an index past the trace's instructions segfaulted doit (rc 139),
    -1 corrupted the heap: TVM trusts a trace's decisions."""
    project, workload, path, lib_hash = good
    data = json.loads(path.read_text())
    mutate(data["trace"][1], _categorical_decision(data["trace"]))
    path.write_text(json.dumps(data))
    from conftest import cli

    built, checked = _failed(project, "build:tiny"), cli(project, "check", "tiny", check=False)
    for rc, output in ((built.returncode, built.output),
                       (checked.returncode, checked.stdout + checked.stderr)):
        assert rc == 1 and message in output, output
        assert f"schedules/tiny/{workload}.json" in output and "Traceback" not in output
    assert sha256(project.library("tiny")) == lib_hash


@pytest.mark.parametrize("make, message", [
    (lambda p: p.mkdir(), "a folder, not a record file"),
    *[pytest.param(make, message, marks=pytest.mark.slow) for make, message in [
        (lambda p: p.symlink_to(p.parent / "gone.json"), "a link to a file that does not exist"),
        (lambda p: p.symlink_to(p.name), "cannot be read: Too many levels of symbolic links"),
        (lambda p: p.write_text("[" * 100_000 + "]" * 100_000), "JSON nested too deeply"),
        (lambda p: os.mkfifo(p), "not a regular file (a pipe, a device or a socket)"),
        (lambda p: p.symlink_to("/dev/zero"), "not a regular file (a pipe, a device or a socket)"),
        (lambda p: os.truncate(p.open("w").name, 17 << 20), "cannot be read: larger than 16 MB"),
    ]],
])
def test_something_at_a_record_s_path_that_is_no_record_file_is_an_error(good, make, message):
    """A folder or a dangling link there was taken for no record (the build used the
    default and said nothing); a link loop and deeply nested JSON were internal errors; a
    pipe made the build (and why, check, inspect, export) wait forever, and a link to
    /dev/zero read until memory ran out."""
    project, workload, path, lib_hash = good
    path.unlink()
    make(path)
    run = _failed(project, "build:tiny")
    assert f"schedules/tiny/{workload}.json: workload {workload}: {message}" in run.output, run
    assert "internal error" not in run.output and "Traceback" not in run.output
    assert sha256(project.library("tiny")) == lib_hash


@pytest.mark.slow
def test_trace_with_an_impossible_instruction(good):
    project, workload, path, lib_hash = good
    data = json.loads(path.read_text())
    get_block = data["trace"][0][0][0]  # the trace's own block-lookup instruction kind
    data["trace"][0].insert(1, [get_block, [], ["no_such_block", "main"], ["b_x"]])
    data["trace"][1] = [[i + 1 if i >= 1 else i, v] for i, v in data["trace"][1]]
    path.write_text(json.dumps(data))
    run = _failed(project, "build:tiny")
    assert "the schedule trace does not apply" in run.output and "no_such_block" in run.output
    assert f"workload {workload}" in run.output
    assert sha256(project.library("tiny")) == lib_hash


@pytest.mark.slow
def test_stale_record(good):
    project, workload, path, lib_hash = good
    data = json.loads(path.read_text())
    data["workload_hash"] = "12345"
    path.write_text(json.dumps(data))
    run = _failed(project, "build:tiny")
    assert "stale record" in run.output and "12345" in run.output
    assert f"schedules/tiny/{workload}.json" in run.output
    assert "delete the file" in run.output  # says how to fix it
    assert sha256(project.library("tiny")) == lib_hash


@pytest.mark.slow
def test_record_for_another_target(good):
    project, workload, path, lib_hash = good
    data = json.loads(path.read_text())
    data["target"] = {"kind": "cuda"}
    path.write_text(json.dumps(data))
    run = _failed(project, "build:tiny")
    assert "made for target 'cuda'" in run.output and f"workload {workload}" in run.output
    assert sha256(project.library("tiny")) == lib_hash


def test_unknown_model(tiny_copy):
    run = _failed(tiny_copy, "build:nosuch")
    assert "unknown model 'nosuch'" in run.output and "Known models: tiny" in run.output
    assert "models/nosuch.toml" in run.output


def test_unsupported_target(tiny_copy):
    lib_hash = sha256(tiny_copy.library("tiny"))
    run = _failed(tiny_copy, "build:tiny", "target=nosuch")
    assert "unsupported target 'nosuch'" in run.output and "llvm" in run.output
    assert "Traceback" not in run.output
    assert sha256(tiny_copy.library("tiny")) == lib_hash


def test_broken_model_file(tiny_copy):
    lib_hash = sha256(tiny_copy.library("tiny"))
    (tiny_copy.root / "models" / "tiny.onnx").write_bytes(b"\x08garbage")
    run = _failed(tiny_copy, "build:tiny")
    assert "models/tiny.onnx: cannot read ONNX model" in run.output
    assert "Traceback" not in run.output and "PythonAction Error" not in run.output
    assert sha256(tiny_copy.library("tiny")) == lib_hash


@pytest.mark.slow
def test_names_are_printed_as_written_not_as_emoji_codes(tmp_path):
    """A model named m failed as 'partition\u24c2 error': rich read ':m:' as an emoji code."""
    from conftest import cli, make_project
    from onnx_models import tiny_model

    project = make_project(tmp_path / "p", {"m": tiny_model()})
    (project.root / "models" / "m.onnx").write_bytes(b"\x08garbage")
    run = _failed(project, "build:m")
    assert "failed partition:m: " in run.output and "\u24c2" not in run.output, run.output
    proc = cli(project, "explain", "m", check=False)
    assert proc.returncode != 0 and "models/m.onnx: cannot read ONNX model" in proc.stderr
    assert "\u24c2" not in proc.stdout + proc.stderr


@pytest.mark.slow
def test_failed_build_then_fix_builds_again(good, tiny_variants):
    project, workload, path, _ = good
    path.write_text("{")
    _failed(project, "build:tiny")
    _write(project, workload, tiny_variants[1][1])
    run = project.doit("build:tiny")
    assert run.ran == {f"lower:tiny/{workload}", f"codegen:tiny/{workload}", "link:tiny"}
