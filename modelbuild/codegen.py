"""codegen: one scheduled workload -> one object file for the target.

How a compiled workload becomes an object depends on the target (a table,
keyed by the target's ``emit``): LLVM writes the object itself; the C
target writes C source that the system compiler turns into an object.
"""

from __future__ import annotations

from pathlib import Path

from . import atomic, toolchain
from .targets import TargetSpec


def _write_object(lib, tmp: Path, _name: str) -> None:
    lib.write_to_file(str(tmp))


# TVM's C codegen defines these in every source file it writes; one library
# gets one file per workload here, so they must be weak, as LLVM emits them.
_WEAK = ("void* __tvm_ffi__library_ctx = NULL;",
         "TVM_DLL int32_t __tvm_ffi_main(")


def _compile_c_source(lib, tmp: Path, name: str) -> None:
    import tvm
    import tvm_ffi.libinfo

    source = tmp.with_suffix(".c")
    try:
        lib.write_to_file(str(source))
        text = source.read_text()
        for definition in _WEAK:
            text = text.replace(definition, "__attribute__((weak)) " + definition)
        source.write_text(text)
        includes = [tvm.libinfo.find_include_path(), tvm_ffi.libinfo.find_include_path(),
                    tvm_ffi.libinfo.find_dlpack_include_path()]
        flat = [p for inc in includes for p in (inc if isinstance(inc, list) else [inc])]
        toolchain.compile_object(source, tmp, ["-O2", *[f"-I{p}" for p in flat]],
                                 f"the C source of workload {name}")
    finally:
        source.unlink(missing_ok=True)


EMITTERS = {"object": _write_object, "c-source": _compile_c_source}


def run(lowered_file: Path, out_file: Path, target_spec: TargetSpec, name: str) -> None:
    import tvm

    func = tvm.ir.load_json(lowered_file.read_text())
    # tvm.compile's AttachGlobalSymbol names each kernel after its global var.
    func = func.with_attr("global_symbol", name)
    lib = tvm.tirx.build(tvm.IRModule({name: func}),
                         target=tvm.target.Target(target_spec.tvm_target))
    tmp = atomic.temp_path_for(out_file, suffix=".o")
    try:
        EMITTERS[target_spec.emit](lib, tmp, name)
        atomic.commit(tmp, out_file)
    finally:
        tmp.unlink(missing_ok=True)
