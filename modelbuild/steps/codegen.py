"""codegen: one scheduled workload -> its artifact for the target.

TVM compiles the workload for the target (``tvm.tirx.build``); how that
becomes the artifact file is the target entry's ``emit`` hook (targets.py):
LLVM writes an object itself, the C target's source goes through the system
C compiler, CUDA's kernels through nvcc.

The step compiles bytes already read (the lowered TIR): the build keys the step
with the very bytes it compiles (issue 19).
"""

from __future__ import annotations

from pathlib import Path

from ..core import atomic, collector, free_space
from ..core.errors import BuildError, summarize
from ..core.workloads import load_json
from ..targets.registry import TargetSpec


def compile_to(lowered: bytes, out_file: Path, target_spec: TargetSpec, name: str) -> None:
    """Write the artifact of the scheduled TIR ``lowered`` (lower's output) to ``out_file``."""
    tvm = collector.import_tvm()

    func = load_json(lowered.decode("utf-8"))
    # tvm.compile's AttachGlobalSymbol names each kernel after its global var.
    func = func.with_attr("global_symbol", name)
    try:
        lib = tvm.tirx.build(tvm.IRModule({name: func}),
                             target=tvm.target.Target(target_spec.tvm_target))
    except tvm.error.InternalError as err:
        raise BuildError(
            f"TVM's {target_spec.kind} code generator cannot compile this workload's scheduled "
            f"TIR: {summarize(err, limit=1)}", workload=name,
            hint=f"with a record (schedules/<model>/{name}.json or .py): its schedule is what "
                 "TVM cannot compile: one made for another target (the c target takes llvm's "
                 "records, whose vector widths C cannot express), or decisions far past the "
                 "loops' sizes (a split factor, an unroll step): remove it, or sample one for "
                 "this target. Without one: TVM cannot compile what the default schedule "
                 "made of this workload (an operator LLVM cannot vectorize, such as cosh): "
                 "rerun with MODELBUILD_TRACEBACK=1 and report it") from None
    tmp = atomic.temp_path_for(out_file, suffix=target_spec.artifact_suffix)
    try:
        # LLVM ends the process when it cannot write an object: check for room first.
        free_space.require(out_file.parent, 0, f"the object of workload {name}")
        target_spec.emit(lib, tmp, name, target_spec)
        atomic.commit(tmp, out_file)
    finally:
        tmp.unlink(missing_ok=True)


def run(lowered_file: Path, out_file: Path, target_spec: TargetSpec, name: str) -> None:
    """The artifact of the lowered TIR in ``lowered_file``."""
    compile_to(lowered_file.read_bytes(), out_file, target_spec, name)
