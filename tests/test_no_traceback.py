"""No input ends in a Python traceback: every command, given malformed arguments or a bad
model, says what is wrong on stderr and exits non-zero."""

import json
import os
import subprocess
import sys

import pytest
from conftest import cli, make_project, tiny_conv_workload
from onnx_models import tiny_model

MALFORMED = [
    [], ["nosuch-command"], ["tune"], ["tune", "nosuch"], ["tune", "tiny", "--trials", "0"],
    ["tune", "tiny", "--trials", "x"], ["tune", "tiny", "--workload", "nosuch", "--trials", "1"],
    ["import", "tiny", "/nonexistent/db"], ["import", "nosuch", "/nonexistent/db"],
    ["export", "tiny"], ["export", "nosuch", "/tmp/x"], ["export", "tiny", "dodo.py"],
    ["export", "tiny", "/proc/no/such/folder"],
    ["sample", "tiny", "nosuch"], ["sample", "tiny", "mean", "-n", "0"],
    ["sample", "tiny", "mean", "--seed", "x"], ["sample", "tiny", "mean", "--seed", "0"],
    ["sample", "tiny", "mean", "--seed", "2147483648"], ["sample", "tiny", "mean", "--seed", "1e23"],
    ["sample", "tiny", "mean", "-n", "99999999999999999999"],
    ["sample", "tiny", "mean", "--target", "c"], ["tune", "tiny", "--target", "c", "--trials", "1"],
    ["tune", "tiny", "--seed", "1e20", "--trials", "1"],
    ["tune", "tiny", "--work-dir", "dodo.py", "--trials", "1"],
    ["export", "tiny", "/proc/self"], ["serve", "--port", "99999"],
    ["sweep", "tiny", "--workload", "mean", "--variants", ""],
    ["sweep", "tiny", "--workload", "mean", "--variants", ",,,"],
    ["export", "tiny", ""], ["explain", "tiny", ""], ["explain", "tiny", "--node", ""],
    ["inspect", "tiny", "--target", ""], ["inspect", "tiny", "--mcpu", ""],
    ["--project", "", "inspect", "tiny"], ["inspect", ""],
    ["select", "tiny", "mean", "abc"], ["select", "tiny", "mean", "0"], ["select", "tiny", "mean", "99"],
    ["select", "nosuch", "mean", "1"],
    ["check", "nosuch"], ["check", "tiny", "--target", "nosuch"],
    ["inspect", "nosuch"], ["inspect", "tiny", "--target", "nosuch"],
    ["explain", "nosuch"], ["explain", "tiny", "nosuch"], ["explain", "tiny", "mean", "--node", "x"],
    ["explain", "tiny", "--node", "nosuch"],
    ["watch", "nosuch"], ["watch", "tiny", "--target", "nosuch"],
    ["why", "nosuch"], ["why", "tiny", "--target", "nosuch"],
    ["cache"], ["cache", "bogus"], ["cache", "prune"], ["cache", "prune", "--max-size", "inf"],
    ["cache", "prune", "--max-size", "nan"], ["cache", "prune", "--max-size", "-1"],
    ["cache", "prune", "--max-size", "lots"],
    ["bench", "nosuch"], ["bench", "tiny", "--runs", "0"], ["bench", "tiny", "--warmup", "-1"],
    ["bench", "tiny", "--runs", "100001"], ["sweep", "tiny", "--workload", "mean", "--warmup",
                                            "999999999999"],  # ran for days
    ["bench", "tiny", "--target", "nosuch"], ["bench", "tiny", "--target", "cuda", "--no-build"],
    ["sweep", "tiny"], ["sweep", "tiny", "--workload", "nosuch"],
    ["sweep", "tiny", "--workload", "mean", "--variants", "x"],
    ["sweep", "tiny", "--workload", "mean", "--mode", "bogus"],
    ["--project", "/nonexistent", "inspect", "tiny"],
    # accepted and ignored, or accepted and failed late, before
    ["tune", "tiny", "--trials", "2", "--total-trials", "4"],
    ["tune", "tiny", "--rpc", "127.0.0.1:99999", "--key", "k", "--trials", "1"],
    ["tune", "tiny", "--local", "--per-cpu", "--trials", "1"],
    ["cache", "clear", "models"], ["cache", "stats", "--max-size", "1G"],
    ["serve", "--dashboard", "70000"],
]


@pytest.mark.parametrize("args", MALFORMED, ids=lambda a: " ".join(a) or "(none)")
def test_malformed_arguments_are_refused_in_words(tiny_built, cli_main, args):
    proc = cli_main(tiny_built, *args, check=False)
    assert proc.returncode != 0, proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    assert "internal error" not in proc.stderr, proc.stderr  # said as a modelbuild bug
    assert proc.stderr.strip(), "the error goes to stderr"
    assert "error" in proc.stderr.lower()


@pytest.mark.parametrize("args, needle", [
    (["build:nosuch"], "unknown model 'nosuch'"),
    (["build:tiny", "target=nosuch"], "unsupported target 'nosuch'"),
    (["bench:tiny", "runs=x"], "runs=x: expected a whole number"),
    (["bench:tiny", "runs=" + "9" * 5000], "expected a whole number"),  # int() refused it
    (["bench:tiny", "runs=100001"], "runs=100001: expected a whole number from 1 to 100000"),
    (["bench:tiny", "warmup=100001"], "from 0 to 100000"),
    (["lower:tiny/nosuch"], "has no workload 'nosuch'"),
    (["build:tiny", "layuot=NCHW"], "unknown variable 'layuot' in 'layuot=NCHW'; doit build and "
                                    "bench take target=, mcpu=, layout=, runs=, warmup= "
                                    "(did you mean layout=?)"),  # it built the default, exit 0
    (["bench:tiny", "TARGET=c"], "unknown variable 'TARGET'"),
    (["build:tiny", "target="], "'target=' gives target no value"),  # it built for llvm
    (["build:tiny", "mcpu="], "'mcpu=' gives mcpu no value"),
])
def test_malformed_doit_requests_are_refused_in_words(tiny_built, args, needle):
    run = tiny_built.doit(*args, check=False)
    assert run.returncode != 0 and needle in run.output
    assert "Traceback" not in run.output


def test_outside_a_project_commands_say_so(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "modelbuild", "inspect", "tiny"], cwd=tmp_path,
                          capture_output=True, text=True)
    assert proc.returncode == 1 and "not inside a modelbuild project" in proc.stderr
    assert "Traceback" not in proc.stderr


def _symbolic_batch_model():
    model = tiny_model()
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
    return model


@pytest.mark.slow
def test_a_model_with_a_symbolic_dimension_asks_for_its_shape(tmp_path):
    project = make_project(tmp_path / "p", {"dyn": _symbolic_batch_model()})
    run = project.doit("build:dyn", check=False)
    assert run.returncode != 0 and "Traceback" not in run.output
    assert "model input 'x' has no static shape ([N, 3, 16, 16])" in run.output
    assert "[inputs]" in run.output and "x = [1, 3, 16, 16]" in run.output
    (project.root / "models" / "dyn.toml").write_text('[inputs]\nx = [2, 3, 16, 16]\n')
    project.doit("build:dyn")
    (project.root / "models" / "dyn.toml").write_text('[inputs]\ny = [2, 3, 16, 16]\n')
    run = project.doit("build:dyn", check=False)
    assert run.returncode != 0 and "[inputs] names y, which the model does not have" in run.output


def test_a_model_file_that_is_not_onnx_is_named(tmp_path):
    project = make_project(tmp_path / "p", {"tiny": tiny_model()})
    (project.root / "models" / "tiny.onnx").write_bytes(b"PK\x03\x04 this is a zip file")
    run = project.doit("build:tiny", check=False)
    assert run.returncode != 0 and "cannot read ONNX model" in run.output
    assert "Traceback" not in run.output



@pytest.mark.parametrize("content", [b"", pytest.param(b"\x08\x07", marks=pytest.mark.slow),
                                     pytest.param(b"# just a comment\n", marks=pytest.mark.slow)],
                         ids=["empty", "ir-version-only", "text"])
def test_a_model_file_protobuf_reads_as_an_empty_model_is_named(tmp_path, content):
    """Protobuf reads such bytes as a model with no graph: TVM's "Model IR version 0 not
    supported" came with a hint about unsupported operators, and a model with an IR version
    and no graph built a library that computes nothing, exit 0."""
    project = make_project(tmp_path / "p", {"tiny": tiny_model()})
    (project.root / "models" / "tiny.onnx").write_bytes(content)
    run = project.doit("build:tiny", check=False)
    assert run.returncode != 0 and "Traceback" not in run.output, run.output
    assert "models/tiny.onnx" in run.output, run.output
    assert any(said in run.output for said in ("not an ONNX model", "cannot read ONNX model",
                                               "the model's graph has no outputs")), run.output
    assert "does not support an operator" not in run.output, run.output
    if not content:
        assert "(the file is empty)" in run.output, run.output

def test_an_internal_error_is_one_paragraph_with_the_way_to_the_traceback(tiny_copy):
    """A failure no check anticipated (here: TVM given a file that is not TIR) is reported
    as an internal error in words, with how to see the traceback."""
    workload = tiny_conv_workload(tiny_copy)
    tiny_copy.workload_file("tiny", workload).write_text('{"not": "tir"}')
    run = tiny_copy.doit(f"lower:tiny/{workload}", check=False)
    assert run.returncode != 0 and "Traceback" not in run.output
    assert "internal error in" in run.output and "MODELBUILD_TRACEBACK=1" in run.output


SPLIT = '''
def schedule(sch):
    block = sch.get_sblock("conv2d_NCHWc")
    n, f, y, x, fb, rc, ry, rx = sch.get_loops(block)
    sch.split(x, factors=[None, 4])
'''


@pytest.mark.slow
def test_export_with_a_python_schedule_exports_its_trace(tiny_copy, tmp_path):
    workload = tiny_conv_workload(tiny_copy)
    folder = tiny_copy.root / "schedules" / "tiny"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{workload}.py").write_text(SPLIT)
    proc = cli(tiny_copy, "export", "tiny", str(tmp_path / "db"))
    assert "exported 1 record(s)" in proc.stdout and "1 Python schedule(s)" in proc.stdout
    fresh = make_project(tmp_path / "fresh", {"tiny": tiny_model()})
    report = json.loads(cli(fresh, "import", "tiny", str(tmp_path / "db"), "--json").stdout)
    assert report["written"] == [workload]
    trace = json.loads(fresh.record("tiny", workload).read_text())["trace"]
    assert any(inst[0] == "Split" for inst in trace[0])


def test_sampling_that_finds_nothing_valid_says_so(tiny_built, monkeypatch):
    import tvm

    from modelbuild.core.errors import BuildError
    from modelbuild.schedules import sample
    from modelbuild.targets import registry

    workload = tiny_conv_workload(tiny_built)
    func = tvm.ir.load_json(tiny_built.workload_file("tiny", workload).read_text())
    monkeypatch.setattr(sample, "_valid", lambda sch, postprocs: False)
    with pytest.raises(BuildError, match="sampling found 0 valid variant"):
        sample.sample_records(func, workload, registry.resolve("llvm"), 2)


def test_a_broken_pyproject_is_named(tiny_copy):
    # (doit itself reads pyproject.toml for [tool.doit] first, and prints its own traceback
    # for a file it cannot parse: that part is doit's.)
    (tiny_copy.root / "pyproject.toml").write_text('[tool.modelbuild]\ncache-dir = \n')
    proc = cli(tiny_copy, "cache", "stats", check=False)
    assert proc.returncode == 1 and "pyproject.toml: not valid TOML" in proc.stderr
    (tiny_copy.root / "pyproject.toml").write_text('[tool.modelbuild]\ncache_dir = "x"\n')
    run = tiny_copy.doit("build:tiny", check=False)
    assert run.returncode != 0 and "unknown keys in [tool.modelbuild]: cache_dir" in run.output
    assert "Traceback" not in run.output + proc.stderr


@pytest.mark.parametrize("args", [
    ["select", "tiny", "../../notes", "default"],
    ["select", "tiny", "../../notes", "1"],
    ["select", "tiny", "../../notes", "winograd"],
    ["select", "tiny", "/tmp/../notes", "default"],
    ["sample", "tiny", "../../notes", "-n", "1"],
])
def test_a_workload_name_is_never_a_path(tiny_copy, cli_main, args):
    """`select tiny ../../notes default` deleted the project's notes.json (any .json the
    path reached), exit 0."""
    notes = tiny_copy.root / "notes.json"
    notes.write_text('{"mine": true}')
    variants = tiny_copy.root / "schedules" / "notes"
    variants.mkdir(parents=True, exist_ok=True)
    (variants / "1.json").write_text('{"not": "a record"}')
    before = sorted(p.relative_to(tiny_copy.root) for p in tiny_copy.root.rglob("*")
                    if "build" not in p.parts)
    proc = cli_main(tiny_copy, *args, check=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc
    assert "not a workload name" in proc.stderr or "has no workload" in proc.stderr, proc
    assert notes.read_text() == '{"mine": true}'
    assert sorted(p.relative_to(tiny_copy.root) for p in tiny_copy.root.rglob("*")
                  if "build" not in p.parts) == before


@pytest.mark.parametrize("cxx, said", [
    ("/nonexistent/g++", "does not exist"),
    *[pytest.param(cxx, said, marks=pytest.mark.slow) for cxx, said in [
        ("'unclosed", "cannot be split into words as a shell would"),
        ("{root}", "is a directory"),
        ("{root}/dodo.py", "is not an executable file"),
        ("CCACHE_DIR=/tmp g++", "starts with a variable assignment"),
        ("{root}/silent-cc", "says no target for -dumpmachine (status 0, no output)"),
    ]],
])
def test_a_compiler_that_cannot_be_used_is_named_with_why(tiny_project, cxx, said):
    """Each was an internal error (FileNotFoundError, "Target triple should not be empty")
    in partition and link, or said "does not exist" of a file that exists."""
    silent = tiny_project.root / "silent-cc"
    silent.write_text("#!/bin/sh\nexit 0\n")
    silent.chmod(0o755)
    cxx = cxx.format(root=tiny_project.root)
    run = tiny_project.doit("build:tiny", check=False, env={**os.environ, "CXX": cxx})
    assert run.returncode == 1 and "internal error" not in run.output, run.output
    assert "the C/C++ compiler " in run.output and said in run.output, run.output


@pytest.mark.slow
def test_a_compiler_written_with_a_wrapper_and_flags_builds(tiny_project):
    """CXX="env g++ -O2", as make users write it, was no program to TVM or to the link."""
    from conftest import assert_close, model_inputs, onnx_output, run_library

    tiny_project.doit("build:tiny", env={**os.environ, "CXX": "env g++ -O2"})
    x = model_inputs(tiny_project.root, "tiny")
    assert_close(run_library(tiny_project.library("tiny"), x), onnx_output(tiny_project.root, "tiny", x))


def test_output_piped_into_a_reader_that_stops_early_is_no_error(tiny_built):
    """`explain --json | head -1` was 'internal error ... this is a modelbuild bug'."""
    read, write = os.pipe()
    proc = subprocess.Popen([sys.executable, "-m", "modelbuild", "explain", "tiny", "--json"],
                            cwd=tiny_built.root, stdout=write, stderr=subprocess.PIPE)
    os.close(write)
    os.close(read)  # the reader is gone before the command writes (it starts in ~0.5 s)
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141, err
    assert "internal error" not in err and "Traceback" not in err and "Exception" not in err, err


def test_doit_list_piped_into_a_reader_that_stops_early_ends_as_unix_tools_do(tiny_built):
    """`doit list | head -1` printed doit's BrokenPipeError traceback (exit 3)."""
    read, write = os.pipe()
    proc = subprocess.Popen([sys.executable, "-m", "doit", "list", "--all"], cwd=tiny_built.root,
                            stdout=write, stderr=subprocess.PIPE)
    os.close(write)
    os.close(read)
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == -13, err  # ended by SIGPIPE, as `ls | head` ends ls
    assert "Traceback" not in err, err


@pytest.mark.parametrize("what", ["dangling-link", "file"])
def test_a_build_folder_that_is_no_folder_is_one_line(tiny_project, what):
    """build/ a link to a scratch disk that is not mounted, or a file: dodo.py's mkdir
    raised a FileExistsError traceback on every doit command."""
    build = tiny_project.root / "build"
    if what == "file":
        build.write_text("")
    else:
        build.symlink_to(tiny_project.root / "not-mounted" / "build")
    run = tiny_project.doit("build:tiny", check=False)
    assert run.returncode != 0 and "Traceback" not in run.output, run.output
    assert f"{build} is a" in run.output and "in that folder" in run.output, run.output


@pytest.mark.parametrize("content", ['tool = "x"\n', '[tool]\nmodelbuild = 3\n'])
def test_a_pyproject_whose_tool_is_no_table_is_one_line(tiny_copy, cli_main, content):
    """`tool = "x"` is valid TOML: `why` said "internal error ... AttributeError"."""
    (tiny_copy.root / "pyproject.toml").write_text(content)
    proc = cli_main(tiny_copy, "why", "tiny", check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "pyproject.toml" in proc.stderr and "must be a table" in proc.stderr, proc.stderr
