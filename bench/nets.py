"""The breadth suite of bench/latency.py: models the project does not declare, as a new
user brings them, each an ONNX ModelProto with random weights (nothing is downloaded).

- the onnx package's light zoo architectures the project does not declare (shufflenet,
  inception_v2, vgg19, alexnet, zfnet512), their ConstantOfShape weight fills made random
  initializers (tests/onnx_models.randomized_light, the tests' own), the final Softmax
  dropped: the outputs compared with onnxruntime are logits;
- networks written with onnx.helper here: a BERT-style encoder (nets_transformer.py) and
  a MobileNetV2-style network (nets_cnn.py), where those modules are present.

``BREADTH`` maps a name to a function making the model; ``make(name)`` calls it.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ZOO = {"shufflenet": "shufflenet", "inception_v2": "inception_v2", "vgg19": "vgg19",
       "alexnet": "bvlc_alexnet", "zfnet512": "zfnet512"}


def _zoo(light: str):
    def make():
        sys.path.insert(0, str(REPO / "tests"))
        from onnx_models import randomized_light

        return randomized_light(light)
    return make


def _written(module: str, function: str, **kwargs):
    """A network a module of bench/ writes (None when the module is not there)."""
    def make():
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        return getattr(importlib.import_module(module), function)(**kwargs)
    return make


BREADTH = {name: _zoo(light) for name, light in ZOO.items()}
WRITTEN = {}  # name -> (module, function, keyword arguments); filled below where present


def _register(name: str, module: str, function: str, **kwargs) -> None:
    if (Path(__file__).resolve().parent / f"{module}.py").is_file():
        WRITTEN[name] = (module, function, kwargs)
        BREADTH[name] = _written(module, function, **kwargs)


def make(name: str):
    return BREADTH[name]()


_register("mobilenet_v2", "nets_cnn", "mobilenet_v2")
_register("bert_s128_h768", "nets_transformer", "encoder", layers=2, seq=128, hidden=768,
          heads=12)
_register("bert_s32_h256", "nets_transformer", "encoder", layers=2, seq=32, hidden=256,
          heads=4)
_register("fc_batch1", "nets_transformer", "fully_connected")
