"""codegen: one scheduled workload -> one object file for the target."""

from __future__ import annotations

from pathlib import Path

from . import atomic
from .targets import TargetSpec


def run(lowered_file: Path, out_file: Path, target_spec: TargetSpec, name: str) -> None:
    import tvm

    func = tvm.ir.load_json(lowered_file.read_text())
    # tvm.compile's AttachGlobalSymbol names each kernel after its global var.
    func = func.with_attr("global_symbol", name)
    lib = tvm.tirx.build(tvm.IRModule({name: func}), target=tvm.target.Target(target_spec.tvm_target))
    tmp = atomic.temp_path_for(out_file, suffix=".o")
    try:
        lib.write_to_file(str(tmp))
        atomic.commit(tmp, out_file)
    finally:
        tmp.unlink(missing_ok=True)
