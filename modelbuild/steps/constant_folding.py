"""Constants folded before fusion, in numpy: a ``broadcast_to`` of a constant (the weights
of some models until then) and the arithmetic and data movement on constants (a decomposed
BatchNorm's, the weights' layouts), which TVM's FoldConstant would compile operator by
operator; what numpy would not compute exactly as TVM does is left to TVM, given only the
calls on constants (constant_calls.py)."""

from __future__ import annotations

import functools

from .constant_calls import fold_constant_calls
from .numpy_layout import map_layout
from .rewrite_pass import function_pass, static_shape


def _bound_constant(mutator, arg):
    """The constant ``arg`` is (or a variable the mutator has bound to one), else None."""
    import tvm
    from tvm import relax

    bound = mutator.lookup_binding(arg) if isinstance(arg, relax.Var) else None
    arg = bound if bound is not None else arg
    return arg if isinstance(arg, tvm.ir.expr.Constant) else None


@functools.cache
def _broadcast_folder_class():
    """Folds ``broadcast_to`` of a constant in numpy and puts constants inline in the calls
    that use them (where TVM's FoldConstant leaves them, and FoldBatchnormToConv2D looks):
    TVM's Relax FoldConstant would compile every operator it folds (about 4 s for
    resnet50's 86 broadcast weights)."""
    import numpy as np
    import tvm
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    @mutator
    class FoldBroadcasts(PyExprMutator):
        def visit_call_(self, call):
            call = self.builder_.normalize(super().visit_call_(call))
            if not isinstance(call.op, tvm.ir.Op):
                return call
            constants = [_bound_constant(self, a) for a in call.args]
            if call.op.name == "relax.broadcast_to" and constants[0] is not None \
                    and static_shape(call) is not None:
                value = np.broadcast_to(constants[0].value.numpy(), static_shape(call))
                return relax.const(np.ascontiguousarray(value), str(call.ty.dtype))
            if any(c is not None and not c.same_as(a) for c, a in zip(constants, call.args)):
                call = self.builder_.normalize(relax.Call(
                    call.op, [a if c is None else c for c, a in zip(constants, call.args)],
                    call.attrs, call.ty_args))
            return call

    return FoldBroadcasts


_ARITHMETIC = {"relax.add": "add", "relax.subtract": "subtract", "relax.multiply": "multiply",
               "relax.divide": "divide", "relax.sqrt": "sqrt", "relax.rsqrt": None,
               "relax.negative": "negative"}
_MOVES = ("relax.reshape", "relax.expand_dims", "relax.squeeze", "relax.permute_dims",
          "relax.broadcast_to", "relax.layout_transform")


def _fold_in_numpy(call, values: list):
    """The value of ``call`` on constant arguments (numpy arrays), or None where numpy would
    not give exactly what TVM's compiled operator gives: float arithmetic that IEEE rounds
    exactly (+ - * / sqrt, negation), data movement of any dtype, a layout_transform
    without padding. Anything else is left to TVM's FoldConstant."""
    import numpy as np

    name = call.op.name
    dtype = str(getattr(call.ty, "dtype", ""))
    shape = static_shape(call)
    if shape is None:
        return None
    if name in _ARITHMETIC:
        if dtype not in ("float32", "float64") or _ARITHMETIC[name] is None \
                or any(v.dtype != np.dtype(dtype) for v in values):
            return None
        with np.errstate(all="ignore"):
            out = getattr(np, _ARITHMETIC[name])(*values)
    elif name == "relax.layout_transform":
        source = values[0]
        if int(np.prod(shape)) != source.size:  # a padding transform
            return None
        out = map_layout(call.attrs.index_map, source, shape)
        if out is None:
            return None
    elif name in _MOVES:
        source = values[0]
        if name == "relax.broadcast_to":
            out = np.broadcast_to(source, shape)
        elif name == "relax.permute_dims":
            axes = call.attrs.axes
            out = np.transpose(source, None if axes is None else [int(a) for a in axes])
        else:
            out = source.reshape(shape)
    else:
        return None
    out = np.ascontiguousarray(out)
    return out if list(out.shape) == shape and str(out.dtype) == dtype else None


@functools.cache
def _constant_folder_class():
    """Folds operators on constants in numpy (_fold_in_numpy): what TVM's FoldConstant would
    compile one by one (about 600 compiles and 30 s for densenet121's BatchNorm arithmetic
    and weight layouts; the same values)."""
    import tvm
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    @mutator
    class FoldInNumpy(PyExprMutator):
        def visit_call_(self, call):
            call = self.builder_.normalize(super().visit_call_(call))
            if not isinstance(call.op, tvm.ir.Op) or not call.args:
                return call
            name = call.op.name
            data = call.args[:1] if name in _MOVES else call.args
            constants = [_bound_constant(self, a) for a in data]
            if name not in _MOVES and name not in _ARITHMETIC or None in constants:
                return call
            value = _fold_in_numpy(call, [_array(c) for c in constants])
            return call if value is None else relax.const(value, str(call.ty.dtype))

    return FoldInNumpy


def _array(constant):
    """A Relax constant's value as a numpy array (a scalar one holds a Python number)."""
    import numpy as np

    value = constant.value
    if hasattr(value, "numpy"):
        return value.numpy()
    return np.asarray(value, dtype=str(constant.ty.dtype))


def fold_constants():
    """Constants folded in numpy, then by TVM what numpy left (constant_calls.py: not
    TVM's FoldConstant over the graph, which before LegalizeOps breaks some graphs)."""
    import tvm
    from tvm import relax

    return tvm.transform.Sequential([
        function_pass("FoldInNumpy", _constant_folder_class,
                      relax.transform.DeadCodeElimination()),
        fold_constant_calls()])


def fold_broadcasts():
    from tvm import relax

    return function_pass("FoldBroadcasts", _broadcast_folder_class,
                          relax.transform.DeadCodeElimination())
