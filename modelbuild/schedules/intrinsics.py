"""MetaSchedule's tensor intrinsics for one target, without the others.

``ms.TuneContext`` imports ``tvm.s_tir.tensor_intrin``, whose package imports
the intrinsics of every target (CUDA, ROCm, ARM, Hexagon, RISC-V, Metal, x86),
each defined by parsing TVMScript: 45-55 s on a 2-core machine, paid by every
`tune` and `sample` before anything happens. The rules for one target need its
own intrinsics only (x86's: under half a second), so the package is entered
with just those loaded; asked for another target later, that target's are
loaded too. A process that already imported the whole package is left alone.
"""

from __future__ import annotations

import importlib
import importlib.util
import platform
import sys
import types

PACKAGE = "tvm.s_tir.tensor_intrin"
# Modules of the package by target kind; the CPU ones by machine.
_CPU = {"x86_64": ("x86",), "amd64": ("x86",), "aarch64": ("arm_cpu",), "arm64": ("arm_cpu",),
        "riscv64": ("riscv_cpu",)}
_BY_KIND = {"cuda": ("cuda",), "rocm": ("rocm",), "metal": ("metal",), "hexagon": ("hexagon",)}


def modules_for(kind: str) -> tuple[str, ...]:
    """The intrinsic modules a target kind's schedule rules may use (None known: all)."""
    if kind in ("llvm", "c"):
        return _CPU.get(platform.machine().lower(), ())
    return _BY_KIND.get(kind, ())


def load_for(kind: str) -> None:
    """Make ``import tvm.s_tir.tensor_intrin`` cheap, with ``kind``'s intrinsics registered."""
    wanted = modules_for(kind)
    package = sys.modules.get(PACKAGE)
    if package is not None and not getattr(package, "__modelbuild_partial__", False):
        return  # the real package, every intrinsic already registered
    if not wanted and package is None:
        importlib.import_module(PACKAGE)  # an unknown kind: the whole package
        return
    if package is None:
        spec = importlib.util.find_spec(PACKAGE)
        package = types.ModuleType(PACKAGE)
        package.__path__ = list(spec.submodule_search_locations)
        package.__modelbuild_partial__ = True
        sys.modules[PACKAGE] = package
    for name in wanted:
        importlib.import_module(f"{PACKAGE}.{name}")


def tune_context(mod, target, **kwargs):
    """MetaSchedule's TuneContext for ``mod`` on ``target`` (a tvm Target), with that
    target's intrinsics loaded first: the TuneContext's own import loads every target's."""
    from tvm.s_tir import meta_schedule as ms

    load_for(target.kind.name)
    return ms.TuneContext(mod=mod, target=target, **kwargs)
