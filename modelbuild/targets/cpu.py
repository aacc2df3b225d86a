"""Hooks of the host CPU targets (``llvm``, ``c``): see registry.py for what each hook does.

``llvm`` builds for this machine's CPU (or the ``mcpu`` asked for). Its artifact
is a plain object file; the graph's executable is
packed by ``export_library`` into an object too, so link is one system-linker
call over all of them.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from pathlib import Path

from . import hostcpu, toolchain


def configure_llvm(spec, options: dict):
    """The ``llvm`` target compiles for this machine's CPU (TVM's LLVM names it; see
    hostcpu.py), or for ``mcpu`` when one is asked for: which one is in the target dict,
    so in every key, and an object built for one CPU is never reused for another."""
    known = hostcpu.host()
    mcpu = options.get("mcpu") or known["cpu"]
    hostcpu.check_cpu(mcpu, known)
    return dataclasses.replace(spec, tvm_target={**spec.tvm_target, "mcpu": mcpu})


def configure_c(spec, _options: dict):
    """The ``c`` target compiles every workload with the system C compiler: which one, and
    its version, are part of the target's key (found at load time, without TVM)."""
    return dataclasses.replace(spec, toolchain=f"cc {toolchain.identity()}")


def vector_floats(tvm_target) -> int:
    """Floats in one vector register of the target's CPU, from its LLVM features: 16 with
    AVX-512, 8 with AVX (AVX2), 4 otherwise (SSE, NEON). A target without an ``mcpu`` (the
    ``c`` target) is taken as this machine's CPU, which its C compiler builds for."""
    import tvm
    from tvm.target import codegen

    target = tvm.target.Target(tvm_target)
    if target.kind.name != "llvm" or "mcpu" not in dict(tvm_target):
        target = tvm.target.Target({"kind": "llvm", "mcpu": hostcpu.host()["cpu"]})
    for feature, floats in (("avx512f", 16), ("avx", 8)):
        if codegen.target_has_features(feature, target):
            return floats
    return 4


def write_object(lib, tmp: Path, _name: str, _target) -> None:
    """LLVM writes the object file itself."""
    lib.write_to_file(str(tmp))


# TVM's C codegen defines these in every source file it writes; one library
# gets one file per workload here, so they must be weak, as LLVM emits them.
_WEAK = ("void* __tvm_ffi__library_ctx = NULL;",
         "TVM_DLL int32_t __tvm_ffi_main(")


def compile_c_source(lib, tmp: Path, name: str, _target) -> None:
    """TVM's C codegen writes C source; the system C compiler makes the object."""
    import tvm
    import tvm_ffi.libinfo

    # The object's symbol table names its source file: the workload's name, in a private
    # folder, so that two builds of the same workload make the same bytes (a temporary
    # file's random name made every c-target object, and library, differ).
    with tempfile.TemporaryDirectory(dir=tmp.parent, prefix=".c-") as private:
        source = Path(private) / f"{name}.c"
        lib.write_to_file(str(source))
        text = source.read_text()
        for definition in _WEAK:
            text = text.replace(definition, "__attribute__((weak)) " + definition)
        source.write_text(text)
        includes = [tvm.libinfo.find_include_path(), tvm_ffi.libinfo.find_include_path(),
                    tvm_ffi.libinfo.find_dlpack_include_path()]
        flat = [p for inc in includes for p in (inc if isinstance(inc, list) else [inc])]
        made = source.with_suffix(".o")
        toolchain.compile_object(source, made, ["-O2", *[f"-I{p}" for p in flat]],
                                 f"the C source of workload {name}")
        os.replace(made, tmp)


def link_objects(artifacts: list[Path], graph: list[Path], out: Path, what: str) -> None:
    """``export_library``'s order: kernels first, then the packed executable."""
    toolchain.link_shared(out, [*artifacts, *graph], what)
