"""Ctrl-C during `doit build`: one line that says so, no traceback, no "done", no step's
internal error; the next build goes on from what had finished."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import DoitRun, held_env, patched_env
from doit.exceptions import TaskFailed

from modelbuild.graph import actions


def _interrupted_build(project, *args: str) -> tuple[int, str]:
    """`doit build:tiny` interrupted as Ctrl-C does (SIGINT to its process group) while a
    lower step runs: (exit status, everything it printed). The step is held (a
    sitecustomize wraps lower.lowered) until the Ctrl-C: sent once ".  lower:" was read,
    it had come after the build's last half second, which had ended (exit 0)."""
    lowering = project.root.parent / "lowering"
    env = held_env(project.root.parent / "site", "modelbuild.steps.lower", "lowered", lowering)
    env["PYTHONUNBUFFERED"] = "1"
    proc = subprocess.Popen([sys.executable, "-m", "doit", *args, "build:tiny"], cwd=project.root,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 300
    while not lowering.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail(f"no lower step started: {proc.stdout.read()}")
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGINT)
    out = proc.stdout.read()
    return proc.wait(timeout=120), out


@pytest.mark.slow
@pytest.mark.parametrize("jobs", [(), ("-n", "2")], ids=["serial", "n2"])
def test_ctrl_c_stops_the_build_in_one_line_and_the_next_build_goes_on(tiny_project, jobs):
    status, output = _interrupted_build(tiny_project, *jobs)
    assert status in (-signal.SIGINT, 128 + signal.SIGINT), output
    assert "interrupted (Ctrl-C)" in output, output
    assert "modelbuild: interrupted - " in output, output  # the summary, not "done"
    for wrong in ("Traceback", "internal error", "modelbuild: done", "KeyboardInterrupt"):
        assert wrong not in output, output

    again = tiny_project.doit("build:tiny")
    assert "partition:tiny" in again.uptodate  # it had finished: kept
    assert "link:tiny" in again.ran
    assert tiny_project.library("tiny").is_file()


def _tvm_like_interrupted_call():
    """What TVM's pass infrastructure does with a Ctrl-C that lands in it: the
    KeyboardInterrupt comes back as a bare RuntimeError."""
    try:
        signal.raise_signal(signal.SIGINT)
    except KeyboardInterrupt:
        pass
    raise RuntimeError("")


def _plain_empty_error():
    raise RuntimeError("")


def test_a_ctrl_c_that_tvm_turned_into_an_error_still_stops_the_build():
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with pytest.raises(KeyboardInterrupt):
        actions.step(_tvm_like_interrupted_call)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back
    # the same error with no Ctrl-C is the step's failure, as before
    failed = actions.step(_plain_empty_error)
    assert isinstance(failed, TaskFailed) and "internal error" in failed.get_msg()


def test_an_uninterrupted_build_still_says_done(tiny_project):
    run = tiny_project.doit("build:tiny")
    assert isinstance(run, DoitRun) and "modelbuild: done" in run.output
    assert "interrupted" not in run.output


@pytest.mark.slow
def test_a_ctrl_c_a_fallback_swallowed_keeps_nothing_the_step_made(tiny_project, tiny_built,
                                                                  tmp_path):
    """The Ctrl-C lands in LegalizeOps (TVM hands it back as a bare error), which partition
    takes for a graph it cannot build blocked, and goes on in NCHW: that fallback was
    stamped and cached (exit 0, "done"; after rm -rf build/, restored from the cache).
    Later, the build stopped but first said TVM could not legalize the graph."""
    env = patched_env(tmp_path / "site", """
import signal
from modelbuild.steps import graph_passes
_pipeline = graph_passes.pipeline
def pipeline(block):
    passes = _pipeline(block)
    legalize = dict(passes)["LegalizeOps"]
    calls = []
    def interrupted_in_tvm(mod):  # the first call only: the fallback's own call goes through
        calls.append(1)
        if len(calls) > 1:
            return legalize(mod)
        try:
            signal.raise_signal(signal.SIGINT)
        except KeyboardInterrupt:
            pass
        raise RuntimeError("")
    return [(name, interrupted_in_tvm if name == "LegalizeOps" and block else apply)
            for name, apply in passes]
graph_passes.pipeline = pipeline
""")
    env["PYTHONUNBUFFERED"] = "1"
    run = tiny_project.doit("build:tiny", check=False, env=env)
    assert run.returncode in (-signal.SIGINT, 128 + signal.SIGINT), run
    assert "interrupted (Ctrl-C)" in run.output and "modelbuild: done" not in run.output, run
    assert "cannot legalize" not in run.output, run  # the Ctrl-C is no reason TVM gave
    assert not tiny_project.library("tiny").exists()

    again = tiny_project.doit("build:tiny")  # no Ctrl-C: the blocked graph, as a clean build
    assert "partition:tiny" in again.ran and "partition:tiny" not in again.from_cache, again
    assert tiny_project.objects("tiny") == tiny_built.objects("tiny")
