"""Depthwise and grouped convolutions in the blocked layout (issue 38): computed blocked with
the channel block as the vector, no layout change around them, ReLU6 (ONNX Clip) fused into
each convolution, and the same numbers as onnxruntime in every layout, including channel
counts that do not divide into the block (which fall back to a plain compute)."""

import numpy as np
import onnx
import pytest
from conftest import (
    assert_close,
    make_project,
    model_inputs,
    onnx_output,
    reference_output,
    run_library,
    sampled_records,
)
from onnx import TensorProto, helper

from modelbuild.core import manifest
from modelbuild.schedules import records


def _workloads(project, model: str) -> list[str]:
    man = manifest.read(project.root / "build" / model / "partition" / "manifest.msgpack")
    return [w.name for w in man.workloads]


def _separable_model(channels: int) -> onnx.ModelProto:
    """A 1x1 convolution 16 -> ``channels``, a 3x3 depthwise one (padding 1), a 3x3 depthwise
    one of stride 2, a 3x3 convolution in 3 groups (2 where the channels do not divide into
    3) to twice the channels, each with a bias
    and a Clip (ReLU6, its upper bound low enough to clip), then a 1x1 convolution to 16
    channels; an 11x11 image."""
    rng = np.random.default_rng(channels)

    def init(name, shape, scale=1.0):
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        value = rng.standard_normal(shape) * scale / np.sqrt(fan_in)
        return onnx.numpy_helper.from_array(value.astype(np.float32), name)

    c = channels
    groups = 3 if c % 3 == 0 else 2
    inits = [init("w0", (c, 16, 1, 1)), init("b0", (c,)), init("w1", (c, 1, 3, 3)),
             init("b1", (c,)), init("w2", (c, 1, 3, 3)), init("b2", (c,)),
             init("w3", (2 * c, c // groups, 3, 3)), init("b3", (2 * c,)),
             init("w4", (16, 2 * c, 1, 1)),
             onnx.numpy_helper.from_array(np.float32(0.0), "lo"),
             onnx.numpy_helper.from_array(np.float32(1.0), "hi")]
    nodes = [helper.make_node("Conv", ["x", "w0", "b0"], ["c0"]),
             helper.make_node("Clip", ["c0", "lo", "hi"], ["r0"]),
             helper.make_node("Conv", ["r0", "w1", "b1"], ["c1"], pads=[1] * 4, group=c),
             helper.make_node("Clip", ["c1", "lo", "hi"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1] * 4, strides=[2, 2],
                              group=c),
             helper.make_node("Clip", ["c2", "lo", "hi"], ["r2"]),
             helper.make_node("Conv", ["r2", "w3", "b3"], ["c3"], pads=[1] * 4, group=groups),
             helper.make_node("Clip", ["c3", "lo", "hi"], ["r3"]),
             helper.make_node("Conv", ["r3", "w4"], ["y"])]
    graph = helper.make_graph(
        nodes, "separable", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 11, 11])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 6, 6])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


# channels -> whether NCHWc computes (the depthwise, the grouped) convolutions blocked: the
# same with blocks of 16 (AVX-512), 8 (AVX2) and 4
_BLOCKED_KINDS = {32: (True, True), 24: (True, True), 20: (True, True), 6: (False, False)}


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["NCHWc", "NCHW"])
@pytest.mark.parametrize("channels", sorted(_BLOCKED_KINDS, reverse=True))
def test_depthwise_and_grouped_convolutions_match_onnxruntime_in_every_layout(
        tmp_path, channels, layout):
    """32 channels: blocks of the model's width; 24: depthwise in blocks of 8, 3 groups of 8
    input channels in blocks of 8; 20: depthwise in blocks of 4, 2 groups of 10 not blocked
    (the plain fallback: 10 is no multiple of 4); 6: nothing blocked. NCHW blocks nothing."""
    project = make_project(tmp_path / "p", {"sep": _separable_model(channels)})
    project.doit("build:sep", f"layout={layout}")
    names = _workloads(project, "sep")
    blocked = (any(n.startswith("fused_depthwise_conv2d_NCHWc") for n in names),
               any(n.startswith("fused_group_conv2d_NCHWc") for n in names))
    assert blocked == (_BLOCKED_KINDS[channels] if layout == "NCHWc" else (False, False)), names
    x = model_inputs(project.root, "sep")
    ours = run_library(project.library("sep"), x)
    expected = onnx_output(project.root, "sep", x)
    assert float(expected.std()) > 0.05 * float(np.abs(expected).max())
    assert_close(ours, expected, rel=1e-4)


@pytest.mark.slow
def test_depthwise_and_grouped_convolutions_run_blocked_with_relu6_fused_and_no_transforms(
        tmp_path):
    """In NCHWc every convolution of the model is one workload with its bias and Clip fused
    in, the depthwise ones vectorized over the channel block by the CPU default schedule;
    the only layout transforms are the model's input and output."""
    import tvm

    from modelbuild.targets import cpu_schedule, registry

    project = make_project(tmp_path / "p", {"sep": _separable_model(32)})
    project.doit("build:sep")
    names = _workloads(project, "sep")
    transforms = [n for n in names if "layout_transform" in n]
    depthwise = [n for n in names if n.startswith("fused_depthwise_conv2d_NCHWc")]
    grouped = [n for n in names if n.startswith("fused_group_conv2d_NCHWc")]
    assert len(transforms) == 2 and len(depthwise) == 2 and len(grouped) == 1, names
    assert len(names) == 7, names  # + the two 1x1 convolutions
    assert all("maximum" in n and "minimum" in n for n in depthwise + grouped), names
    target = tvm.target.Target(registry.resolve("llvm").tvm_target)
    for name in depthwise:
        func = tvm.ir.load_json(project.workload_file("sep", name).read_text())
        scheduled = cpu_schedule.default_schedule(func, name, target).script()
        assert "T.vectorized" in scheduled and "T.parallel" in scheduled, scheduled
    x = model_inputs(project.root, "sep")
    assert_close(run_library(project.library("sep"), x), onnx_output(project.root, "sep", x),
                 rel=1e-4)


@pytest.mark.slow
def test_records_of_depthwise_and_grouped_workloads_rebuild_them_and_equal_tvm_compile(tmp_path):
    """A sampled record for a depthwise and for a grouped workload reruns their lower (and
    codegen) and the link, and the library computes what tvm.compile with the same records
    and layout computes."""
    project = make_project(tmp_path / "p", {"sep": _separable_model(32)})
    project.doit("build:sep")
    names = _workloads(project, "sep")
    chosen = [next(n for n in names if n.startswith(kind))
              for kind in ("fused_depthwise_conv2d_NCHWc", "fused_group_conv2d_NCHWc")]
    for workload in chosen:
        records.save(project.record("sep", workload),
                     sampled_records(project, "sep", workload, 1, seed=3)[0])
    run = project.doit("build:sep")
    assert {f"lower:sep/{w}" for w in chosen} | {"link:sep"} <= run.ran, run.ran
    assert not any(t.startswith("lower:") and t.split("/")[-1] not in chosen for t in run.ran)
    x = model_inputs(project.root, "sep")
    ours = run_library(project.library("sep"), x)
    assert_close(ours, reference_output(project, "sep", x))
    assert_close(ours, onnx_output(project.root, "sep", x), rel=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["NCHWc", "NCHW"])
def test_a_grouped_convolution_left_nchw_keeps_each_vector_in_one_group(tmp_path, layout):
    """ShuffleNet's 1x1 convolutions in 4 groups of 34 or 68 channels stay NCHW (no block
    divides their groups); the NCHW rule's vectors of 8 output channels then straddled two
    groups, a gather per multiply-add (about 1 GFLOP/s). A vector now holds one group's
    channels: 4 of a group of 12."""
    import tvm

    from modelbuild.targets import cpu_schedule, registry

    rng = np.random.default_rng(4)
    w = onnx.numpy_helper.from_array(
        (rng.standard_normal((48, 12, 1, 1)) * 0.3).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], group=4),
         helper.make_node("Relu", ["c"], ["y"])],
        "grouped", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 48, 7, 7])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 48, 7, 7])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    project = make_project(tmp_path / "p", {"g": model})
    project.doit("build:g", f"layout={layout}")
    conv = next(n for n in _workloads(project, "g") if "conv2d" in n)
    func = tvm.ir.load_json(project.workload_file("g", conv).read_text())
    scheduled = cpu_schedule.default_schedule(func, conv, tvm.target.Target(
        registry.resolve("llvm").tvm_target)).script()
    assert "T.vectorized(T.int64(4))" in scheduled and "T.vectorized(T.int64(8))" not in \
        scheduled, scheduled
    x = model_inputs(project.root, "g")
    assert_close(run_library(project.library("g"), x), onnx_output(project.root, "g", x),
                 rel=1e-4)


_CLIP_CASES = ("clip", "clip_example", "clip_inbounds", "clip_outbounds", "clip_splitbounds",
               "clip_min_greater_than_max", "clip_default_min", "clip_default_max",
               "clip_default_inbounds", "clip_default_int8_min", "clip_default_int8_max")


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["NCHW", "NCHWc"])
def test_onnx_clip_node_tests_give_their_outputs_in_every_layout(tmp_path, layout):
    """ONNX's Clip node tests (bounds as run-time inputs, one bound, none, int8, min above
    max), now that partition writes Clip as Relax maximum / minimum."""
    from onnx_models import node_test

    cases = {name: node_test("clip", f"test_{name}") for name in _CLIP_CASES}
    project = make_project(tmp_path / "p", {n: model for n, (model, _, _) in cases.items()})
    run = project.doit(*(f"build:{n}" for n in cases), f"layout={layout}", check=False)
    assert run.returncode == 0 and "error" not in run.output, run.output
    for name, (_, inputs, (expected,)) in cases.items():
        out = run_library(project.library(name), inputs)
        assert out.dtype == expected.dtype and np.array_equal(out, expected), name


def _odd_depthwise_model() -> onnx.ModelProto:
    """A 5x3 depthwise convolution of 48 channels, stride (2, 1), dilation (2, 1), padding
    (top 3, left 1, bottom 1, right 2), then a grouped 3x3 convolution in 3 groups of 16,
    stride 2, padding 1, on a 13x10 image."""
    rng = np.random.default_rng(9)
    inits = [onnx.numpy_helper.from_array((rng.standard_normal(s) * 0.3).astype(np.float32), n)
             for n, s in (("w1", (48, 1, 5, 3)), ("w2", (48, 16, 3, 3)))]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c"], group=48, strides=[2, 1],
                              dilations=[2, 1], pads=[3, 1, 1, 2]),
             helper.make_node("Conv", ["c", "w2"], ["y"], group=3, strides=[2, 2],
                              pads=[1, 1, 1, 1])]
    graph = helper.make_graph(
        nodes, "odd", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 48, 13, 10])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


@pytest.mark.slow
def test_a_dilated_strided_asymmetrically_padded_depthwise_convolution_matches(tmp_path):
    project = make_project(tmp_path / "p", {"odd": _odd_depthwise_model()})
    project.doit("build:odd")
    names = _workloads(project, "odd")
    assert any(n.startswith("depthwise_conv2d_NCHWc") or n.startswith(
        "fused_depthwise_conv2d_NCHWc") for n in names), names
    assert any("group_conv2d_NCHWc" in n for n in names), names
    x = model_inputs(project.root, "odd")
    assert_close(run_library(project.library("odd"), x), onnx_output(project.root, "odd", x),
                 rel=1e-4)


def _shuffle_unit_model() -> onnx.ModelProto:
    """A ShuffleNet-style stage on an 8x8 image (a 1x1 convolution 16 -> 24 channels, ReLU,
    then as ShuffleNet): a 1x1 convolution in 4 groups of
    6 -> 28 channels (blocks of 8 and 16 straddle them), ReLU, a channel shuffle
    (reshape, transpose, reshape), a 3x3 depthwise convolution of stride 2, a 1x1
    convolution in 4 groups of 28, a concat with the average-pooled input (24 + 112 = 136
    channels: a concat of tensors whose own blocks differ), ReLU, a 1x1 convolution in 4
    groups of 34, a shuffle again, a 1x1 convolution to 16 channels."""
    rng = np.random.default_rng(11)

    def init(name, shape):
        value = rng.standard_normal(shape) / np.sqrt(int(np.prod(shape[1:])))
        return onnx.numpy_helper.from_array(value.astype(np.float32), name)

    def shuffle(x, y, channels, hw):
        shapes = [onnx.numpy_helper.from_array(np.array(s, np.int64), f"{y}_s{i}")
                  for i, s in enumerate(([1, 4, channels // 4, hw, hw], [1, channels, hw, hw]))]
        return shapes, [helper.make_node("Reshape", [x, shapes[0].name], [f"{y}_r"]),
                        helper.make_node("Transpose", [f"{y}_r"], [f"{y}_t"],
                                         perm=[0, 2, 1, 3, 4]),
                        helper.make_node("Reshape", [f"{y}_t", shapes[1].name], [y])]

    s1, shuffle1 = shuffle("r1", "s1", 112, 8)
    s2, shuffle2 = shuffle("r3", "s2", 136, 4)
    inits = [init("w0", (24, 16, 1, 1)), init("w1", (112, 6, 1, 1)), init("b1", (112,)), init("w2", (112, 1, 3, 3)),
             init("w3", (112, 28, 1, 1)), init("w4", (136, 34, 1, 1)), init("b4", (136,)),
             init("w5", (16, 136, 1, 1)), *s1, *s2]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c0"]),
             helper.make_node("Relu", ["c0"], ["r0"]),
             helper.make_node("AveragePool", ["r0"], ["a"], kernel_shape=[3, 3],
                              strides=[2, 2], pads=[1] * 4),
             helper.make_node("Conv", ["r0", "w1", "b1"], ["c1"], group=4),
             helper.make_node("Relu", ["c1"], ["r1"]), *shuffle1,
             helper.make_node("Conv", ["s1", "w2"], ["c2"], group=112, strides=[2, 2],
                              pads=[1] * 4),
             helper.make_node("Conv", ["c2", "w3"], ["c3"], group=4),
             helper.make_node("Concat", ["a", "c3"], ["cat"], axis=1),
             helper.make_node("Relu", ["cat"], ["r2"]),
             helper.make_node("Conv", ["r2", "w4", "b4"], ["c4"], group=4),
             helper.make_node("Relu", ["c4"], ["r3"]), *shuffle2,
             helper.make_node("Conv", ["s2", "w5"], ["y"])]
    graph = helper.make_graph(
        nodes, "shuffle", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 4, 4])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["NCHWc", "NCHW"])
def test_a_shufflenet_stage_runs_blocked_with_its_shuffles_as_one_gather(tmp_path, layout):
    """Grouped convolutions whose groups straddle the channel blocks are computed blocked,
    the concat of 24 and 112 channels keeps the graph blocked (one block for every tensor
    it joins), and each channel shuffle is one gather between blocked tensors: the only
    layout transforms left are the model's input and output. The same numbers as
    onnxruntime in every layout."""
    project = make_project(tmp_path / "p", {"shuffle": _shuffle_unit_model()})
    run = project.doit("build:shuffle", f"layout={layout}")
    assert "note:" not in run.output, run.output  # ConvertLayout carried the whole graph
    names = _workloads(project, "shuffle")
    grouped = [n for n in names if "group_conv2d_NCHWc" in n]
    shuffles = [n for n in names if n.startswith("channel_shuffle")]
    transforms = [n for n in names if "layout_transform" in n]
    if layout == "NCHWc":
        assert len(grouped) == 3 and len(shuffles) == 2 and len(transforms) == 2, names
    else:
        assert not grouped and not shuffles and not transforms, names
    x = model_inputs(project.root, "shuffle")
    expected = onnx_output(project.root, "shuffle", x)
    assert float(expected.std()) > 0.05 * float(np.abs(expected).max())
    assert_close(run_library(project.library("shuffle"), x), expected, rel=1e-4)


@pytest.mark.slow
def test_a_straddling_group_never_reads_another_groups_channels(tmp_path):
    """A 1x1 convolution in 4 groups of 34 channels (blocks of 8 straddle groups 0|1 and
    2|3): with inf in one channel of group 0 and NaN in one of group 1, groups 2 and 3
    stay finite and every output is onnxruntime's, inf and NaN where it has them. (Zeros
    padded into the weights of another group's channels would give 0 x inf = NaN.)"""
    rng = np.random.default_rng(5)
    w = onnx.numpy_helper.from_array(
        (rng.standard_normal((136, 34, 1, 1)) * 0.2).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], group=4)], "straddle",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 136, 3, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 136, 3, 3])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    project = make_project(tmp_path / "p", {"straddle": model})
    project.doit("build:straddle")
    assert any("group_conv2d_NCHWc" in n for n in _workloads(project, "straddle"))
    (x,) = model_inputs(project.root, "straddle")
    x[0, 3, 1, 1] = np.inf
    x[0, 40, 0, 2] = np.nan
    ours = run_library(project.library("straddle"), [x])
    expected = onnx_output(project.root, "straddle", [x])
    assert np.isfinite(ours[0, 68:]).all() and not np.isfinite(ours[0, :68]).all()
    np.testing.assert_allclose(ours, expected, rtol=1e-4, atol=1e-5, equal_nan=True)


@pytest.mark.slow
def test_a_record_of_a_straddling_grouped_workload_rebuilds_it_and_equals_tvm_compile(tmp_path):
    """Tuning keeps working on the new compute: a sampled record for a grouped convolution
    whose groups straddle the blocks reruns its lower and the link only, and the library
    computes what tvm.compile with the same records and layout computes, and
    onnxruntime's numbers."""
    project = make_project(tmp_path / "p", {"shuffle": _shuffle_unit_model()})
    project.doit("build:shuffle")
    workload = next(n for n in _workloads(project, "shuffle") if "group_conv2d_NCHWc" in n)
    records.save(project.record("shuffle", workload),
                 sampled_records(project, "shuffle", workload, 1, seed=5)[0])
    run = project.doit("build:shuffle")
    lowered = {t for t in run.ran if t.startswith("lower:")}
    assert lowered == {f"lower:shuffle/{workload}"} and "link:shuffle" in run.ran, run.ran
    x = model_inputs(project.root, "shuffle")
    ours = run_library(project.library("shuffle"), x)
    assert_close(ours, reference_output(project, "shuffle", x))
    assert_close(ours, onnx_output(project.root, "shuffle", x), rel=1e-4)
