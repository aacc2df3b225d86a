"""Hooks of the ``cuda`` target: see targets.py for what each hook does.

- configure (load time, no TVM): the machine must have an NVIDIA GPU, its
  driver, a TVM with its CUDA runtime and the CUDA toolkit's ``nvcc``;
  otherwise the build stops before anything runs, naming what is missing.
  ``MODELBUILD_CUDA_ARCH=sm_XX`` cross-compiles for that architecture instead
  (only ``nvcc`` needed, the library cannot run here). The GPU's architecture
  and limits (as TVM detects them; CROSS_DEVICE when cross-compiling) and the
  nvcc version become part of the target's key.
- default schedule: what ``tvm.compile``'s CUDA pipeline runs after fusion
  (DLight's default GPU schedules), for workloads without a record.
- codegen: TVM compiles the workload to host code (an LLVM object) and a CUDA
  device module carrying CUDA C source; nvcc compiles that source to a
  fatbin here. The artifact is a tar of the host object and the device module
  (TVM's serialized form, now holding the fatbin).
- graph: the executable's imports are kept as TVM's raw library blob
  (libblob.py) instead of an object, so that link can add the kernels to it.
- link: every workload's device module becomes an import of the library
  module in that blob (as ``export_library`` packs a CUDA module's imports),
  the blob is assembled into an object, and the system linker links it with
  the host objects. No TVM.
"""

from __future__ import annotations

import ctypes
import dataclasses
import glob
import importlib.util
import io
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from ..core.errors import BuildError
from . import libblob, toolchain

ARCH_ENV = "MODELBUILD_CUDA_ARCH"
_ARCH = re.compile(r"sm_(\d+)([a-z]?)")

# tvm.support.nvcc's flags for a CUDA module (without its environment switches);
# the fatbin holds the machine code for the architecture and its PTX, so a newer
# GPU can still load it.
_NVCC_FLAGS = (
    "--fatbin", "-O3",
    "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",
    "-U__CUDA_NO_BFLOAT16_OPERATORS__", "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
    "-U__CUDA_NO_BFLOAT162_OPERATORS__", "-U__CUDA_NO_BFLOAT162_CONVERSIONS__",
    "--expt-relaxed-constexpr", "--expt-extended-lambda", "--use_fast_math",
)


# -- configure: what this machine has -------------------------------------------------

def find_nvcc() -> str | None:
    found = shutil.which("nvcc")
    if found:
        return found
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and (Path(home) / "bin" / "nvcc").is_file():
            return str(Path(home) / "bin" / "nvcc")
    return None


def _nvcc_version(nvcc: str) -> str:
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    found = re.search(r"release [\d.]+, V([\d.]+)", out)
    return found.group(1) if found else "unknown"


def _tvm_has_cuda_runtime() -> bool:
    """Whether the installed TVM ships its CUDA runtime (found without importing TVM)."""
    spec = importlib.util.find_spec("tvm")
    if spec is None or not spec.submodule_search_locations:
        return False
    return any((Path(loc) / "lib" / "libtvm_runtime_cuda.so").is_file()
               for loc in spec.submodule_search_locations)


def _driver():
    try:
        return ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None


# What TVM asks a CUDA device for (tvm.backend.cuda's target detection), by CUdevice_attribute.
_DEVICE_ATTRIBUTES = {"max_threads_per_block": 1, "max_shared_memory_per_block": 8,
                      "thread_warp_size": 10}
# For cross-compiling: the limits every architecture nvcc still supports has.
CROSS_DEVICE = {"max_threads_per_block": 1024, "max_shared_memory_per_block": 49152,
                "thread_warp_size": 32}


def _gpu(driver) -> dict | None:
    """GPU 0 as TVM would detect it (``arch`` = ``sm_XY`` and its limits), from the driver API."""
    device = ctypes.c_int()
    if driver.cuInit(0) != 0 or driver.cuDeviceGet(ctypes.byref(device), 0) != 0:
        return None

    def attribute(number: int) -> int | None:
        value = ctypes.c_int()
        ok = driver.cuDeviceGetAttribute(ctypes.byref(value), number, device) == 0
        return value.value if ok else None

    found = {name: attribute(number) for name, number in _DEVICE_ATTRIBUTES.items()}
    major, minor = attribute(75), attribute(76)  # COMPUTE_CAPABILITY_MAJOR / _MINOR
    if major is None or minor is None or None in found.values():
        return None
    return {"arch": f"sm_{major}{minor}", **found}


def configure(spec, _options: dict):
    """``spec`` completed for this machine (architecture, nvcc), or a BuildError naming
    everything that is missing. Cheap, and without TVM: it runs when doit loads the tasks."""
    arch = os.environ.get(ARCH_ENV, "").strip()
    nvcc = find_nvcc()
    missing, device = [], None
    if nvcc is None:
        missing.append("the CUDA toolkit: no `nvcc` on PATH, in $CUDA_HOME/bin or /usr/local/cuda/bin")
    if arch:
        if not _ARCH.fullmatch(arch):
            raise BuildError(f"{ARCH_ENV}={arch!r} is not a CUDA architecture",
                             hint=f"write it as nvcc does, e.g. {ARCH_ENV}=sm_80")
        device = {**CROSS_DEVICE, "arch": arch}
    else:
        driver = _driver()
        if not glob.glob("/dev/nvidia[0-9]*"):
            missing.append("an NVIDIA GPU: no /dev/nvidia* device")
        if driver is None:
            missing.append("the NVIDIA driver: libcuda.so.1 cannot be loaded "
                           "(TVM's CUDA runtime needs it)")
        if not _tvm_has_cuda_runtime():
            missing.append("a TVM built with CUDA: the installed TVM has no CUDA runtime "
                           "(tvm/lib/libtvm_runtime_cuda.so)")
        if not missing:
            device = _gpu(driver)
            if device is None:
                missing.append("a usable GPU: the driver does not describe GPU 0")
    if missing:
        raise BuildError(
            "target 'cuda' cannot build on this machine, which lacks:\n    - "
            + "\n    - ".join(missing),
            hint="build for the CPU instead: `doit build:<model> target=llvm` (or target=c); "
                 f"to cross-compile the CUDA kernels without a GPU, set {ARCH_ENV}=sm_80 "
                 "(or another architecture; needs nvcc)")
    return dataclasses.replace(spec, tvm_target={**spec.tvm_target, **device},
                               toolchain=f"nvcc {_nvcc_version(nvcc)}")


# -- lower: the default GPU schedule --------------------------------------------------

def default_schedule(func, name: str, target):
    """The passes ``tvm.compile``'s pipeline for ``target`` runs after the fusion passes
    partition already ran: for CUDA, DLight's default schedules (threads bound)."""
    import tvm
    from tvm import relax

    from ..core.passes import PASSES

    passes = [p for p in relax.pipeline.legalize_passes(target) if p.info.name not in PASSES]
    with target:
        mod = tvm.transform.Sequential(passes)(tvm.IRModule({name: func}))
    return mod[name]


# -- codegen: host object + device module with the nvcc-compiled kernels -------------

def compile_kernels(source: str, arch: str, name: str) -> bytes:
    """CUDA C source -> fatbin, with nvcc (in a private directory: output is deterministic)."""
    nvcc = find_nvcc()
    if nvcc is None:
        raise BuildError("nvcc not found to compile the CUDA kernels", workload=name,
                         hint="install the CUDA toolkit, or put its bin/ on PATH")
    number = _ARCH.fullmatch(arch)
    if number is None:
        raise BuildError(f"not a CUDA architecture: {arch!r}", workload=name)
    sm = "".join(number.groups())
    with tempfile.TemporaryDirectory(prefix="modelbuild-nvcc-") as work:
        source_file, out = Path(work) / f"{name}.cu", Path(work) / f"{name}.fatbin"
        source_file.write_text(source)
        toolchain.run([nvcc, *_NVCC_FLAGS, f"-gencode=arch=compute_{sm},code=[sm_{sm},compute_{sm}]",
                       "-o", str(out), str(source_file)],
                      f"compiling the CUDA kernels of workload {name}")
        return out.read_bytes()


def _device_modules(lib, name: str, arch: str) -> list[tuple[str, bytes]]:
    """The workload's device modules as TVM serializes them, CUDA source compiled to a fatbin."""
    from tvm.runtime import _ffi_api

    blob = libblob.parse(_ffi_api.ModulePackImportsToTensor(lib).numpy().tobytes())
    modules = []
    for (kind, payload), module in zip(blob.device_modules(), lib.imports, strict=True):
        if kind != "cuda":
            raise BuildError(f"TVM made a '{kind}' device module; target cuda links only CUDA ones",
                             workload=name)
        fmt, rest = libblob.split_string(payload)
        source = module.inspect_source()
        # A CUDA module serializes as [format][function table][code]; TVM without
        # its CUDA runtime leaves the code as CUDA source ("cuda") for us to compile.
        if fmt == "cuda":
            code = libblob.string(source)
            if not rest.endswith(code):
                raise BuildError("unexpected layout of TVM's CUDA module (cannot find its source)",
                                 workload=name)
            functions = rest[:len(rest) - len(code)]
            fatbin = compile_kernels(source, arch, name)
            payload = libblob.string("fatbin") + functions + libblob.string(fatbin)
        modules.append((kind, payload))
    return modules


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)  # mtime, owner 0: the same bytes every time
    info.size, info.mode = len(data), 0o644
    tar.addfile(info, io.BytesIO(data))


def emit(lib, tmp: Path, name: str, target) -> None:
    """The artifact: a tar of ``host.o`` and ``device<i>.<kind>`` (serialized device modules)."""
    devices = _device_modules(lib, name, target.tvm_target["arch"])
    host = tmp.with_suffix(".host.o")
    try:
        lib.write_to_file(str(host))
        with tarfile.open(tmp, "w", format=tarfile.USTAR_FORMAT) as tar:
            _add(tar, "host.o", host.read_bytes())
            for i, (kind, payload) in enumerate(devices):
                _add(tar, f"device{i}.{kind}", payload)
    finally:
        host.unlink(missing_ok=True)


def read_artifact(path: Path) -> tuple[bytes, list[tuple[str, bytes]]]:
    """(host object, [(kind, device module)]) of a cuda codegen artifact."""
    try:
        with tarfile.open(path) as tar:
            members = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    except (OSError, tarfile.TarError) as err:
        raise BuildError(f"not a cuda codegen artifact: {err}", file=path,
                         hint="delete it; the next build makes it again") from None
    if "host.o" not in members:
        raise BuildError("cuda codegen artifact without host.o", file=path)
    devices = sorted((n for n in members if n.startswith("device")),
                     key=lambda n: int(n[len("device"):].split(".")[0]))
    return members["host.o"], [(n.split(".", 1)[1], members[n]) for n in devices]


# -- partition: keep the graph's imports as a blob ------------------------------------

def pack_graph_imports(module, _is_system_lib, prefix: str, workspace_dir: str) -> str:
    """``export_library``'s fpack_imports: the raw blob, for link to add the kernels to."""
    from tvm.runtime import _ffi_api

    path = Path(workspace_dir) / f"{prefix}imports.blob"
    path.write_bytes(_ffi_api.ModulePackImportsToTensor(module).numpy().tobytes())
    return str(path)


# -- link -------------------------------------------------------------------------------

_BLOB_ASM = """\
    .section .rodata.{symbol},"a"
    .globl {symbol}
    .type {symbol}, @object
    .p2align 4
{symbol}:
    .incbin "{file}"
    .size {symbol}, . - {symbol}
    .section .note.GNU-stack,"",@progbits
"""


def link(artifacts: list[Path], graph: list[Path], out: Path, what: str) -> None:
    blobs = [g for g in graph if g.suffix == ".blob"]
    if len(blobs) != 1:
        raise BuildError(f"the graph of a cuda build has {len(blobs)} import blobs, expected 1",
                         hint="rerun partition (doit forget partition:<model>)")
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=".link-") as work:
        work_dir = Path(work)
        hosts, devices = [], []
        for artifact in artifacts:
            host, modules = read_artifact(artifact)
            hosts.append(work_dir / f"{artifact.name}.o")
            hosts[-1].write_bytes(host)
            devices += modules
        blob = libblob.parse(blobs[0].read_bytes())
        blob.import_into_lib(devices)
        data = work_dir / "imports.bin"
        data.write_bytes(libblob.dump(blob))
        asm = work_dir / "imports.S"
        asm.write_text(_BLOB_ASM.format(symbol=libblob.SYMBOL, file=str(data.resolve())
                                        .replace("\\", "\\\\").replace('"', '\\"')))
        packed = work_dir / "imports.o"
        toolchain.compile_object(asm, packed, [], f"the packed imports of {what}")
        objects = [g for g in graph if g.suffix == ".o"]
        toolchain.link_shared(out, [*hosts, *objects, packed], what)
