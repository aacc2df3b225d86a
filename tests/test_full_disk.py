"""A full disk: a step that cannot write says so in one paragraph and the build stops, with
no traceback and no LLVM abort (LLVM ends the whole process when an object cannot be
written); once there is room, the same command finishes the build, and its objects and
library are a clean build's. doit's own state file, which doit writes as the run goes, is
removed with a warning when it cannot be written.

The disk is a small tmpfs the test mounts (root only; skipped elsewhere) and resizes.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys

import pytest
from conftest import (Project, assert_close, cli, make_project, model_inputs, run_library,
                      tiny_conv_workload)
from onnx_models import tiny_model

pytestmark = pytest.mark.slow  # builds on a small tmpfs, filled: the full suite only
NOT_SHOWN = ("Traceback", "internal error", "LLVM ERROR")


@pytest.fixture
def small_disk(tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = os.geteuid() == 0 and subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(disk)],
        capture_output=True).returncode == 0
    if not mounted:
        pytest.skip("needs root, to mount a small file system")
    yield disk
    subprocess.run(["umount", "-l", str(disk)], capture_output=True)


def resize(disk, size: str) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", str(disk)], check=True,
                   capture_output=True)


def fill(disk) -> None:
    """Write a file until the disk has no byte left."""
    fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        for chunk in (1 << 16, 1 << 12, 1):
            try:
                while os.write(fd, b"\0" * chunk):
                    pass
            except OSError as err:
                assert err.errno == errno.ENOSPC
    finally:
        os.close(fd)


def assert_clean_build(project: Project, reference: Project) -> None:
    assert project.objects("tiny") == reference.objects("tiny")
    inputs = model_inputs(reference.root, "tiny")
    assert_close(run_library(project.library("tiny"), inputs),
                 run_library(reference.library("tiny"), inputs), rel=0)


@pytest.mark.parametrize("size", ["100k", "600k"])
def test_a_full_disk_stops_the_build_in_words_and_room_finishes_it(small_disk, tiny_built, size):
    # 100k: partition's own files do not fit; 600k: they do, the graph's weights would not
    project = make_project(small_disk / "p", {"tiny": tiny_model()})
    resize(small_disk, size)

    full = project.doit("build:tiny", check=False)

    assert full.returncode == 1, full
    assert "No space left on device" in full.output or "no room to write" in full.output, full
    assert "free space on that disk" in full.output
    assert not any(text in full.output for text in NOT_SHOWN), full
    assert not project.library("tiny").exists()

    resize(small_disk, "64m")
    again = project.doit("build:tiny")
    assert "link:tiny" in again.ran
    assert_clean_build(project, tiny_built)


def test_a_disk_full_at_link_time_keeps_the_objects_and_the_next_run_relinks(small_disk, tiny_built):
    project = make_project(small_disk / "p", {"tiny": tiny_model()})
    project.doit("build:tiny")
    project.library("tiny").unlink()
    fill(small_disk)

    full = project.doit("build:tiny", check=False)

    assert full.returncode == 1, full
    assert "No space left on device" in full.output, full
    # as partition and lower say it: one line and the hint, not the linker's lines
    assert "error: No space left on device: build/tiny/tiny.so" in full.output, full
    assert "hint: free space on that disk" in full.output, full
    assert "linking build/tiny/tiny.so failed" not in full.output and "\ncommand: " not in full.output, full
    # doit could not record the failed link: its state file goes, said once, no traceback
    assert "warning: doit could not save" in full.stderr, full
    assert not any(text in full.output for text in NOT_SHOWN), full

    (small_disk / "filler").unlink()
    again = project.doit("build:tiny")
    assert again.ran == {"link:tiny"}, again
    assert_clean_build(project, tiny_built)


def test_no_room_for_an_object_is_a_failed_codegen_not_an_llvm_abort(small_disk, tiny_built):
    project = make_project(small_disk / "p", {"tiny": tiny_model()})
    project.doit("build:tiny")
    subprocess.run([sys.executable, "-m", "modelbuild", "cache", "clear"], cwd=project.root,
                   check=True, capture_output=True)
    for obj in (project.root / "build" / "tiny" / "objects").glob("*.o"):
        obj.unlink()
    fill(small_disk)

    full = project.doit("build:tiny", check=False)

    assert full.returncode == 1, full
    assert "no room to write the object of workload" in full.output, full
    assert "modelbuild: failed" in full.output, full  # doit lived to say so
    assert not any(text in full.output for text in NOT_SHOWN), full

    (small_disk / "filler").unlink()
    again = project.doit("build:tiny")
    # the same objects again: the library, linked from them, stays (doit's lost state
    # relinked it)
    assert again.ran_kind("codegen") and "link:tiny" in again.uptodate, again
    assert_clean_build(project, tiny_built)


def test_commands_on_a_full_disk_say_so_and_leave_the_records_alone(small_disk):
    project = make_project(small_disk / "p", {"tiny": tiny_model()})
    project.doit("build:tiny")
    workload = tiny_conv_workload(project)
    cli(project, "sample", "tiny", workload, "--count", "2")
    fill(small_disk)

    chose = cli(project, "select", "tiny", workload, "1", check=False)
    assert chose.returncode == 1, chose.stderr
    assert "No space left on device" in chose.stderr and "internal error" not in chose.stderr
    assert not project.record("tiny", workload).exists()  # no half-written active record

    tuned = cli(project, "tune", "tiny", "--total-trials", "2", check=False)
    assert tuned.returncode == 1, tuned.stderr
    # TVM's database writer would leave a truncated line and say nothing
    assert "no room to write the tuning database" in tuned.stderr, tuned.stderr
