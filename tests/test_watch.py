"""Watch mode: a warm process rebuilds on each edit and survives broken ones."""

import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from conftest import assert_close, model_inputs, reference_output, run_library, sha256

from modelbuild.core import atomic
from modelbuild.schedules import records


pytestmark = pytest.mark.slow  # a watch process and its rebuilds: the full suite only


class Watcher:
    def __init__(self, project, model="tiny"):
        self.proc = subprocess.Popen([sys.executable, "-m", "modelbuild", "watch", model],
                                     cwd=project.root, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def stop(self) -> int:
        """Ctrl-C; its exit status, once everything it printed is in ``lines`` (the reader
        ends at the end of its output: without waiting for it, the last line was missing
        when the reader had not been scheduled yet)."""
        self.proc.send_signal(signal.SIGINT)
        code = self.proc.wait(timeout=60)
        self.reader.join(timeout=60)
        return code

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, text: str, after: int = 0, timeout: float = 120) -> int:
        deadline = time.time() + timeout
        while time.time() < deadline:
            for i, line in enumerate(self.lines[after:], after):
                if text in line:
                    return i
            assert self.proc.poll() is None, "\n".join(self.lines)
            time.sleep(0.1)
        raise AssertionError(f"no line with {text!r}:\n" + "\n".join(self.lines))


def test_watch_rebuilds_on_edit_and_keeps_watching_after_a_broken_one(tiny_copy, tiny_variants):
    workload, variants = tiny_variants
    w = Watcher(tiny_copy)
    try:
        first = w.wait_for("watching ...")
        records.save(tiny_copy.record("tiny", workload), variants[0])
        rebuilt = w.wait_for("rebuilt tiny", after=first + 1)
        ran = set(w.lines[first + 1:rebuilt])
        assert {f".  lower:tiny/{workload}", f".  codegen:tiny/{workload}", ".  link:tiny"} <= ran
        x = model_inputs(tiny_copy.root, "tiny")
        assert_close(run_library(tiny_copy.library("tiny"), x), reference_output(tiny_copy, "tiny", x))
        good = sha256(tiny_copy.library("tiny"))

        ready = w.wait_for("watching ...", after=rebuilt)
        atomic.write_text(tiny_copy.record("tiny", workload), "{ not json")
        failed = w.wait_for("build failed", after=ready + 1)
        assert any("invalid JSON" in line for line in w.lines[ready:failed])
        w.wait_for("watching ...", after=failed)
        assert w.proc.poll() is None and sha256(tiny_copy.library("tiny")) == good
    finally:
        code = w.stop()
    assert code == 0 and "watch: stopped" in w.lines[-1]
    # The watch used doit's own state: with the good record back, a plain doit run agrees
    # that what watch built is current (the broken build changed nothing).
    records.save(tiny_copy.record("tiny", workload), variants[0])
    run = tiny_copy.doit("build:tiny")
    assert run.ran == set(), run


def test_watch_reads_an_edited_declaration_and_a_model_file_outside_models(tmp_path):
    import onnx
    from conftest import make_project, onnx_file_output
    from onnx_models import tiny_model

    from modelbuild.core import manifest

    def dyn(seed):  # batch left symbolic: the declaration's [inputs] decides it
        model = tiny_model(seed=seed)
        model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
        model.graph.output[0].type.tensor_type.shape.dim[0].dim_param = "N"
        return model

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    onnx.save(dyn(1), str(elsewhere / "dyn.onnx"))
    declaration = 'onnx = "{path}"\n[inputs]\nx = [{batch}, 3, 16, 16]\n'
    project = make_project(tmp_path / "p", {})
    toml = project.root / "models" / "dyn.toml"
    toml.write_text(declaration.format(path=elsewhere / "dyn.onnx", batch=1))
    w = Watcher(project, "dyn")
    man = project.root / "build" / "dyn" / "partition" / "manifest.msgpack"
    try:
        first = w.wait_for("watching ...")
        assert manifest.read(man).inputs[0][1] == (1, 3, 16, 16)
        atomic.write_text(toml, declaration.format(path=elsewhere / "dyn.onnx", batch=2))
        second = w.wait_for("watching ...", after=first + 1)
        assert ".  partition:dyn" in w.lines[first + 1:second]
        assert manifest.read(man).inputs[0][1] == (2, 3, 16, 16)
        x = model_inputs(project.root, "dyn")
        assert_close(run_library(project.library("dyn"), x), onnx_file_output(elsewhere / "dyn.onnx", x))
        onnx.save(dyn(2), str(tmp_path / "dyn.onnx"))  # new weights, outside models/,
        os.replace(tmp_path / "dyn.onnx", elsewhere / "dyn.onnx")  # whole
        third = w.wait_for("watching ...", after=second + 1)
        assert ".  partition:dyn" in w.lines[second + 1:third]
        assert_close(run_library(project.library("dyn"), x), onnx_file_output(elsewhere / "dyn.onnx", x))
    finally:
        w.stop()


def test_watch_rebuilds_on_an_edit_of_a_helper_outside_the_models_schedules(tiny_copy):
    """Only schedules/<model>/ was watched: an edit of schedules/name.py (or a module beside
    dodo.py) that a Python schedule imports waited for the next unrelated edit."""
    from conftest import tiny_conv_workload

    workload = tiny_conv_workload(tiny_copy)
    helper = tiny_copy.root / "schedules" / "tiling_factor.py"
    helper.parent.mkdir(parents=True, exist_ok=True)
    helper.write_text("FACTOR = 8\n")
    schedule = tiny_copy.root / "schedules" / "tiny" / f"{workload}.py"
    schedule.parent.mkdir(parents=True, exist_ok=True)
    schedule.write_text(
        "from tiling_factor import FACTOR\n\n\ndef schedule(sch):\n"
        "    block = sch.get_sblock('conv2d_NCHWc')\n"
        "    n, f, y, x, fb, rc, ry, rx = sch.get_loops(block)\n"
        "    outer, inner = sch.split(x, factors=[None, FACTOR])\n"
        "    sch.reorder(n, f, y, rc, ry, rx, outer, inner, fb)\n")
    w = Watcher(tiny_copy)
    try:
        first = w.wait_for("watching ...")
        atomic.write_text(helper, "FACTOR = 4\n")  # whole: an emptied helper fails a build
        second = w.wait_for("watching ...", after=first + 1, timeout=60)
        assert f".  lower:tiny/{workload}" in w.lines[first + 1:second], w.lines
    finally:
        w.stop()
