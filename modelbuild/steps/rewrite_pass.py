"""How partition's own graph passes are made: a Relax mutator run over every function of
a module as one module pass (``function_pass``), a function of the module as a pass
(``as_pass``), and the static shape those rewrites read of a tensor (``static_shape``)."""

from __future__ import annotations


def static_shape(expr):
    """The static shape of a tensor expression as ints, or None."""
    from tvm import relax

    ty = getattr(expr, "ty", None)
    if not isinstance(ty, relax.TensorType) or ty.shape is None:
        return None
    try:
        return [int(d) for d in ty.shape]
    except (TypeError, ValueError, AttributeError):
        return None


def function_pass(name: str, mutator_class, cleanup):
    """The module pass ``name``: the mutator ``mutator_class()`` over every Relax function of
    the module, then ``cleanup`` of the module it made."""
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


def as_pass(function, name: str):
    """``function`` (module -> module) as the module pass ``name``."""
    import tvm

    return tvm.transform.module_pass(lambda mod, _ctx: function(mod), opt_level=0, name=name)
