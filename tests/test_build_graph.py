"""The doit task graph, observed from real `doit` runs in a subprocess on a tiny model."""

import json
import os
import shutil
import subprocess
import sys
import threading
import time

import pytest

from conftest import (
    assert_close,
    make_project,
    model_inputs,
    held_env,
    onnx_output,
    reference_output,
    run_library,
    sha256,
    tiny_conv_workload,
)
from onnx_models import tiny_model


def test_doit_list_shows_the_task_kinds_with_help(tiny_project):
    out = tiny_project.doit("list").stdout
    rows = dict(line.split(None, 1) for line in out.strip().splitlines())
    assert set(rows) == {"build", "partition", "lower", "codegen", "link", "bench"}
    assert "schedule record" in rows["lower"] and "object file" in rows["codegen"]


def test_doit_list_all_shows_every_workload_after_partition(tiny_built):
    out = tiny_built.doit("list", "--all").stdout
    workload = tiny_conv_workload(tiny_built)
    assert f"lower:tiny/{workload}" in out and f"codegen:tiny/{workload}" in out
    assert "link:tiny" in out and "partition:tiny" in out and "build:tiny" in out


def test_clean_build_matches_tvm_compile_and_onnxruntime(tiny_built):
    lib = tiny_built.library("tiny")
    assert lib.is_file()
    x = model_inputs(tiny_built.root, "tiny")
    ours = run_library(lib, x)
    assert_close(ours, reference_output(tiny_built, "tiny", x))
    assert_close(ours, onnx_output(tiny_built.root, "tiny", x))


def test_noop_rebuild_runs_nothing_and_never_imports_tvm(tiny_copy):
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "doit", "build:tiny"],
                          cwd=tiny_copy.root, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert not [ln for ln in proc.stdout.splitlines() if ln.startswith(".  ")]
    assert "nothing to rebuild" in proc.stdout
    imported = {ln.split("|")[-1].strip() for ln in proc.stderr.splitlines() if "|" in ln}
    assert "doit" in imported and "tvm" not in imported and "onnx" not in imported



def test_editing_one_record_reruns_that_workload_and_link_only(tiny_copy, tiny_variants):
    workload, variants = tiny_variants
    tiny_copy.set_record("tiny", workload, variants[0])
    first = tiny_copy.doit("build:tiny")
    assert first.ran == {f"lower:tiny/{workload}", f"codegen:tiny/{workload}", "link:tiny"}
    assert f"lower:tiny/{workload}" not in first.uptodate and "partition:tiny" in first.uptodate
    x = model_inputs(tiny_copy.root, "tiny")
    assert_close(run_library(tiny_copy.library("tiny"), x), reference_output(tiny_copy, "tiny", x))

    tiny_copy.set_record("tiny", workload, variants[1])
    second = tiny_copy.doit("build:tiny")
    assert second.ran == {f"lower:tiny/{workload}", f"codegen:tiny/{workload}", "link:tiny"}
    assert_close(run_library(tiny_copy.library("tiny"), x), reference_output(tiny_copy, "tiny", x))


@pytest.mark.slow
def test_reformatting_a_record_rebuilds_nothing(tiny_copy, tiny_variants):
    workload, variants = tiny_variants
    tiny_copy.set_record("tiny", workload, variants[0])
    tiny_copy.doit("build:tiny")
    lib_hash = sha256(tiny_copy.library("tiny"))
    path = tiny_copy.record("tiny", workload)
    path.write_text(json.dumps(json.loads(path.read_text()), indent=1, sort_keys=True))
    run = tiny_copy.doit("build:tiny")
    # The build depends on what the record means (its canonical content), not its layout.
    assert run.ran == set()
    assert {f"lower:tiny/{workload}", f"codegen:tiny/{workload}", "link:tiny"} <= run.uptodate
    assert sha256(tiny_copy.library("tiny")) == lib_hash


@pytest.mark.slow
def test_removing_a_record_goes_back_to_the_default_schedule(tiny_copy, tiny_variants):
    workload, variants = tiny_variants
    default_objects = tiny_copy.objects("tiny")
    tiny_copy.set_record("tiny", workload, variants[2])
    tiny_copy.doit("build:tiny")
    assert tiny_copy.objects("tiny")[f"{workload}.o"] != default_objects[f"{workload}.o"]
    tiny_copy.record("tiny", workload).unlink()
    run = tiny_copy.doit("build:tiny")
    # The default schedule's artifacts were built before: they come back from the cache.
    assert run.ran == {"link:tiny"}
    assert run.from_cache == {f"lower:tiny/{workload}", f"codegen:tiny/{workload}"}
    assert tiny_copy.objects("tiny") == default_objects


@pytest.mark.slow
def test_incremental_build_equals_clean_build(tiny_copy, tiny_variants, tmp_path):
    workload, variants = tiny_variants
    for rec in variants:  # a few edits in a row, each an incremental build
        tiny_copy.set_record("tiny", workload, rec)
        tiny_copy.doit("build:tiny")
    clean = make_project(tmp_path / "clean", {"tiny": tiny_model()})
    shutil.copytree(tiny_copy.root / "schedules", clean.root / "schedules", dirs_exist_ok=True)
    clean.doit("build:tiny")
    assert clean.objects("tiny") == tiny_copy.objects("tiny")
    x = model_inputs(clean.root, "tiny")
    assert_close(run_library(tiny_copy.library("tiny"), x), run_library(clean.library("tiny"), x),
                 rel=0)


def test_editing_the_model_reruns_partition_and_what_changed(tiny_copy):
    (tiny_copy.root / "models" / "tiny.onnx").write_bytes(tiny_model(seed=1).SerializeToString())
    run = tiny_copy.doit("build:tiny")
    # New weights live in the graph; the kernels are the same, so they are not recompiled.
    assert run.ran == {"partition:tiny", "link:tiny"}
    x = model_inputs(tiny_copy.root, "tiny")
    assert_close(run_library(tiny_copy.library("tiny"), x), reference_output(tiny_copy, "tiny", x))


def test_a_dropped_in_model_gets_its_own_build_task(tiny_copy):
    shutil.copy(tiny_copy.root / "models" / "tiny.onnx", tiny_copy.root / "models" / "tiny2.onnx")
    run = tiny_copy.doit("build:tiny2")
    assert "partition:tiny2" in run.ran and "link:tiny2" in run.ran
    assert not any(t.endswith(":tiny") or ":tiny/" in t for t in run.ran)
    assert tiny_copy.library("tiny2").is_file()


@pytest.mark.slow
def test_parallel_build_equals_serial_build(tiny_built, tmp_path):
    par = make_project(tmp_path / "par", {"tiny": tiny_model()})
    run = par.doit("-n", "2", "build:tiny")
    assert "link:tiny" in run.ran
    assert par.objects("tiny") == tiny_built.objects("tiny")


def _timed_lines(proc, into: list) -> None:
    for line in proc.stdout:
        into.append((time.monotonic(), line.rstrip("\n")))


def _at_once(project, first: list[str], second: list[str]) -> list[str]:
    """Run doit ``first`` and ``second`` in the project at once: ``second`` starts while
    ``first`` holds the model's lock (held in its link, by a sitecustomize, until
    ``second`` says it waits). Started on a line of ``first``'s output, ``second`` had come
    after ``first``'s last second and waited for nothing. Their outputs, once both ended
    with status 0."""
    linking, go = project.root.parent / "linking", project.root.parent / "go"
    gated = held_env(project.root.parent / "site", "modelbuild.steps.link", "run", linking, go)
    procs, lines, readers = [], [], []
    try:
        for args, env in ((first, gated), (second, dict(os.environ))):
            env["PYTHONUNBUFFERED"] = "1"  # each task line when it happens
            proc = subprocess.Popen([sys.executable, "-m", "doit", *args], cwd=project.root,
                                    stdout=subprocess.PIPE, env=env, stderr=subprocess.STDOUT,
                                    text=True)
            out: list = []
            reader = threading.Thread(target=_timed_lines, args=(proc, out))
            reader.start()
            procs.append(proc)
            lines.append(out)
            readers.append(reader)
            waiting_for = linking if len(procs) == 1 else None
            deadline = time.monotonic() + 300
            while (not waiting_for.exists() if waiting_for else
                   not any(WAITED in text for _, text in out)):
                assert proc.poll() is None and time.monotonic() < deadline, \
                    "\n".join(text for _, text in out)
                time.sleep(0.01)
    finally:
        go.touch()
        for proc, reader in zip(procs, readers):
            proc.wait(timeout=300)
            reader.join()
    outputs = ["\n".join(text for _, text in out) for out in lines]
    assert [p.returncode for p in procs] == [0] * len(procs), outputs
    return outputs


WAITED = "waiting for another doit run building tiny in this project"


@pytest.mark.slow
def test_two_doit_processes_on_one_model_take_turns_and_both_end_with_a_correct_library(tmp_path):
    project = make_project(tmp_path / "p", {"tiny": tiny_model()})
    outputs = _at_once(project, ["build:tiny"], ["build:tiny"])
    # one built, the other waited for it (saying so) and found everything built
    assert sorted(WAITED in out for out in outputs) == [False, True], outputs
    waiter = next(out for out in outputs if WAITED in out)
    assert ".  " not in waiter and "nothing to rebuild" in waiter, waiter
    x = model_inputs(project.root, "tiny")
    assert_close(run_library(project.library("tiny"), x), reference_output(project, "tiny", x))
    # The shared doit state is still usable and agrees that everything is built.
    assert project.doit("build:tiny").ran == set()


@pytest.mark.slow
def test_two_runs_of_one_model_in_two_layouts_at_once_each_build_what_they_asked(tiny_built,
                                                                                tmp_path):
    """They wrote the same files: the default run linked the NCHW run's graph with its own
    kernels, a library that does not load, with exit 0."""
    project = make_project(tmp_path / "p", {"tiny": tiny_model()})
    nchw, blocked = _at_once(project, ["build:tiny", "layout=NCHW"], ["build:tiny"])
    assert WAITED in blocked and ".  partition:tiny" in blocked, blocked
    # the last to finish left its library: the blocked layout's, as a clean build makes it
    assert project.objects("tiny") == tiny_built.objects("tiny")
    x = model_inputs(project.root, "tiny")
    assert_close(run_library(project.library("tiny"), x),
                 run_library(tiny_built.library("tiny"), x), rel=0)


def test_a_link_leaves_another_process_s_temporary_files_and_removes_abandoned_ones(tiny_copy):
    """A link sweeps its objects folder of files no workload owns. It once swept another
    doit process's object in the making too, which then failed (FileNotFoundError)."""
    objects = tiny_copy.library("tiny").parent / "objects"
    workload = tiny_conv_workload(tiny_copy)
    writing = objects / f".{workload}.o.abc123.o"  # temp_path_for's name for an object
    abandoned = objects / f".{workload}.o.def456.o"
    orphan = objects / "gone_workload.o"
    for path in (writing, abandoned, orphan):
        path.write_bytes(b"partial")
    two_hours_ago = time.time() - 7200
    os.utime(abandoned, (two_hours_ago, two_hours_ago))
    tiny_copy.library("tiny").unlink()
    assert tiny_copy.doit("build:tiny").ran == {"link:tiny"}
    assert writing.is_file()
    assert not abandoned.exists() and not orphan.exists()


@pytest.mark.slow
def test_runs_with_a_reporter_of_the_user_s_choice_take_turns_too(tiny_built, tmp_path):
    """The model's lock was taken by modelbuild's reporter only: with doit's own
    (`--reporter console`), two runs in two layouts wrote the same files at once."""
    project = make_project(tmp_path / "p", {"tiny": tiny_model()})
    nchw, blocked = _at_once(project, ["--reporter", "console", "build:tiny", "layout=NCHW"],
                             ["--reporter", "console", "build:tiny"])
    assert WAITED in blocked and ".  partition:tiny" in blocked, blocked
    assert project.objects("tiny") == tiny_built.objects("tiny")
    x = model_inputs(project.root, "tiny")
    assert_close(run_library(project.library("tiny"), x),
                 run_library(tiny_built.library("tiny"), x), rel=0)
    # and `doit -n 2` with it: the workers do not wait for their own run's lock
    project.library("tiny").unlink()
    for p in (project.root / "build" / "tiny" / "objects").glob("*.o"):
        p.unlink()
    run = project.doit("-n", "2", "--reporter", "console", "build:tiny")
    assert project.objects("tiny") == tiny_built.objects("tiny"), run.output


class _LockHolder:
    """Another process holding a model's build lock, as a build in progress does (not the
    test's own: a child of the lock's holder counts as its doit -n worker)."""

    def __init__(self, root, model):
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "import sys, time; from pathlib import Path; "
             "from modelbuild.core.paths import Project; from modelbuild.graph import build_lock; "
             f"build_lock.hold(build_lock.lock_file(Project(Path.cwd()), {model!r})); "
             "print('held', flush=True); time.sleep(600)"],
            cwd=root, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "held"

    def __enter__(self):
        return self

    def __exit__(self, *_):
        self.proc.kill()
        self.proc.wait()


def _free(path) -> bool:
    """No process holds the lock at ``path`` (it is taken and given back at once)."""
    import fcntl

    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def test_why_neither_waits_for_a_build_in_progress_nor_holds_up_the_next(tiny_copy):
    """why reads doit's verdict of link through the task's uptodate checks, one of which
    takes the model's lock: why (which writes nothing) must not take it."""
    with _LockHolder(tiny_copy.root, "tiny"):
        proc = subprocess.run([sys.executable, "-m", "modelbuild", "why", "tiny"],
                              cwd=tiny_copy.root, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "waiting" not in proc.stderr, proc.stderr
    assert "nothing will run" in proc.stdout, proc.stdout


def test_status_queries_do_not_wait_for_a_build_in_progress(tiny_copy):
    """`doit info` and `doit list --status` waited for a build, then restored another
    layout's files from the cache into the build's folder."""
    with _LockHolder(tiny_copy.root, "tiny"):
        for args, said in ((["info", "partition:tiny"], "status     : up-to-date"),
                           (["list", "--all", "--status"], "U partition:tiny ")):
            proc = subprocess.run([sys.executable, "-m", "doit", *args], cwd=tiny_copy.root,
                                  capture_output=True, text=True, timeout=60)
            assert proc.returncode == 0, (args, proc.stdout + proc.stderr)
            assert "waiting" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
            assert said in proc.stdout, (args, proc.stdout)


@pytest.mark.slow
def test_a_run_takes_its_models_locks_in_name_order(tmp_path):
    """`doit build:b build:a` took b's lock, then waited for a's: beside a run doing the
    opposite (`build:a build:b`), each waited for the other forever."""
    project = make_project(tmp_path / "p", {"a": tiny_model(), "b": tiny_model()})
    locks = project.root / "build"
    with _LockHolder(project.root, "a"):
        run = subprocess.Popen([sys.executable, "-m", "doit", "--reporter", "console",
                                "build:b", "build:a"], cwd=project.root, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        first = run.stdout.readline()
        assert "waiting for another doit run building a" in first, first
        assert _free(locks / ".b.lock"), "b's lock was taken before a's"
    out, _ = run.communicate(timeout=300)
    assert run.returncode == 0, out
    assert project.library("a").is_file() and project.library("b").is_file()


@pytest.mark.slow
def test_doit_clean_waits_for_a_build_in_progress(tiny_copy):
    """`doit clean` removed the outputs of a build in progress, which then failed."""
    library = tiny_copy.library("tiny")
    with _LockHolder(tiny_copy.root, "tiny"):
        with pytest.raises(subprocess.TimeoutExpired):
            subprocess.run([sys.executable, "-m", "doit", "clean"], cwd=tiny_copy.root,
                           capture_output=True, timeout=8)
        assert library.is_file()
    proc = subprocess.run([sys.executable, "-m", "doit", "clean"], cwd=tiny_copy.root,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and not library.exists(), proc.stdout + proc.stderr


@pytest.mark.slow
def test_a_killed_parallel_run_gives_its_lock_back(tmp_path):
    """doit's workers outlived a SIGKILLed `doit -n 2`, holding the model's lock: the next
    run of the model waited forever."""
    import signal

    project = make_project(tmp_path / "p", {"tiny": tiny_model()})
    # a worker is held in the link (it had ended before a kill sent on a line of its output)
    linking = tmp_path / "linking"
    env = held_env(tmp_path / "site", "modelbuild.steps.link", "run", linking)
    run = subprocess.Popen([sys.executable, "-m", "doit", "-n", "2", "build:tiny"],
                           cwd=project.root, text=True, env=env, start_new_session=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while not linking.exists():
            assert run.poll() is None and time.monotonic() < deadline, "no link started"
            time.sleep(0.01)
        run.send_signal(signal.SIGKILL)
        run.wait()
        lock = project.root / "build" / ".tiny.lock"
        deadline = time.monotonic() + 20
        while not _free(lock):
            assert time.monotonic() < deadline, "the killed run's workers still hold the lock"
            time.sleep(0.2)
    finally:
        try:
            os.killpg(run.pid, signal.SIGKILL)  # a worker still in the held link
        except ProcessLookupError:
            pass
    assert project.doit("build:tiny").ran  # and the next run builds


@pytest.mark.slow
def test_a_link_killed_leaves_a_temporary_library_the_next_build_removes(tiny_copy, tmp_path):
    """A SIGKILL during link left build/tiny/.tiny.so.<random>.so, and every rebuild kept
    it. The next link removes its own, and only its own: files of other names stay."""
    import signal

    folder = tiny_copy.library("tiny").parent
    tiny_copy.library("tiny").unlink()
    linking = tmp_path / "linking"
    env = held_env(tmp_path / "site", "modelbuild.targets.toolchain", "link_shared", linking)
    run = subprocess.Popen([sys.executable, "-m", "doit", "build:tiny"], cwd=tiny_copy.root,
                           env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while not linking.exists():
            assert run.poll() is None and time.monotonic() < deadline, "no link started"
            time.sleep(0.01)
    finally:
        os.killpg(run.pid, signal.SIGKILL)
        run.wait()
    (left,) = folder.glob(".tiny.so.*.so")
    others = [".tiny.so.notes", ".tiny.so.keep.so", ".tiny.so.stamp.abcdefgh.tmp", "x.so"]
    for name in others:
        (folder / name).write_text("not the link's")

    assert "link:tiny" in tiny_copy.doit("build:tiny").ran
    assert not left.exists()
    assert all((folder / name).read_text() == "not the link's" for name in others)


@pytest.mark.parametrize("in_place", ["folder", "link"])
def test_something_in_the_lock_s_place_is_said_once_and_left_as_it_is(tiny_copy, tmp_path,
                                                                      in_place):
    """A folder there made the run go on unlocked in silence; a link there had the holder's
    pid written over the file it named."""
    lock = tiny_copy.root / "build" / ".tiny.lock"
    lock.unlink(missing_ok=True)
    precious = tmp_path / "notes.txt"
    precious.write_text("the user's own file\n")
    lock.mkdir() if in_place == "folder" else lock.symlink_to(precious)
    proc = subprocess.run([sys.executable, "-m", "doit", "build:tiny"], cwd=tiny_copy.root,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("cannot lock") == 1, proc.stderr
    assert precious.read_text() == "the user's own file\n"


def test_no_lock_is_another_s(tmp_path):
    """A model named m.sweep had m's sweep lock for its build lock; one named serve had
    serve's."""
    from modelbuild.core.paths import Project
    from modelbuild.graph import build_lock

    project = Project(tmp_path)
    assert build_lock.lock_file(project, "m.sweep") != build_lock.sweep_lock_file(project, "m")
    assert build_lock.lock_file(project, "serve") != build_lock.serve_lock_file(project)


@pytest.mark.slow
def test_the_reference_ignores_a_record_of_a_workload_the_model_no_longer_has(tiny_copy,
                                                                                tiny_variants):
    """A record left for a workload an edited model no longer has: the build ignores it, and
    the tvm.compile reference (tests, bench) raised a KeyError instead."""
    import json

    workload, variants = tiny_variants
    tiny_copy.set_record("tiny", workload, variants[0])
    gone = tiny_copy.record("tiny", workload).with_name("fused_conv2d_NCHWc9_add9_relu9.json")
    data = json.loads(tiny_copy.record("tiny", workload).read_text())
    data["workload"] = gone.stem
    gone.write_text(json.dumps(data))
    tiny_copy.doit("build:tiny")
    x = model_inputs(tiny_copy.root, "tiny")
    assert_close(run_library(tiny_copy.library("tiny"), x), reference_output(tiny_copy, "tiny", x))
