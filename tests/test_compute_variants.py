"""Per-workload compute variants (issue 20): a record names a workload's compute (Winograd
for a 3x3, stride-1 convolution); the build uses that compute's TIR, matches onnxruntime,
reruns exactly what depends on the switch, and a switch back is a cache hit."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import (REPO, assert_close, make_project, model_inputs, onnx_output,
                      reference_output, run_library, tiny_conv_workload, tiny_model)

from modelbuild.core import models as models_mod

MODEL = "tiny"


def _winograd(project, workload: str, **extra) -> None:
    path = project.record(MODEL, workload)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"format": "modelbuild.record/1", "workload": workload,
                                "compute": "winograd", **extra}, indent=1))


def _why(project) -> list[dict]:
    proc = subprocess.run([sys.executable, "-m", "modelbuild", "why", MODEL, "--json"],
                          cwd=project.root, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _relative_error(project) -> float:
    inputs = model_inputs(project.root, MODEL)
    expected = onnx_output(project.root, MODEL, inputs)
    actual = run_library(project.library(MODEL), inputs)
    return float(np.abs(actual - expected).max() / np.abs(expected).max())


def test_partition_writes_a_winograd_tir_for_each_3x3_stride1_conv(tiny_built):
    folder = tiny_built.root / "build" / MODEL / "partition" / "computes"
    variants = sorted(p.name for p in folder.glob("*@winograd.json"))
    # both convolutions of the tiny model are 3x3, stride 1; nothing else is
    assert len(variants) == 2 and all("conv2d" in v for v in variants), variants
    assert tiny_conv_workload(tiny_built) + "@winograd.json" in variants


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["NCHW", "NCHWc"])
def test_winograd_in_each_layout_computes_winograd_and_matches_onnxruntime(tmp_path, layout):
    """NCHWc is the CPU default (the other tests); NCHW keeps its own Winograd rule."""
    project = make_project(tmp_path / "p", {MODEL: tiny_model()})
    (project.root / "models" / f"{MODEL}.toml").write_text(
        f'onnx = "{MODEL}.onnx"\nlayout = "{layout}"\n')
    project.doit(f"partition:{MODEL}")
    folder = project.root / "build" / MODEL / "partition" / "computes"
    convs = [p.name.split("@")[0] for p in folder.glob("*@winograd.json")]
    assert len(convs) == 2 and all(("NCHWc" in w) == (layout == "NCHWc") for w in convs), convs
    for workload in convs:
        _winograd(project, workload)
    project.doit(f"build:{MODEL}")
    for workload in convs:  # Winograd's stages, not a direct convolution
        lowered = (project.root / "build" / MODEL / "lowered" / f"{workload}.json").read_text()
        assert "bgemm" in lowered and "inverse" in lowered
    assert _relative_error(project) <= 1e-3


def test_winograd_records_build_and_match_onnxruntime(tiny_copy):
    direct = tiny_copy.objects(MODEL)
    folder = tiny_copy.root / "build" / MODEL / "partition" / "computes"
    convs = [p.name.split("@")[0] for p in folder.glob("*@winograd.json")]
    for workload in convs:
        _winograd(tiny_copy, workload)
    tiny_copy.doit(f"build:{MODEL}")
    changed = {n for n, data in tiny_copy.objects(MODEL).items() if direct[n] != data}
    assert changed == {f"{w}.o" for w in convs}  # the Winograd code is what got built
    error = _relative_error(tiny_copy)
    print(f"Winograd tiny model: max |ours - onnxruntime| / max |onnxruntime| = {error:.2e}")
    assert error <= 1e-3


@pytest.mark.slow
def test_switching_compute_reruns_what_why_predicts_and_switching_back_is_a_cache_hit(
        tiny_copy):
    workload = tiny_conv_workload(tiny_copy)
    before = tiny_copy.objects(MODEL)
    _winograd(tiny_copy, workload)
    predicted = _why(tiny_copy)
    expected = {f"lower:{MODEL}/{workload}", f"codegen:{MODEL}/{workload}", f"link:{MODEL}"}
    assert {v["task"] for v in predicted if v["action"] == "run"} == expected
    reasons = " ".join(r for v in predicted for r in v["reasons"])
    assert "compute winograd" in reasons and "winograd compute's" in reasons
    run = tiny_copy.doit(f"build:{MODEL}")
    assert run.ran == expected
    winograd = tiny_copy.objects(MODEL)

    tiny_copy.record(MODEL, workload).unlink()  # back to the direct compute
    back = tiny_copy.doit(f"build:{MODEL}")
    assert not back.ran_kind("lower") and not back.ran_kind("codegen")
    assert {f"lower:{MODEL}/{workload}", f"codegen:{MODEL}/{workload}"} <= back.from_cache
    assert tiny_copy.objects(MODEL) == before

    _winograd(tiny_copy, workload)  # and to Winograd again: from the cache too
    again = tiny_copy.doit(f"build:{MODEL}")
    assert not again.ran_kind("lower") and not again.ran_kind("codegen")
    assert tiny_copy.objects(MODEL) == winograd


@pytest.mark.slow
def test_incremental_switch_equals_a_clean_build(tiny_copy, tmp_path):
    workload = tiny_conv_workload(tiny_copy)
    _winograd(tiny_copy, workload)
    tiny_copy.doit(f"build:{MODEL}")
    clean = make_project(tmp_path / "clean", {MODEL: tiny_model()})
    shutil.copytree(tiny_copy.root / "schedules" / MODEL, clean.root / "schedules" / MODEL)
    clean.doit(f"build:{MODEL}")
    assert clean.objects(MODEL) == tiny_copy.objects(MODEL)


@pytest.mark.slow
def test_a_compute_the_workload_lacks_is_refused_in_one_line(tiny_copy):
    workload = tiny_conv_workload(tiny_copy)
    matmul = next(p.stem for p in (tiny_copy.root / "build" / MODEL / "partition"
                                   / "workloads").glob("*matmul*.json") if "@" not in p.stem)
    _winograd(tiny_copy, workload)
    (tiny_copy.record(MODEL, workload)).write_text(
        tiny_copy.record(MODEL, workload).read_text().replace("winograd", "fft"))
    run = tiny_copy.doit(f"build:{MODEL}", check=False)
    assert run.returncode != 0 and "Traceback" not in run.output
    line = next(ln for ln in run.output.splitlines() if "compute 'fft'" in ln)
    assert f"workload {workload} does not have; its computes: direct, winograd" in line
    _winograd(tiny_copy, matmul)  # a matrix multiply has no Winograd compute
    tiny_copy.record(MODEL, workload).unlink()
    run = tiny_copy.doit(f"build:{MODEL}", check=False)
    assert run.returncode != 0 and "Traceback" not in run.output
    assert f"workload {matmul} does not have; its computes: direct" in run.output


@pytest.mark.slow
def test_a_trace_for_the_winograd_tir_applies_to_it(tiny_copy):
    import tvm

    from modelbuild.schedules import sample
    from modelbuild.targets import registry

    workload = tiny_conv_workload(tiny_copy)
    tir = (tiny_copy.root / "build" / MODEL / "partition" / "computes"
           / f"{workload}@winograd.json")
    rec = sample.sample_records(tvm.ir.load_json(tir.read_text()), workload,
                                registry.resolve("llvm"), 1, seed=3, model=MODEL)[0]
    data = rec.to_json()
    _winograd(tiny_copy, workload, **{k: data[k] for k in ("workload_hash", "target", "trace")})
    run = tiny_copy.doit(f"build:{MODEL}")
    assert run.ran_kind("lower") == {f"lower:{MODEL}/{workload}"}
    assert _relative_error(tiny_copy) <= 1e-3
    # the same trace without "compute" is a trace of the direct TIR: stale there
    path = tiny_copy.record(MODEL, workload)
    plain = json.loads(path.read_text())
    del plain["compute"]
    path.write_text(json.dumps(plain))
    failed = tiny_copy.doit(f"build:{MODEL}", check=False)
    assert failed.returncode != 0 and "Traceback" not in failed.output



DECLARED = sorted(models_mod.discover(REPO / "models"))
_slow = pytest.mark.skipif(not os.environ.get("MODELBUILD_SLOW_TESTS"),
                           reason="slow (~110 s); set MODELBUILD_SLOW_TESTS=1 to run")


# In the NCHW layout inception_v1's 10 Winograd workloads together gave 1.8e-3 (over the
# issue's 1e-3); in the blocked layout, now the default, they pass (the error is printed).
_MARKS = {"densenet121": _slow}


@pytest.mark.slow
@pytest.mark.parametrize("name", [pytest.param(n, marks=_MARKS[n]) if n in _MARKS else n
                                  for n in DECLARED])
def test_declared_model_with_every_winograd_variant_matches_onnxruntime(name,
                                                                        declared_partitioned):
    project = declared_partitioned(name)  # shared: the records are removed afterwards
    folder = project.root / "build" / name / "partition" / "computes"
    convs = sorted(p.name.split("@")[0] for p in folder.glob("*@winograd.json"))
    assert convs, f"{name} has no 3x3 stride-1 convolution?"
    try:
        for workload in convs:
            path = project.record(name, workload)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"format": "modelbuild.record/1", "workload": workload,
                                        "compute": "winograd"}))
        run = project.doit(f"build:{name}")
        assert {f"lower:{name}/{w}" for w in convs} <= run.ran | run.from_cache
        x = model_inputs(project.root, name)
        ours = run_library(project.library(name), x)
        expected = onnx_output(project.root, name, x)
        error = float(np.abs(ours - expected).max() / np.abs(expected).max())
        print(f"{name}: {len(convs)} Winograd workloads; max |ours - onnxruntime| / "
              f"max |onnxruntime| = {error:.2e}")
        assert error <= 1e-3
        assert_close(ours, reference_output(project, name, x))  # tvm.compile, same computes
    finally:
        for workload in convs:
            project.record(name, workload).unlink(missing_ok=True)


@pytest.mark.slow
def test_record_commands_handle_a_workload_s_compute(tiny_copy, tmp_path):
    from conftest import cli

    workload = tiny_conv_workload(tiny_copy)
    cli(tiny_copy, "select", MODEL, workload, "winograd")
    rows = {r["workload"]: r for r in json.loads(cli(tiny_copy, "inspect", MODEL, "--json").stdout)}
    assert rows[workload]["compute"] == "winograd"
    assert rows[workload]["computes"] == ["direct", "winograd"]
    assert all(r["computes"] == ["direct"] for r in rows.values() if "conv2d" not in r["workload"])
    shown = cli(tiny_copy, "explain", MODEL, workload).stdout
    assert "compute: winograd (it could use: direct" in shown and "@winograd.json" in shown
    assert "ok" in cli(tiny_copy, "check", MODEL).stdout
    # MetaSchedule's database holds traces: a compute with the default schedule is left out
    assert "not exported" in cli(tiny_copy, "export", MODEL, str(tmp_path / "db0")).stdout
    # traces of the Winograd TIR: sampled, selected, exported, imported back as a compute record
    sampled = cli(tiny_copy, "sample", MODEL, workload, "--compute", "winograd", "-n", "1")
    assert "kept" not in cli(tiny_copy, "select", MODEL, workload, "direct").stdout + \
        sampled.stdout  # what `select winograd` wrote is no record of the user's to keep
    cli(tiny_copy, "select", MODEL, workload, "winograd")
    variant = json.loads((tiny_copy.root / "schedules" / MODEL / "variants" / workload
                          / "1.json").read_text())
    assert variant["compute"] == "winograd" and variant["trace"]
    cli(tiny_copy, "select", MODEL, workload, "1")
    assert "ok" in cli(tiny_copy, "check", MODEL).stdout
    assert "exported 1 record" in cli(tiny_copy, "export", MODEL, str(tmp_path / "db")).stdout
    tiny_copy.record(MODEL, workload).unlink()
    cli(tiny_copy, "import", MODEL, str(tmp_path / "db"))
    imported = json.loads(tiny_copy.record(MODEL, workload).read_text())
    assert imported["compute"] == "winograd" and imported["trace"] == variant["trace"]
    # back to direct; a compute the workload lacks is one line
    cli(tiny_copy, "select", MODEL, workload, "direct")
    assert not tiny_copy.record(MODEL, workload).exists()
    refused = cli(tiny_copy, "select", MODEL, "mean", "winograd", check=False)
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert "no compute 'winograd'; its computes: direct" in refused.stdout + refused.stderr


@pytest.mark.slow
def test_a_partition_restored_from_the_cache_brings_its_computes(tiny_copy):
    computes = tiny_copy.root / "build" / MODEL / "partition" / "computes"
    made = {p.name: p.read_bytes() for p in computes.glob("*.json")}
    assert made
    workload = tiny_conv_workload(tiny_copy)
    shutil.rmtree(tiny_copy.root / "build" / MODEL / "partition")
    _winograd(tiny_copy, workload)
    run = tiny_copy.doit(f"build:{MODEL}")
    assert f"partition:{MODEL}" in run.from_cache  # the cache entry passed its checks
    assert {p.name: p.read_bytes() for p in computes.glob("*.json")} == made
    assert run.ran_kind("lower") == {f"lower:{MODEL}/{workload}"}
    assert _relative_error(tiny_copy) <= 1e-3


@pytest.mark.parametrize("size", [(14, 10), (7, 7), (8, 8), (5, 13)])
def test_the_winograd_compute_reads_inside_its_buffers_whatever_the_output_size(size):
    """TOPI's tiles read rows and columns past its padded input when the output is no
    multiple of 4: a record that keeps that input in a buffer read garbage (exit 0, 1e27 x
    the output). Unscheduled (every stage its own buffer) and with TVM's bound checks on,
    the compute runs and equals a direct convolution."""
    import numpy as np
    import tvm
    from tvm import te

    from modelbuild.steps import compute_variants

    h, w = size
    data, kernel = te.placeholder((1, 16, h, w), name="x"), te.placeholder((16, 16, 3, 3), name="k")
    out = compute_variants.winograd_nchw(data, kernel, [1, 1, 1, 1])
    assert [int(d) for d in out.shape] == [1, 16, h, w]
    with tvm.transform.PassContext(config={"tirx.instrument_bound_checkers": True}):
        lib = tvm.compile(te.create_prim_func([data, kernel, out]), target="llvm")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 16, h, w)).astype("float32")
    k = rng.standard_normal((16, 16, 3, 3)).astype("float32")
    y = tvm.runtime.tensor(np.zeros((1, 16, h, w), "float32"))
    lib(tvm.runtime.tensor(x), tvm.runtime.tensor(k), y)
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    direct = np.zeros((1, 16, h, w), "float32")
    for i in range(3):
        for j in range(3):
            direct += np.einsum("nchw,oc->nohw", padded[:, :, i:i + h, j:j + w], k[:, :, i, j])
    np.testing.assert_allclose(y.numpy(), direct, rtol=1e-3, atol=1e-3 * np.abs(direct).max())


@pytest.mark.slow
@pytest.mark.parametrize("compute", ["direct", "winograd"])
def test_one_seed_samples_the_same_records_every_time(tiny_built, compute):
    """`sample --seed S` is a reproducible command: the design space it samples from was
    drawn with a random state of its own, so one seed gave other records (or none) from
    one run to the next."""
    import tvm

    from modelbuild.schedules import sample
    from modelbuild.targets import registry

    workload = tiny_conv_workload(tiny_built)
    folder = tiny_built.root / "build" / MODEL / "partition"
    tir = (folder / "computes" / f"{workload}@winograd.json" if compute == "winograd"
           else folder / "workloads" / f"{workload}.json")
    func = tvm.ir.load_json(tir.read_text())
    drawn = {json.dumps([r.to_json() for r in sample.sample_records(
        func, workload, registry.resolve("llvm"), 3, seed=5, model=MODEL)], sort_keys=True)
        for _ in range(16)}
    assert len(drawn) == 1, f"{len(drawn)} different sets of records from one seed"


@pytest.mark.slow
def test_sample_of_a_compute_reads_the_partition_of_the_layout_it_samples_for(tiny_copy,
                                                                               tiny_built):
    """With build/ partitioned in another layout (or for an older model), `sample --compute`
    partitions privately, as the direct compute does, but read the compute's TIR from build/:
    "no compute 'winograd'", or records of the other model's TIR, with exit 0."""
    from conftest import cli

    from modelbuild.core.workloads import load_json, structural_hash

    tiny_copy.doit(f"build:{MODEL}", "layout=NCHW")
    workload = tiny_conv_workload(tiny_built)  # the blocked layout's, which sample builds
    cli(tiny_copy, "sample", MODEL, workload, "--compute", "winograd", "-n", "1", "--seed", "3")
    variant = json.loads((tiny_copy.root / "schedules" / MODEL / "variants" / workload
                          / "1.json").read_text())
    tir = (tiny_built.root / "build" / MODEL / "partition" / "computes"
           / f"{workload}@winograd.json")
    assert variant["compute"] == "winograd"
    assert variant["workload_hash"] == structural_hash(load_json(tir.read_text()))


def _miscompiled_project(tmp_path):
    """A 3x3 conv (batch 2, 33 -> 3 channels, 5x6: no whole Winograd tiles) in NCHW, and a
    sampled Winograd trace of it that TVM compiles into wrong code (a differential run's:
    off by 42% of the output, in the library and in plain tvm.compile alike)."""
    from onnx import TensorProto as TP
    from onnx import helper as H
    from onnx import numpy_helper

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((3, 33, 3, 3)) / np.sqrt(297))
                                .astype(np.float32), "w")
    b = numpy_helper.from_array((rng.standard_normal(3) * 0.1).astype(np.float32), "b")
    graph = H.make_graph([H.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
                          H.make_node("Relu", ["c"], ["y"])], "m",
                         [H.make_tensor_value_info("x", TP.FLOAT, [2, 33, 5, 6])],
                         [H.make_tensor_value_info("y", TP.FLOAT, [2, 3, 5, 6])],
                         initializer=[w, b])
    model = H.make_model(graph, opset_imports=[H.make_opsetid("", 13)], ir_version=8)
    project = make_project(tmp_path / "p", {"m": model})
    (project.root / "models" / "m.toml").write_text('layout = "NCHW"\n')
    project.doit("build:m")
    bad = (Path(__file__).parent / "data" / "winograd_record_tvm_miscompiles.json").read_text()
    return project, "fused_conv2d_add_relu", bad


@pytest.mark.slow
def test_a_record_tvm_miscompiles_is_caught_by_the_numeric_check(tmp_path):
    """The check sample and import run: the record's kernel against the workload itself."""
    import tvm

    from modelbuild.core.paths import Project as Layouts
    from modelbuild.core.workloads import copy
    from modelbuild.schedules import numeric_check
    from modelbuild.schedules.active import of_json
    from modelbuild.schedules.apply import apply_record
    from modelbuild.targets import registry

    project, workload, bad = _miscompiled_project(tmp_path)
    spec = registry.resolve("llvm")
    layout = Layouts(project.root).model("m")
    func = tvm.ir.load_json(layout.workload(workload, "winograd").read_text())
    record = of_json(workload, layout.record(workload), bad.encode()).record
    reference = numeric_check.Reference(func, workload, spec)
    wrong = reference.difference(apply_record(copy(func), workload, record,
                                              tvm.target.Target(spec.tvm_target)))
    assert wrong > 0.1
    default = spec.default_schedule(copy(func), workload, tvm.target.Target(spec.tvm_target))
    assert reference.difference(default) < numeric_check.TOLERANCE


@pytest.mark.slow
def test_import_leaves_out_a_record_tvm_miscompiles(tmp_path):
    """MetaSchedule's search keeps the fastest candidate, never comparing numbers: a tuned
    (or imported) record whose code is wrong built a wrong library, exit 0. import (and
    tune, which imports) leaves it out and says why."""
    from conftest import cli

    project, workload, bad = _miscompiled_project(tmp_path)
    record = project.record("m", workload)
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(bad)
    assert "exported 1 record" in cli(project, "export", "m", str(tmp_path / "db")).stdout
    record.unlink()
    done = cli(project, "import", "m", str(tmp_path / "db"), "--json")
    report = json.loads(done.stdout)
    assert report["wrong"] == [workload] and report["written"] == [], report
    assert not record.exists()


@pytest.mark.slow
def test_check_names_a_record_tvm_miscompiles(tmp_path):
    """A record already on disk (hand-copied, from an older modelbuild): `check` said ok."""
    from conftest import cli

    project, workload, bad = _miscompiled_project(tmp_path)
    record = project.record("m", workload)
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(bad)
    checked = cli(project, "check", "m", check=False)
    assert checked.returncode == 1, checked.stdout
    assert "its kernel computes other numbers than the workload" in checked.stdout


@pytest.mark.slow
def test_a_record_tvm_miscompiles_before_a_clip_is_caught(tmp_path):
    """A differential run's: a chain of odd 3x3 convolutions ending in Clip, whose last
    workload got a sampled Winograd record that TVM compiles into wrong code (the library
    off by 7x the output). sample kept it and check said ok: the numeric check drew the
    Clip's bounds at random, crossed, and every output of both kernels was one value."""
    import onnx
    from conftest import cli

    data = Path(__file__).parent / "data"
    project = make_project(tmp_path / "p", {"w5": onnx.load(data / "winograd_clip_chain.onnx")})
    project.doit("build:w5")
    workload = "fused_conv2d_NCHWc2_add2_maximum1_minimum1"
    record = project.record("w5", workload)
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text((data / "winograd_clip_record_tvm_miscompiles.json").read_text())
    checked = cli(project, "check", "w5", check=False)
    assert checked.returncode == 1, checked.stdout
    assert "its kernel computes other numbers than the workload" in checked.stdout
    record.write_text((data / "winograd_clip_record_correct.json").read_text())  # another draw
    assert cli(project, "check", "w5").returncode == 0
