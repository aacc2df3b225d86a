"""Constants folded by TVM before LegalizeOps, what constant_folding's numpy leaves
(``rsqrt``, float16 arithmetic, a padding layout_transform, shape arithmetic): the calls
whose every argument is a constant, and those on their results, computed by TVM's own
LegalizeOps and FoldConstant in a module of their own; then every constant put inline
where it is used, as FoldConstant does (ConvertLayout and FoldBatchnormToConv2D look
for inline constants).

Not TVM's FoldConstant over the graph: before LegalizeOps it legalizes every operator
call it meets, constant or not, to see whether it folds. A legalization that emits more
than the call (``dynamic_strided_slice``, an ONNX Slice whose starts and ends are inputs,
emits its shape function) then leaves in the graph a call to a PrimFunc that never
reaches the module ("There is no definition of I.GlobalVar("shape_func")"); and the
graph's every call is legalized for nothing (1.5 s for shufflenet).
"""

from __future__ import annotations

import functools


def fold_constant_calls():
    """The module pass: calls on constants computed by TVM, constants inline."""
    import tvm
    from tvm import relax

    @tvm.transform.module_pass(opt_level=0, name="FoldConstantCalls")
    def run(mod, _ctx):
        folded: dict = {}
        for func in mod.functions.values():
            if isinstance(func, relax.Function):
                folded.update(_computed(_constant_calls(func)))
        rewriter = _inliner_class()(mod, folded)
        for gv, func in mod.functions.items():
            if isinstance(func, relax.Function):
                rewriter.builder_.update_func(gv, rewriter.visit_expr(func))
        return relax.transform.DeadCodeElimination()(rewriter.builder_.get())

    return run


def _constant_calls(func) -> tuple[dict, list]:
    """(the variables bound to a constant or a constant shape, the (variable, call) pairs
    in order whose arguments are those, results of earlier pairs, or literals) of the
    function's dataflow blocks."""
    import tvm
    from tvm import relax

    constants: dict = {}
    calls: list = []
    computed: set = set()
    body = func.body
    for block in body.blocks if isinstance(body, relax.SeqExpr) else ():
        if not isinstance(block, relax.DataflowBlock):
            continue
        for binding in block.bindings:
            if not isinstance(binding, relax.VarBinding):
                continue
            var, value = binding.var, binding.value
            if _is_constant(value):
                constants[var] = value
            elif isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op) and \
                    _known(value, constants, computed):
                calls.append((var, value))
                computed.add(var)
    return constants, calls


def _is_constant(expr) -> bool:
    import tvm
    from tvm import relax

    return isinstance(expr, tvm.ir.expr.Constant) or (
        isinstance(expr, relax.ShapeExpr) and not relax.analysis.free_symbolic_vars(expr))


def _known(call, constants: dict, computed: set) -> bool:
    """Whether ``call`` needs nothing but constants: its variables bound to constants or
    computed by earlier calls, no symbolic dimension, no function of the module."""
    from tvm import relax

    return all(v in constants or v in computed for v in relax.analysis.free_vars(call)) and \
        not relax.analysis.free_symbolic_vars(call) and not relax.analysis.all_global_vars(call)


def _computed(found: tuple[dict, list]) -> dict:
    """variable -> its value (a constant or a constant shape) for each call TVM folds:
    the calls in a function of their own, legalized and folded by TVM's passes (each
    distinct kernel built once)."""
    import tvm
    from tvm import relax

    constants, calls = found
    if not calls:
        return {}
    bb = relax.BlockBuilder()
    made: dict = {}
    with bb.function("main", []):
        with bb.dataflow():
            for var, call in calls:
                args = [_substituted(a, made, constants) for a in call.args]
                made[var] = bb.emit(relax.Call(call.op, args, call.attrs, call.ty_args))
            out = bb.emit_output(relax.Tuple([made[var] for var, _ in calls]))
        bb.emit_func_output(out)
    t = relax.transform
    main = tvm.transform.Sequential([t.LegalizeOps(), t.FoldConstant()])(bb.get())["main"]
    values = _resolved(main.body.body, main)
    if not isinstance(values, relax.Tuple):
        return {}
    results = (_resolved(field, main) for field in values.fields)
    return {var: value for (var, _), value in zip(calls, results) if _is_constant(value)}


def _substituted(arg, made: dict, constants: dict):
    """``arg`` with the variables of the graph replaced: by the emitted call's variable,
    or the constant they are bound to."""
    from tvm import relax

    if isinstance(arg, relax.Var):
        return made.get(arg, constants.get(arg, arg))
    if isinstance(arg, relax.Tuple):
        return relax.Tuple([_substituted(f, made, constants) for f in arg.fields])
    return arg


def _resolved(expr, func):
    """``expr`` with variables followed to the value they are bound to in ``func``."""
    from tvm import relax

    bound = relax.analysis.get_var2val(func)
    while isinstance(expr, relax.Var) and expr in bound:
        expr = bound[expr]
    return expr


@functools.cache
def _inliner_class():
    """Puts constants inline where they are used (each use of a variable bound to one,
    or to a folded call), and constant shapes into the calls that take them, as TVM's
    FoldConstant leaves a graph; dead code elimination drops the bindings after."""
    import tvm
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    @mutator
    class InlineConstants(PyExprMutator):
        def __init__(self, mod, folded):
            super().__init__(mod)
            self.folded = folded

        def _constant(self, var):
            value = self.folded.get(var)
            if value is None:
                value = self.lookup_binding(var)
            return value if isinstance(value, tvm.ir.expr.Constant) else var

        def visit_var_(self, var):
            return self._constant(super().visit_var_(var))

        def visit_dataflow_var_(self, var):
            return self._constant(super().visit_dataflow_var_(var))

        def visit_call_(self, call):
            call = super().visit_call_(call)
            args = [self._shape(a) for a in call.args]
            if all(a.same_as(b) for a, b in zip(args, call.args)):
                return call
            return relax.Call(call.op, args, call.attrs, call.ty_args)

        def _shape(self, arg):
            if not isinstance(arg, relax.Var):
                return arg
            value = self.folded.get(arg, self.lookup_binding(arg))
            return value if isinstance(value, relax.ShapeExpr) and _is_constant(value) else arg

    return InlineConstants
