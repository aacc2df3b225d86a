"""ONNX's node tests (one operator, its inputs and expected outputs) that a differential run
over all of them found partition refusing where ``tvm.compile`` builds them, built in
both layouts and run on their inputs against their expected outputs: a Slice whose starts
and ends are run-time inputs (NCHWc: "There is no definition of
I.GlobalVar("shape_func")"), a Trilu of an empty (0-row) matrix (refused at import)."""

import numpy as np
import pytest
from conftest import make_project, run_library
from onnx_models import node_test

CASES = {"slice_end_out_of_bounds": "slice", "slice_default_steps": "slice",
         "triu_zero": "trilu"}


@pytest.mark.parametrize("layout", ["NCHW", "NCHWc"])
def test_node_tests_tvm_compile_builds_build_and_give_their_outputs(tmp_path, layout):
    cases = {name: node_test(module, f"test_{name}") for name, module in CASES.items()}
    project = make_project(tmp_path / "p", {name: model for name, (model, _, _) in cases.items()})
    run = project.doit(*(f"build:{name}" for name in cases), f"layout={layout}", check=False)
    assert run.returncode == 0 and "error" not in run.output, run.output
    for name, (_, inputs, (expected,)) in cases.items():
        out = run_library(project.library(name), inputs)
        assert out.shape == expected.shape and np.array_equal(out, expected), name
