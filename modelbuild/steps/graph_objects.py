"""The graph's VM executable (Relax ``main`` with its constants) built as object files,
once per model at partition, for link to link: ``relax.build`` without the workloads,
whose objects come from codegen."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from ..core import atomic, free_space
from ..targets import toolchain


def _capture_objects(executable, out_dir: Path, fpack_imports=None) -> list[str]:
    """Let export_library write the executable's objects into out_dir, and keep them there
    instead of linking (returns their names). ``fpack_imports``: the target's way of
    packing the executable's imports (None: export_library's object file)."""

    captured: list[str] = []

    def keep(_file_name, files, **kwargs):
        options = list(kwargs.get("options") or [])
        for i, path in enumerate(map(Path, files)):
            name = f"graph{i}.o"
            if path.suffix == ".o":
                os.replace(path, out_dir / name)
            elif path.suffix in (".c", ".cc", ".cpp"):  # compile it the way the final link would
                toolchain.compile_object(path, out_dir / name, options, "the graph's C module")
            else:  # a file of the target's fpack_imports: its link reads it
                name = f"graph{i}{path.suffix}"
                os.replace(path, out_dir / name)
            captured.append(name)

    keep.get_target_triple = toolchain.target_triple
    executable.export_library(str(out_dir / "graph.so"), fcompile=keep, workspace_dir=str(out_dir),
                              fpack_imports=fpack_imports)
    return captured


def build_graph(fused, workload_names, target, out_dir: Path, fpack_imports=None) -> list[str]:
    """The VM executable of the graph, as object files in out_dir (returns their names).

    Mirrors ``relax.build`` (what ``tvm.compile`` runs) but leaves the workloads
    out of the TIR it compiles: their objects come from codegen.
    """
    import tvm
    from tvm import relax
    from tvm.relax import vm_build

    with target:
        mod = relax.get_pipeline("default")(fused)
    attrs = dict(mod.attrs) if mod.attrs else {}
    builder = relax.ExecBuilder()
    leftover = vm_build._vmcodegen(builder, mod, "bytecode")
    extra = {gv: f for gv, f in leftover.functions.items()
             if isinstance(f, tvm.tirx.PrimFunc) and gv.name_hint not in workload_names}
    executable = vm_build._vmlink(
        builder, target, tir_mod=tvm.IRModule(extra, attrs=leftover.attrs) if extra else None,
        ext_libs=attrs.get("external_mods", []), params=dict(attrs.get("const_name_to_constant", {})))
    # Objects are made in a private directory, then each is renamed into place:
    # a link running meanwhile (or another doit process partitioning the same
    # model, which makes the same bytes) never sees a half-written object.
    out_dir.mkdir(parents=True, exist_ok=True)
    free_space.require(out_dir.parent, constant_bytes(fused), "the graph's objects (its weights)",
                       margin=4 * 1024 * 1024)
    with tempfile.TemporaryDirectory(dir=out_dir.parent, prefix=".graph-") as private:
        names = _capture_objects(executable, Path(private), fpack_imports)
        for name in names:
            atomic.commit(Path(private) / name, out_dir / name)
    atomic.sweep(out_dir.iterdir(), lambda p: p.name in names)
    return names


def constant_bytes(mod) -> int:
    """The size of the tensors the graph's functions hold (its weights): about what the
    graph's object, which LLVM writes, takes on disk (at most: equal tensors are kept once)."""
    import math

    import tvm
    from tvm import relax

    total = 0

    def visit(expr):
        nonlocal total
        if isinstance(expr, tvm.ir.expr.Constant) and isinstance(expr.value, tvm.runtime.Tensor):
            tensor = expr.value
            total += math.prod(tensor.shape) * tvm.runtime.DataType(str(tensor.dtype)).bits // 8

    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
    return total
