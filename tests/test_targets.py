"""Targets: a registry of what modelbuild builds for; the target is an input of every step."""

import ctypes
import glob
import json
import shutil

import pytest
from conftest import (
    Project,
    assert_close,
    cli,
    load_library,
    make_project,
    model_inputs,
    run_library,
    sha256,
    tiny_conv_workload,
)
from onnx_models import randomized_light, tiny_model

from modelbuild.core import manifest
from modelbuild.core.errors import BuildError
from modelbuild.schedules import records
from modelbuild.schedules import sample as sampling
from modelbuild.targets import cuda as target_cuda
from modelbuild.targets import libblob
from modelbuild.targets import registry as targets

HAS_GPU = bool(glob.glob("/dev/nvidia[0-9]*"))
HAS_NVCC = target_cuda.find_nvcc() is not None


def test_unknown_target_lists_the_known_ones():
    with pytest.raises(BuildError) as info:
        targets.resolve("nosuch")
    assert "unsupported target 'nosuch'" in str(info.value)
    assert "c, cuda, llvm" in str(info.value)


def test_a_name_is_registered_once():
    with pytest.raises(BuildError, match="already registered"):
        targets.register(targets.TargetSpec("llvm", {"kind": "llvm"}))


@pytest.mark.slow
def test_changing_the_target_reruns_every_step_and_builds_for_it(tiny_copy):
    llvm_lib = tiny_copy.library("tiny").read_bytes()
    x = model_inputs(tiny_copy.root, "tiny")
    expected = run_library(tiny_copy.library("tiny"), x)
    man = manifest.read(tiny_copy.root / "build/tiny/partition/manifest.msgpack")
    every = ({"partition:tiny", "link:tiny"}
             | {f"{kind}:tiny/{w.name}" for w in man.workloads for kind in ("lower", "codegen")})

    run = tiny_copy.doit("build:tiny", "target=c")
    assert run.ran == every
    c_lib = tiny_copy.library("tiny").read_bytes()
    assert c_lib != llvm_lib
    assert_close(run_library(tiny_copy.library("tiny"), x), expected)
    # a clean c build elsewhere makes the same bytes (each object named its source file,
    # a temporary file's random name, in its symbol table)
    clean = Project(shutil.copytree(tiny_copy.root, tiny_copy.root.parent / "clean",
                                    ignore=shutil.ignore_patterns("build")))
    clean.doit("build:tiny", "target=c")
    assert clean.library("tiny").read_bytes() == c_lib

    assert tiny_copy.doit("build:tiny", "target=c").ran == set()
    back = tiny_copy.doit("build:tiny")  # back to llvm: every step's llvm output is cached
    assert back.ran == {"link:tiny"} and "partition:tiny" in back.from_cache, back.output
    assert tiny_copy.library("tiny").read_bytes() == llvm_lib
    assert_close(run_library(tiny_copy.library("tiny"), x), expected, rel=0)


@pytest.mark.slow
def test_resnet50_for_c_equals_llvm(tmp_path):
    """The issue's check: the C codegen and LLVM builds of resnet50 compute the same
    (random weights, so that a wrong kernel shows)."""
    project = make_project(tmp_path / "p", {"resnet50": randomized_light("resnet50")})
    project.doit("-n", "2", "build:resnet50")
    x = model_inputs(project.root, "resnet50")
    llvm_out, llvm_lib = run_library(project.library("resnet50"), x), sha256(project.library("resnet50"))
    project.doit("-n", "2", "build:resnet50", "target=c")
    c_out = run_library(project.library("resnet50"), x)
    assert sha256(project.library("resnet50")) != llvm_lib
    assert float(llvm_out.std()) > 0
    assert_close(c_out, llvm_out)


# -- a new target is one registry entry ---------------------------------------------------

PLUGIN = '''
from modelbuild.targets import TargetSpec, register

# LLVM for a baseline x86-64 CPU: a target of its own, defined outside modelbuild.
register(TargetSpec("llvm-baseline", {"kind": "llvm", "mcpu": "x86-64"},
                    "x86-64 without newer instruction sets", records_from=("llvm",)))
'''


@pytest.mark.slow
def test_a_target_registered_in_the_project_builds(tmp_path):
    project = make_project(tmp_path / "p", {"tiny": tiny_model()})
    with open(project.root / "dodo.py", "a") as dodo:
        dodo.write(PLUGIN)
    project.doit("build:tiny")
    x = model_inputs(project.root, "tiny")
    expected = run_library(project.library("tiny"), x)
    run = project.doit("build:tiny", "target=llvm-baseline")
    assert "link:tiny" in run.ran and len(run.ran_kind("codegen")) > 0
    assert_close(run_library(project.library("tiny"), x), expected)


@pytest.mark.slow
def test_a_target_module_named_in_pyproject_is_seen_by_doit_and_the_commands(tmp_path):
    project = make_project(tmp_path / "p", {"tiny": tiny_model()})
    (project.root / "my_targets.py").write_text(PLUGIN)
    (project.root / "pyproject.toml").write_text('[tool.modelbuild]\ntargets = ["my_targets"]\n')
    run = project.doit("build:tiny", "target=llvm-baseline")
    assert "link:tiny" in run.ran
    proc = cli(project, "why", "tiny", "--target", "llvm-baseline", "--json")
    assert json.loads(proc.stdout) == []
    (project.root / "pyproject.toml").write_text('[tool.modelbuild]\ntargets = ["no_such_module"]\n')
    run = project.doit("build:tiny", check=False)
    assert run.returncode != 0 and "cannot import target module 'no_such_module'" in run.output
    assert "Traceback" not in run.output


# -- cuda -----------------------------------------------------------------------------------

@pytest.mark.skipif(HAS_GPU, reason="this machine has a GPU")
def test_cuda_fails_clearly_here(tiny_project, monkeypatch):
    monkeypatch.delenv(target_cuda.ARCH_ENV, raising=False)
    run = tiny_project.doit("build:tiny", "target=cuda", check=False)
    assert run.returncode != 0
    assert "target 'cuda' cannot build on this machine" in run.output
    assert "no /dev/nvidia* device" in run.output  # names what is missing ...
    assert "target=llvm" in run.output and target_cuda.ARCH_ENV in run.output  # ... and what to do
    assert "Traceback" not in run.output
    assert not (tiny_project.root / "build" / "tiny").exists()  # nothing built, nothing to reuse


@pytest.mark.skipif(HAS_GPU, reason="this machine has a GPU")
def test_cuda_failure_keeps_the_last_library(tiny_copy, monkeypatch):
    monkeypatch.delenv(target_cuda.ARCH_ENV, raising=False)
    before = sha256(tiny_copy.library("tiny"))
    run = tiny_copy.doit("build:tiny", "target=cuda", check=False)
    assert run.returncode != 0 and "Traceback" not in run.output
    assert sha256(tiny_copy.library("tiny")) == before
    assert not list((tiny_copy.root / "build" / "tiny" / "objects").glob("*.cuda.tar"))


def test_cuda_names_a_missing_toolkit(monkeypatch):
    monkeypatch.setenv(target_cuda.ARCH_ENV, "sm_80")
    monkeypatch.setattr(target_cuda, "find_nvcc", lambda: None)
    with pytest.raises(BuildError) as info:
        targets.resolve("cuda")
    assert "the CUDA toolkit: no `nvcc`" in str(info.value)


def test_cuda_refuses_a_malformed_architecture(monkeypatch):
    monkeypatch.setenv(target_cuda.ARCH_ENV, "80")
    with pytest.raises(BuildError, match="is not a CUDA architecture"):
        targets.resolve("cuda")


def _library_blob(path, tmp_path) -> libblob.Blob:
    """The import blob the dynamic loader finds in the library (a fresh copy: see load_library)."""
    import tvm  # noqa: F401  (loads libtvm_ffi, which the library links against)

    copy = tmp_path / f"inspected{len(list(tmp_path.glob('inspected*.so')))}.so"  # never rewrite a loaded file
    shutil.copyfile(path, copy)
    lib = ctypes.CDLL(str(copy), mode=ctypes.RTLD_LOCAL)
    head = ctypes.c_uint64.in_dll(lib, libblob.SYMBOL)
    return libblob.parse(ctypes.string_at(ctypes.addressof(head), head.value + 8))


@pytest.mark.slow
@pytest.mark.skipif(not HAS_NVCC, reason="no nvcc")
def test_cuda_cross_compiles_and_keeps_targets_apart(tiny_copy, monkeypatch, tmp_path):
    """Without a GPU, MODELBUILD_CUDA_ARCH builds the library; it cannot run here, so the
    checks are on its content: every workload's kernels, compiled by nvcc, imported by the
    library module next to the graph's executable, as export_library would pack them."""
    import tvm

    x = model_inputs(tiny_copy.root, "tiny")
    expected = run_library(tiny_copy.library("tiny"), x)
    monkeypatch.setenv(target_cuda.ARCH_ENV, "sm_80")
    run = tiny_copy.doit("build:tiny", "target=cuda")
    man = manifest.read(tiny_copy.root / "build/tiny/partition/manifest.msgpack")
    assert run.ran_kind("codegen") == {f"codegen:tiny/{w.name}" for w in man.workloads}

    blob = _library_blob(tiny_copy.library("tiny"), tmp_path)
    assert blob.modules[0][0] == "relax.VMExecutable"
    assert blob.children[0] == [blob.lib_index()]
    devices = blob.device_modules()
    assert [kind for kind, _ in devices] == ["cuda"] * len(man.workloads)
    for _, payload in devices:
        fmt, rest = libblob.split_string(payload)
        assert fmt == "fatbin" and b"\x50\xed\x55\xba" in rest  # nvcc's fatbin magic
    kernels = b"".join(payload for _, payload in devices)
    for w in man.workloads:
        assert f"{w.name}_kernel".encode() in kernels

    with pytest.raises(Exception, match=r"ffi\.Module\.load_from_bytes\.cuda"):
        load_library(tiny_copy.library("tiny"))  # loads all but the kernels: no CUDA runtime here

    # A record made for cuda (MetaSchedule's GPU design space) replaces the default schedule.
    workload = tiny_conv_workload(tiny_copy)
    func = tvm.ir.load_json(tiny_copy.workload_file("tiny", workload).read_text())
    record = sampling.sample_records(func, workload, targets.resolve("cuda"), 1, model="tiny")[0]
    records.save(tiny_copy.record("tiny", workload), record)
    run = tiny_copy.doit("build:tiny", "target=cuda")
    assert run.ran == {f"lower:tiny/{workload}", f"codegen:tiny/{workload}", "link:tiny"}
    assert len(_library_blob(tiny_copy.library("tiny"), tmp_path).device_modules()) == len(man.workloads)
    tiny_copy.record("tiny", workload).unlink()

    # Back to llvm: nothing of the cuda build is used, the library computes as before.
    monkeypatch.delenv(target_cuda.ARCH_ENV)
    back = tiny_copy.doit("build:tiny")
    assert "link:tiny" in back.ran
    assert_close(run_library(tiny_copy.library("tiny"), x), expected, rel=0)


@pytest.mark.skipif(not HAS_NVCC, reason="no nvcc")
def test_cuda_arch_is_part_of_the_key(monkeypatch):
    monkeypatch.setenv(target_cuda.ARCH_ENV, "sm_80")
    a = targets.resolve("cuda")
    monkeypatch.setenv(target_cuda.ARCH_ENV, "sm_90")
    b = targets.resolve("cuda")
    assert a.key() != b.key() and "sm_80" in a.key() and "nvcc" in a.key()


def _kernels(source: str) -> dict[str, str]:
    """name -> text of each __global__ function in CUDA source."""
    import re

    chunks = re.split(r'(?=extern "C" __global__)', source)[1:]
    out = {}
    for chunk in chunks:
        name = re.search(r"void\s+(?:__launch_bounds__\(\d+\)\s+)?(\w+)\(", chunk).group(1)
        out[name] = chunk.strip()
    return out


def test_cuda_kernels_equal_tvm_compiles_without_nvcc_or_gpu(tiny_built):
    """The cuda path up to nvcc, which CI can run: partition's fusion for cuda, lower's default
    schedule (the target's hook, DLight), TVM's CUDA codegen of each workload alone; every
    kernel is the one tvm.compile emits for the whole model, character for character."""
    import dataclasses

    import tvm

    from modelbuild.core import models
    from modelbuild.steps import onnx_import, partition

    entry = targets.TARGETS["cuda"]
    spec = dataclasses.replace(entry, tvm_target={**entry.tvm_target, **target_cuda.CROSS_DEVICE,
                                                  "arch": "sm_80"})
    target = tvm.target.Target(spec.tvm_target)
    model = models.discover(tiny_built.root / "models")["tiny"]
    fused = partition.fuse(onnx_import.import_model(model), target)
    ours = {}
    for name, func in partition.workloads_of(fused).items():
        scheduled = spec.default_schedule(func, name, target).with_attr("global_symbol", name)
        lib = tvm.tirx.build(tvm.IRModule({name: scheduled}), target=target)
        ours.update(_kernels(lib.imports[0].inspect_source()))
    whole = tvm.compile(fused, target)  # VM executable -> host (llvm) module -> cuda module

    def cuda_modules(module):
        return [module] if module.kind == "cuda" else [m for i in module.imports
                                                       for m in cuda_modules(i)]

    theirs = {}
    for module in cuda_modules(whole.mod):
        theirs.update(_kernels(module.inspect_source()))
    assert ours and set(ours) == set(theirs)
    assert ours == theirs


@pytest.mark.slow
def test_llvm_builds_for_this_machines_cpu_and_mcpu_chooses_another(tiny_copy):
    """The CPU is in every key: objects for one CPU are never restored for another, and
    going back restores them. The host's CPU comes from TVM's LLVM, asked once and
    remembered (no TVM in the doit process)."""
    import subprocess
    import sys

    from modelbuild.targets import hostcpu

    host = hostcpu.host()["cpu"]
    assert targets.resolve("llvm").tvm_target == {"kind": "llvm", "mcpu": host}
    objects = tiny_copy.objects("tiny")
    why = subprocess.run([sys.executable, "-m", "modelbuild", "why", "tiny", "--mcpu", "x86-64",
                          "--json"], cwd=tiny_copy.root, capture_output=True, text=True)
    assert f"target changed (mcpu: {host} -> x86-64)" in why.stdout
    other = tiny_copy.doit("build:tiny", "mcpu=x86-64")
    assert other.ran_kind("codegen") and not other.from_cache
    assert tiny_copy.objects("tiny") != objects
    x = model_inputs(tiny_copy.root, "tiny")
    expected = run_library(tiny_copy.library("tiny"), x)
    back = tiny_copy.doit("build:tiny")
    # x86-64 (no AVX) blocks channels by 4, not by the host's vector: its workloads need not
    # have the host's names; those whose objects it replaced come back from the cache
    restored = {t for t in back.from_cache if t.startswith("codegen:")}
    assert restored and restored <= {f"codegen:tiny/{name[:-2]}" for name in objects}
    assert not back.ran_kind("codegen"), back.output
    assert tiny_copy.objects("tiny") == objects
    assert_close(run_library(tiny_copy.library("tiny"), x), expected)
    bad = tiny_copy.doit("build:tiny", "mcpu=nosuch", check=False)
    assert bad.returncode != 0 and "mcpu=nosuch: not a CPU that TVM's LLVM knows" in bad.output
    bad = tiny_copy.doit("build:tiny", "target=c", "mcpu=x86-64", check=False)
    assert bad.returncode != 0 and "target 'c' takes no option mcpu" in bad.output


@pytest.mark.parametrize("module, source, said", [
    ("../my_targets", None, "targets names '../my_targets', which is no module name"),
    ("my_targets", "def f(:\n", "the target module 'my_targets' failed as it was imported (line 1): SyntaxError"),
    ("my_targets", "raise RuntimeError('no GPU here')\n", "failed as it was imported: RuntimeError: no GPU here"),
    ("my_targets", "import sys\nsys.exit(3)\n", "failed as it was imported: SystemExit: 3"),
    ("my_targets", "from modelbuild.targets import TargetSpec, register\n"
                   "register(TargetSpec('bad', 'llvm', 'a string target'))\n",
     "target 'bad': its TVM target must be a dict with a kind"),
])
def test_a_target_module_that_fails_is_one_error_naming_it(tmp_path, module, source, said):
    """Each was a traceback (or, for sys.exit, exit 3 with no word at all)."""
    project = make_project(tmp_path / "p", {"tiny": tiny_model()})
    if source is not None:
        (project.root / "my_targets.py").write_text(source)
    (project.root / "pyproject.toml").write_text(f'[tool.modelbuild]\ntargets = ["{module}"]\n')
    run = project.doit("build:tiny", check=False)
    assert run.returncode != 0 and "Traceback" not in run.output, run.output
    assert said in run.output, run.output
    proc = cli(project, "inspect", "tiny", check=False)
    assert proc.returncode != 0 and said in proc.stderr and "Traceback" not in proc.stderr, proc
