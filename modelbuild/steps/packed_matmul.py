"""Matrix products by a constant weight in the blocked layout: the weight ``W [K, N]`` is
packed at build time into panels of the vector width, ``W_p [N / b, K, b]`` (panel ``p``
holds columns ``p*b .. p*b+b-1``, row after row), as a convolution's weights are laid out
``OIHW{b}i{b}o``. The kernel (the CPU default schedule's rule: targets/cpu_schedule_matmul.py)
then reads each panel as one contiguous stream, one vector per reduction step, where a plain
``W [K, N]`` is read down its columns (an ``N x 4``-byte stride per step: 12 KB for a BERT
FFN's ``[768, 3072]``).

The packing is part of the layout: the constant is packed in numpy when LegalizeOps meets
the call (never at run time), so the layout's name and partition's code are in every
step's key, and a record of a packed workload is stale in NCHW (the workload differs).
b is the target's vector width in floats (16 with AVX-512, 8 with AVX2) or, for a product
whose columns do not divide into it, their greatest common divisor with it (1000 classes:
8); under 4 (``panel`` None) the product is left to TVM's own legalization.
"""

from __future__ import annotations

import math

PACKED = "matmul_packed"  # the compute's name: the block the schedule's rule recognises


def panel(columns: int, block: int) -> int | None:
    """The panel width of a product with ``columns`` output columns (None: not packed)."""
    width = math.gcd(columns, block)
    return width if width >= 4 else None


def legalize(bb, call, block: int):
    """``call`` (``relax.matmul``) as a product by the packed constant, or TVM's own
    legalization where its weight is not a 2-D float32 constant of static shape or its
    input has fewer than 2 dimensions."""
    import numpy as np
    from tvm import relax
    from tvm.relax.transform.legalize_ops.linear_algebra import _matmul

    a, w = call.args
    width = _packable(call, block)
    if width is None:
        return _matmul(bb, call)
    k, n = (int(d) for d in w.ty.shape)
    value = w.value.numpy()
    packed = np.ascontiguousarray(value.reshape(k, n // width, width).transpose(1, 0, 2))
    weights = relax.const(packed, "float32")
    return bb.call_te(_compute, a, weights, primfunc_name_hint=PACKED)


def _packable(call, block: int) -> int | None:
    import tvm

    a, w = call.args
    if not isinstance(w, tvm.ir.expr.Constant) or str(call.ty.dtype) != "float32":
        return None
    out_dtype = str(call.attrs.out_dtype)
    if out_dtype not in ("", "None", "void", "float32"):
        return None
    try:
        a_shape = [int(d) for d in a.ty.shape]
        w_shape = [int(d) for d in w.ty.shape]
    except (TypeError, ValueError, AttributeError):
        return None
    if len(w_shape) != 2 or len(a_shape) < 2 or str(a.ty.dtype) != "float32" \
            or str(w.ty.dtype) != "float32" or a_shape[-1] != w_shape[0] or w_shape[0] == 0:
        return None
    return panel(w_shape[1], block)


def _compute(a, weights):
    """``out[..., i, j] = sum_k a[..., i, k] * weights[j // b, k, j % b]``."""
    from tvm import te

    panels, k, width = weights.shape
    reduce = te.reduce_axis((0, k), name="k")
    shape = (*a.shape[:-1], panels * width)

    def product(*index):
        *rows, j = index
        return te.sum(a[(*rows, reduce)] * weights[j // width, reduce, j % width], axis=reduce)

    return te.compute(shape, product, name=PACKED)
