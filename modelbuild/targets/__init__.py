"""targets: what modelbuild builds for: the registry (one entry per target, its hooks) and
the hooks of the built-in targets (cpu, cuda), the system toolchain, TVM's library blob.

May import: core. Choosing a target never imports TVM.
"""

from .registry import TargetSpec, register, resolve

__all__ = ["TargetSpec", "register", "resolve"]
