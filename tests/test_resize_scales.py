"""A Resize by a scale that does not give a whole output size is refused: TVM's importer
maps its output with the sizes' ratio where ONNX uses the scale, and the library computed
other numbers than onnxruntime with exit 0 (found by a differential run). What the
message suggests builds and matches."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_close, make_project, model_inputs, onnx_output, run_library
from onnx import TensorProto as TP
from onnx import helper as H
from onnx import numpy_helper

pytestmark = pytest.mark.slow  # builds of small models, onnxruntime's check: the full suite only


def _resize(scale=None, sizes=None, mode="linear", transform="asymmetric"):
    inputs = ["x", "", "scales"] if scale is not None else ["x", "", "", "sizes"]
    weights = ([numpy_helper.from_array(np.array([1, 1, scale, scale], np.float32), "scales")]
               if scale is not None else [numpy_helper.from_array(np.array(sizes, np.int64), "sizes")])
    graph = H.make_graph([H.make_node("Resize", inputs, ["y"], name="up", mode=mode,
                                      coordinate_transformation_mode=transform)], "g",
                         [H.make_tensor_value_info("x", TP.FLOAT, [1, 2, 7, 7])],
                         [H.make_tensor_value_info("y", TP.FLOAT, None)], initializer=weights)
    return H.make_model(graph, opset_imports=[H.make_opsetid("", 13)], ir_version=8)


@pytest.mark.parametrize("mode, transform", [("linear", "asymmetric"), ("nearest", "asymmetric"),
                                             ("linear", "half_pixel")])
def test_an_inexact_scale_is_refused_naming_the_node(tmp_path, mode, transform):
    project = make_project(tmp_path / "p", {"m": _resize(1.5, mode=mode, transform=transform)})
    run = project.doit("build:m", check=False)
    assert run.returncode != 0 and "internal error" not in run.output
    assert "Resize 'up': axis 2 of size 7 scaled by 1.5 is 10.5, not a whole number" in run.output
    assert "give the Resize `sizes` instead of `scales`" in run.output
    assert not project.library("m").exists()


@pytest.mark.parametrize("model", [_resize(2.0), _resize(sizes=[1, 2, 10, 10]),
                                   _resize(1.5, transform="align_corners")],
                         ids=["whole-scale", "sizes", "align-corners"])
def test_what_the_message_suggests_builds_and_matches(tmp_path, model):
    project = make_project(tmp_path / "p", {"m": model})
    assert project.doit("build:m").returncode == 0
    x = model_inputs(project.root, "m")
    assert_close(run_library(project.library("m"), x), onnx_output(project.root, "m", x))


@pytest.mark.parametrize("scale", [float("nan"), float("inf"), -1.5, 0.0])
def test_a_scale_that_is_no_positive_number_is_refused_in_one_line(tmp_path, scale):
    project = make_project(tmp_path / "p", {"m": _resize(scale)})
    run = project.doit("build:m", check=False)
    assert run.returncode != 0 and "internal error" not in run.output, run.output
    assert "Resize 'up': its scale for axis 2 is" in run.output and "not a positive number" \
        in run.output


@pytest.mark.parametrize("model", [_resize(sizes=[1, 4, 7, 7]),
                                   H.make_model(H.make_graph(
                                       [H.make_node("Resize", ["x", "", "scales"], ["y"],
                                                    name="up", mode="nearest")], "g",
                                       [H.make_tensor_value_info("x", TP.FLOAT, [1, 2, 7, 7])],
                                       [H.make_tensor_value_info("y", TP.FLOAT, None)],
                                       initializer=[numpy_helper.from_array(
                                           np.array([1, 2, 1, 1], np.float32), "scales")]),
                                       opset_imports=[H.make_opsetid("", 13)], ir_version=8)],
                         ids=["sizes", "scales"])
def test_a_resize_of_the_channels_is_refused(tmp_path, model):
    """TVM's importer resizes the spatial axes only: a Resize of 2 channels to 4 built a
    library that returned the 2 channels unresized, exit 0 (a differential run found it)."""
    project = make_project(tmp_path / "p", {"m": model})
    run = project.doit("build:m", check=False)
    assert run.returncode == 1 and "internal error" not in run.output, run.output
    assert "Resize 'up': resizes axis 1 (the channels) from 2 to 4: TVM's importer resizes " \
        "only the spatial axes" in run.output, run.output
    assert not project.library("m").exists()
