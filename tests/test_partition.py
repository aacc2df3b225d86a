"""partition: deterministic artifacts, the zero pipeline's workloads, the graph objects."""

import pytest
from conftest import make_project
from onnx import TensorProto, helper
from onnx_models import tiny_model

from modelbuild.core import manifest


def _artifacts(project, model):
    part = project.root / "build" / model / "partition"
    return {str(p.relative_to(part)): p.read_bytes() for p in sorted(part.rglob("*")) if p.is_file()}


def test_same_model_gives_byte_identical_artifacts(tmp_path):
    a = make_project(tmp_path / "a", {"tiny": tiny_model()})
    b = make_project(tmp_path / "b", {"tiny": tiny_model()})
    a.doit("partition:tiny")
    b.doit("partition:tiny")
    files_a, files_b = _artifacts(a, "tiny"), _artifacts(b, "tiny")
    assert "manifest.msgpack" in files_a and any(k.startswith("graph/") for k in files_a)
    assert files_a == files_b


def test_workloads_are_the_zero_pipelines_primfuncs(tmp_path):
    import tvm
    import tvm_ffi
    from tvm import relax

    from modelbuild.core import models
    from modelbuild.steps import onnx_import

    project = make_project(tmp_path / "p", {"tiny": tiny_model()})
    project.doit("partition:tiny", "layout=NCHW")  # the zero pipeline converts no layout
    spec = models.discover(project.root / "models")["tiny"]
    target = tvm.target.Target({"kind": "llvm"})
    with target:
        zero = relax.get_pipeline("zero")(onnx_import.import_model(spec))
    expected = [f for f in zero.functions.values() if isinstance(f, tvm.tirx.PrimFunc)]
    man = manifest.read(project.root / "build/tiny/partition/manifest.msgpack")
    # The same kernels; a name's number may differ: partition folds constants before
    # LegalizeOps names kernels (the zero pipeline's folded "reshape" leaves "reshape1").
    assert len(man.workloads) == len(expected)
    for w in man.workloads:
        saved = tvm.ir.load_json(project.workload_file("tiny", w.name).read_text())
        assert any(tvm_ffi.structural_equal(saved, f) for f in expected), w.name
    assert [(n, list(s), d) for n, s, d in man.inputs] == [("x", [1, 3, 16, 16], "float32")]


@pytest.mark.slow
def test_model_edit_that_removes_workloads_removes_their_files(tmp_path):
    import onnx

    project = make_project(tmp_path / "p", {"tiny": tiny_model()})
    project.doit("build:tiny")
    model = tiny_model()
    # Drop the classifier: Flatten and Gemm go, the pooled tensor becomes the output.
    keep = [n for n in model.graph.node if n.op_type not in ("Flatten", "Gemm")]
    del model.graph.node[:]
    model.graph.node.extend(keep)
    model.graph.output[0].name = "p"
    del model.graph.output[0].type.tensor_type.shape.dim[2:]
    model.graph.output[0].type.tensor_type.shape.dim.extend(model.graph.output[0].type.tensor_type.shape.dim[:0])
    onnx.save(model, str(project.root / "models" / "tiny.onnx"))
    run = project.doit("build:tiny")
    man = manifest.read(project.root / "build/tiny/partition/manifest.msgpack")
    names = {w.name for w in man.workloads}
    on_disk = {p.stem for p in (project.root / "build/tiny/partition/workloads").glob("*.json")}
    assert on_disk == names
    assert not any("matmul" in n for n in names)
    assert "link:tiny" in run.ran


def _chain_model(length: int):
    """x -> a chain of ``length`` element-wise operators, which FuseOps fuses into one
    kernel named after all of them (single-use operators: abs and tanh use their input
    more than once once lowered, and a long chain of them compiles for minutes)."""
    import onnx
    from onnx import TensorProto, helper

    ops = ["Sigmoid", "Neg", "Relu", "Exp"]
    nodes = [helper.make_node(ops[i % 4], [f"t{i - 1}" if i else "x"], [f"t{i}"])
             for i in range(length)]
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 5, 5])],
        [helper.make_tensor_value_info(f"t{length - 1}", TensorProto.FLOAT, [1, 4, 5, 5])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


@pytest.mark.slow
def test_a_kernel_fused_from_a_long_chain_gets_a_short_stable_name(tmp_path):
    """FuseOps named it with 200+ characters: partition failed with 'File name too long',
    or (200 and a few) wrote a manifest it could not read back."""
    import re

    from conftest import assert_close, model_inputs, onnx_output, run_library

    project = make_project(tmp_path / "p", {"chain": _chain_model(24)})
    project.doit("build:chain", "layout=NCHW")
    man = manifest.read(project.root / "build/chain/partition/manifest.msgpack")
    [name] = [w.name for w in man.workloads]
    assert len(name) == manifest.WORKLOAD_NAME_MAX and re.fullmatch(r"fused_\w+_[0-9a-f]{12}", name)
    assert (project.root / "build/chain/objects" / f"{name}.o").is_file()
    x = model_inputs(project.root, "chain")
    assert_close(run_library(project.library("chain"), x), onnx_output(project.root, "chain", x))
    again = make_project(tmp_path / "q", {"chain": _chain_model(24)})  # the same name again
    again.doit("partition:chain", "layout=NCHW")
    assert [w.name for w in manifest.read(
        again.root / "build/chain/partition/manifest.msgpack").workloads] == [name]
    assert manifest.short_name(name) == name and manifest.short_name("a" * 40) == "a" * 40


@pytest.mark.slow
def test_a_chain_of_operators_that_reuse_their_operand_is_not_inlined_into_one_expression(tmp_path):
    """Tanh lowers to five uses of its argument, LeakyRelu's Select to three: inlined whole,
    16 alternating Tanh and Abs took 100 s to compile (tvm.compile: 0.1 s), 48 hours."""
    import tvm
    from conftest import assert_close, model_inputs, onnx_output, run_library

    from modelbuild.core.workloads import load_json
    from modelbuild.targets import cpu_schedule_inline
    from modelbuild.targets import registry as targets

    ops = ["Tanh", "Abs", "LeakyRelu"] * 16
    nodes = [helper.make_node(op, [f"t{i - 1}" if i else "x"], [f"t{i}"]) for i, op in enumerate(ops)]
    graph = helper.make_graph(
        nodes, "reuse", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 5, 5])],
        [helper.make_tensor_value_info(f"t{len(ops) - 1}", TensorProto.FLOAT, [1, 4, 5, 5])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    project = make_project(tmp_path / "p", {"reuse": model})
    project.doit("partition:reuse")
    [name] = [w.name for w in manifest.read(
        project.root / "build/reuse/partition/manifest.msgpack").workloads]
    spec = targets.resolve("llvm")
    scheduled = spec.default_schedule(load_json(project.workload_file("reuse", name).read_text()),
                                      name, tvm.target.Target(spec.tvm_target))
    sch = tvm.s_tir.Schedule(scheduled)
    blocks = [sch.get(b) for b in sch.get_child_blocks(sch.get_sblock("root", func_name="main"))]
    sizes = [cpu_schedule_inline._tree(b.body.value, None, {})[0] for b in blocks]
    assert len(blocks) > 1 and max(sizes) <= cpu_schedule_inline.INLINED_NODES_MAX, sizes
    project.doit("build:reuse")
    x = model_inputs(project.root, "reuse")
    assert_close(run_library(project.library("reuse"), x), onnx_output(project.root, "reuse", x))


@pytest.mark.slow
def test_a_chain_of_saturating_casts_is_not_inlined_into_one_expression(tmp_path):
    """Each Cast to an integer is a Select on isnan/isinf of its operand; four of them inlined
    into one expression took 165 s to compile (TVM's simplifier is exponential in the
    nesting of Selects on data), tvm.compile 0.1 s."""
    import subprocess
    import sys

    import tvm
    from conftest import DoitRun, assert_close, model_inputs, onnx_output, run_library

    from modelbuild.core.workloads import load_json
    from modelbuild.targets import cpu_schedule_inline
    from modelbuild.targets import registry as targets

    nodes, previous = [], "x"
    for k, to in enumerate([TensorProto.INT32, TensorProto.FLOAT16, TensorProto.INT8,
                            TensorProto.FLOAT]):
        nodes.append(helper.make_node("Cast", [previous], [f"c{k}"], to=to))
        previous = f"c{k}"
    graph = helper.make_graph(
        nodes, "casts", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [50])],
        [helper.make_tensor_value_info(previous, TensorProto.FLOAT, [50])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    project = make_project(tmp_path / "p", {"casts": model})
    # a guard against the old minutes, not a speed figure: the build takes about a second
    run = DoitRun(subprocess.run([sys.executable, "-m", "doit", "build:casts"], cwd=project.root,
                                 capture_output=True, text=True, timeout=120))
    assert run.returncode == 0, run
    x = model_inputs(project.root, "casts")
    x[0] = (x[0] * 60).astype("float32")  # past int8's range: the casts saturate and wrap
    assert_close(run_library(project.library("casts"), x), onnx_output(project.root, "casts", x))
    spec = targets.resolve("llvm")
    for w in manifest.read(project.root / "build/casts/partition/manifest.msgpack").workloads:
        func = load_json(project.workload_file("casts", w.name).read_text())
        scheduled = spec.default_schedule(func, w.name, tvm.target.Target(spec.tvm_target))
        sch = tvm.s_tir.Schedule(scheduled)
        for b in sch.get_child_blocks(sch.get_sblock("root", func_name="main")):
            body = sch.get(b).body
            if isinstance(body, tvm.tirx.BufferStore):
                assert cpu_schedule_inline._data_selects(body.value, {}) <= cpu_schedule_inline.DATA_SELECTS_MAX
