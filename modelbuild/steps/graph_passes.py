"""Clean-ups of the imported graph before partition's fusion, as one Relax pass
(``SimplifyGraph``):

- ``sum(stack([a, b, ...], axis=k), axis=k)`` of equal shapes (ONNX ``Sum``, resnet50's
  residual add, imports so: a 5-D copy, then a reduction) becomes ``a + b + ...``; a
  ``broadcast_to`` of an operand already of the output's shape is dropped first;
- ``dropout(x)[0]`` becomes ``x`` (inference);
- a constant operand of an element-wise add/subtract/multiply/divide gets the rank of the
  other operand (``(C, 1, 1)`` -> ``(1, C, 1, 1)``; what TVM's ConvertLayout needs to carry
  a channel-blocked layout through a decomposed BatchNorm).

BatchNorm after a convolution is folded into it by TVM's own ``FoldBatchnormToConv2D``
(partition runs it before this pass; see core/passes.py for the whole list).
"""

from __future__ import annotations

import functools

_BINARY = ("relax.add", "relax.subtract", "relax.multiply", "relax.divide", "relax.maximum",
           "relax.minimum")


def _shape(expr):
    """The static shape of a tensor expression as ints, or None."""
    from tvm import relax

    ty = getattr(expr, "ty", None)
    if not isinstance(ty, relax.TensorType) or ty.shape is None:
        return None
    try:
        return [int(d) for d in ty.shape]
    except (TypeError, ValueError, AttributeError):
        return None


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
    out = _shape(call)
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
    if any(part is None for part in parts) or not any(_shape(p) == out for p in parts):
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
        return next((x for x in (bare, item) if _shape(x) == out), None)
    shape = _shape(bare)
    if shape is None or len(shape) > len(out) or any(
            d not in (1, o) for d, o in zip(reversed(shape), reversed(out))):
        return None
    return bare


def _full_rank_constants(self, call):
    """The call with a lower-rank constant operand reshaped to the other operand's rank."""
    import tvm
    from tvm import relax

    shapes = [_shape(a) for a in call.args]
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
                    and _shape(call) is not None:
                value = np.broadcast_to(constants[0].value.numpy(), _shape(call))
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
    shape = _shape(call)
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
        out = _map_layout(call.attrs.index_map, source, shape)
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


def _map_layout(index_map, source, shape: list):
    """``source`` laid out by ``index_map`` (a bijection: no padding), in numpy: each output
    index computed from the grid of input indices (TVM's IndexMap.map_tensor evaluates it
    element by element: 9 s for one 512x512x3x3 weight). None for an expression this
    evaluator does not know."""
    import numpy as np
    from tvm import tirx

    moved = _split_and_permute(index_map, source, shape)
    if moved is not None:
        return moved
    grid = dict(zip((v.name for v in index_map.initial_indices), np.indices(source.shape)))
    ops = {tirx.FloorDiv: np.floor_divide, tirx.FloorMod: np.mod, tirx.Add: np.add,
           tirx.Sub: np.subtract, tirx.Mul: np.multiply}

    def value(expr):
        if isinstance(expr, tirx.Var):
            return grid[expr.name]
        if isinstance(expr, tirx.IntImm):
            return int(expr.value)
        apply = ops.get(type(expr))
        if apply is None:
            raise KeyError(type(expr).__name__)
        return apply(value(expr.a), value(expr.b))

    try:
        where = tuple(np.broadcast_to(value(e), source.shape) for e in index_map.final_indices)
    except KeyError:
        return None
    if len(where) != len(shape):
        return None
    out = np.empty(shape, source.dtype)
    out[where] = source
    return out


def _split_and_permute(index_map, source, shape: list):
    """``source`` laid out by ``index_map`` when every output index is an input index, or
    an input index floor-divided or taken modulo one factor (the blocked layouts of
    weights and data: ``OIHW -> OIHW{i}i{o}o``, ``NCHW -> NCHW{b}c``): a reshape that
    splits those axes, then a transpose. Without the index grids of the general path:
    resnet50's 106 weight transforms took 1.4 s of its 4.8 s partition that way. None for
    any other index map."""
    from tvm import tirx

    names = [v.name for v in index_map.initial_indices]
    factors: dict[str, int] = {}
    picks = []  # per output axis: (input name, "whole" | "outer" | "inner")
    for expr in index_map.final_indices:
        if isinstance(expr, tirx.Var) and expr.name in names:
            picks.append((expr.name, "whole"))
            continue
        if not (isinstance(expr, (tirx.FloorDiv, tirx.FloorMod)) and isinstance(expr.a, tirx.Var)
                and expr.a.name in names and isinstance(expr.b, tirx.IntImm)):
            return None
        name, factor = expr.a.name, int(expr.b.value)
        if factor <= 0 or factors.setdefault(name, factor) != factor:
            return None
        picks.append((name, "outer" if isinstance(expr, tirx.FloorDiv) else "inner"))
    dims, axis = [], {}
    for name, size in zip(names, source.shape):
        if name in factors:
            if size % factors[name]:
                return None
            axis[(name, "outer")], axis[(name, "inner")] = len(dims), len(dims) + 1
            dims += [size // factors[name], factors[name]]
        else:
            axis[(name, "whole")] = len(dims)
            dims.append(size)
    try:
        order = [axis[pick] for pick in picks]
    except KeyError:  # a split axis used whole, or a whole one split
        return None
    if sorted(order) != list(range(len(dims))):
        return None
    out = source.reshape(dims).transpose(order)
    return out if list(out.shape) == list(shape) else None


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
    """Constants folded in numpy, then TVM's FoldConstant for what numpy left."""
    import tvm
    from tvm import relax

    t = relax.transform
    return tvm.transform.Sequential([
        _function_pass("FoldInNumpy", _constant_folder_class, t.DeadCodeElimination()),
        t.FoldConstant()])


def _function_pass(name: str, mutator_class, cleanup):
    import tvm
    from tvm import relax

    @tvm.transform.module_pass(opt_level=0, name=name)
    def run(mod, _ctx):
        rewriter = mutator_class()(mod)
        for gv, func in mod.functions.items():
            if isinstance(func, relax.Function):
                rewriter.builder_.update_func(gv, rewriter.visit_expr(func))
        return cleanup(rewriter.builder_.get())

    return run


def fold_broadcasts():
    from tvm import relax

    return _function_pass("FoldBroadcasts", _broadcast_folder_class,
                           relax.transform.DeadCodeElimination())


def simplify_graph():
    """The pass (over every Relax function); dead bindings removed after it, and the aliases
    the rewrites leave (y = x), which would stop FuseOps at them."""
    from tvm import relax

    t = relax.transform
    return _function_pass("SimplifyGraph", _mutator_class,
                           lambda mod: t.CanonicalizeBindings()(t.DeadCodeElimination()(mod)))


@functools.cache
def _renamer_class():
    from tvm.relax.expr_functor import PyExprMutator, mutator

    @mutator
    class Rename(PyExprMutator):
        def __init__(self, mod, names: dict):
            super().__init__(mod)
            self.names = names

        def visit_global_var_(self, gv):
            return self.names.get(gv.name_hint, gv)

    return Rename


def short_workload_names():
    """Kernels renamed where FuseOps's name (every fused operator's, joined) is longer than
    a workload's name may be (core/manifest.short_name): a workload's name is its files'
    names, and a long chain of element-wise operators made one longer than a file name."""
    import tvm
    from tvm import relax

    from ..core.manifest import short_name

    @tvm.transform.module_pass(opt_level=0, name="ShortWorkloadNames")
    def run(mod, _ctx):
        renamed = {}
        for gv, func in mod.functions.items():
            if isinstance(func, tvm.tirx.PrimFunc) and short_name(gv.name_hint) != gv.name_hint:
                new = tvm.ir.GlobalVar(short_name(gv.name_hint))
                relax.expr._update_type(new, gv.ty)
                renamed[gv.name_hint] = new
        if not renamed:
            return mod
        rewriter = _renamer_class()(mod, renamed)
        funcs = {}
        for gv, func in mod.functions.items():
            if gv.name_hint in renamed:
                new = renamed[gv.name_hint]
                if func.attrs is not None and "global_symbol" in func.attrs:
                    func = func.with_attr("global_symbol", new.name_hint)
                funcs[new] = func
            elif isinstance(func, relax.Function):
                funcs[gv] = rewriter.visit_expr(func)
            else:
                funcs[gv] = func
        return tvm.IRModule(funcs, attrs=mod.attrs, global_infos=mod.global_infos)

    return run


def pipeline(block: int | None) -> list:
    """(name, pass) in core/passes.py's PASSES order; ``block``: the channel block of the
    blocked layout (None: NCHW, and ConvertLayout does nothing)."""
    import tvm
    from tvm import relax

    from ..core.passes import PASSES
    from . import blocked_layout

    t = relax.transform
    passes = {
        "FoldWeights": fold_broadcasts(),
        # BatchNorm after a conv into its weights (the arithmetic on constants it leaves is
        # folded after LegalizeOps); the others as element-wise arithmetic
        "FoldBatchnormToConv2D": tvm.transform.Sequential(
            [_as_pass(fold_batchnorm, "FoldBatchnormToConv2D"), t.DecomposeOpsForInference()]),
        # blocked: constants folded first, as ConvertLayout wants (else it crashes); a stage
        # of its own, so that provenance lines up the bindings ConvertLayout remakes in order
        "SimplifyGraph": simplify_graph() if block is None else tvm.transform.Sequential(
            [simplify_graph(), fold_constants()]),
        "ConvertLayout": (lambda mod: mod) if block is None else tvm.transform.Sequential(
            [_as_pass(lambda mod: blocked_layout.convert(mod, block, for_convert_layout),
                      "ConvertLayoutBlocked"),
             fold_constants()]),
        "LegalizeOps": t.LegalizeOps() if block is None else
        t.LegalizeOps(customize_legalize_map=blocked_layout.legalize_map(block)),
        "AnnotateTIROpPattern": t.AnnotateTIROpPattern(),
        "FoldConstant": t.FoldConstant(),
        "FuseOps": t.FuseOps(),
        "FuseTIR": tvm.transform.Sequential([t.FuseTIR(), short_workload_names()]),
    }
    return [(name, passes[name]) for name in PASSES]


def for_convert_layout(mod):
    """``mod`` with what TVM's ConvertLayout gets wrong written another way, for
    blocked_layout.convert:

    - a concat's negative axis as the positive one: ConvertLayout carried
      ``concat(axis=-3)`` of NCHW (the channels, as ONNX writes them) into NCHW{b}c as axis
      2 of the five, the rows: a library with other numbers, or none at all;
    - a split into one section (ONNX's Split with one output, which the importer types as
      the tensor itself) as its input: ConvertLayout ended the process with SIGSEGV on it
      after a convolution with blocks of its own (found by a differential run);
    - a split of the channels at given indices as one strided_slice per piece:
      ConvertLayout carried ``split(indices=[16], axis=1)`` into NCHW16c with its index
      still in channels, applied to the blocks (pieces of 256 and 32 channels for 16 and
      272: other numbers, exit 0; or a negative extent). A differential run found it."""
    return _function_pass("ForConvertLayout", _for_convert_layout_class, lambda m: m)(mod)


@functools.cache
def _for_convert_layout_class():
    import tvm
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    @mutator
    class ForConvertLayout(PyExprMutator):
        def visit_call_(self, call):
            call = self.builder_.normalize(super().visit_call_(call))
            if not isinstance(call.op, tvm.ir.Op):
                return call
            if (call.op.name == "relax.concat"
                    and call.attrs.axis is not None and int(call.attrs.axis) < 0):
                axis = int(call.attrs.axis) + call.ty.ndim
                return self.builder_.normalize(relax.op.concat(call.args[0], axis=axis))
            if call.op.name == "relax.split" and _one_section(call.attrs.indices_or_sections):
                data = call.args[0]
                if isinstance(call.ty, relax.TensorType):
                    return data
                return self.builder_.normalize(relax.Tuple([data]))
            if call.op.name == "relax.split":
                return self._channel_split_as_slices(call)
            return call

        def _channel_split_as_slices(self, call):
            """A split of the channels at given indices as one strided_slice per piece."""
            data, attrs = call.args[0], call.attrs
            ndim = getattr(data.ty, "ndim", -1)
            sections = attrs.indices_or_sections
            if ndim != 4 or isinstance(sections, (int, tvm.tirx.IntImm)) \
                    or int(attrs.axis) % ndim != 1:
                return call
            try:
                cuts = [int(i) for i in sections]
                channels = int(data.ty.shape[1])
            except (TypeError, ValueError):
                return call  # a symbolic size: left to ConvertLayout as it is
            bounds = [0, *cuts, channels]
            pieces = [relax.op.strided_slice(data, axes=[1], begin=[a], end=[max(a, b)])
                      for a, b in zip(bounds, bounds[1:])]
            return self.builder_.normalize(relax.Tuple(pieces))

    return ForConvertLayout


def _one_section(sections) -> bool:
    """Whether a split's ``indices_or_sections`` is one section (the whole axis)."""
    try:
        return int(sections) == 1
    except (TypeError, ValueError):
        return len(sections) == 0  # no split indices: one piece


def _as_pass(function, name: str):
    import tvm

    return tvm.transform.module_pass(lambda mod, _ctx: function(mod), opt_level=0, name=name)


def fold_batchnorm(mod):
    """TVM's FoldBatchnormToConv2D, or ``mod`` as it is where that rewrite fails: it adds a
    float32 epsilon to the variance whatever the BatchNorm's dtype, so a float16 one raised
    TypeError. Not folded, the BatchNorm becomes element-wise arithmetic
    (DecomposeOpsForInference, next): the same numbers, one fusion less."""
    import tvm
    from tvm import relax

    try:
        return relax.transform.FoldBatchnormToConv2D()(mod)
    except (TypeError, tvm.error.InternalError):
        return mod
