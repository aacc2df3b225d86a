"""`doit -n 2`: a worker process that dies with its step (SIGKILL, as the kernel's OOM
killer sends; a crash) stops the build with one message and doit's error status, where
doit alone waited for it forever; the next build goes on from what had finished and makes
what a clean build makes."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import DoitRun, patched_env

pytestmark = pytest.mark.slow  # doit -n 2 workers killed mid-build: the full suite only
KILLER = """
import os, signal
import modelbuild.steps.codegen as codegen

def compile_to(*args, **kwargs):
    {death}

codegen.compile_to = compile_to
"""
DEATHS = {"SIGKILL": "os.kill(os.getpid(), signal.SIGKILL)",
          "SIGSEGV": "os.kill(os.getpid(), signal.SIGSEGV)",
          "status 0": "os._exit(0)"}  # as a worker ends when doit tells it to


@pytest.mark.parametrize("signal", list(DEATHS))
def test_a_worker_that_dies_stops_the_build_and_the_next_build_goes_on(
        tiny_project, tiny_built, tmp_path, signal):
    env = patched_env(tmp_path / "site", KILLER.format(death=DEATHS[signal]))
    proc = subprocess.run([sys.executable, "-m", "doit", "-n", "2", "build:tiny"],
                          cwd=tiny_project.root, capture_output=True, text=True, env=env,
                          timeout=120)
    died = DoitRun(proc)
    assert died.returncode == 2, died
    said = "ended (status 0) before its step did" if signal == "status 0" else f"ended by {signal}"
    assert "a doit worker process (pid " in died.output and said in died.output, died
    assert "run the same command to go on" in died.output, died
    assert "Traceback" not in died.output and "modelbuild: failed - " in died.stdout, died
    assert not tiny_project.library("tiny").exists()

    again = tiny_project.doit("-n", "2", "build:tiny")
    assert not again.ran_kind("partition") and again.ran_kind("codegen"), again
    assert tiny_project.objects("tiny") == tiny_built.objects("tiny")
