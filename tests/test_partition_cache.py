"""partition is a cached step too: its entry holds every file it writes, under a key of
everything that decides them (the model's files, [inputs], target, TVM and tvm-ffi)."""

from __future__ import annotations

import shutil

import onnx
import pytest
from conftest import Project, make_project, other_tvm_ffi_env, sha256
from onnx_models import tiny_model
from test_no_traceback import _symbolic_batch_model

from modelbuild.core import manifest


def _events(project: Project) -> list[str]:
    return (project.root / "build" / ".cache-events").read_text().splitlines()


def _partition_events(project: Project) -> list[str]:
    return [e.split(" ")[0] for e in _events(project) if e.split(" ")[1] == "partition"]


def test_a_deleted_build_folder_with_the_cache_kept_recomputes_nothing(tiny_copy):
    library = sha256(tiny_copy.library("tiny"))
    objects = tiny_copy.objects("tiny")
    shutil.rmtree(tiny_copy.root / "build" / "tiny")
    run = tiny_copy.doit("build:tiny")
    assert run.ran == {"link:tiny"}, run.output
    assert "partition:tiny" in run.from_cache
    assert sha256(tiny_copy.library("tiny")) == library and tiny_copy.objects("tiny") == objects


def test_a_changed_model_file_misses_partitions_entry(tiny_copy):
    library = sha256(tiny_copy.library("tiny"))
    onnx_file = tiny_copy.root / "models" / "tiny.onnx"
    original = onnx_file.read_bytes()
    onnx.save(tiny_model(seed=7), str(onnx_file))
    run = tiny_copy.doit("build:tiny")
    assert "partition:tiny" in run.ran and _partition_events(tiny_copy) == ["miss"]
    onnx_file.write_bytes(original)  # back: partition's entry for it is still there
    back = tiny_copy.doit("build:tiny")
    assert "partition:tiny" in back.from_cache and _partition_events(tiny_copy) == ["hit"]
    assert sha256(tiny_copy.library("tiny")) == library


@pytest.mark.slow
def test_a_changed_inputs_shape_misses_partitions_entry(tmp_path):
    project = make_project(tmp_path / "p", {"dyn": _symbolic_batch_model()})
    declaration = project.root / "models" / "dyn.toml"
    layout = project.root / "build" / "dyn" / "partition" / "manifest.msgpack"
    declaration.write_text('[inputs]\nx = [1, 3, 16, 16]\n')
    project.doit("build:dyn")
    first = sha256(project.library("dyn"))
    declaration.write_text('[inputs]\nx = [2, 3, 16, 16]\n')
    run = project.doit("build:dyn")
    assert "partition:dyn" in run.ran and _partition_events(project) == ["miss"]
    assert manifest.read(layout).inputs[0][1] == (2, 3, 16, 16)
    declaration.write_text('[inputs]\nx = [1, 3, 16, 16]\n')
    back = project.doit("build:dyn")
    assert "partition:dyn" in back.from_cache and _partition_events(project) == ["hit"]
    assert manifest.read(layout).inputs[0][1] == (1, 3, 16, 16)
    assert sha256(project.library("dyn")) == first


@pytest.mark.slow
def test_another_tvm_ffi_misses_partitions_entry(tiny_copy, tmp_path):
    env = other_tvm_ffi_env(tmp_path / "site")
    shutil.rmtree(tiny_copy.root / "build" / "tiny")
    run = tiny_copy.doit("partition:tiny", env=env)
    assert run.ran == {"partition:tiny"} and _partition_events(tiny_copy) == ["miss"]
    shutil.rmtree(tiny_copy.root / "build" / "tiny")
    same = tiny_copy.doit("partition:tiny")  # the real tvm-ffi: the first build's entry
    assert same.from_cache == {"partition:tiny"} and _partition_events(tiny_copy) == ["hit"]


def test_a_link_in_place_of_a_partition_file_is_replaced_not_followed(tiny_copy, tmp_path):
    """A stale link where a partition file was (to nowhere, or to a file elsewhere) ended
    every build in a traceback blaming "a cache entry naming a file outside its folder":
    the restore resolved the link. The file is put back in the link's place, the file the
    link named is left alone, and the library is the clean one."""
    import os

    library = sha256(tiny_copy.library("tiny"))
    folder = tiny_copy.root / "build" / "tiny" / "partition" / "workloads"
    first, second = sorted(folder.glob("*.json"))[:2]
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text("not yours to overwrite")
    first.unlink()
    first.symlink_to(tmp_path / "nowhere.json")
    second.unlink()
    os.symlink(elsewhere, second)
    run = tiny_copy.doit("build:tiny")
    assert "Traceback" not in run.output, run.output
    assert not first.is_symlink() and not second.is_symlink()
    assert elsewhere.read_text() == "not yours to overwrite"
    assert sha256(tiny_copy.library("tiny")) == library
    assert tiny_copy.doit("build:tiny").ran == set()
