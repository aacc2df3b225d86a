"""Schedule records written by hand as Python functions (schedules/<model>/<workload>.py)."""

import json
import subprocess
import sys

import pytest

from conftest import assert_close, model_inputs, run_library, sha256, tiny_conv_workload

SPLIT_AND_VECTORIZE = '''
def schedule(sch):
    block = sch.get_sblock("conv2d_NCHWc")  # the blocked layout's, the CPU default
    n, f, y, x, fb, rc, ry, rx = sch.get_loops(block)
    x_outer, x_inner = sch.split(x, factors=[None, 8])
    sch.reorder(n, f, y, rc, ry, rx, x_outer, x_inner, fb)
    sch.vectorize(fb)
    sch.parallel(f)
'''

RAISES = '''
def schedule(sch):
    block = sch.get_sblock("conv2d_NCHWc")
    loops = sch.get_loops(block)
    sch.vectorize(sch.get_sblock("conv2d_nhwc"))
'''


def test_python_schedule_builds_and_matches_the_default(tiny_copy):
    workload = tiny_conv_workload(tiny_copy)
    x = model_inputs(tiny_copy.root, "tiny")
    default = run_library(tiny_copy.library("tiny"), x)
    default_obj = tiny_copy.objects("tiny")[f"{workload}.o"]
    path = tiny_copy.root / "schedules" / "tiny" / f"{workload}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(SPLIT_AND_VECTORIZE)
    run = tiny_copy.doit("build:tiny")
    assert run.ran == {f"lower:tiny/{workload}", f"codegen:tiny/{workload}", "link:tiny"}
    assert tiny_copy.objects("tiny")[f"{workload}.o"] != default_obj
    assert_close(run_library(tiny_copy.library("tiny"), x), default, rel=1e-5)
    # The function's source is a dependency like a JSON record's.
    path.write_text(SPLIT_AND_VECTORIZE.replace("factors=[None, 8]", "factors=[None, 4]"))
    assert f"lower:tiny/{workload}" in tiny_copy.doit("build:tiny").ran
    # A Python record is identified by its text: a comment reruns lower, whose output
    # is unchanged, so nothing downstream runs (early cutoff).
    path.write_text(path.read_text() + "\n# a comment schedules nothing\n")
    assert tiny_copy.doit("build:tiny").ran == {f"lower:tiny/{workload}"}
    rows = json.loads(subprocess.run([sys.executable, "-m", "modelbuild", "inspect", "tiny", "--json"],
                                     cwd=tiny_copy.root, capture_output=True, text=True).stdout)
    assert next(r for r in rows if r["workload"] == workload)["status"] == "python"


@pytest.mark.slow
def test_python_schedule_that_raises_names_file_line_and_workload(tiny_copy):
    workload = tiny_conv_workload(tiny_copy)
    lib_hash = sha256(tiny_copy.library("tiny"))
    path = tiny_copy.root / "schedules" / "tiny" / f"{workload}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(RAISES)
    run = tiny_copy.doit("build:tiny", check=False)
    assert run.returncode != 0
    assert f"schedules/tiny/{workload}.py" in run.output and f"workload {workload}" in run.output
    assert 'at line 5 (`sch.vectorize(sch.get_sblock("conv2d_nhwc"))`)' in run.output
    assert "Cannot find a block with the name: conv2d_nhwc" in run.output
    assert "Traceback" not in run.output
    assert sha256(tiny_copy.library("tiny")) == lib_hash
    check = subprocess.run([sys.executable, "-m", "modelbuild", "check", "tiny"], cwd=tiny_copy.root,
                           capture_output=True, text=True)
    assert check.returncode == 1 and "at line 5" in check.stdout


@pytest.mark.slow
def test_a_schedule_that_calls_sys_exit_fails_its_step_not_the_whole_run_with_success(tiny_copy):
    """sys.exit(0) in a schedule ended doit with 0 and 'done', the library not relinked."""
    workload = tiny_conv_workload(tiny_copy)
    lib_hash = sha256(tiny_copy.library("tiny"))
    path = tiny_copy.root / "schedules" / "tiny" / f"{workload}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    for text in ("def schedule(sch):\n    import sys; sys.exit(0)\n", "import sys\nsys.exit(0)\n"):
        path.write_text(text)
        run = tiny_copy.doit("build:tiny", check=False)
        assert run.returncode != 0, run
        assert "called sys.exit(0): a schedule cannot end the build" in run.output
        assert f"failed lower:tiny/{workload}" in run.output and "Traceback" not in run.output
        assert sha256(tiny_copy.library("tiny")) == lib_hash



@pytest.mark.slow
@pytest.mark.parametrize("body, said", [
    ("raise KeyboardInterrupt", "raised KeyboardInterrupt at line 2 (`raise KeyboardInterrupt`), "
                                "with no Ctrl-C: its own failure"),
    ("sch.split(sch.fuse(*sch.get_loops(sch.get_sblock('compute'))), factors=[None, 1000000], "
     "disable_predication=True)", "splits a loop with disable_predication=True"),
])
def test_a_schedule_s_own_interrupt_or_unchecked_split_fails_its_step(tiny_copy, body, said):
    """A KeyboardInterrupt the schedule raised stopped the build as a Ctrl-C ("interrupted",
    130) and `check` with it; a split without its bounds check built, exit 0, a library
    that corrupted the heap when it ran."""
    workload = tiny_conv_workload(tiny_copy)
    lib_hash = sha256(tiny_copy.library("tiny"))
    path = tiny_copy.root / "schedules" / "tiny" / f"{workload}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"def schedule(sch):\n    {body}\n")
    run = tiny_copy.doit("build:tiny", check=False)
    assert run.returncode == 1 and said in run.output, run
    assert f"failed lower:tiny/{workload}" in run.output and "interrupted" not in run.output
    check = subprocess.run([sys.executable, "-m", "modelbuild", "check", "tiny"],
                           cwd=tiny_copy.root, capture_output=True, text=True)
    assert check.returncode == 1 and said in check.stdout + check.stderr, check
    assert sha256(tiny_copy.library("tiny")) == lib_hash


@pytest.mark.slow
def test_a_schedule_cannot_end_the_process_or_escape_its_step(tiny_copy):
    """os._exit(0) in a schedule ended doit with 0 and no library; a GeneratorExit or a
    BaseException of the schedule's own ended in a traceback and 'done'."""
    workload = tiny_conv_workload(tiny_copy)
    lib_hash = sha256(tiny_copy.library("tiny"))
    path = tiny_copy.root / "schedules" / "tiny" / f"{workload}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    cases = {
        "def schedule(sch):\n    import os; os._exit(0)\n": "called os._exit(0): a schedule cannot end the build",
        "import os\nos._exit(3)\n": "loading the file called os._exit(3)",
        "import posix\ndef schedule(sch):\n    posix._exit(0)\n": "called os._exit(0): a schedule cannot end the build",
        "def schedule(sch):\n    import os; os.execv('/bin/true', ['true'])\n": "called os.execv('/bin/true')",
        "def schedule(sch):\n    raise GeneratorExit('stop')\n": "raised at line 2 (`raise GeneratorExit('stop')`): GeneratorExit: stop",
        "class Stop(BaseException):\n    pass\n\ndef schedule(sch):\n    raise Stop()\n": "the schedule function raised at line 5 (`raise Stop()`): Stop",
    }
    for text, said in cases.items():
        path.write_text(text)
        run = tiny_copy.doit("build:tiny", check=False)
        assert run.returncode == 1, run
        assert said in run.output, run
        assert f"failed lower:tiny/{workload}" in run.output and "Traceback" not in run.output, run
        assert sha256(tiny_copy.library("tiny")) == lib_hash


@pytest.mark.slow
def test_a_schedule_that_changes_the_working_directory_builds(tiny_copy):
    """The build's paths are relative to the project: os.chdir in a schedule was an
    internal error of the step after it."""
    workload = tiny_conv_workload(tiny_copy)
    x = model_inputs(tiny_copy.root, "tiny")
    default = run_library(tiny_copy.library("tiny"), x)
    path = tiny_copy.root / "schedules" / "tiny" / f"{workload}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("import os\nos.chdir('/')\n" + SPLIT_AND_VECTORIZE.replace(
        "def schedule(sch):\n", "def schedule(sch):\n    os.chdir('/tmp')\n"))
    run = tiny_copy.doit("build:tiny")
    assert run.ran == {f"lower:tiny/{workload}", f"codegen:tiny/{workload}", "link:tiny"}, run
    assert_close(run_library(tiny_copy.library("tiny"), x), default, rel=1e-5)

@pytest.mark.slow
def test_two_records_for_one_workload_are_refused(tiny_copy, tiny_variants):
    from modelbuild.schedules import records

    workload, variants = tiny_variants
    records.save(tiny_copy.record("tiny", workload), variants[0])
    (tiny_copy.root / "schedules" / "tiny" / f"{workload}.py").write_text(SPLIT_AND_VECTORIZE)
    run = tiny_copy.doit("build:tiny", check=False)
    assert run.returncode != 0 and "two records for one workload" in run.output
    # check said "0 with problems - ok" (each file is fine alone) for what cannot build
    checked = subprocess.run([sys.executable, "-m", "modelbuild", "check", "tiny"],
                             cwd=tiny_copy.root, capture_output=True, text=True)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert f"workload {workload}: two records for one workload: {workload}.json, " \
           f"{workload}.py" in checked.stdout, checked.stdout


@pytest.mark.slow
def test_check_takes_a_float16_reduction_in_another_order_for_right(tmp_path):
    """A float16 matmul (K=4096) scheduled with rfactor: its numbers differ from the
    reference's by float16's own rounding (1%), which `check` took for TVM's wrong code."""
    import numpy as np
    from conftest import cli, make_project
    from onnx import TensorProto as TP
    from onnx import helper as H
    from onnx import numpy_helper

    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4096, 64))
                                .astype(np.float16), "w")
    graph = H.make_graph([H.make_node("MatMul", ["x", "w"], ["y"])], "h",
                         [H.make_tensor_value_info("x", TP.FLOAT16, [1, 4096])],
                         [H.make_tensor_value_info("y", TP.FLOAT16, [1, 64])], initializer=[w])
    project = make_project(tmp_path / "p", {"gemv": H.make_model(
        graph, opset_imports=[H.make_opsetid("", 13)], ir_version=8)})
    schedules = project.root / "schedules" / "gemv"
    schedules.mkdir(parents=True, exist_ok=True)
    (schedules / "matmul.py").write_text(
        "def schedule(sch):\n"
        "    block = sch.get_sblock('matmul')\n"
        "    i0, i1, k = sch.get_loops(block)\n"
        "    ko, ki = sch.split(k, factors=[64, None])\n"
        "    sch.rfactor(ko, 0)\n")
    project.doit("build:gemv")
    checked = cli(project, "check", "gemv", check=False)
    assert checked.returncode == 0 and "ok" in checked.stdout, checked.stdout
