"""partition's passes: each stage of core/passes.py's PASSES as the pass that runs it
(``pipeline``). TVM's passes, and partition's own: simplify_graph.py (SimplifyGraph),
constant_folding.py (constants folded in numpy), convert_layout_fixes.py (what
ConvertLayout gets wrong, written another way), channel_shuffle.py (a blocked channel
shuffle as one gather), workload_names.py (short kernel names).

BatchNorm after a convolution is folded into it by TVM's own ``FoldBatchnormToConv2D``
(``fold_batchnorm``), before SimplifyGraph.
"""

from __future__ import annotations

from . import constant_folding
from .channel_shuffle import blocked_shuffles
from .convert_layout_fixes import for_convert_layout
from .rewrite_pass import as_pass
from .simplify_graph import simplify_graph
from .workload_names import short_workload_names


def pipeline(block: int | None) -> list:
    """(name, pass) in core/passes.py's PASSES order; ``block``: the channel block of the
    blocked layout (None: NCHW, and ConvertLayout does nothing)."""
    import tvm
    from tvm import relax

    from ..core.passes import PASSES
    from . import blocked_layout

    t = relax.transform
    passes = {
        "FoldWeights": constant_folding.fold_broadcasts(),
        # BatchNorm after a conv into its weights (the arithmetic on constants it leaves is
        # folded next); the others as element-wise arithmetic
        "FoldBatchnormToConv2D": tvm.transform.Sequential(
            [as_pass(fold_batchnorm, "FoldBatchnormToConv2D"), t.DecomposeOpsForInference()]),
        # constants folded in numpy before LegalizeOps, in every layout: as ConvertLayout
        # wants them (else it crashes), and FoldConstant after LegalizeOps would compile
        # each operator of the arithmetic (shufflenet NCHW: 25 s); a stage of its own, so
        # that provenance lines up the bindings ConvertLayout remakes in order
        "SimplifyGraph": tvm.transform.Sequential(
            [simplify_graph(), constant_folding.fold_constants()]),
        "ConvertLayout": (lambda mod: mod) if block is None else tvm.transform.Sequential(
            [as_pass(lambda mod: blocked_layout.convert(mod, block, for_convert_layout),
                     "ConvertLayoutBlocked"),
             blocked_shuffles(), constant_folding.fold_constants()]),
        "LegalizeOps": t.LegalizeOps() if block is None else
        t.LegalizeOps(customize_legalize_map=blocked_layout.legalize_map(block)),
        "AnnotateTIROpPattern": t.AnnotateTIROpPattern(),
        "FoldConstant": t.FoldConstant(),
        "FuseOps": t.FuseOps(),
        "FuseTIR": tvm.transform.Sequential([t.FuseTIR(), short_workload_names()]),
    }
    return [(name, passes[name]) for name in PASSES]


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
