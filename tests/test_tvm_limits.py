"""A model TVM imports but cannot compile is the model's clear error when tvm.compile fails
on it as well, and stays an internal error (a bug to report) when it does not."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import make_project, patched_env
from onnx import TensorProto as TP
from onnx import helper as H
from onnx import numpy_helper

pytestmark = pytest.mark.slow  # builds TVM cannot compile: the full suite only


def _range_from_a_shape():  # y = x + range(0, x.shape[1]): TVM's VM cannot emit the add
    nodes = [H.make_node("Shape", ["x"], ["sh"]),
             H.make_node("Gather", ["sh", "one"], ["lim"], axis=0),
             H.make_node("Range", ["zero", "lim", "one"], ["r"]),
             H.make_node("Cast", ["r"], ["rf"], to=TP.FLOAT),
             H.make_node("Add", ["x", "rf"], ["y"])]
    graph = H.make_graph(nodes, "g", [H.make_tensor_value_info("x", TP.FLOAT, [2, 7])],
                         [H.make_tensor_value_info("y", TP.FLOAT, [2, 7])],
                         initializer=[numpy_helper.from_array(np.array(0, np.int64), "zero"),
                                      numpy_helper.from_array(np.array(1, np.int64), "one")])
    return H.make_model(graph, opset_imports=[H.make_opsetid("", 13)], ir_version=8)


def test_what_tvm_compile_cannot_build_either_is_the_model_s_error(tmp_path):
    project = make_project(tmp_path / "p", {"m": _range_from_a_shape()})
    run = project.doit("build:m", check=False)
    assert run.returncode != 0 and "Traceback" not in run.output
    assert "internal error" not in run.output, run.output
    assert "error: models/m.onnx: TVM cannot compile this model: InternalError: CodeGenVM" \
        in run.output, run.output
    assert "tvm.compile fails on it as well" in run.output


def test_a_failure_tvm_compile_does_not_share_stays_an_internal_error(tiny_project, tmp_path):
    env = patched_env(tmp_path / "site",
                      "from modelbuild.steps import partition\n"
                      "def fuse_stages(mod, target, block=None):\n"
                      "    raise RuntimeError('a bug of ours')\n"
                      "partition.fuse_stages = fuse_stages\n")
    run = tiny_project.doit("build:tiny", check=False, env=env)
    assert run.returncode != 0 and "Traceback" not in run.output
    assert "internal error in partition:tiny" in run.output and "a bug of ours" in run.output
    assert "TVM cannot compile" not in run.output
