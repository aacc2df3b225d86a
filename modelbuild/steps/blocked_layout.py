"""The channel-blocked layout (``NCHWc``): convolutions in ``NCHW{b}c`` with weights
``OIHW{b}i{b}o``, b = the target's vector width in floats (16 with AVX-512, 8 with
AVX2), and the operators between them (pooling, element-wise, concat, the residual add)
carried along by TVM's ``ConvertLayout``; a convolution whose channels do not divide
into blocks, and an operator that cannot take the layout, stay NCHW with a
``layout_transform`` on each side. Weights are transformed once, at build time
(partition's ``FoldConstant`` folds the transforms of constants).

TVM's ``LegalizeOps`` refuses blocked conv2d; ``legalize_map`` gives it
``topi.nn.conv2d_NCHWc`` (a grouped one: back to NCHW around TOPI's own conv).
"""

from __future__ import annotations

import re

_BLOCKED = re.compile(r"^NCHW(\d+)c$")


def convert(mod, block: int):
    """``mod`` with its convolutions and what lies between them in NCHW{block}c."""
    from tvm import relax

    desired = {"relax.nn.conv2d": [f"NCHW{block}c", f"OIHW{block}i{block}o"]}
    return relax.transform.ConvertLayout(desired)(mod)


def legalize_map(block: int) -> dict:
    """LegalizeOps' ``customize_legalize_map`` for blocked conv2d (others: TVM's own)."""
    import functools

    return {"relax.nn.conv2d": functools.partial(_conv2d, block=block)}


def _stem(bb, call, block: int):
    """A convolution left NCHW because its few input channels do not fill a block (the
    first one of an RGB image) computed blocked all the same: its input as NCHW{I}c (one
    block of all I channels: a cheap copy), its weights as OIHW{I}i{b}o (a transform of
    a constant, folded at build time), the output back to NCHW."""
    from tvm import topi

    attrs = call.attrs
    channels = int(call.args[1].ty.shape[1])
    kernel = bb.emit_te(topi.layout_transform, call.args[1], "OIHW",
                        f"OIHW{channels}i{block}o", primfunc_name_hint="weight_layout")
    out_dtype = str(call.ty.dtype)

    def blocked(data, weights):
        data = topi.layout_transform(data, "NCHW", f"NCHW{channels}c")
        ints = [[int(v) for v in a] for a in (attrs.strides, attrs.padding, attrs.dilation)]
        out = topi.nn.conv2d_NCHWc(data, weights, *ints, f"NCHW{channels}c", f"NCHW{block}c",
                                   out_dtype)
        return topi.layout_transform(out, f"NCHW{block}c", "NCHW")

    return bb.call_te(blocked, call.args[0], kernel, primfunc_name_hint="conv2d_NCHWc")


def _is_stem(call, block: int) -> bool:
    attrs = call.attrs
    weight = [int(d) for d in call.args[1].ty.shape]
    return (str(attrs.data_layout) == str(attrs.out_layout) == "NCHW"
            and str(attrs.kernel_layout) == "OIHW" and int(attrs.groups) == 1
            and weight[0] % block == 0 and weight[1] < block)


def _conv2d(bb, call, block: int):
    from tvm import topi
    from tvm.relax.transform.legalize_ops import nn as legal_nn

    attrs = call.attrs
    if not _BLOCKED.match(str(attrs.data_layout)):
        if _is_stem(call, block):
            return _stem(bb, call, block)
        return legal_nn._nn_conv2d(bb, call)
    out_dtype = str(attrs.out_dtype)
    if out_dtype in ("", "None", "void"):
        out_dtype = str(call.args[0].ty.dtype)
    if int(attrs.groups) == 1 and str(attrs.out_layout) == str(attrs.data_layout):
        return bb.call_te(topi.nn.conv2d_NCHWc, call.args[0], call.args[1], attrs.strides,
                          attrs.padding, attrs.dilation, str(attrs.data_layout),
                          str(attrs.out_layout), out_dtype, primfunc_name_hint="conv2d_NCHWc")

    def plain(data, kernel):
        data = topi.layout_transform(data, str(attrs.data_layout), "NCHW")
        kernel = topi.layout_transform(kernel, str(attrs.kernel_layout), "OIHW")
        out = topi.nn.conv(data, kernel, attrs.strides, attrs.padding, attrs.dilation,
                           int(attrs.groups), "NCHW", "OIHW", out_dtype)
        return topi.layout_transform(out, "NCHW", str(attrs.out_layout))

    return bb.call_te(plain, call.args[0], call.args[1], primfunc_name_hint="conv2d")
