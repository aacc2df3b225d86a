"""Legalizations of element-wise CPU operators as arithmetic that vectorizes, where TVM's own
call the C library once per element (``LEGALIZE``, part of blocked_layout.legalize_map: the
CPU layout's; NCHW, cuda's default, keeps TVM's):

- erf as TVM's ``fast_erf``, softmax as ``fast_softmax`` (its exp as ``fast_exp``);
- a power by a constant exponent that square roots and products give (2, 3, 1, 0.5, 0.25,
  0.75, -0.5, -1: ``power``), with pow's own values at -0 and -inf.
"""

from __future__ import annotations


def erf(bb, call):
    """A float32 erf as TVM's ``fast_erf`` (a rational approximation, clamped to [-4, 4]:
    arithmetic that vectorizes), where TVM's own ``erf`` becomes a call of libm's ``erff``
    per element: in a BERT FFN's GELU epilogue, 393,216 calls per layer at S=128, the
    epilogue as long as the product. The CPU layout's; NCHW (cuda's default) keeps erf."""
    from tvm import topi
    from tvm.relax.transform.legalize_ops import unary

    if str(call.args[0].ty.dtype) != "float32":
        return unary._erf(bb, call)
    return bb.call_te(topi.fast_erf, call.args[0], primfunc_name_hint="erf")


def softmax(bb, call):
    """A float32 softmax as TVM's ``fast_softmax``: its exp as ``fast_exp`` (arithmetic that
    vectorizes; TVM's ``exp`` calls libm's ``expf`` per element, twice: attention's softmax
    over [12, 128, 128] took as long as a 768 x 768 product)."""
    from tvm import topi
    from tvm.relax.transform.legalize_ops import nn

    if str(call.args[0].ty.dtype) != "float32":
        return nn._nn_softmax(bb, call)
    return bb.call_te(topi.nn.fast_softmax, call.args[0], int(call.attrs.axis),
                      primfunc_name_hint="softmax")


# the exponents computed as products and square roots (``_power_te``), for float32: square
# roots are correctly rounded, so each is within an ulp or two of powf (2 and -1 are exact)
_EXPONENTS = (2.0, 3.0, 1.0, 0.5, 0.25, 0.75, -0.5, -1.0)


def power(bb, call):
    """``x ** c`` for a float32 ``x`` and a constant scalar ``c`` in ``_EXPONENTS`` as
    products and square roots, where TVM's ``power`` calls ``powf`` per element: an LRN
    (AlexNet: its ``** 0.75`` over 290,400 values took 2.9 ms of 28) or a LayerNorm that an
    exporter wrote with ``Pow(x, 2)``. pow's own values where the arithmetic differs: at
    -inf (pow(-inf, 0.5) = inf, sqrt gives NaN) and -0 (pow(-0, 0.5) = +0, sqrt gives -0)."""
    from tvm import topi
    from tvm.relax.transform.legalize_ops import binary

    exponent = _constant_exponent(call)
    if exponent is None or str(call.args[0].ty.dtype) != "float32":
        return binary._binary(topi.power)(bb, call)
    return bb.call_te(lambda x: _power_te(x, exponent), call.args[0], primfunc_name_hint="power")


def _constant_exponent(call) -> float | None:
    """The exponent of ``power(x, c)`` when ``c`` is a float32 constant of one element in
    ``_EXPONENTS`` and the output has ``x``'s shape; else None."""
    import tvm

    base, exponent = call.args
    if not isinstance(exponent, tvm.ir.expr.Constant) or str(exponent.value.dtype) != "float32":
        return None
    value = exponent.value.numpy()
    if value.size != 1 or float(value.reshape(())) not in _EXPONENTS:
        return None
    try:
        if [int(d) for d in call.ty.shape] != [int(d) for d in base.ty.shape]:
            return None  # the exponent broadcasts the base: TVM's own
    except (TypeError, ValueError, AttributeError):
        return None
    return float(value.reshape(()))


def _power_te(x, exponent: float):
    import tvm
    from tvm import te

    def value(*i):
        v = x(*i)
        if exponent == 1.0:
            return v
        if exponent == 2.0:
            return v * v
        if exponent == 3.0:
            return v * v * v
        if exponent == -1.0:
            return tvm.tirx.const(1.0, "float32") / v
        zero, inf = tvm.tirx.const(0.0, "float32"), tvm.tirx.const(float("inf"), "float32")
        # pow(-0, c) is +0 (+inf for c < 0) where sqrt(-0) is -0 (an explicit select: TVM's
        # simplifier drops a "+ 0")
        root = tvm.tirx.Select(v == zero, zero, te.sqrt(v))
        if exponent == 0.5:
            r = root
        elif exponent == 0.25:
            r = te.sqrt(root)
        elif exponent == 0.75:
            r = root * te.sqrt(root)
        else:  # -0.5
            r = tvm.tirx.const(1.0, "float32") / root
        at_minus_inf = zero if exponent < 0 else inf  # pow(-inf, c): +inf, or +0 for c < 0
        return tvm.tirx.Select(v == -inf, at_minus_inf, r)

    return te.compute(x.shape, value, name="power")


LEGALIZE = {"relax.erf": erf, "relax.nn.softmax": softmax, "relax.power": power}
