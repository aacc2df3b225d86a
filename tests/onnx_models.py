"""Small real ONNX models for tests, with random weights so a wrong kernel cannot hide."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def _init(name, array):
    return numpy_helper.from_array(np.asarray(array, dtype=np.float32), name)


def tiny_model(seed: int = 0, channels: int = 8) -> onnx.ModelProto:
    """conv+relu -> conv+add(skip)+relu -> global average pool -> gemm: a handful of workloads."""
    rng = np.random.default_rng(seed)
    c = channels
    inits = [
        _init("w1", rng.standard_normal((c, 3, 3, 3)) * 0.3), _init("b1", rng.standard_normal(c) * 0.1),
        _init("w2", rng.standard_normal((c, c, 3, 3)) * 0.2), _init("b2", rng.standard_normal(c) * 0.1),
        _init("wf", rng.standard_normal((10, c)) * 0.3), _init("bf", rng.standard_normal(10) * 0.1),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
        helper.make_node("Add", ["c2", "r1"], ["a2"], name="add2"),
        helper.make_node("Relu", ["a2"], ["r2"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["r2"], ["p"], name="pool"),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "wf", "bf"], ["y"], transB=1, name="fc"),
    ]
    graph = helper.make_graph(
        nodes, "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        initializer=inits)
    # IR version 8 (opset 13 needs at least 7): what onnxruntime, the oracle, reads.
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    onnx.checker.check_model(model)
    return model


def randomized_light(name: str, seed: int = 0, logits: bool = True) -> onnx.ModelProto:
    """A shipped light zoo model with its ConstantOfShape weight fills made random initializers.

    Convolution weights get He-scaled normals; 1-D parameters (batch-norm scale,
    bias, mean, variance) get values near their usual ranges, so activations stay finite.
    With ``logits``, a final Softmax is dropped: with random weights most of its 1000
    probabilities are too small for a tolerance relative to the largest to check them,
    while the logits before it all are.
    """
    model = onnx.load(str(LIGHT / f"light_{name}.onnx"))
    g = model.graph
    rng = np.random.default_rng(seed)
    consts = {i.name: numpy_helper.to_array(i) for i in g.initializer}
    keep, new_inits = [], []
    for node in g.node:
        if node.op_type == "ConstantOfShape" and node.input[0] in consts:
            shape = [int(d) for d in consts[node.input[0]]]
            out = node.output[0]
            if len(shape) >= 2:
                fan_in = int(np.prod(shape[1:]))
                value = rng.standard_normal(shape) * np.sqrt(1.0 / fan_in)
            elif out.endswith(("_riv_0", "_s_0")) or "var" in out:
                value = rng.uniform(0.5, 1.5, shape)
            else:
                value = rng.standard_normal(shape) * 0.1
            new_inits.append(_init(out, value))
            # Old-style models list every initializer as a graph input too.
            g.input.append(helper.make_tensor_value_info(out, TensorProto.FLOAT, shape))
        else:
            keep.append(node)
    if logits and keep and keep[-1].op_type == "Softmax" and keep[-1].output[0] == g.output[0].name:
        g.output[0].name = keep.pop().input[0]
    del g.node[:]
    g.node.extend(keep)
    g.initializer.extend(new_inits)
    used = {name for node in keep for name in node.input}  # the fills' shapes are unused now
    unused = {i.name for i in g.initializer if i.name not in used}
    kept_inits = [i for i in g.initializer if i.name not in unused]
    kept_inputs = [v for v in g.input if v.name not in unused]
    del g.initializer[:], g.input[:]
    g.initializer.extend(kept_inits)
    g.input.extend(kept_inputs)
    return model


def provenance_model() -> onnx.ModelProto:
    """Operators fusion merges, splits and folds away: generated weights (ConstantOfShape),
    a static Shape, an Identity, a two-output Split, a Reshape of a constant."""
    rng = np.random.default_rng(0)

    def ints(name, values):
        return numpy_helper.from_array(np.asarray(values, dtype=np.int64), name)

    fill = helper.make_tensor("fill", TensorProto.FLOAT, [1], [0.1])
    nodes = [
        helper.make_node("ConstantOfShape", ["w_shape"], ["w"], value=fill, name="weights"),
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("Shape", ["c"], ["s"], name="shape"),
        helper.make_node("Identity", ["c"], ["i"], name="identity"),
        helper.make_node("Relu", ["i"], ["r"], name="relu"),
        helper.make_node("Split", ["r", "split"], ["a", "b"], axis=1, name="split"),
        helper.make_node("Mul", ["a", "b"], ["m"], name="mul"),
        helper.make_node("Slice", ["m", "zero", "one", "one"], ["m1"], name="slice"),
        helper.make_node("Reshape", ["m1", "flat"], ["f"], name="flatten"),
        helper.make_node("Reshape", ["bias", "flat"], ["bias_flat"], name="bias_reshape"),
        helper.make_node("Add", ["f", "bias_flat"], ["y"], name="add"),
    ]
    inits = [ints("w_shape", [3, 3, 3, 3]), ints("split", [1, 2]), ints("zero", [0]),
             ints("one", [1]), ints("flat", [1, 64]), _init("bias", rng.standard_normal((2, 32)))]
    graph = helper.make_graph(
        nodes, "provenance",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64]),
         helper.make_tensor_value_info("s", TensorProto.INT64, [4])],
        initializer=inits)
    # IR version 8 (opset 13 needs at least 7): what onnxruntime, the oracle, reads.
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    onnx.checker.check_model(model, full_check=True)
    return model


def repeated_conv_model(seed: int = 0, once_kernel: int = 1) -> onnx.ModelProto:
    """Three identical 16->16 3x3 convolutions in a row (one workload the graph calls three
    times), then one 16->6 convolution (called once; 6 channels are not a multiple of the
    CPU default schedule's vector, so it keeps TVM's serial default): tuning weights and
    keep-if-faster have something to tell apart.

    ``once_kernel`` 1 (a 1x1) gives the one called once a 24th of the repeated one's
    arithmetic, so the gradient task scheduler (weight x latency) places the rounds after
    the first on the repeated one whatever candidates the search draws (with a 3x3 a draw
    could tie them). 3 gives it enough work that threads and vectors beat serial loops."""
    rng = np.random.default_rng(seed)
    inits = [_init(f"w{i}", rng.standard_normal((16, 16, 3, 3)) * 0.1) for i in range(3)]
    inits.append(_init("w3", rng.standard_normal((6, 16, once_kernel, once_kernel)) * 0.1))
    nodes, last = [], "x"
    for i in range(3):
        nodes.append(helper.make_node("Conv", [last, f"w{i}"], [f"c{i}"], pads=[1, 1, 1, 1],
                                      name=f"conv{i}"))
        nodes.append(helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"relu{i}"))
        last = f"r{i}"
    pad = once_kernel // 2
    nodes.append(helper.make_node("Conv", [last, "w3"], ["y"], pads=[pad] * 4, name="conv3"))
    graph = helper.make_graph(
        nodes, "repeated",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, 32, 32])],
        initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    onnx.checker.check_model(model)
    return model


def node_test(module: str, name: str):
    """ONNX's node test ``name`` (``test_slice_default_steps``: one operator, its inputs and
    expected outputs), made by the onnx package's case module ``module`` (``slice``) of
    ``onnx/backend/test/case/node``, as ONNX makes its test data: (model, inputs, outputs).
    Only that module is imported (collect_testcases imports all 200, 15 s); its cases
    land in the package's list."""
    import importlib

    from onnx.backend.test.case import node

    importlib.import_module(f"onnx.backend.test.case.node.{module}")
    case = next(c for c in node._NodeTestCases if c.name == name)
    inputs, outputs = case.data_sets[0]
    return case.model, list(inputs), list(outputs)
