"""Record tools (python -m modelbuild ...): tune, import, export, sample, select, check, inspect."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from conftest import (
    assert_close,
    cli,
    make_project,
    model_inputs,
    reference_output,
    run_library,
    sha256,
    tiny_conv_workload,
)
from onnx_models import tiny_model


def snapshot(folder):
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def compile_with_database(project, model, work_dir, inputs):
    """tvm.compile of the model with a MetaSchedule JSONDatabase applied, run on inputs."""
    import tvm
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms

    from modelbuild.core import models
    from modelbuild.steps import onnx_import

    spec = models.discover(project.root / "models")[model]
    target = tvm.target.Target({"kind": "llvm"})
    db = ms.database.JSONDatabase(work_dir=str(work_dir), allow_missing=False)
    with target, db:
        mod = relax.get_pipeline("zero")(onnx_import.import_model(spec))
    return run_library(tvm.compile(mod, target), inputs)


@pytest.fixture(scope="session")
def tuned(tmp_path_factory):
    """A tiny project whose conv workload was tuned (2 real trials) by `modelbuild tune`."""
    project = make_project(tmp_path_factory.mktemp("tuned") / "proj", {"tiny": tiny_model()})
    project.doit("partition:tiny")
    workload = tiny_conv_workload(project)
    db = project.root / "db"
    proc = cli(project, "tune", "tiny", "--workload", workload, "--trials", "2", "--work-dir", str(db),
               "--no-keep-if-faster")
    return project, workload, db, proc.stdout


@pytest.mark.slow
def test_tune_writes_a_database_and_a_tuned_record(tuned):
    project, workload, db, out = tuned
    assert (db / "database_workload.json").is_file() and (db / "database_tuning_record.json").is_file()
    rec = json.loads(project.record("tiny", workload).read_text())
    assert rec["source"] == "tuned" and rec["run_secs"] and rec["run_secs"][0] > 0
    assert "matched 1" in out and "tuning 1 workload(s) of tiny" in out


@pytest.mark.slow
def test_imported_database_builds_like_tvm_compile_with_it(tuned, tmp_path):
    project, workload, db, _ = tuned
    fresh = make_project(tmp_path / "p", {"tiny": tiny_model()})
    out = cli(fresh, "import", "tiny", str(db)).stdout
    assert "matched 1, unmatched 0" in out
    assert fresh.record("tiny", workload).read_bytes() == project.record("tiny", workload).read_bytes()
    fresh.doit("build:tiny")
    x = model_inputs(fresh.root, "tiny")
    assert_close(run_library(fresh.library("tiny"), x), compile_with_database(fresh, "tiny", db, x))


@pytest.mark.slow
@pytest.mark.alone  # times the record against the default
def test_keep_if_faster_keeps_a_record_only_when_it_beats_the_default(tuned, tmp_path):
    project, workload, db, _ = tuned
    fresh = make_project(tmp_path / "p", {"tiny": tiny_model()})
    report = json.loads(cli(fresh, "import", "tiny", str(db), "--keep-if-faster", "--json").stdout)
    left_out = report["not_faster"] == [workload]
    assert fresh.record("tiny", workload).exists() != left_out
    timing = report["timings"][workload]
    assert timing["default_ms"] > 0
    # kept only when 2% faster than the default (schedules/timing.KEEP_MARGIN)
    assert left_out == (timing["record_ms"] >= 0.98 * timing["default_ms"])


@pytest.mark.slow
def test_import_twice_changes_nothing_and_lists_unmatched(tuned, tmp_path):
    project, workload, db, _ = tuned
    other = make_project(tmp_path / "other", {"tiny": tiny_model(channels=16)})
    out = cli(other, "import", "tiny", str(db)).stdout
    assert "matched 0, unmatched 1" in out and "unmatched: not in the model" in out
    assert not list((other.root / "schedules").rglob("*.json"))

    before = snapshot(project.root / "schedules")
    again = cli(project, "import", "tiny", str(db)).stdout
    assert "unchanged" in again and snapshot(project.root / "schedules") == before


@pytest.mark.slow
def test_export_refuses_to_replace_a_database_unless_forced(tuned, tmp_path):
    """export into a tune's work folder replaced its database (its trials, which
    `tune --resume` goes on from) with the active records, silently."""
    project, _, db, _ = tuned
    work = tmp_path / "db"
    shutil.copytree(db, work)
    before = snapshot(work)
    proc = cli(project, "export", "tiny", str(work), check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "a MetaSchedule database is in this folder already" in proc.stderr
    assert "--force" in proc.stderr and "Traceback" not in proc.stderr
    assert snapshot(work) == before
    cli(project, "export", "tiny", str(work), "--force")
    assert snapshot(work) != before


@pytest.mark.slow
def test_round_trip_import_export_import_is_identity(tuned, tmp_path):
    project, workload, db, _ = tuned
    work = make_project(tmp_path / "w", {"tiny": tiny_model()})
    shutil.copytree(project.root / "schedules", work.root / "schedules", dirs_exist_ok=True)
    before = snapshot(work.root / "schedules")
    cli(work, "export", "tiny", str(tmp_path / "exported"))
    for p in work.record("tiny", workload).parent.glob("*.json"):
        p.unlink()
    cli(work, "import", "tiny", str(tmp_path / "exported"))
    assert snapshot(work.root / "schedules") == before
    # tvm.compile over the exported database gives the modelbuild library's output.
    work.doit("build:tiny")
    x = model_inputs(work.root, "tiny")
    assert_close(run_library(work.library("tiny"), x),
                 compile_with_database(work, "tiny", tmp_path / "exported", x))


@pytest.mark.slow
def test_every_sampled_variant_builds_and_matches_the_untuned_library(tiny_copy):
    workload = tiny_conv_workload(tiny_copy)
    x = model_inputs(tiny_copy.root, "tiny")
    untuned = run_library(tiny_copy.library("tiny"), x)
    out = cli(tiny_copy, "sample", "tiny", workload, "-n", "3").stdout
    assert out.count("wrote ") == 3
    for k in (1, 2, 3):
        cli(tiny_copy, "select", "tiny", workload, str(k))
        run = tiny_copy.doit("build:tiny")
        assert run.ran == {f"lower:tiny/{workload}", f"codegen:tiny/{workload}", "link:tiny"}
        assert_close(run_library(tiny_copy.library("tiny"), x), untuned, rel=1e-4)
        assert_close(run_library(tiny_copy.library("tiny"), x), reference_output(tiny_copy, "tiny", x))
    rows = json.loads(cli(tiny_copy, "inspect", "tiny", "--json").stdout)
    row = next(r for r in rows if r["workload"] == workload)
    assert (row["status"], row["variant"], row["variants"]) == ("sampled", 3, 3)
    cli(tiny_copy, "select", "tiny", workload, "default")
    assert not tiny_copy.record("tiny", workload).exists()
    assert cli(tiny_copy, "select", "tiny", workload, "9", check=False).returncode != 0


@pytest.mark.slow
def test_check_lists_problems_per_file(tiny_copy, tiny_variants):
    from modelbuild.schedules import records

    workload, variants = tiny_variants
    good = tiny_copy.record("tiny", workload)
    records.save(good, variants[0])
    assert cli(tiny_copy, "check", "tiny").returncode == 0
    stale = json.loads(good.read_text())
    stale["workload_hash"] = "1"
    (good.parent / "mean.json").write_text("{oops")
    other = dict(stale, workload="reshape", workload_hash=json.loads(good.read_text())["workload_hash"])
    (good.parent / "reshape.json").write_text(json.dumps(other))
    cuda = dict(json.loads(good.read_text()), workload="fused_matmul_add2", target={"kind": "cuda"})
    (good.parent / "fused_matmul_add2.json").write_text(json.dumps(cuda))
    good.write_text(json.dumps(stale))
    proc = cli(tiny_copy, "check", "tiny", check=False)
    out = proc.stdout
    assert proc.returncode == 1
    assert f"{workload}.json" in out and "stale record" in out
    assert "mean.json" in out and "invalid JSON" in out
    assert "reshape.json" in out and "now hashes to" in out
    assert "fused_matmul_add2.json" in out and "made for target 'cuda'" in out
    assert "4 with problems" in out
    statuses = {r["workload"]: r["status"] for r in json.loads(cli(tiny_copy, "inspect", "tiny", "--json").stdout)}
    assert statuses[workload] == "stale" and statuses["mean"] == "invalid"


@pytest.mark.slow
def test_bad_databases_are_named_and_leave_schedules_untouched(tuned, tmp_path):
    project, workload, db, _ = tuned
    work = make_project(tmp_path / "w", {"tiny": tiny_model()})
    before = snapshot(work.root / "schedules")

    missing = tmp_path / "missing"
    shutil.copytree(db, missing)
    (missing / "database_tuning_record.json").unlink()
    proc = cli(work, "import", "tiny", str(missing), check=False)
    assert proc.returncode != 0 and "database_tuning_record.json" in proc.stderr
    assert "missing" in proc.stderr

    truncated = tmp_path / "truncated"
    shutil.copytree(db, truncated)
    path = truncated / "database_tuning_record.json"
    path.write_text(path.read_text().rstrip("\n")[:-15] + "\n")
    proc = cli(work, "import", "tiny", str(truncated), check=False)
    assert proc.returncode != 0 and "database_tuning_record.json" in proc.stderr
    assert "not valid JSON" in proc.stderr and "truncated" in proc.stderr

    # a pipe or /dev/zero was said "missing"; bytes that are no UTF-8, an internal error
    for kind in ("pipe", "device", "binary"):
        odd = tmp_path / kind
        shutil.copytree(db, odd)
        path = odd / "database_tuning_record.json"
        path.unlink()
        if kind == "pipe":
            os.mkfifo(path)
        elif kind == "device":
            path.symlink_to("/dev/zero")
        else:
            path.write_bytes(b'["\xff\xfe"]\n')
        proc = cli(work, "import", "tiny", str(odd), check=False)
        assert proc.returncode == 1 and "database_tuning_record.json" in proc.stderr, proc.stderr
        said = ("is not text (byte 2 is no UTF-8)" if kind == "binary" else
                "is not a regular file (a folder, a pipe or a device)")
        assert said in proc.stderr and "missing" not in proc.stderr, proc.stderr
    assert snapshot(work.root / "schedules") == before
    assert not list(work.root.rglob(".*.tmp"))


def test_unknown_model_and_workload_are_named(tiny_copy, cli_main):
    proc = cli_main(tiny_copy, "inspect", "nosuch", check=False)
    assert proc.returncode == 1 and "unknown model 'nosuch'" in proc.stderr
    proc = cli_main(tiny_copy, "sample", "tiny", "nosuch", check=False)
    assert proc.returncode == 1 and "has no workload 'nosuch'" in proc.stderr


COMMANDS = {"tune", "import", "export", "sample", "select", "check", "inspect", "explain",
            "watch", "why", "serve", "cache", "bench", "sweep"}


def test_help_lists_every_command_with_its_help(tiny_copy):
    out = cli(tiny_copy, "--help").stdout
    listed = out.split("{", 1)[1].split("}", 1)[0].split(",")
    assert set(listed) == COMMANDS, listed
    for command in COMMANDS:  # each one has a line of help of its own
        line = next((ln for ln in out.splitlines() if ln.strip().startswith(command + " ")), "")
        assert len(line.split(None, 1)) == 2, (command, out)


@pytest.mark.slow
def test_export_for_another_target_partitions_privately_once_and_leaves_build_alone(
        tiny_copy, tmp_path):
    """The build's partition is for llvm; an export for the c target needs the model's
    workloads as a c build makes them: one private partition (export asks for the workloads
    and then for the other computes), and build/ as it was."""
    manifest = tiny_copy.root / "build" / "tiny" / "partition" / "manifest.msgpack"
    before = sha256(manifest)
    proc = cli(tiny_copy, "export", "tiny", str(tmp_path / "db"), "--target", "c")
    notes = [line for line in proc.stderr.splitlines() if "partitioning it privately" in line]
    assert len(notes) == 1, proc.stderr
    assert "not current for target c" in notes[0] and "modelbuild why tiny" in notes[0]
    assert sha256(manifest) == before
    assert (tmp_path / "db" / "database_workload.json").is_file()


@pytest.mark.parametrize("workload_line, record_line, said", [
    ("[1, 2]", "[1, 2]", "database_workload.json: line 1 is not a MetaSchedule workload"),
    ("{}", "", "database_workload.json: line 1 is not a MetaSchedule workload"),
    ('["123", "notbase64"]', "", "TVM cannot read this MetaSchedule database"),
    ('["123", "eA=="]', '{"trace": []}', "database_tuning_record.json: line 1 is not a MetaSchedule tuning record"),
])
def test_a_database_of_the_wrong_shape_is_named(tiny_copy, tmp_path, workload_line, record_line, said):
    """Valid JSON of another shape was an internal error (TypeError, TVM's Check failed)."""
    db = tmp_path / "db"
    db.mkdir()
    (db / "database_workload.json").write_text(workload_line + "\n")
    (db / "database_tuning_record.json").write_text(record_line + "\n" if record_line else "")
    proc = cli(tiny_copy, "import", "tiny", str(db), check=False)
    assert proc.returncode == 1 and "internal error" not in proc.stderr, proc
    assert said in proc.stderr and "Traceback" not in proc.stderr, proc


def test_a_sampled_decision_a_later_instruction_cannot_follow_is_skipped(tiny_built, monkeypatch):
    """`sample --compute winograd` ended now and then in an internal error ("The block no
    longer exists in the IRModule"): a sketch replayed with a sampled decision that breaks a
    later instruction. Such a sample is skipped, as one the post-processors refuse."""
    from tvm.s_tir.schedule import Trace

    from modelbuild.core.paths import Project
    from modelbuild.core.workloads import load_json
    from modelbuild.schedules import sample
    from modelbuild.targets import registry

    layout = Project(tiny_built.root).model("tiny")
    workload = tiny_conv_workload(tiny_built)
    func = load_json(layout.workload(workload).read_text())
    replay, calls = Trace.apply_to_schedule, []

    def breaks_every_other(self, *args, **kwargs):
        calls.append(1)
        if len(calls) % 2:
            raise ValueError("The block no longer exists in the IRModule")
        return replay(self, *args, **kwargs)

    monkeypatch.setattr(Trace, "apply_to_schedule", breaks_every_other)
    found = sample.sample_records(func, workload, registry.resolve("llvm"), 2)
    assert len(found) == 2 and len(calls) >= 4


@pytest.mark.slow
def test_a_variant_named_by_a_digit_that_is_not_ascii_is_no_variant(tiny_copy):
    """``٣.json`` (an Arabic-Indic three) was taken for variant 3, so `select ... 3` copied
    it; ``².json`` made select, inspect, check and sweep internal errors."""
    workload = tiny_conv_workload(tiny_copy)
    cli(tiny_copy, "sample", "tiny", workload, "-n", "3")
    folder = tiny_copy.root / "schedules" / "tiny" / "variants" / workload
    shutil.copy(folder / "1.json", folder / "٣.json")
    shutil.copy(folder / "1.json", folder / "².json")
    for name in ("03.json", "003.json"):  # also variant 3, by int(): whichever came last won
        shutil.copy(folder / "1.json", folder / name)
    assert (folder / "1.json").read_bytes() != (folder / "3.json").read_bytes()
    cli(tiny_copy, "select", "tiny", workload, "3")
    assert tiny_copy.record("tiny", workload).read_bytes() == (folder / "3.json").read_bytes()
    for args in (["inspect", "tiny"], ["check", "tiny"]):
        proc = cli(tiny_copy, *args, check=False)
        assert proc.returncode in (0, 1) and "internal error" not in proc.stderr, proc


def _first_categorical(record):
    insts, decisions = record[0]
    return next(d for d in decisions if insts[d[0]][0] == "SampleCategorical")


@pytest.mark.slow
@pytest.mark.parametrize("mutate, said", [
    (lambda line: line[1][0][1][0].__setitem__(1, None), "must be an integer or a list of integers"),
    (lambda line: line[1][0][1].append([9999, 1]), "a decision names instruction 9999"),
    (lambda line: _first_categorical(line[1]).__setitem__(1, 99), "must pick one of its"),
    (lambda line: line[1].__setitem__(1, [float("nan")]), "run_secs must be a list of times"),
    (lambda line: line[1].__setitem__(2, {"kind": "llvm", "bogus": 1}), "Unknown config option"),
    (lambda line: line.__setitem__(0, 7), "the record names workload line 7"),
])
def test_a_hand_edited_database_line_is_named_not_replayed(tuned, tmp_path, mutate, said):
    """TVM replays a database's traces as it reads them: a null decision or one past the
    trace's instructions ended `import` with SIGSEGV; the others were internal errors."""
    project, _, db, _ = tuned
    bad = tmp_path / "bad"
    shutil.copytree(db, bad)
    path = bad / "database_tuning_record.json"
    line = json.loads(path.read_text().splitlines()[0])
    mutate(line)
    path.write_text(json.dumps(line) + "\n")
    work = make_project(tmp_path / "w", {"tiny": tiny_model()})
    before = snapshot(work.root / "schedules")
    proc = cli(work, "import", "tiny", str(bad), check=False)
    assert proc.returncode == 1 and said in proc.stderr, proc
    assert "internal error" not in proc.stderr and "Segfault" not in proc.stderr, proc
    assert snapshot(work.root / "schedules") == before


def _standard_flow_database(project, model, work_dir):
    """A MetaSchedule database as TVM's standard flow makes one: the tasks of the zero
    pipeline's module (extract_tasks; NCHW workloads), each with a record."""
    import tvm
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.schedule import Schedule

    from modelbuild.core import models
    from modelbuild.steps import onnx_import

    target = tvm.target.Target({"kind": "llvm"})
    with target:
        mod = relax.get_pipeline("zero")(
            onnx_import.import_model(models.discover(project.root / "models")[model]))
    work_dir.mkdir()
    db = ms.database.JSONDatabase(work_dir=str(work_dir))
    for task in ms.relax_integration.extract_tasks(mod, target):
        workload = db.commit_workload(task.dispatched[0])
        db.commit_tuning_record(ms.database.TuningRecord(
            Schedule(task.dispatched[0]).trace, workload, [1e-3], target))


@pytest.mark.slow
def test_import_of_an_nchw_database_into_an_nchwc_model_says_to_declare_nchw(tmp_path):
    """It said only `unmatched: not in the model: main (hash ...)`."""
    project = make_project(tmp_path / "p", {"tiny": tiny_model()})
    _standard_flow_database(project, "tiny", tmp_path / "db")
    out = cli(project, "import", "tiny", str(tmp_path / "db")).stdout
    assert "matched 0, unmatched 3" in out, out
    assert ("note: tiny builds NCHWc; 3 of the 3 unmatched workloads are tiny's in NCHW (as "
            "TVM's standard flow tunes them): to use this database, write models/tiny.toml: "
            'onnx = "tiny.onnx" and layout = "NCHW", then import again') in " ".join(out.split())
    (project.root / "models" / "tiny.toml").write_text('onnx = "tiny.onnx"\nlayout = "NCHW"\n')
    out = cli(project, "import", "tiny", str(tmp_path / "db")).stdout
    assert "unmatched 0" in out and "note:" not in out, out
