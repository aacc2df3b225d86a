"""Networks of matrix products, written with onnx.helper (never downloaded), random weights:

- ``encoder(layers, seq, hidden, heads)``: a BERT-style encoder on float embeddings
  ``x [1, seq, hidden]`` (no token lookup): per layer the Q, K, V projections (MatMul by
  a constant weight + Add bias), attention's batched products Q·Kᵀ and P·V around a
  scaled Softmax, the output projection, residual add + LayerNormalization, the FFN
  (hidden -> 4 x hidden, GELU written with Erf, -> hidden), residual add + LayerNorm;
- ``fully_connected(features, hidden, classes)``: alexnet's classifier at batch 1 (Gemm
  9216 -> 4096 -> 4096 -> 1000, transB=1, ReLU between): matrix-vector products.

``flops(model)`` counts 2 x the multiply-adds of their MatMul/Gemm nodes, as
bench/latency.py counts a model's (its shapes from ONNX's shape inference).

    import nets_transformer as nets
    onnx.save(nets.encoder(2, 128, 768, 12), "bert.onnx")
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17  # LayerNormalization is an ONNX operator from opset 17


def encoder(layers: int = 2, seq: int = 128, hidden: int = 768, heads: int = 12,
            seed: int = 0) -> onnx.ModelProto:
    """The encoder described above, input ``x [1, seq, hidden]`` float, output ``y`` alike."""
    if hidden % heads:
        raise ValueError(f"hidden {hidden} is not a multiple of heads {heads}")
    net = _Net(seed)
    x = "x"
    for layer in range(layers):
        x = _encoder_layer(net, f"l{layer}", x, seq, hidden, heads)
    net.nodes.append(helper.make_node("Identity", [x], ["y"], name="out"))
    graph = helper.make_graph(
        net.nodes, f"encoder{layers}x{seq}x{hidden}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, seq, hidden])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, seq, hidden])],
        initializer=net.inits)
    return _model(graph)


def fully_connected(features: int = 9216, hidden: int = 4096, classes: int = 1000,
                    seed: int = 0) -> onnx.ModelProto:
    """alexnet's classifier at batch 1: input ``x [1, features]``, output ``y [1, classes]``."""
    net = _Net(seed)
    x, width = "x", features
    for i, out in enumerate((hidden, hidden, classes)):
        w = net.init(f"fc{i}_w", (out, width), 1 / math.sqrt(width))
        b = net.init(f"fc{i}_b", (out,), 0.1)
        y = f"fc{i}" if i < 2 else "y"
        net.nodes.append(helper.make_node("Gemm", [x, w, b], [y], transB=1, name=f"fc{i}"))
        if i < 2:
            net.nodes.append(helper.make_node("Relu", [y], [f"relu{i}"], name=f"relu{i}"))
            y = f"relu{i}"
        x, width = y, out
    graph = helper.make_graph(
        net.nodes, f"fc{features}x{hidden}x{classes}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, features])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, classes])],
        initializer=net.inits)
    return _model(graph)


def flops(model: onnx.ModelProto) -> int:
    """2 x the multiply-adds of the model's MatMul and Gemm nodes."""
    inferred = onnx.shape_inference.infer_shapes(model)
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in [*inferred.graph.input, *inferred.graph.value_info,
                        *inferred.graph.output]}
    shapes.update({i.name: list(i.dims) for i in model.graph.initializer})
    total = 0
    for node in model.graph.node:
        if node.op_type in ("MatMul", "Gemm"):
            a, out = shapes[node.input[0]], shapes[node.output[0]]
            k = a[0] if node.op_type == "Gemm" and any(
                at.name == "transA" and at.i for at in node.attribute) else a[-1]
            total += 2 * int(np.prod(out)) * k
    return total


class _Net:
    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list = []
        self.inits: list = []

    def init(self, name: str, shape, scale: float, offset: float = 0.0) -> str:
        value = self.rng.standard_normal(shape) * scale + offset
        self.inits.append(numpy_helper.from_array(np.asarray(value, np.float32), name))
        return name

    def const(self, name: str, value, dtype=np.float32) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype), name))
        return name

    def op(self, op: str, inputs: list[str], out: str, **attrs) -> str:
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out


def _linear(net: _Net, name: str, x: str, width: int, out: int) -> str:
    """x @ W + b, W [width, out] a constant."""
    w = net.init(f"{name}_w", (width, out), 1 / math.sqrt(width))
    b = net.init(f"{name}_b", (out,), 0.1)
    return net.op("Add", [net.op("MatMul", [x, w], f"{name}_mm"), b], name)


def _layer_norm(net: _Net, name: str, x: str, hidden: int) -> str:
    scale = net.init(f"{name}_g", (hidden,), 0.1, 1.0)
    bias = net.init(f"{name}_b", (hidden,), 0.1)
    return net.op("LayerNormalization", [x, scale, bias], name, axis=-1, epsilon=1e-5)


def _encoder_layer(net: _Net, p: str, x: str, seq: int, hidden: int, heads: int) -> str:
    d = hidden // heads
    split = net.const(f"{p}_split", [1, seq, heads, d], np.int64)
    merged = net.const(f"{p}_merge", [1, seq, hidden], np.int64)

    def heads_of(t: str, perm) -> str:
        shaped = net.op("Reshape", [t, split], f"{t}_heads")
        return net.op("Transpose", [shaped], f"{t}_t", perm=perm)

    q = heads_of(_linear(net, f"{p}_q", x, hidden, hidden), [0, 2, 1, 3])  # [1, h, S, d]
    k = heads_of(_linear(net, f"{p}_k", x, hidden, hidden), [0, 2, 3, 1])  # [1, h, d, S]
    v = heads_of(_linear(net, f"{p}_v", x, hidden, hidden), [0, 2, 1, 3])  # [1, h, S, d]
    scores = net.op("MatMul", [q, k], f"{p}_qk")
    scaled = net.op("Mul", [scores, net.const(f"{p}_scale", 1 / math.sqrt(d))], f"{p}_scaled")
    probs = net.op("Softmax", [scaled], f"{p}_probs", axis=-1)
    context = net.op("MatMul", [probs, v], f"{p}_pv")  # [1, h, S, d]
    context = net.op("Transpose", [context], f"{p}_ctx_t", perm=[0, 2, 1, 3])
    context = net.op("Reshape", [context, merged], f"{p}_ctx")
    attended = _linear(net, f"{p}_o", context, hidden, hidden)
    x1 = _layer_norm(net, f"{p}_ln1", net.op("Add", [x, attended], f"{p}_res1"), hidden)
    h = _linear(net, f"{p}_ff1", x1, hidden, 4 * hidden)
    erf = net.op("Erf", [net.op("Div", [h, net.const(f"{p}_sqrt2", math.sqrt(2))],
                                f"{p}_gelu_div")], f"{p}_gelu_erf")
    one_plus = net.op("Add", [erf, net.const(f"{p}_one", 1.0)], f"{p}_gelu_add")
    gelu = net.op("Mul", [net.op("Mul", [h, one_plus], f"{p}_gelu_mul"),
                          net.const(f"{p}_half", 0.5)], f"{p}_gelu")
    ffn = _linear(net, f"{p}_ff2", gelu, 4 * hidden, hidden)
    return _layer_norm(net, f"{p}_ln2", net.op("Add", [x1, ffn], f"{p}_res2"), hidden)


def _model(graph) -> onnx.ModelProto:
    # IR version 8: what onnxruntime, the oracle, reads
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              ir_version=8)
    onnx.checker.check_model(model)
    return model
