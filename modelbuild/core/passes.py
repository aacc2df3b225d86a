"""The passes partition runs, in order, and the layouts a model may be built in.

Before fusion, clean-ups of the imported graph: constants folded (the weights of some
models are ``broadcast_to`` of scalars until then), BatchNorm after a convolution folded
into it, ``SimplifyGraph`` (steps/simplify_graph.py: stack+sum as adds, dropout gone,
constants of full rank), then the model's layout (``ConvertLayout``: nothing to do for
NCHW); then those of ``relax.get_pipeline("zero")`` before its database step. The list
is an input of every step's key, and what a target's default schedule leaves out.
"""

PASSES = ("FoldWeights", "FoldBatchnormToConv2D", "SimplifyGraph", "ConvertLayout",
          "LegalizeOps", "AnnotateTIROpPattern", "FoldConstant", "FuseOps", "FuseTIR")

LAYOUTS = {
    "NCHW": "every operator in the imported layout (ONNX's NCHW)",
    "NCHWc": "channel-blocked: convolutions and the operators between them in NCHW{b}c, "
             "b = the target's vector width in floats (16 with AVX-512, 8 with AVX2)",
}


def default_layout(target_kind: str, can_block: bool = True) -> str:
    """The layout of a model that declares none: the one that measured fastest on the
    declared models for the target's kind. CPU targets (``llvm``, ``c``): NCHWc, 4.2-5.1x
    faster than NCHW on every declared model through LLVM (AVX-512 Zen 5:
    bench/README.md). ``cuda``, and a target registered without a channel block
    (``can_block`` False: no ``vector_floats``): NCHW."""
    return "NCHWc" if can_block and target_kind in ("llvm", "c") else "NCHW"
