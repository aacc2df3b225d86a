"""Provenance (partition records which model operators each workload computes) and
`python -m modelbuild explain`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from conftest import cli, make_project, sha256
from onnx_models import provenance_model, tiny_model

from modelbuild.commands import explain
from modelbuild.core import manifest
from modelbuild.core.errors import BuildError
from modelbuild.core.paths import Project


def explain_json(project, *args) -> dict:
    return json.loads(cli(project, "explain", *args, "--json").stdout)


def read_manifest(project, model) -> manifest.Manifest:
    return manifest.read(project.root / "build" / model / "partition" / "manifest.msgpack")


@pytest.fixture(scope="module")
def partitioned(tmp_path_factory):
    """The tiny model and one whose operators fuse, split and fold away, partitioned."""
    project = make_project(tmp_path_factory.mktemp("explain") / "proj",
                           {"tiny": tiny_model(), "ops": provenance_model()})
    project.doit("partition:tiny", "partition:ops")
    return project


@pytest.mark.parametrize("model, onnx_model", [("tiny", tiny_model), ("ops", provenance_model)])
def test_every_onnx_node_appears_once_under_a_workload_or_with_a_reason(partitioned, model,
                                                                         onnx_model):
    man = read_manifest(partitioned, model)
    nodes = onnx_model().graph.node
    assert [(o.name, o.op_type) for o in man.operators] == [(n.name, n.op_type) for n in nodes]
    workloads = {w.name for w in man.workloads}
    for o in man.operators:
        if o.workload is not None:
            assert o.workload in workloads and set(o.also) <= workloads, o
        else:
            assert o.note.startswith(("folded into constants", "no kernel: ")), o
    for w in workloads:  # and every workload computes some operator, or changes the layout
        assert man.sources(w) or man.layout_change(w) is not None, w


def test_tiny_model_operators_land_in_the_workloads_fusion_made(partitioned):
    man = read_manifest(partitioned, "tiny")
    where = {o.name: o.workload for o in man.operators}
    assert where["conv1"] == where["relu1"] == "fused_conv2d_NCHWc_add_relu"
    assert where["conv2"] == where["add2"] == where["relu2"] == "fused_conv2d_NCHWc1_add_add1_relu"
    assert where["pool"] == "mean" and where["fc"] == "fused_matmul_add2"
    sources = [o.name for o, part in man.sources("fused_conv2d_NCHWc1_add_add1_relu")]
    assert sources == ["conv2", "add2", "relu2"]  # in model order


def test_the_layout_s_changes_are_nobody_s_operators_and_say_whose_input_they_convert(partitioned):
    """The blocked layout converts the image before conv1 and the pooled tensor before
    flatten; those kernels were charged to flatten ("computes part of" it)."""
    man = read_manifest(partitioned, "tiny")
    assert man.layout_changes == (("te_layout_transform", "conv1"),
                                  ("te_layout_transform1", "flatten"))
    assert all(not o.also for o in man.operators), man.operators
    rows = explain_json(partitioned, "tiny")["workloads"]
    assert [r["workload"] for r in rows][:2] == ["te_layout_transform", "fused_conv2d_NCHWc_add_relu"]
    changes = {r["workload"]: r["layout_change"] for r in rows if r["layout_change"]}
    assert changes == {"te_layout_transform": {"operator": "conv1", "op_type": "Conv"},
                       "te_layout_transform1": {"operator": "flatten", "op_type": "Flatten"}}
    assert all(r["operators"] == [] for r in rows if r["layout_change"])
    out = cli(partitioned, "explain", "tiny").stdout
    assert "layout change: no operator of the model" in out and "*" not in out
    one = cli(partitioned, "explain", "tiny", "te_layout_transform1").stdout
    assert "operators (0, in model order):" in one
    assert "a layout change (the input of flatten, Flatten): no operator of the model" in one


@pytest.mark.slow
def test_a_layout_change_of_the_model_s_output_says_so(tmp_path):
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((16, 3, 3, 3), np.float32), "w")
    graph = helper.make_graph(  # y is an output and relu's input: converted back for both
        [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1], name="conv"),
         helper.make_node("Relu", ["y"], ["z"], name="relu")], "one",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 8, 8]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 16, 8, 8])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    project = make_project(tmp_path / "p", {"one": model})
    project.doit("partition:one")
    man = read_manifest(project, "one")
    assert [user for _, user in man.layout_changes] == ["conv", ""], man.layout_changes
    last = man.layout_changes[-1][0]
    out = cli(project, "explain", "one", last).stdout
    assert "a layout change (of the model's output): no operator of the model" in out


def test_folded_and_kernel_less_operators_say_why(partitioned):
    ops = {o.name: o for o in read_manifest(partitioned, "ops").operators}
    assert ops["weights"].workload is None and ops["weights"].note.startswith("folded into constants")
    assert ops["bias_reshape"].note.startswith("folded into constants")
    assert ops["shape"].note.startswith("no kernel: ")
    assert ops["identity"].note.startswith("no kernel: passes its input through")
    assert ops["conv"].workload == ops["relu"].workload  # across the Identity
    assert len({ops[n].workload for n in ("split", "mul", "slice", "flatten", "add")}) == 1


def test_explain_node_finds_the_workload(partitioned):
    out = cli(partitioned, "explain", "tiny", "--node", "conv2").stdout
    assert "conv2 (Conv) in tiny: computed by workload fused_conv2d_NCHWc1_add_add1_relu" in out
    report = explain_json(partitioned, "tiny", "--node", "relu2")
    assert report["workload"] == "fused_conv2d_NCHWc1_add_add1_relu"
    assert report["workload_operators"] == ["conv2", "add2", "relu2"]
    folded = explain_json(partitioned, "ops", "--node", "weights")
    assert folded["workload"] is None and folded["note"].startswith("folded into constants")


def test_explain_unknown_node_is_an_error_with_close_matches(partitioned, cli_main):
    proc = cli_main(partitioned, "explain", "tiny", "--node", "conv3", check=False)
    assert proc.returncode != 0
    assert "has no operator named 'conv3'" in proc.stderr
    assert "did you mean: conv2, conv1?" in proc.stderr
    proc = cli_main(partitioned, "explain", "tiny", "no_such_workload", check=False)
    assert proc.returncode != 0 and "has no workload 'no_such_workload'" in proc.stderr


def test_explain_model_lists_workloads_and_kernel_less_operators(partitioned):
    report = explain_json(partitioned, "ops")
    counted = sorted(n for w in report["workloads"] for n in w["operators"])
    kernel_less = sorted(o["name"] for o in report["no_kernel"])
    assert sorted(counted + kernel_less) == sorted(n.name for n in provenance_model().graph.node)
    out = cli(partitioned, "explain", "ops").stdout
    assert "4 operator(s) without a kernel:" in out and "folded into constants" in out
    assert "no benchmark (run `python -m modelbuild bench ops`)" in out


@pytest.mark.slow
def test_explain_workload_shows_record_artifacts_and_benchmark(tiny_copy):
    workload = "fused_conv2d_NCHWc1_add_add1_relu"
    layout_dir = tiny_copy.root / "build" / "tiny"
    report = explain_json(tiny_copy, "tiny", workload)
    assert [o["name"] for o in report["operators"]] == ["conv2", "add2", "relu2"]
    assert report["record"]["source"] == "default" and report["record"]["record"] is None
    artifacts = {a["kind"]: a for a in report["artifacts"]}
    assert set(artifacts) == {"workload TIR", "lowered TIR", "object", "library"}
    for a in artifacts.values():
        assert a["built"] and a["sha256"] == sha256(Path(a["path"])) and a["size"] > 0
    assert report["benchmark"] is None and "no benchmark" in report["benchmark_note"]

    (layout_dir / "objects" / f"{workload}.o").unlink()
    (layout_dir / "bench.json").write_text(json.dumps(
        {"workloads": {workload: {"median_ms": 0.125, "calls": 1}}}))
    out = cli(tiny_copy, "explain", "tiny", workload).stdout
    assert f"objects/{workload}.o  not built" in out
    assert "time: 0.125 ms median per run" in out
    assert "0.125 ms" in cli(tiny_copy, "explain", "tiny").stdout
    # A kernel the graph never calls is said to be unused, not timed at 0 ms.
    (layout_dir / "bench.json").write_text(json.dumps(
        {"workloads": {workload: {"median_ms": 0.0, "calls": 0}}}))
    assert "time: not called when the model runs" in cli(tiny_copy, "explain", "tiny", workload).stdout
    assert "unused" in cli(tiny_copy, "explain", "tiny").stdout


def test_explain_on_a_partitioned_model_does_not_import_tvm(partitioned):
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "modelbuild", "explain",
                           "tiny", "--node", "conv1"], cwd=partitioned.root,
                          capture_output=True, text=True, check=True)
    imported = {line.split("|")[-1].strip() for line in proc.stderr.splitlines()}
    assert "tvm" not in imported and "onnx" not in imported


@pytest.mark.slow
def test_resnet50_every_conv_maps_to_exactly_one_workload(declared_partitioned):
    project = declared_partitioned("resnet50")
    man = read_manifest(project, "resnet50")
    convs = [n.name for n in onnx.load(str(project.root / "models" / "resnet50.onnx")).graph.node
             if n.op_type == "Conv"]
    assert len(convs) == 53
    report = explain_json(project, "resnet50")
    for name in convs:
        holders = [w["workload"] for w in report["workloads"] if name in w["operators"]]
        assert len(holders) == 1, (name, holders)
        assert man.operator(name).workload == holders[0] and man.operator(name).also == ()
    for name in (convs[0], convs[-1]):
        found = explain_json(project, "resnet50", "--node", name)
        assert found["workload"] == man.operator(name).workload
        assert "conv2d" in found["workload"]


def test_a_relax_model_is_traced_by_its_bindings(tmp_path):
    import tvm

    from modelbuild.core import models
    from modelbuild.steps import onnx_import, partition, provenance

    project = make_project(tmp_path / "p", {"tiny": tiny_model()})
    mod = onnx_import.import_model(models.discover(project.root / "models")["tiny"])
    stages = partition.fuse_stages(mod, tvm.target.Target({"kind": "llvm"}))
    workloads = partition.workloads_of(stages["FuseTIR"])
    traced, layout_changes = provenance.trace(provenance.relax_operators(mod), stages, workloads)
    bindings = [b for block in mod["main"].body.blocks for b in block.bindings]
    assert [o.name for o in traced] == [b.var.name for b in bindings]
    assert {o.workload for o in traced if o.workload} == set(workloads)
    assert all(o.workload or o.note == "folded into constants" for o in traced)


def test_a_failed_trace_is_recorded_and_explained_not_fatal(tmp_path):
    from modelbuild.steps import partition

    operators, layout_changes, error = partition._provenance([], {}, {})
    assert operators == () == layout_changes and error.startswith("KeyError")
    man = manifest.Manifest("m", (manifest.Workload("w", "1"),), (), (), (), error)
    layout = Project(tmp_path).model("m")
    with pytest.raises(BuildError, match="no provenance recorded for model 'm': KeyError"):
        explain.node_report(layout, man, "conv")
    assert explain.model_report(layout, man)["provenance_error"] == error


def test_explain_ignores_a_benchmark_of_another_library(tiny_copy):
    workload = "fused_conv2d_NCHWc1_add_add1_relu"
    bench = tiny_copy.root / "build" / "tiny" / "bench.json"
    bench.write_text(json.dumps({"library_sha256": "0" * 64,
                                 "workloads": {workload: {"median_ms": 0.125, "calls": 1}}}))
    report = explain_json(tiny_copy, "tiny", workload)
    assert report["benchmark"] is None and "rebuilt since" in report["benchmark_note"]
    assert "0.125" not in cli(tiny_copy, "explain", "tiny").stdout
    bench.write_text(json.dumps({"library_sha256": sha256(tiny_copy.library("tiny")),
                                 "workloads": {workload: {"median_ms": 0.125, "calls": 1}}}))
    assert explain_json(tiny_copy, "tiny", workload)["benchmark"]["median_ms"] == 0.125


@pytest.mark.slow
def test_a_channel_split_written_as_slices_is_traced_to_its_workloads(tmp_path):
    """In the blocked layout a split of the channels at given sizes is built as one slice
    per piece; FuseTIR dropped the tuple around them, and `explain` had said "provenance
    unavailable" for such a model."""
    import numpy as np
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((32, 16, 1, 1)) * 0.3)
                                     .astype(np.float32), "w"),
             numpy_helper.from_array(np.array([16, 16], np.int64), "sp")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
             helper.make_node("Split", ["c", "sp"], ["a", "b"], axis=1, name="split"),
             helper.make_node("Concat", ["b", "a"], ["y"], axis=1, name="cat")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 16, 5, 5])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 32, 5, 5])],
        initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    project = make_project(tmp_path / "p", {"m": model})
    project.doit("partition:m")
    man = read_manifest(project, "m")
    where = {o.name: o for o in man.operators}
    assert where["split"].workload is not None and "strided_slice" in where["split"].workload
    assert where["conv"].workload and where["cat"].workload, man.operators
    proc = cli(project, "explain", "m")
    assert "provenance unavailable" not in proc.stdout + proc.stderr, proc.stdout
