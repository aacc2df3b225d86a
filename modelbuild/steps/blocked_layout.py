"""The channel-blocked layout (``NCHWc``): convolutions in ``NCHW{b}c`` with weights
``OIHW{b}i{b}o``, b = the target's vector width in floats (16 with AVX-512, 8 with
AVX2), and the operators between them (pooling, element-wise, concat, the residual add)
carried along by TVM's ``ConvertLayout``. A convolution whose channels do not divide
into b takes blocks of its own (``blocks``: an RGB image's first convolution reads
``NCHW3c`` and writes ``NCHW16c``, so the pooling after it runs blocked too); an
operator that cannot take the layout stays NCHW with a ``layout_transform`` on each
side. Weights are transformed once, at build time (partition folds the transforms of
constants).

Depthwise and grouped convolutions are blocked too where their groups' channels allow
(blocked_grouped.py: the channel block as the vector), with no layout change around them.

TVM's ``LegalizeOps`` refuses blocked conv2d; ``legalize_map`` gives it
``topi.nn.conv2d_NCHWc``, blocked_grouped's computes for depthwise and grouped ones (any
other grouped one: back to NCHW around TOPI's own conv).
"""

from __future__ import annotations

import re

from . import blocked_grouped, channel_blocks

_BLOCKED = re.compile(r"^NCHW(\d+)c$")


def convert(mod, block: int, prepare=lambda mod: mod):
    """``mod`` with its convolutions and what lies between them in NCHW{block}c;
    ``prepare(mod)``: the same graph written the way ConvertLayout carries right
    (convert_layout_fixes.for_convert_layout), applied only when the conversion succeeds.

    Where TVM's ``ConvertLayout`` fails on the graph (it refuses a model whose outputs
    include a shape: "DataflowBlock Pass should not rewrite or delete any global-scope
    Var"), the graph stays NCHW as it was, each convolution is still computed blocked on
    its own (legalize_map: its input and output transformed around it), and a note on
    stderr says so. Deterministic, so the build stays cacheable."""
    import tvm
    from tvm import relax

    desired = {"relax.nn.conv2d": [f"NCHW{block}c", f"OIHW{block}i{block}o"]}
    prepared = prepare(mod)
    group_channels, bound = channel_blocks.tensor_blocks(prepared)

    def per_call(call):
        """Each convolution's own blocks (see blocks), a depthwise or grouped one's
        (blocked_grouped.layouts), from the channels of its input's and its output's
        groups (channel_blocks.py); ``desired`` for the others."""
        if call.op.name != "relax.nn.conv2d":
            return desired
        group = (group_channels.get(call.args[0]), group_channels.get(bound.get(call)))
        grouped = blocked_grouped.layouts(call, block, group)
        if grouped is not None:
            return {"relax.nn.conv2d": grouped}
        blocks_ = blocks(call, block, group)
        if blocks_ is None:
            return desired
        inner, outer = blocks_
        return {"relax.nn.conv2d": [f"NCHW{inner}c", f"OIHW{inner}i{outer}o", f"NCHW{outer}c"]}

    try:
        return relax.transform.ConvertLayout(desired, layout_cb=per_call)(prepared)
    except (tvm.error.InternalError, RuntimeError, ValueError) as err:
        say_unblocked(f"TVM's ConvertLayout cannot carry this graph in NCHW{block}c", err)
        return mod


def say_unblocked(what: str, err: Exception) -> None:
    """The note on stderr when the graph between the convolutions stays NCHW: ``what``
    failed, and TVM's reason (the last line of ``err``). A Ctrl-C that TVM handed back as
    that failure stops the step instead (KeyboardInterrupt): it is no reason to say."""
    import sys

    from ..core import interrupts

    interrupts.check()
    reason = (str(err).strip().splitlines() or ["?"])[-1].strip()
    print(f"modelbuild: note: {what} ({reason[:200]}); each convolution runs blocked on its "
          "own, the graph between them in NCHW", file=sys.stderr)


def legalize_map(block: int) -> dict:
    """LegalizeOps' ``customize_legalize_map`` for blocked conv2d, for matrix products by a
    constant, whose weight is packed in panels (packed_matmul.py), and for a float32 erf,
    softmax and power by a constant (fast_math.py: arithmetic that vectorizes); others:
    TVM's own."""
    import functools

    from . import fast_math, packed_matmul

    return {"relax.nn.conv2d": functools.partial(_conv2d, block=block),
            "relax.matmul": functools.partial(packed_matmul.legalize, block=block),
            **fast_math.LEGALIZE}


def blocks(call, block: int, group=(None, None)) -> tuple[int, int] | None:
    """The (input, output) channel blocks of an NCHW convolution: the input's block is
    ``block``, or all its channels when fewer (the first convolution of an RGB image: 3),
    or their greatest common divisor with ``block``; the output's is ``block`` or its
    greatest common divisor with the channels (8 for a classifier of 1000 classes).
    ``group``: the channels of the input's and the output's groups
    (channel_blocks.tensor_blocks) where known, in place of the tensors' own. None:
    not worth blocking (an output block under 4 floats, a grouped convolution, other
    layouts). ``convert`` asks ConvertLayout for these per convolution; where it could
    not carry the graph, ``_reblocked`` computes the convolution with them inside its
    workload."""
    import math

    attrs = call.attrs
    if not (str(attrs.data_layout) == str(attrs.out_layout) == "NCHW"
            and str(attrs.kernel_layout) == "OIHW" and int(attrs.groups) == 1):
        return None
    out, channels = [int(d) for d in call.args[1].ty.shape][:2]
    inner = channel_blocks.block_of(group[0] or channels, block)
    outer = math.gcd(group[1] or out, block)
    return (inner, outer) if outer >= 4 and inner >= 1 else None


def _reblocked(bb, call, blocks: tuple[int, int]):
    """A convolution left NCHW (see blocks) computed blocked all the same: its input as
    NCHW{i}c (a cheap copy), its weights as OIHW{i}i{o}o (a transform of a constant,
    folded at build time), the output back to NCHW; so the blocked schedule's rule takes
    it (the NCHW default runs the 1000-class convolution of squeezenet at a fifth of the
    speed)."""
    from tvm import topi

    attrs = call.attrs
    inner, outer = blocks
    kernel = bb.emit_te(topi.layout_transform, call.args[1], "OIHW",
                        f"OIHW{inner}i{outer}o", primfunc_name_hint="weight_layout")
    out_dtype = str(call.ty.dtype)

    def blocked(data, weights):
        data = topi.layout_transform(data, "NCHW", f"NCHW{inner}c")
        ints = [[int(v) for v in a] for a in (attrs.strides, attrs.padding, attrs.dilation)]
        out = topi.nn.conv2d_NCHWc(data, weights, *ints, f"NCHW{inner}c", f"NCHW{outer}c",
                                   out_dtype)
        return topi.layout_transform(out, f"NCHW{outer}c", "NCHW")

    return bb.call_te(blocked, call.args[0], kernel, primfunc_name_hint="conv2d_NCHWc")


def is_blocked(attrs) -> bool:
    """A blocked conv as ConvertLayout makes it: NCHW{i}c, OIHW{i}i{o}o, NCHW{o}c (i = o
    but for a convolution with blocks of its own: see blocks)."""
    data, out = _BLOCKED.match(str(attrs.data_layout)), _BLOCKED.match(str(attrs.out_layout))
    return bool(data and out) and str(attrs.kernel_layout) == f"OIHW{data[1]}i{out[1]}o"


def _conv2d(bb, call, block: int):
    from tvm import topi
    from tvm.relax.transform.legalize_ops import nn as legal_nn

    attrs = call.attrs
    if not _BLOCKED.match(str(attrs.data_layout)):
        blocks_ = blocks(call, block)
        return legal_nn._nn_conv2d(bb, call) if blocks_ is None else _reblocked(bb, call, blocks_)
    out_dtype = str(attrs.out_dtype)
    if out_dtype in ("", "None", "void"):
        out_dtype = str(call.args[0].ty.dtype)
    if int(attrs.groups) == 1 and is_blocked(attrs):
        return bb.call_te(topi.nn.conv2d_NCHWc, call.args[0], call.args[1], attrs.strides,
                          attrs.padding, attrs.dilation, str(attrs.data_layout),
                          str(attrs.out_layout), out_dtype, primfunc_name_hint="conv2d_NCHWc")
    kernel_shape = [int(d) for d in call.args[1].ty.shape]
    for test, compute, name in ((blocked_grouped.is_depthwise, blocked_grouped.depthwise,
                                 "depthwise_conv2d_NCHWc"),
                                (blocked_grouped.is_grouped, blocked_grouped.grouped,
                                 "group_conv2d_NCHWc"),
                                (blocked_grouped.is_straddling, blocked_grouped.straddling,
                                 "group_conv2d_NCHWc")):
        if test(attrs, kernel_shape):
            return bb.call_te(lambda data, kernel, compute=compute:
                              compute(data, kernel, attrs, out_dtype),
                              call.args[0], call.args[1], primfunc_name_hint=name)

    # TOPI's generic conv takes its padding as a Python list or tuple, not an ffi Array
    # ("Unknown padding option (2, 2, 2, 2)": AlexNet's grouped convolutions)
    strides, padding, dilation = ([int(v) for v in a]
                                  for a in (attrs.strides, attrs.padding, attrs.dilation))

    def plain(data, kernel):
        data = topi.layout_transform(data, str(attrs.data_layout), "NCHW")
        kernel = topi.layout_transform(kernel, str(attrs.kernel_layout), "OIHW")
        out = topi.nn.conv(data, kernel, strides, padding, dilation,
                           int(attrs.groups), "NCHW", "OIHW", out_dtype)
        return topi.layout_transform(out, "NCHW", str(attrs.out_layout))

    return bb.call_te(plain, call.args[0], call.args[1], primfunc_name_hint="conv2d")
