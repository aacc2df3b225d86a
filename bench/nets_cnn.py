"""Convolutional networks the project never declares, written with ``onnx.helper`` (nothing
downloaded), random weights, for the latency bench (issue 38):

- ``mobilenet_v2``: MobileNetV2 (width 1.0, a 224x224 RGB image): a 3x3 stride-2 stem, 17
  inverted residual blocks (1x1 expand conv + BatchNorm + ReLU6, 3x3 depthwise conv with
  ``group`` = channels + BatchNorm + ReLU6, 1x1 project conv + BatchNorm, the residual add
  where stride is 1 and the channels match), a 1x1 conv to 1280 channels, global average
  pooling and a 1000-class Gemm (logits). ReLU6 is ``Clip(x, 0, 6)`` with its bounds as
  initializers (opset 13), as exporters write it.

    python bench/nets_cnn.py mobilenet_v2 out.onnx   # write one to a file

``NETS`` maps each name to its builder (``builder(seed=0) -> onnx.ModelProto``).
"""

from __future__ import annotations

import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# (expansion t, output channels c, repeats n, first stride s): the MobileNetV2 paper's table 2
_INVERTED_RESIDUALS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                       (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))


class _Graph:
    """Nodes and random initializers as they are added; names numbered in order."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list = []
        self.inits: list = []
        self.count = 0

    def name(self, what: str) -> str:
        self.count += 1
        return f"{what}{self.count}"

    def init(self, what: str, value) -> str:
        name = self.name(what)
        self.inits.append(numpy_helper.from_array(np.asarray(value, np.float32), name))
        return name

    def node(self, op: str, inputs: list[str], **attrs) -> str:
        out = self.name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return out

    def conv(self, x: str, cin: int, cout: int, kernel: int, stride: int = 1,
             group: int = 1) -> str:
        """A convolution without bias (the BatchNorm after it has one), He-scaled weights."""
        fan_in = cin // group * kernel * kernel
        w = self.rng.standard_normal((cout, cin // group, kernel, kernel)) * np.sqrt(2.0 / fan_in)
        pad = kernel // 2
        return self.node("Conv", [x, self.init("w", w)], kernel_shape=[kernel, kernel],
                         strides=[stride, stride], pads=[pad] * 4, group=group)

    def batchnorm(self, x: str, channels: int) -> str:
        scale = self.rng.uniform(0.5, 1.5, channels)
        bias = self.rng.standard_normal(channels) * 0.1
        mean = self.rng.standard_normal(channels) * 0.1
        var = self.rng.uniform(0.5, 1.5, channels)
        return self.node("BatchNormalization",
                         [x, *(self.init(n, v) for n, v in (("scale", scale), ("bias", bias),
                                                            ("mean", mean), ("var", var)))],
                         epsilon=1e-5)

    def relu6(self, x: str) -> str:
        return self.node("Clip", [x, self.init("lo", 0.0), self.init("hi", 6.0)])

    def conv_bn(self, x: str, cin: int, cout: int, kernel: int, stride: int = 1,
                group: int = 1, relu6: bool = True) -> str:
        y = self.batchnorm(self.conv(x, cin, cout, kernel, stride, group), cout)
        return self.relu6(y) if relu6 else y


def mobilenet_v2(seed: int = 0, size: int = 224, classes: int = 1000) -> onnx.ModelProto:
    """MobileNetV2, width 1.0 (see the module's docstring), random weights from ``seed``."""
    g = _Graph(seed)
    x = g.conv_bn("input", 3, 32, 3, stride=2)
    channels = 32
    for t, c, n, s in _INVERTED_RESIDUALS:
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = channels * t
            y = x if t == 1 else g.conv_bn(x, channels, hidden, 1)
            y = g.conv_bn(y, hidden, hidden, 3, stride=stride, group=hidden)
            y = g.conv_bn(y, hidden, c, 1, relu6=False)
            x = g.node("Add", [x, y]) if stride == 1 and channels == c else y
            channels = c
    x = g.conv_bn(x, channels, 1280, 1)
    x = g.node("Flatten", [g.node("GlobalAveragePool", [x])])
    fc = g.rng.standard_normal((classes, 1280)) * np.sqrt(1.0 / 1280)
    logits = g.node("Gemm", [x, g.init("fc_w", fc), g.init("fc_b", np.zeros(classes))],
                    transB=1)
    graph = helper.make_graph(
        g.nodes, "mobilenet_v2",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info(logits, TensorProto.FLOAT, [1, classes])],
        initializer=g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    onnx.checker.check_model(model)
    return model


NETS = {"mobilenet_v2": mobilenet_v2}


def main(argv: list[str]) -> None:
    if len(argv) != 2 or argv[0] not in NETS:
        raise SystemExit(f"usage: python bench/nets_cnn.py {{{','.join(NETS)}}} OUT.onnx")
    onnx.save(NETS[argv[0]](), argv[1])


if __name__ == "__main__":
    main(sys.argv[1:])
