"""Kernels renamed after fusion (FuseTIR's stage) where FuseOps's name is longer than a
workload's name may be."""

from __future__ import annotations

import functools


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
