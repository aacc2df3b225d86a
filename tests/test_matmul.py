"""Matrix products (issue 38): a BERT-style encoder and a batch-1 fully connected net
(bench/nets_transformer.py, tiny sizes) compute what onnxruntime computes in both layouts;
in the blocked layout a product by a constant weight is its own packed workload
(``matmul_packed``), and a record of it rebuilds exactly that workload, as ``why`` predicts."""

import json
import shutil
import sys

import pytest
from conftest import (
    REPO,
    assert_close,
    cli,
    make_project,
    model_inputs,
    onnx_output,
    reference_output,
    run_library,
    sampled_records,
)

from modelbuild.core import manifest

sys.path.insert(0, str(REPO / "bench"))  # bench/ is not a package
import nets_transformer as nets


def _project(root, model, layout: str):
    project = make_project(root, {"net": model})
    (project.root / "models" / "net.toml").write_text(f'onnx = "net.onnx"\nlayout = "{layout}"\n')
    return project


def _workloads(project) -> list[str]:
    man = manifest.read(project.root / "build" / "net" / "partition" / "manifest.msgpack")
    return [w.name for w in man.workloads]


def _why(project) -> list[dict]:
    """What ``python -m modelbuild why net --json`` predicts, before the build."""
    return json.loads(cli(project, "why", "net", "--json").stdout)


def _matches_onnxruntime(project) -> None:
    x = model_inputs(project.root, "net")
    assert_close(run_library(project.library("net"), x), onnx_output(project.root, "net", x),
                 rel=1e-4)


@pytest.mark.parametrize("layout", ["NCHWc", "NCHW"])
def test_an_encoder_matches_onnxruntime_in_each_layout(tmp_path, layout):
    # hidden 48: panels of 16 (AVX-512) or 8 (AVX2); heads of 24; the FFN 48 -> 192 -> 48
    project = _project(tmp_path / "p", nets.encoder(layers=1, seq=12, hidden=48, heads=2), layout)
    project.doit("build:net")
    packed = [n for n in _workloads(project) if "matmul_packed" in n]
    # the projections and the FFN's two products (the same kernels shared): their weights
    # packed in the blocked layout, bias, GELU and residual add fused in; none in NCHW
    if layout == "NCHWc":
        assert len(packed) >= 3 and any("erf" in n for n in packed), _workloads(project)
        # GELU's erf and softmax's exp are arithmetic in the kernels, not a libm call per
        # element (the symbol would be an undefined reference of the object)
        calls = {name for name, data in project.objects("net").items()
                 if b"erff" in data or b"expf" in data}
        assert not calls, calls
    else:
        assert not packed, packed
    _matches_onnxruntime(project)


def test_softmax_and_layer_norm_reduce_each_row_in_vectors(tmp_path):
    """Softmax over rows of 32 and LayerNorm over 48 features: each row reduced as vectors of
    partial results (an ``_rf`` block of vector loops), not one scalar chain per row (was
    2.3 ms for attention's [12, 128, 128] softmax, now 0.4); the same numbers as
    onnxruntime."""
    import tvm

    project = _project(tmp_path / "p", nets.encoder(layers=1, seq=32, hidden=48, heads=2),
                       "NCHWc")
    project.doit("build:net")
    rows = [n for n in _workloads(project) if n in ("softmax", "layer_norm")]
    assert sorted(rows) == ["layer_norm", "softmax"], _workloads(project)
    for name in rows:
        lowered = tvm.ir.load_json((project.root / "build" / "net" / "lowered" /
                                    f"{name}.json").read_text()).script()
        assert "_rf_update" in lowered and "T.vectorized" in lowered, lowered
    _matches_onnxruntime(project)


@pytest.mark.parametrize("layout", ["NCHWc", "NCHW"])
def test_a_batch_one_fully_connected_net_matches_onnxruntime_in_each_layout(tmp_path, layout):
    # 40 -> 48 -> 48 -> 24 classes: the last product packed in panels of 8 (gcd with the block)
    project = _project(tmp_path / "p", nets.fully_connected(40, 48, 24), layout)
    project.doit("build:net")
    packed = [n for n in _workloads(project) if "matmul_packed" in n]
    assert len(packed) == (3 if layout == "NCHWc" else 0), _workloads(project)
    _matches_onnxruntime(project)


@pytest.mark.slow
def test_a_record_of_a_packed_product_reruns_exactly_its_workload_and_equals_a_clean_build(
        tmp_path):
    model = nets.encoder(layers=1, seq=8, hidden=32, heads=2)
    project = _project(tmp_path / "p", model, "NCHWc")
    project.doit("build:net")
    workload = next(n for n in _workloads(project) if "matmul_packed" in n and "erf" in n)
    expected = {f"lower:net/{workload}", f"codegen:net/{workload}", "link:net"}
    for rec in sampled_records(project, "net", workload, 2, seed=5):
        project.set_record("net", workload, rec)
        assert {v["task"] for v in _why(project) if v["action"] == "run"} == expected
        run = project.doit("build:net")
        assert run.ran == expected
    clean = _project(tmp_path / "clean", model, "NCHWc")
    shutil.copytree(project.root / "schedules", clean.root / "schedules", dirs_exist_ok=True)
    clean.doit("build:net")
    assert clean.objects("net") == project.objects("net")
    x = model_inputs(project.root, "net")
    built = run_library(project.library("net"), x)
    assert_close(built, onnx_output(project.root, "net", x), rel=1e-4)
    assert_close(built, reference_output(project, "net", x), rel=1e-6)
