"""A Resize that TVM would compute wrong is refused before import, not built.

ONNX maps a Resize's output coordinates to its input with the ``scales`` it is given
(x_in = x_out / scale, for every coordinate mode but align_corners); TVM's importer maps
them with the ratio of the sizes (out / in). The two agree only where input size x scale
is a whole number: 7 x 1.5 gives a 10-long output, and TVM's 10/7 is not 1.5, so the
library computes other numbers than onnxruntime (0.4-1.4 of the output's largest value,
found by a differential run), with exit 0. tvm.compile does the same. A wrong library is
worse than none: such a Resize stops the build, naming the node and what to change.
"""

from __future__ import annotations

import math

from ..core.errors import BuildError

_SMALL = 4096  # bytes: initializers kept for shape inference (shapes, axes, scales)


def refuse_inexact_scales(model, declared: dict, onnx_path) -> None:
    """BuildError for the first Resize of ``model`` whose scale does not give a whole
    output size (``declared``: [inputs] shapes, over the model's own)."""
    found = list(_resizes(model))
    if not found:
        return
    shapes = _shapes(model, declared)
    for node, kind, values, axes in found:
        dims = shapes.get(node.input[0])
        if not dims or any(d is None for d in dims):
            continue
        name = node.name or node.output[0]
        pairs = list(zip([a % len(dims) for a in axes] if axes else range(len(dims)), values))
        _refuse_non_spatial(name, kind, pairs, dims, onnx_path)
        if kind != "scales":
            continue
        for axis, scale in pairs:
            if not (math.isfinite(scale) and scale > 0):
                raise BuildError(f"Resize '{name}': its scale for axis {axis} is {scale:g}, not a "
                                 "positive number", file=onnx_path,
                                 hint="give the Resize positive scales, or `sizes`")
            size = dims[axis]
            exact = size * float(scale)
            out = math.floor(exact)
            if abs(exact - out) > 1e-6 * max(out, 1):
                raise BuildError(
                    f"Resize '{name}': axis {axis} of size {size} scaled by {float(scale):g} is "
                    f"{exact:g}, not a whole number: ONNX maps its output with the scale, TVM's "
                    f"importer with the sizes' ratio ({out}/{size}), so the library would "
                    "compute other numbers than onnxruntime", file=onnx_path,
                    hint="give the Resize `sizes` instead of `scales`, or a scale that makes "
                         "a whole size")


def _refuse_non_spatial(name: str, kind: str, pairs: list, dims: list, onnx_path) -> None:
    """TVM's importer resizes only the spatial axes (resize1d/2d/3d from axis 2 on): a
    Resize of the batch or the channels came out of the library unresized, with exit 0."""
    if len(dims) < 3:
        return
    for axis, value in pairs:
        if axis > 1:
            continue
        to = value if kind == "sizes" else dims[axis] * value
        if to != dims[axis]:
            what = "the channels" if axis == 1 else "the batch"
            raise BuildError(
                f"Resize '{name}': resizes axis {axis} ({what}) from {dims[axis]} to {to:g}: "
                "TVM's importer resizes only the spatial axes (2 and after), so the library "
                "would leave it as it is", file=onnx_path,
                hint="resize only the spatial axes (a scale of 1, or the input's own size, "
                     "for axes 0 and 1)")


def _opset(model) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def _resizes(model):
    """(node, kind, values, axes) of the Resize nodes with constant scales or sizes; kind:
    "sizes", "scales", or "ratios" (scales that align_corners or tf_crop_and_resize apply
    as TVM does, by the sizes' ratio)."""
    from onnx import helper, numpy_helper

    resizes = [n for n in model.graph.node if n.op_type == "Resize"]
    if not resizes:
        return
    constants = {i.name: i for i in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            constants[node.output[0]] = node.attribute[0].t
    index = 1 if _opset(model) < 11 else 2
    for node in resizes:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        mode = attrs.get("coordinate_transformation_mode", b"half_pixel")
        axes = [int(a) for a in attrs.get("axes") or []]
        if (node.input[index] if len(node.input) > index else "") in constants:
            scales = numpy_helper.to_array(constants[node.input[index]]).reshape(-1)
            if scales.size:
                # align_corners maps with the sizes' ratio, as TVM does: only the axes count
                exact = mode not in (b"align_corners", b"tf_crop_and_resize")
                yield node, "scales" if exact else "ratios", [float(s) for s in scales], axes
                continue
        if len(node.input) > index + 1 and node.input[index + 1] in constants:
            sizes = numpy_helper.to_array(constants[node.input[index + 1]]).reshape(-1)
            if sizes.size:
                yield node, "sizes", [int(s) for s in sizes], axes


def _shapes(model, declared: dict) -> dict:
    """Every value's static shape (None for an unknown dimension), by ONNX's shape
    inference on a copy of the graph without its large weights."""
    import onnx
    from onnx import shape_inference

    graph = onnx.GraphProto()
    graph.node.extend(model.graph.node)
    graph.input.extend(model.graph.input)
    graph.output.extend(model.graph.output)
    for tensor in model.graph.initializer:
        if tensor.ByteSize() <= _SMALL:
            graph.initializer.append(tensor)
        else:  # its shape, without its values
            graph.initializer.append(onnx.TensorProto(name=tensor.name, dims=tensor.dims,
                                                      data_type=tensor.data_type))
    for value in graph.input:
        if value.name in declared:
            dims = value.type.tensor_type.shape.dim
            del dims[:]
            for d in declared[value.name]:
                dims.add().dim_value = int(d)
    light = onnx.helper.make_model(graph, opset_imports=model.opset_import,
                                   ir_version=model.ir_version)
    try:
        inferred = shape_inference.infer_shapes(light, strict_mode=False, data_prop=True)
    except Exception:  # noqa: BLE001 - no inference, no check: TVM's import then decides
        return {}
    out = {}
    for value in (*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output):
        dims = value.type.tensor_type.shape.dim
        out[value.name] = [d.dim_value if d.HasField("dim_value") else None for d in dims]
    return out
