"""Clean-ups of the imported graph before partition's fusion, as one Relax pass
(``SimplifyGraph``):

- ``sum(stack([a, b, ...], axis=k), axis=k)`` of equal shapes (ONNX ``Sum``, resnet50's
  residual add, imports so: a 5-D copy, then a reduction) becomes ``a + b + ...``; a
  ``broadcast_to`` of an operand already of the output's shape is dropped first;
- ``dropout(x)[0]`` becomes ``x`` (inference);
- a constant operand of an element-wise add/subtract/multiply/divide gets the rank of the
  other operand (``(C, 1, 1)`` -> ``(1, C, 1, 1)``; what TVM's ConvertLayout needs to carry
  a channel-blocked layout through a decomposed BatchNorm);
- ONNX ``Clip`` (ReLU6), which TVM imports as ``call_tir`` of TOPI's maximum and minimum
  with a scalar bound, as Relax's ``maximum`` and ``minimum``: ConvertLayout cannot carry a
  ``call_tir``, so each Clip sent the blocked layout back to NCHW (a layout transform on
  each side, and the Clip a workload of its own, ``fused_maximum_minimum``).

BatchNorm after a convolution is folded into it by TVM's own ``FoldBatchnormToConv2D``
(partition runs it before this pass; see core/passes.py for the whole list, and
graph_passes.py for the pass of each stage).
"""

from __future__ import annotations

import functools

from .rewrite_pass import function_pass, static_shape

_BINARY = ("relax.add", "relax.subtract", "relax.multiply", "relax.divide", "relax.maximum",
           "relax.minimum")


@functools.cache
def _mutator_class():
    """The PyExprMutator subclass (made once, at first use: TVM is imported lazily)."""
    import tvm
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    op = tvm.ir.Op.get

    @mutator
    class Simplify(PyExprMutator):
        def _value(self, expr):
            while isinstance(expr, relax.Var):
                bound = self.lookup_binding(expr)
                if bound is None:
                    break
                expr = bound
            return expr

        def visit_call_(self, call):
            call = self.builder_.normalize(super().visit_call_(call))
            if not isinstance(call.op, tvm.ir.Op):
                return call
            if call.op.name == "relax.call_tir":
                return _clamp_as_op(self, call)
            if call.op.name in _STACKED:
                folded = _stacked_elementwise(self, call)
                return call if folded is None else folded
            if call.op.name in _BINARY and len(call.args) == 2:
                return _full_rank_constants(self, call)
            return call

        def visit_tuple_getitem_(self, item):
            item = super().visit_tuple_getitem_(item)
            value = self._value(item.tuple_value)
            if item.index == 0 and isinstance(value, relax.Call) and \
                    value.op.same_as(op("relax.nn.dropout")):
                return value.args[0]
            return item

    return Simplify


def _stacked(self, call):
    """(the items, the output's shape) of ``f(stack(items, axis=k), axis=k)`` (a reduction
    ``f`` over the stacking axis, as TVM imports ONNX Sum, Max and Min), or None."""
    import tvm
    from tvm import relax

    axis = call.attrs.axis
    if axis is None or len(axis) != 1 or call.attrs.keepdims:
        return None
    stacked = self._value(call.args[0])
    if not (isinstance(stacked, relax.Call) and stacked.op.same_as(tvm.ir.Op.get("relax.stack"))
            and int(stacked.attrs.axis) == int(axis[0])):
        return None
    items = self._value(stacked.args[0])
    out = static_shape(call)
    if not isinstance(items, relax.Tuple) or out is None:
        return None
    return items.fields, out


def _unbroadcast(self, item):
    """``item`` as it was before a broadcast_to (itself when it is none)."""
    import tvm
    from tvm import relax

    value = self._value(item)
    if isinstance(value, relax.Call) and value.op.same_as(tvm.ir.Op.get("relax.broadcast_to")):
        return value.args[0]
    return item


# ONNX Sum / Max / Min of n tensors import as sum / max / min over stack(broadcast_to(...)):
# one elementwise op per operand instead (resnet50's residual add; a Max or Min beside a
# convolution, whose stack sent the graph back to NCHW: found by a differential run). The
# flag: whether the operands must have the output's shape (Sum) or may broadcast to it.
_STACKED = {"relax.sum": ("add", True), "relax.max": ("maximum", False),
            "relax.min": ("minimum", False)}


def _stacked_elementwise(self, call):
    """``a + b + ...`` for ``sum(stack(items, axis=k), axis=k)`` of equal shapes, and
    ``maximum(a, maximum(b, ...))`` for ``max`` (``min`` alike) of operands that broadcast
    to the output, each as it was before it was broadcast; or None."""
    from tvm import relax

    found = _stacked(self, call)
    if found is None:
        return None
    items, out = found
    name, equal = _STACKED[call.op.name]
    parts = [_operand(self, item, out, equal) for item in items]
    if any(part is None for part in parts) or not any(static_shape(p) == out for p in parts):
        return None  # the result's shape would come of broadcasting alone: left as it is
    combine = getattr(relax.op, name)
    total = parts[0]
    for part in parts[1:]:
        total = _full_rank_constants(self, self.builder_.normalize(combine(total, part)))
    return total if call.ty.dtype == total.ty.dtype else None


def _operand(self, item, out: list, equal: bool):
    """One stacked item as an operand: unbroadcast where that keeps it usable (of the
    output's shape when ``equal``, else broadcasting to it); None when it is not."""
    bare = _unbroadcast(self, item)
    if equal:
        return next((x for x in (bare, item) if static_shape(x) == out), None)
    shape = static_shape(bare)
    if shape is None or len(shape) > len(out) or any(
            d not in (1, o) for d, o in zip(reversed(shape), reversed(out))):
        return None
    return bare


def _clamp_as_op(self, call):
    """``maximum(x, bound)`` (``minimum`` alike) for a ``call_tir`` of a PrimFunc that
    computes just that, element by element, with a scalar ``bound`` (TVM's import of ONNX
    Clip); else the call as it is."""
    from tvm import relax

    args = call.args[1]
    if not isinstance(args, relax.Tuple) or len(args.fields) != 2:
        return call
    x, bound = args.fields
    func = self.builder_.get().functions.get(call.args[0])
    name = _clamp_kind(func) if func is not None else None
    if name is None or static_shape(bound) != [] or static_shape(x) != static_shape(call) \
            or not (x.ty.dtype == bound.ty.dtype == call.ty.dtype):
        return call
    return self.builder_.normalize(getattr(relax.op, name)(x, bound))


def _clamp_kind(func) -> str | None:
    """"maximum" or "minimum" for a PrimFunc of three buffers ``(A, b, out)`` whose one
    store is ``out[i...] = max(A[i...], b[()])`` (min alike); else None."""
    import tvm

    if not isinstance(func, tvm.tirx.PrimFunc) or len(func.params) != 3:
        return None
    stores = _stores(func.body)
    if stores is None or len(stores) != 1:
        return None
    store = stores[0]
    a, b, out = func.params
    value = store.value
    kind = {tvm.tirx.Max: "maximum", tvm.tirx.Min: "minimum"}.get(type(value))
    loads = (value.a, value.b) if kind else ()
    if not (kind and all(isinstance(v, tvm.ir.TensorLoad) for v in loads)
            and store.buffer.same_as(out) and loads[0].source.same_as(a)
            and loads[1].source.same_as(b) and len(loads[1].indices) == 0
            and len(store.indices) == len(loads[0].indices)
            and all(i.same_as(j) for i, j in zip(store.indices, loads[0].indices))):
        return None
    return kind


def _stores(stmt) -> list | None:
    """The stores of a loop nest of blocks, in order; None for any other statement (a
    condition, an allocation: not a plain element-wise function)."""
    import tvm

    if isinstance(stmt, tvm.tirx.BufferStore):
        return [stmt]
    if isinstance(stmt, tvm.tirx.SeqStmt):
        parts = [_stores(s) for s in stmt.seq]
        return None if any(p is None for p in parts) else [s for p in parts for s in p]
    for kind, field in ((tvm.tirx.For, "body"), (tvm.s_tir.SBlockRealize, "block"),
                        (tvm.s_tir.SBlock, "body")):
        if isinstance(stmt, kind):
            if kind is tvm.s_tir.SBlock and (stmt.init is not None or stmt.alloc_buffers):
                return None
            return _stores(getattr(stmt, field))
    return None


def _full_rank_constants(self, call):
    """The call with a lower-rank constant operand reshaped to the other operand's rank."""
    import tvm
    from tvm import relax

    shapes = [static_shape(a) for a in call.args]
    if None in shapes or len(shapes[0]) == len(shapes[1]):
        return call
    rank = max(len(s) for s in shapes)
    if rank < 4:  # only (C, 1, 1) beside an image-like tensor: ConvertLayout's case
        return call
    args = []
    for arg, shape in zip(call.args, shapes):
        if isinstance(arg, tvm.ir.expr.Constant) and len(shape) < rank:
            # the constant's own dtype: relax.const would make an int64 scalar int32 (the
            # int32 wrap-around of a float -> int32 Cast subtracts 2**32)
            arg = relax.const(arg.value.numpy().reshape([1] * (rank - len(shape)) + shape),
                              str(arg.value.dtype))
        args.append(arg)
    if all(a.same_as(b) for a, b in zip(args, call.args)):
        return call
    return self.builder_.normalize(relax.Call(call.op, args, call.attrs))


def simplify_graph():
    """The pass (over every Relax function); dead bindings removed after it, and the aliases
    the rewrites leave (y = x), which would stop FuseOps at them."""
    from tvm import relax

    t = relax.transform
    return function_pass("SimplifyGraph", _mutator_class,
                          lambda mod: t.CanonicalizeBindings()(t.DeadCodeElimination()(mod)))
