"""A graph ConvertLayout converts into one TVM cannot fold or legalize (a reduction over the
channel axis that keeps it, as CBAM's spatial attention does) stays NCHW between its
convolutions, with a note, as one ConvertLayout cannot carry at all: a differential run
found it failing partition with an internal error in the default (blocked) layout."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_close, make_project, model_inputs, onnx_output, run_library
from onnx import TensorProto as TP
from onnx import helper as H
from onnx import numpy_helper

pytestmark = pytest.mark.slow  # builds of small models, onnxruntime's check: the full suite only


@pytest.mark.parametrize("op, axes", [("ReduceMean", [1]), ("ReduceMax", [1, 2, 3])])
def test_a_channel_reduction_after_a_conv_builds_blocked_and_matches(tmp_path, op, axes):
    rng = np.random.default_rng(0)
    weights = numpy_helper.from_array((rng.standard_normal((16, 8, 3, 3)) * 0.2).astype(np.float32), "w")
    graph = H.make_graph([H.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                          H.make_node(op, ["c"], ["y"], axes=axes, keepdims=1)], "g",
                         [H.make_tensor_value_info("x", TP.FLOAT, [1, 8, 6, 6])],
                         [H.make_tensor_value_info("y", TP.FLOAT, None)],
                         initializer=[weights])
    model = H.make_model(graph, opset_imports=[H.make_opsetid("", 13)], ir_version=8)
    project = make_project(tmp_path / "p", {"m": model})
    run = project.doit("build:m")  # the default layout: blocked on CPU targets
    assert "internal error" not in run.output, run.output
    assert "note: TVM cannot legalize this graph in NCHW" in run.stderr, run.output
    x = model_inputs(project.root, "m")
    assert_close(run_library(project.library("m"), x), onnx_output(project.root, "m", x))
    assert project.doit("build:m").ran == set()
