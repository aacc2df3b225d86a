"""Depthwise and grouped convolutions in the channel-blocked layout (see blocked_layout.py),
as onnxruntime's MLAS and TVM's old ``topi/x86`` compute them:

- a depthwise convolution (``group`` = input channels = output channels) in ``NCHW{b}c``
  with weights ``OIHW1i{b}o`` (shape ``[C/b, 1, kh, kw, 1, b]``): the channel block is the
  vector, each channel reads only its own lane, b = the model's block or its greatest
  common divisor with the channels (24 channels: 8);
- a grouped convolution whose groups' channels divide into blocks (AlexNet's 2 groups of
  48 and 192 input channels): ``NCHW{i}c`` in, ``OIHW{i}i{o}o`` weights (the
  grouped ``[O, I/groups, kh, kw]`` blocked per group), ``NCHW{o}c`` out, i and o each
  tensor's own block (the model's, or its greatest common divisor with the channels) where
  they divide the group's input and output channels, so each block lies in one group; the
  compute is
  the dense ``conv2d_NCHWc``'s with the input's block offset by the output block's group,
  and its reduction block has the dense one's name, so the CPU default schedule's blocked
  rule (targets/cpu_schedule_blocked.py) takes it as it is.

- a grouped convolution whose groups' channels do not divide into the blocks (ShuffleNet's
  4 groups of 34, 68 or 136 channels in blocks of 8 or 16): ``NCHW{i}c`` in,
  ``OIHW{I}i{o}o`` weights (I: a group's input channels), ``NCHW{o}c`` out, each output
  block holding the channels of at most two groups, each lane summing its own group's
  input channels only (``straddling``).

The blocks are those of the tensors' groups (channel_blocks.py), so that a concat joins
tensors of one block. Any other grouped convolution (a depthwise one with a channel
multiplier, an output block of more than two groups) keeps the layouts ConvertLayout gives
it, and blocked_layout's NCHW fallback.
"""

from __future__ import annotations

import math

MIN_BLOCK = 4  # floats: a smaller block is not worth a layout of its own


def layouts(call, block: int, group=(None, None)) -> list[str] | None:
    """ConvertLayout's [data, weights, output] layouts for the NCHW grouped convolution
    ``call``, or None where this module does not compute it blocked; ``group``: the
    channels of its input's and its output's groups (channel_blocks.py) where known."""
    attrs = call.attrs
    groups = int(attrs.groups)
    if not (groups > 1 and str(attrs.data_layout) == str(attrs.out_layout) == "NCHW"
            and str(attrs.kernel_layout) == "OIHW"):
        return None
    try:
        out, group_in = [int(d) for d in call.args[1].ty.shape][:2]
        channels = int(call.args[0].ty.shape[1])
    except (TypeError, ValueError, AttributeError):
        return None  # a symbolic size
    in_group, out_group = group[0] or channels, group[1] or out
    if group_in == 1 and out == channels == groups:  # depthwise
        b = math.gcd(math.gcd(in_group, out_group), block)
        return [f"NCHW{b}c", f"OIHW1i{b}o", f"NCHW{b}c"] if b >= MIN_BLOCK else None
    # each tensor's own block, as the convolutions and operators around it have it (a
    # change of block between them is a transform ConvertLayout cannot always make:
    # "Invalid layout axis 4b" for 24 channels in blocks of 8 into groups of 12 in 4)
    inner, outer = math.gcd(in_group, block), math.gcd(out_group, block)
    if inner < MIN_BLOCK or outer < MIN_BLOCK:
        return None
    if group_in % inner == 0 and (out // groups) % outer == 0:
        return [f"NCHW{inner}c", f"OIHW{inner}i{outer}o", f"NCHW{outer}c"]
    if out // groups < outer:  # an output block would span more than two groups
        return None
    return [f"NCHW{inner}c", f"OIHW{group_in}i{outer}o", f"NCHW{outer}c"]  # see straddling


def is_depthwise(attrs, kernel_shape) -> bool:
    """A blocked depthwise conv as ``layouts`` asks for it: NCHW{b}c, OIHW1i{b}o, NCHW{b}c,
    one group per channel."""
    b = _block(attrs.data_layout)
    return (b is not None and str(attrs.out_layout) == f"NCHW{b}c"
            and str(attrs.kernel_layout) == f"OIHW1i{b}o"
            and int(attrs.groups) == int(kernel_shape[0]) * b)


def is_grouped(attrs, kernel_shape) -> bool:
    """A blocked grouped conv as ``layouts`` asks for it: each input and output block in one
    group (the weights' blocked input channels are one group's)."""
    inner, outer = _block(attrs.data_layout), _block(attrs.out_layout)
    if inner is None or outer is None or str(attrs.kernel_layout) != f"OIHW{inner}i{outer}o":
        return False
    groups = int(attrs.groups)
    out_channels = int(kernel_shape[0]) * outer
    return groups > 1 and out_channels % groups == 0 and (out_channels // groups) % outer == 0


def is_straddling(attrs, kernel_shape) -> bool:
    """A blocked grouped conv whose blocks straddle groups, as ``layouts`` asks for it:
    ``OIHW{I}i{o}o`` weights (each output block's weights over its group's I input
    channels, ``[O/o, 1, kh, kw, I, o]``), output blocks of at most two groups."""
    inner, outer = _block(attrs.data_layout), _block(attrs.out_layout)
    if inner is None or outer is None or len(kernel_shape) != 6:
        return False
    groups, group_in = int(attrs.groups), int(kernel_shape[4])
    out_channels = int(kernel_shape[0]) * outer
    return (groups > 1 and str(attrs.kernel_layout) == f"OIHW{group_in}i{outer}o"
            and int(kernel_shape[1]) == 1 and int(kernel_shape[5]) == outer
            and out_channels % groups == 0 and out_channels // groups >= outer
            and not is_grouped(attrs, kernel_shape))


def _block(layout) -> int | None:
    text = str(layout)
    if text.startswith("NCHW") and text.endswith("c") and text[4:-1].isdigit():
        return int(text[4:-1])
    return None


def _padded(data, attrs):
    from tvm import topi

    top, left, bottom, right = (int(p) for p in attrs.padding)
    if not any((top, left, bottom, right)):
        return data
    return topi.nn.pad(data, [0, 0, top, left, 0], [0, 0, bottom, right, 0], name="data_pad")


def _out_size(size, kernel, pad, stride, dilation):
    return (size + pad - (kernel - 1) * dilation - 1) // stride + 1


class _Window:
    """A convolution's window over the blocked input ``data`` (``[n, c, h, w, b]``): the
    padded input, the output's height and width, the window's reduction axes, and the input
    row and column that output position (y, x) reads at the window's offset."""

    def __init__(self, data, kh: int, kw: int, attrs):
        from tvm import te

        height, width = int(data.shape[2]), int(data.shape[3])
        (self.sh, self.sw), (self.dh, self.dw) = (
            [int(v) for v in a] for a in (attrs.strides, attrs.dilation))
        top, left, bottom, right = (int(p) for p in attrs.padding)
        self.oh = _out_size(height, kh, top + bottom, self.sh, self.dh)
        self.ow = _out_size(width, kw, left + right, self.sw, self.dw)
        self.padded = _padded(data, attrs)
        self.ry, self.rx = te.reduce_axis((0, kh), "ry"), te.reduce_axis((0, kw), "rx")

    def row(self, y):
        return y * self.sh + self.ry * self.dh

    def col(self, x):
        return x * self.sw + self.rx * self.dw


def depthwise(data, kernel, attrs, out_dtype: str):
    """``out[n, c, y, x, k] = sum(pad(data)[n, c, y*sh + ry*dh, x*sw + rx*dw, k] *
    kernel[c, 0, ry, rx, 0, k])``: each lane of the channel block on its own."""
    from tvm import te

    n, chunks, _, _, b = (int(d) for d in data.shape)
    w = _Window(data, int(kernel.shape[2]), int(kernel.shape[3]), attrs)
    return te.compute(
        (n, chunks, w.oh, w.ow, b),
        lambda i, c, y, x, k: te.sum(
            w.padded[i, c, w.row(y), w.col(x), k].astype(out_dtype)
            * kernel[c, 0, w.ry, w.rx, 0, k].astype(out_dtype), axis=[w.ry, w.rx]),
        name="depthwise_conv2d_NCHWc", tag="depthwise_conv2d_NCHWc")


def grouped(data, kernel, attrs, out_dtype: str):
    """The dense ``conv2d_NCHWc`` over one group's input channels: output block ``oc``
    (group ``oc * o // (O / groups)``) reads the input blocks of that group."""
    from tvm import te

    n, _, _, _, inner = (int(d) for d in data.shape)
    out_chunks, in_chunks, kh, kw, _, outer = (int(d) for d in kernel.shape)
    group_out = out_chunks * outer // int(attrs.groups)
    ic = te.reduce_axis((0, in_chunks * inner), "ic")
    w = _Window(data, kh, kw, attrs)

    def value(i, oc, y, x, ob):
        first = (oc * outer) // group_out * in_chunks  # the group's first input block
        return te.sum(
            w.padded[i, first + ic // inner, w.row(y), w.col(x), ic % inner].astype(out_dtype)
            * kernel[oc, ic // inner, w.ry, w.rx, ic % inner, ob].astype(out_dtype),
            axis=[ic, w.ry, w.rx])

    # named as the dense compute's block, so its schedule rule takes this one too
    return te.compute((n, out_chunks, w.oh, w.ow, outer), value, name="conv2d_NCHWc",
                      tag="group_conv2d_NCHWc")


def straddling(data, kernel, attrs, out_dtype: str):
    """A grouped convolution whose groups do not divide into the tensors' blocks
    (ShuffleNet's 4 groups of 34, 68 or 136 channels in blocks of 8 or 16): output block
    ``oc`` holds the channels of at most two groups, ``lo`` and ``lo + 1``; each of its
    lanes ``ob`` sums its own group's input channels only, a select between the two
    groups' inputs (two broadcasts and a blend per multiply-add: no channel of another
    group is ever multiplied, not even by a zero weight, so an inf or NaN in one group
    never reaches another). Named as the dense compute's block, so the blocked rule
    (targets/cpu_schedule_blocked.py) schedules it; its input block is the group's
    channels (the weights' fifth axis)."""
    import tvm
    from tvm import te

    n, _, _, _, inner = (int(d) for d in data.shape)
    out_chunks, _, kh, kw, group_in, outer = (int(d) for d in kernel.shape)
    groups = int(attrs.groups)
    group_out = out_chunks * outer // groups
    ic = te.reduce_axis((0, group_in), "ic")
    w = _Window(data, kh, kw, attrs)

    def value(i, oc, y, x, ob):
        lo = (oc * outer) // group_out  # the group of the block's first lane
        split = (lo + 1) * group_out - oc * outer  # the first lane of group lo + 1
        hi = te.min(lo + 1, groups - 1)

        def read(group):
            c = group * group_in + ic
            return w.padded[i, c // inner, w.row(y), w.col(x), c % inner]

        # a Select, not if_then_else (which the vectorizer makes a loop of scalars): both
        # reads are in bounds (hi is clamped), so both may be evaluated
        chosen = tvm.tirx.Select(ob < split, read(lo), read(hi))
        return te.sum(
            chosen.astype(out_dtype) * kernel[oc, 0, w.ry, w.rx, ic, ob].astype(out_dtype),
            axis=[ic, w.ry, w.rx])

    return te.compute((n, out_chunks, w.oh, w.ow, outer), value, name="conv2d_NCHWc",
                      tag="group_conv2d_NCHWc")
