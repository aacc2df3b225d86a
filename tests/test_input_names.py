"""Inputs whose names are not C identifiers are renamed, never onto another value's name,
and every use follows them (a differential run found "x:0" -> "x_0" joined with a node
output "x_0": a library that computed something else, with exit 0)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import (assert_close, load_library, make_project, model_inputs, onnx_output,
                      run_library)
from onnx import TensorProto as TP
from onnx import helper as H
from onnx import numpy_helper


def _vi(name, shape, kind=TP.FLOAT):
    return H.make_tensor_value_info(name, kind, shape)


def _model(nodes, inputs, outputs, weights=()):
    graph = H.make_graph(nodes, "g", inputs, outputs, initializer=list(weights))
    return H.make_model(graph, opset_imports=[H.make_opsetid("", 13)], ir_version=8)


def _output_taken():  # y = Relu(x:0) - x:0, where Relu's output is named x_0
    return _model([H.make_node("Relu", ["x:0"], ["x_0"]), H.make_node("Sub", ["x_0", "x:0"], ["y"])],
                  [_vi("x:0", [2, 3])], [_vi("y", [2, 3])])


def _weight_taken():  # y = x:0 - x_0, x_0 a weight
    weight = numpy_helper.from_array(np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3), "x_0")
    return _model([H.make_node("Sub", ["x:0", "x_0"], ["y"])], [_vi("x:0", [2, 3])],
                  [_vi("y", [2, 3])], [weight])


def _two_inputs_one_name():  # y = a/b - a:b
    return _model([H.make_node("Sub", ["a/b", "a:b"], ["y"])],
                  [_vi("a/b", [2, 3]), _vi("a:b", [2, 3])], [_vi("y", [2, 3])])


def _read_in_a_branch():  # y = If(c, -x:0, |x:0|), x:0 read inside the branches
    then = H.make_graph([H.make_node("Neg", ["x:0"], ["t"])], "then", [], [_vi("t", [2, 3])])
    other = H.make_graph([H.make_node("Abs", ["x:0"], ["e"])], "else", [], [_vi("e", [2, 3])])
    return _model([H.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)],
                  [_vi("x:0", [2, 3]), _vi("c", [], TP.BOOL)], [_vi("y", [2, 3])])


def _passed_through():  # outputs: x:0 * 2, and x:0 itself
    two = numpy_helper.from_array(np.full((2, 3), 2, np.float32), "two")
    return _model([H.make_node("Mul", ["x:0", "two"], ["y"])], [_vi("x:0", [2, 3])],
                  [_vi("y", [2, 3]), _vi("x:0", [2, 3])], [two])


@pytest.mark.parametrize("make", [_output_taken] + [
    pytest.param(make, marks=pytest.mark.slow)
    for make in (_weight_taken, _two_inputs_one_name, _read_in_a_branch, _passed_through)])
def test_renamed_inputs_keep_the_model_onnxruntime_computes(tmp_path, make):
    project = make_project(tmp_path / "p", {"m": make()})
    assert project.doit("build:m", "layout=NCHW").returncode == 0
    x = model_inputs(project.root, "m")
    if make is _read_in_a_branch:
        x[1] = np.array(False)
    graph = make().graph
    weights = {i.name for i in graph.initializer}
    assert len(x) == len([v for v in graph.input if v.name not in weights])  # none joined
    if make is _passed_through:  # two outputs: both, against onnxruntime's
        _assert_both_outputs(project, x)
    else:
        assert_close(run_library(project.library("m"), x), onnx_output(project.root, "m", x))


def _assert_both_outputs(project, x):
    import onnxruntime
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(load_library(project.library("m")), tvm.cpu())
    ours = [o.numpy() for o in vm["main"](tvm.runtime.tensor(x[0]))]
    session = onnxruntime.InferenceSession(str(project.root / "models" / "m.onnx"),
                                           providers=["CPUExecutionProvider"])
    theirs = session.run(None, {"x:0": x[0]})
    assert len(ours) == len(theirs) == 2
    for a, b in zip(ours, theirs):
        assert_close(a, b)
