"""Element-wise operators the CPU layout computes as arithmetic that vectorizes, where TVM
calls the C library per element (steps/fast_math.py): a power by a constant exponent
(an LRN's ** 0.75, a LayerNorm written with Pow(x, 2)) gives onnxruntime's values,
at -0, -inf, inf and NaN too."""

import numpy as np
import pytest
from conftest import make_project, run_library
from onnx import TensorProto, helper, numpy_helper
from onnx_models import node_test

_EXPONENTS = [2.0, 3.0, 1.0, 0.5, 0.25, 0.75, -0.5, -1.0, 1.7]  # 1.7: TVM's powf


def _powers_model():
    import onnx

    inits = [numpy_helper.from_array(np.array(e, np.float32), f"e{i}")
             for i, e in enumerate(_EXPONENTS)]
    nodes = [helper.make_node("Pow", ["x", f"e{i}"], [f"y{i}"]) for i in range(len(_EXPONENTS))]
    nodes.append(helper.make_node("Concat", [f"y{i}" for i in range(len(_EXPONENTS))], ["y"],
                                  axis=0))
    graph = helper.make_graph(
        nodes, "powers", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 12])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [len(_EXPONENTS), 12])], inits)
    return onnx.helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                                  ir_version=8)


def test_a_power_by_a_constant_gives_onnxruntimes_values_without_powf():
    import onnxruntime
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    from modelbuild.steps.graph_passes import pipeline

    model = _powers_model()
    x = np.array([[0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30, 2.5, 1e30, -2.0, 0.3, 7.0, 1.0]],
                 np.float32)
    expected = onnxruntime.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    mod = from_onnx(model, keep_params_in_input=False)
    with tvm.target.Target("llvm"):
        for _, apply in pipeline(16):
            mod = apply(mod)
    kernels = "\n".join(f.script() for gv, f in mod.functions.items() if gv.name_hint != "main")
    assert kernels.count("T.pow(") == 1, kernels  # 1.7 alone keeps powf
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    ours = vm["main"](tvm.runtime.tensor(x)).numpy()
    for exponent, got, want in zip(_EXPONENTS, ours, expected):
        np.testing.assert_allclose(got, want, rtol=3e-7, atol=0, equal_nan=True,
                                   err_msg=f"** {exponent}")
        zeros = (got == 0) & (want == 0)
        assert np.array_equal(np.signbit(got[zeros]), np.signbit(want[zeros])), exponent


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["NCHW", "NCHWc"])
def test_onnx_lrn_node_tests_give_their_outputs_in_every_layout(tmp_path, layout):
    """ONNX's LRN node tests (its ``** beta`` a power by the constant 0.75)."""
    cases = {name: node_test("lrn", f"test_{name}") for name in ("lrn", "lrn_default")}
    project = make_project(tmp_path / "p", {n: model for n, (model, _, _) in cases.items()})
    run = project.doit(*(f"build:{n}" for n in cases), f"layout={layout}", check=False)
    assert run.returncode == 0 and "error" not in run.output, run.output
    for name, (_, inputs, (expected,)) in cases.items():
        np.testing.assert_allclose(run_library(project.library(name), inputs), expected,
                                   rtol=1e-5, atol=1e-6, err_msg=name)
