"""modelbuild: a Make-style build graph over machine-learning models.

A model expands into doit tasks: ``partition`` (model -> one TIR PrimFunc per
fused workload, plus the graph), ``lower`` per workload (apply that workload's
schedule record), ``codegen`` per workload (one object file) and ``link`` (one
shared library runnable with ``tvm.relax.VirtualMachine``).

Importing this package does not import TVM: task loading must stay cheap.
"""

__version__ = "0.1.0"
