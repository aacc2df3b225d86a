"""The passes partition runs: those of ``relax.get_pipeline("zero")`` before its database
step. An input of every step's key, and what a target's default schedule leaves out."""

PASSES = ("LegalizeOps", "AnnotateTIROpPattern", "FoldConstant", "FuseOps", "FuseTIR")
