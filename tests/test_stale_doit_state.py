"""doit saves its state when a run ends. A run killed after a link, or two builds of one
project at once (the last to end saving its view), leave doit's state older than the
library on disk. The library's stamp, which records what it was linked from, decides:
the next build relinks when the inputs now are not those, and `why` says so."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from conftest import assert_close, model_inputs, onnx_output, run_library, sha256
from onnx import numpy_helper


def _stale_state_after(project, change, undo):
    """Build after ``change`` with doit's state put back to before that build (as a kill
    before doit saved it leaves it), then ``undo`` the change. Returns the library's
    digest before the change."""
    before = sha256(project.library("tiny"))
    db = project.root / "build" / ".doit.db"
    saved = db.read_bytes()
    change()
    assert project.doit("build:tiny").returncode == 0
    assert sha256(project.library("tiny")) != before
    db.write_bytes(saved)
    undo()
    return before


@pytest.mark.slow
def test_a_record_edit_undone_after_a_kill_gets_its_library_back(tiny_copy, tiny_variants):
    workload, records = tiny_variants
    before = _stale_state_after(tiny_copy, lambda: tiny_copy.set_record("tiny", workload, records[0]),
                                tiny_copy.record("tiny", workload).unlink)

    why = subprocess.run([sys.executable, "-m", "modelbuild", "why", "tiny"],
                         cwd=tiny_copy.root, capture_output=True, text=True)
    assert why.returncode == 0, why.stderr
    assert any(line.split()[:2] == ["run", "link:tiny"] for line in why.stdout.splitlines()), \
        why.stdout  # what the build then does

    run = tiny_copy.doit("build:tiny")
    assert "link:tiny" in run.ran
    assert sha256(tiny_copy.library("tiny")) == before


@pytest.mark.slow
def test_why_names_an_input_the_library_was_not_linked_from(tiny_copy, tiny_variants):
    """Objects back to A, library still B's, doit's state A's: only the stamp knows."""
    workload, records = tiny_variants
    before = _stale_state_after(tiny_copy, lambda: tiny_copy.set_record("tiny", workload, records[0]),
                                tiny_copy.record("tiny", workload).unlink)
    assert tiny_copy.doit(f"codegen:tiny/{workload}").returncode == 0  # not the link

    why = subprocess.run([sys.executable, "-m", "modelbuild", "why", "tiny"],
                         cwd=tiny_copy.root, capture_output=True, text=True)
    assert f"objects/{workload}.o is not the one the library was linked from" in why.stdout, \
        why.stdout + why.stderr
    assert "link:tiny" in tiny_copy.doit("build:tiny").ran
    assert sha256(tiny_copy.library("tiny")) == before


@pytest.mark.slow
def test_changed_weights_undone_after_a_kill_compute_the_model_again(tiny_copy):
    model_file = tiny_copy.root / "models" / "tiny.onnx"
    original = model_file.read_bytes()
    changed = onnx.load_from_string(original)
    first = changed.graph.initializer[0]
    first.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(first) * -2.0, first.name))

    before = _stale_state_after(tiny_copy, lambda: onnx.save(changed, str(model_file)),
                                lambda: model_file.write_bytes(original))
    tiny_copy.doit("build:tiny")
    assert sha256(tiny_copy.library("tiny")) == before
    x = model_inputs(tiny_copy.root, "tiny")
    assert_close(run_library(tiny_copy.library("tiny"), x), onnx_output(tiny_copy.root, "tiny", x))


def test_a_library_stamped_without_its_inputs_is_relinked(tiny_copy):
    """A stamp written before stamps recorded the inputs (or damaged): relinked once."""
    stamp = tiny_copy.library("tiny").with_name("tiny.so.stamp")
    data = json.loads(stamp.read_text())
    del data["linked_from"]
    stamp.write_text(json.dumps(data))
    assert "link:tiny" in tiny_copy.doit("build:tiny").ran
    assert "link:tiny" in tiny_copy.doit("build:tiny").uptodate


def test_a_no_op_build_reads_no_input_of_the_link_again(tiny_copy, monkeypatch):
    """The inputs' check is by signature (size, times, inode) like the library's: nothing is
    hashed when nothing changed."""
    from modelbuild.decision import link_check

    assert "link:tiny" in tiny_copy.doit("build:tiny").uptodate  # a copy: checked by content once
    library = tiny_copy.library("tiny").relative_to(tiny_copy.root)
    monkeypatch.chdir(tiny_copy.root)
    inputs = json.loads(Path(f"{library}.stamp").read_text())["linked_from"]
    assert len(inputs) > 3 and all(len(v) == 2 for v in inputs.values())
    hashed = []
    monkeypatch.setattr("modelbuild.core.filecheck.file_digest", hashed.append)
    assert link_check.problems(library, [Path(p) for p in inputs]) == []
    assert hashed == []
