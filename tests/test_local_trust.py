"""Issue 19 items 2, 3, 7: files in build/ are trusted by content, not by size; `doit clean`
works; a damaged doit state file is set aside.

Each edit here keeps the file's size (and, to be hostile, may put its mtime back):
the build must notice, put back what partition or link wrote, and the library must
still compute what onnxruntime computes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from conftest import (assert_close, model_inputs, onnx_output, patched_env, run_library, sha256,
                      tiny_conv_workload)
from onnx import numpy_helper


def _why(project) -> list[dict]:
    proc = subprocess.run([sys.executable, "-m", "modelbuild", "why", "tiny", "--json"],
                          cwd=project.root, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _reasons(verdicts) -> str:
    return " | ".join(r for v in verdicts for r in v["reasons"])


def _edit_keeping_size(path, change, keep_mtime: bool) -> None:
    before = os.stat(path)
    data = change(path.read_bytes())
    assert len(data) == before.st_size and data != path.read_bytes()
    path.write_bytes(data)
    if keep_mtime:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def _assert_matches_onnxruntime(project) -> None:
    inputs = model_inputs(project.root, "tiny")
    assert_close(run_library(project.library("tiny"), inputs),
                 onnx_output(project.root, "tiny", inputs))


def _double_weight(project):
    """An edit of the graph object holding the weight w2: its values doubled, same size."""
    model = onnx.load(str(project.root / "models" / "tiny.onnx"))
    w2 = next(numpy_helper.to_array(i) for i in model.graph.initializer if i.name == "w2")
    o, i, h, w = w2.shape  # as imported (NCHW), or laid out OIHW{i}i{o}o (NCHWc, the default)
    blocked = w2.reshape(1, o, 1, i, h, w).transpose(0, 2, 4, 5, 3, 1)
    for layout in (w2, blocked):
        raw = np.ascontiguousarray(layout, np.float32).tobytes()
        doubled = np.ascontiguousarray(layout * 2, np.float32).tobytes()
        for path in sorted((project.root / "build/tiny/partition/graph").iterdir()):
            if raw in path.read_bytes():
                return path, lambda data, raw=raw, doubled=doubled: data.replace(raw, doubled, 1)
    raise AssertionError("no graph object holds w2's bytes")


@pytest.mark.parametrize("keep_mtime", [False, True])
def test_a_same_size_edit_of_a_graph_weight_is_restored(tiny_copy, keep_mtime):
    path, change = _double_weight(tiny_copy)
    original = path.read_bytes()
    _edit_keeping_size(path, change, keep_mtime)
    verdicts = _why(tiny_copy)
    assert [(v["task"], v["action"]) for v in verdicts] == [("partition:tiny", "restore")]
    assert f"output damaged: build/tiny/partition/graph/{path.name}" in _reasons(verdicts)
    run = tiny_copy.doit("build:tiny")
    assert run.from_cache == {"partition:tiny"} and run.ran == set()
    assert path.read_bytes() == original
    _assert_matches_onnxruntime(tiny_copy)


def test_a_same_size_edit_of_a_graph_weight_reruns_partition_without_a_cache(tiny_copy):
    import shutil

    shutil.rmtree(tiny_copy.root / "build" / ".cache")
    path, change = _double_weight(tiny_copy)
    original = path.read_bytes()
    _edit_keeping_size(path, change, keep_mtime=True)
    assert "partition:tiny" in tiny_copy.doit("build:tiny").ran
    assert path.read_bytes() == original
    _assert_matches_onnxruntime(tiny_copy)


def test_a_same_size_edit_of_a_workload_tir_is_restored(tiny_copy):
    workload = tiny_conv_workload(tiny_copy)
    path = tiny_copy.workload_file("tiny", workload)
    original = path.read_bytes()
    library = sha256(tiny_copy.library("tiny"))

    def change(data: bytes) -> bytes:  # one byte in the middle of the TIR
        middle = len(data) // 2
        return data[:middle] + bytes([data[middle] ^ 0x01]) + data[middle + 1:]

    _edit_keeping_size(path, change, keep_mtime=True)
    assert "output damaged: build/tiny/partition/workloads/" in _reasons(_why(tiny_copy))
    run = tiny_copy.doit("build:tiny")
    assert run.ran == set() and run.from_cache == {"partition:tiny"}
    assert path.read_bytes() == original
    assert sha256(tiny_copy.library("tiny")) == library
    _assert_matches_onnxruntime(tiny_copy)


def test_a_truncated_library_is_relinked(tiny_copy):
    library = tiny_copy.library("tiny")
    digest = sha256(library)
    os.truncate(library, 1000)
    verdicts = _why(tiny_copy)
    assert [(v["task"], v["action"]) for v in verdicts] == [("link:tiny", "run")]
    assert "output modified since it was built" in _reasons(verdicts)
    assert tiny_copy.doit("build:tiny").ran == {"link:tiny"}
    assert sha256(library) == digest
    _assert_matches_onnxruntime(tiny_copy)
    assert tiny_copy.doit("build:tiny").ran == set()  # and then it is current


def test_a_same_size_edit_of_the_library_with_its_mtime_put_back_is_relinked(tiny_copy):
    library = tiny_copy.library("tiny")
    digest = sha256(library)
    _edit_keeping_size(library, lambda d: d[:2000] + bytes(b ^ 0xFF for b in d[2000:2100])
                       + d[2100:], keep_mtime=True)
    assert tiny_copy.doit("build:tiny").ran == {"link:tiny"}
    assert sha256(library) == digest


def _outputs(project) -> list[str]:
    build = project.root / "build" / "tiny"
    return sorted(str(p.relative_to(build)) for p in build.rglob("*")
                  if p.is_file() and p.suffix in (".so", ".o", ".json", ".msgpack", ".stamp"))


@pytest.mark.slow
def test_doit_clean_removes_outputs_and_stamps(tiny_copy):
    built = _outputs(tiny_copy)
    assert any(p.startswith("lowered/") for p in built)
    tiny_copy.doit("clean", "link:tiny")
    assert set(built) - set(_outputs(tiny_copy)) == {"tiny.so", "tiny.so.stamp"}
    run = tiny_copy.doit("clean", "lower")
    left = _outputs(tiny_copy)
    assert not any(p.startswith("lowered/") for p in left)
    assert any(p.startswith("objects/") for p in left)
    run = tiny_copy.doit("clean")
    assert "removing file" in run.output
    assert _outputs(tiny_copy) == []
    # the cache keeps its copies: the next build restores everything
    run = tiny_copy.doit("build:tiny")
    assert run.ran == {"link:tiny"}
    _assert_matches_onnxruntime(tiny_copy)


def test_doit_clean_of_partition_removes_its_memo_too(tiny_copy):
    """build/<model>/partition.checked (the digests of partition's files as last verified)
    was left behind by `doit clean`."""
    build = tiny_copy.root / "build" / "tiny"
    assert (build / "partition.checked").is_file()
    run = tiny_copy.doit("clean", "partition:tiny")
    assert not (build / "partition.checked").exists()
    assert "removing file 'build/tiny/partition.checked'" in run.output
    assert not (build / "partition" / "manifest.msgpack").exists()


def test_a_damaged_doit_state_file_is_set_aside_with_one_warning(tiny_copy):
    db = tiny_copy.root / "build" / ".doit.db"
    db.write_bytes(os.urandom(4096))
    assert _why(tiny_copy) == []  # no traceback from why; doit's state decides no step
    run = tiny_copy.doit("build:tiny")
    assert "Traceback" not in run.output
    warnings = [ln for ln in run.stderr.splitlines() if ".doit.db" in ln]
    assert len(warnings) == 1 and "set aside" in warnings[0], run.output
    assert (tiny_copy.root / "build" / ".doit.db.corrupt-1").is_file()
    _assert_matches_onnxruntime(tiny_copy)
    again = tiny_copy.doit("build:tiny")
    assert again.ran == set() and ".doit.db" not in again.output


def _replace_with(path, kind: str) -> None:
    path.unlink()
    if kind == "pipe":
        os.mkfifo(path)
    else:
        path.mkdir()


_BUILT_FILES = ["objects/{w}.o", "objects/{w}.o.stamp", "lowered/{w}.json", "tiny.so",
                "tiny.so.stamp", "partition.checked", "partition/manifest.msgpack",
                "partition/graph/graph1.o"]


@pytest.mark.parametrize("name", [name if name in ("objects/{w}.o", "tiny.so")
                                  else pytest.param(name, marks=pytest.mark.slow)
                                  for name in _BUILT_FILES])
def test_a_pipe_in_place_of_a_built_file_is_rebuilt_not_waited_on(tiny_copy, tiny_built, name):
    """Reading it waited forever: `doit build` and `why` hung."""
    path = tiny_copy.root / "build" / "tiny" / name.format(w=tiny_conv_workload(tiny_copy))
    _replace_with(path, "pipe")
    why = subprocess.run([sys.executable, "-m", "modelbuild", "why", "tiny"], cwd=tiny_copy.root,
                         capture_output=True, text=True, timeout=120)
    assert why.returncode == 0, why.stderr
    run = subprocess.run([sys.executable, "-m", "doit", "build:tiny"], cwd=tiny_copy.root,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and "Traceback" not in run.stdout + run.stderr, run
    assert path.is_file() or name == "partition.checked"
    assert tiny_copy.objects("tiny") == tiny_built.objects("tiny")
    assert sha256(tiny_copy.library("tiny")) == sha256(tiny_built.library("tiny"))


@pytest.mark.parametrize("name", [
    "objects/{w}.o", pytest.param("lowered/{w}.json.stamp", marks=pytest.mark.slow), "tiny.so",
    pytest.param("partition/manifest.msgpack", marks=pytest.mark.slow)])
def test_a_folder_in_place_of_a_built_file_is_named_and_the_build_stops(tiny_copy, name):
    """It was an internal error, or doit's traceback (exit 3) from a cache restore."""
    name = name.format(w=tiny_conv_workload(tiny_copy))
    path = tiny_copy.root / "build" / "tiny" / name
    _replace_with(path, "folder")
    run = tiny_copy.doit("build:tiny", check=False)
    assert run.returncode == 1, run
    assert f"Is a directory: build/tiny/{name}" in run.output, run
    assert "a folder stands where modelbuild writes a file: remove it" in run.output
    assert "Traceback" not in run.output and "internal error" not in run.output, run
    path.rmdir()
    assert tiny_copy.doit("build:tiny").returncode == 0


@pytest.mark.parametrize("name", [".doit.db", ".cache-events"])
def test_doit_s_state_or_the_event_log_as_a_folder_is_no_traceback(tiny_copy, name):
    path = tiny_copy.root / "build" / name
    if path.exists():
        path.unlink()
    path.mkdir()
    tiny_copy.library("tiny").unlink()
    run = tiny_copy.doit("build:tiny")
    assert "Traceback" not in run.output and "link:tiny" in run.ran, run
    if name == ".doit.db":  # set aside as a damaged one is
        assert "is damaged (not a regular file" in run.stderr, run


@pytest.mark.slow
def test_a_clean_build_reads_partition_s_files_once_to_hash_them(tiny_project, tmp_path):
    """partition hashes each file it writes for its manifest and records the file as
    verified: the check of its output and the link take the digest from that memo instead
    of reading the file again (resnet50's graph object, its weights, is ~50 MB)."""
    log = tmp_path / "hashed.log"
    env = patched_env(tmp_path / "site", f"""
import modelbuild.core.digest as _digest
_file_digest = _digest.file_digest
def file_digest(path):
    with open({str(log)!r}, "a") as f:
        f.write(str(path) + "\\n")
    return _file_digest(path)
_digest.file_digest = file_digest
""")
    tiny_project.doit("build:tiny", env=env)
    root = tiny_project.root
    hashed = [str((root / p).resolve().relative_to(root)) for p in log.read_text().splitlines()]
    part = root / "build" / "tiny" / "partition"
    outputs = sorted(str(p.relative_to(root)) for p in part.rglob("*")
                     if p.is_file() and not p.name.startswith("manifest.msgpack"))
    assert any("/graph/" in p for p in outputs) and len(outputs) > 3
    assert {p: hashed.count(p) for p in outputs} == {p: 1 for p in outputs}
    memo = json.loads((part.parent / "partition.checked").read_text())
    linked = json.loads((part.parent / "tiny.so.stamp").read_text())["linked_from"]
    for path in (p for p in outputs if "/graph/" in p):
        assert memo[path][1] == linked[path][1] == sha256(root / path)
    _assert_matches_onnxruntime(tiny_project)
