"""A channel shuffle between blocked tensors as one gather (``blocked_shuffles``).

ShuffleNet mixes its groups' channels by reshaping ``[N, C, H, W]`` to ``[N, g, C/g, H, W]``,
swapping the two channel axes and reshaping back. ConvertLayout cannot carry a reshape in
``NCHW{b}c``, so in the blocked layout each shuffle became three passes over the tensor:
a ``layout_transform`` to NCHW, the reshape-transpose-reshape, and a ``layout_transform``
back (17% of ShuffleNet's time). The same channel permutation reads the blocked input
directly: ``out[n, k // b', h, w, k % b'] = in[n, s // b, h, w, s % b]`` with
``s = (k % g) * (C / g) + k // g``, one workload, kept on its own (opaque to FuseOps, so
the convolution before it keeps its vectorized epilogue).

Run after ConvertLayout, on its ``layout_transform``s: only a chain whose transforms are
exactly NCHW{b}c -> NCHW and NCHW -> NCHW{b'}c (checked on their index maps, no padding)
is replaced; the bindings it leaves unused are removed, any other use keeps them.
"""

from __future__ import annotations

import functools

from ..targets.cpu_schedule import SERIAL_GATHER
from .rewrite_pass import function_pass, static_shape


def blocked_shuffles():
    """The module pass that writes each blocked channel shuffle as one gather."""
    from tvm import relax

    return function_pass("BlockedShuffles", _mutator_class,
                         relax.transform.DeadCodeElimination())


@functools.cache
def _mutator_class():
    import tvm
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    @mutator
    class BlockedShuffles(PyExprMutator):
        def _bound(self, expr, op_name: str):
            """The call of ``op_name`` bound to the variable ``expr``, or None."""
            if not isinstance(expr, relax.Var):
                return None
            value = self.lookup_binding(expr)
            if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op) \
                    and value.op.name == op_name:
                return value
            return None

        def visit_call_(self, call):
            call = self.builder_.normalize(super().visit_call_(call))
            if not (isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.layout_transform"):
                return call
            found = _shuffle(self, call)
            if found is None:
                return call
            source, groups = found
            return _gather(self.builder_, source, groups, call)

    return BlockedShuffles


def _shuffle(self, last):
    """(the blocked tensor, the groups) where ``last`` is NCHW -> NCHW{b'}c of
    reshape(permute_dims(reshape(NCHW{b}c -> NCHW of the tensor))) shuffling the channels;
    else None."""
    out = static_shape(last)
    if out is None or len(out) != 5 or not _is_blocking(last, out[4], to_blocked=True):
        return None
    chain, expr = [], last.args[0]
    for op_name in ("relax.reshape", "relax.permute_dims", "relax.reshape",
                    "relax.layout_transform"):
        call = self._bound(expr, op_name)
        if call is None:
            return None
        chain.append(call)
        expr = call.args[0]
    back, swap, split, first = chain
    source = first.args[0]
    inp, flat, grouped = static_shape(source), static_shape(first), static_shape(split)
    if inp is None or flat is None or grouped is None or len(inp) != 5 or len(flat) != 4:
        return None
    if not _is_blocking(first, inp[4], to_blocked=False):
        return None
    n, channels, height, width = flat
    if (len(grouped) != 5 or grouped[0] != n or grouped[3:] != [height, width]
            or grouped[1] * grouped[2] != channels or static_shape(back) != flat
            or [int(a) for a in swap.attrs.axes] != [0, 2, 1, 3, 4]
            or out[1] * out[4] != channels):
        return None
    return source, grouped[1]


def _is_blocking(call, block: int, to_blocked: bool) -> bool:
    """Whether the layout_transform ``call`` is NCHW -> NCHW{block}c (``to_blocked``) or
    NCHW{block}c -> NCHW, without padding."""
    from tvm.tirx import IndexMap

    if call.attrs.pad_value is not None or block < 1:
        return False
    if to_blocked:
        expected = IndexMap.from_func(
            lambda n, c, h, w: (n, c // block, h, w, c % block), index_dtype="int64")
    else:
        expected = IndexMap.from_func(
            lambda n, c, h, w, k: (n, c * block + k, h, w), index_dtype="int64")
    try:
        return bool(call.attrs.index_map.is_equivalent_to(expected))
    except Exception:  # noqa: BLE001 - another map (another rank): not a shuffle's
        return False


def _gather(builder, source, groups: int, last):
    """``last``'s tensor read from the blocked ``source`` in one pass (see the module)."""
    from tvm import relax, te

    n, chunks, height, width, inner = static_shape(source)
    out = static_shape(last)
    outer = out[4]
    per_group = chunks * inner // groups
    data = te.placeholder(tuple(static_shape(source)), str(source.ty.dtype), "data")

    def value(i, oc, y, x, ob):
        k = oc * outer + ob
        s = (k % groups) * per_group + k // groups
        return data[i, s // inner, y, x, s % inner]

    # the name the CPU default schedule knows it by (a serial loop nest: see SERIAL_GATHER)
    result = te.compute(tuple(out), value, name=SERIAL_GATHER)
    func = (te.create_prim_func([data, result]).without_attr("global_symbol")
            .with_attr("op_pattern", 8))  # opaque: a workload of its own
    gv = builder.add_func(func, SERIAL_GATHER)
    return builder.normalize(relax.call_tir(gv, [source], relax.TensorType(out, source.ty.dtype)))
