"""Every model declared in models/ builds, and its library computes what onnxruntime computes
(an oracle outside TVM) and what tvm.compile with the same records computes.

The shipped light zoo models fill their weights with constants, which would
hide a wrong kernel; here each one gets random weights (same architecture,
dropped into models/ as an .onnx file, its final Softmax dropped so that every
logit is checked) and sampled records on two of its convolutions. resnet50 is
the end-to-end test.

densenet121 (191 workloads) takes about 110 s here on 2 cores, too long for
the default suite: it runs with MODELBUILD_SLOW_TESTS=1.
"""

import os

import pytest
from conftest import (
    REPO,
    assert_close,
    model_inputs,
    onnx_output,
    reference_output,
    run_library,
    sampled_records,
)

from modelbuild.core import manifest, models
from modelbuild.schedules import records

pytestmark = pytest.mark.slow  # the declared models, resnet50 among them: the full suite only
DECLARED = models.discover(REPO / "models")
SLOW = {"densenet121"}
_slow = pytest.mark.skipif(not os.environ.get("MODELBUILD_SLOW_TESTS"),
                           reason="slow (~110 s); set MODELBUILD_SLOW_TESTS=1 to run")


@pytest.mark.parametrize("name", [pytest.param(n, marks=_slow) if n in SLOW else n
                                  for n in sorted(DECLARED)])
def test_declared_model_matches_tvm_compile(name, declared_partitioned):
    project = declared_partitioned(name)
    man = manifest.read(project.root / "build" / name / "partition" / "manifest.msgpack")
    convs = [w.name for w in man.workloads if "conv2d" in w.name][:2]
    for workload in convs:
        rec = sampled_records(project, name, workload, 1, seed=7)[0]
        records.save(project.record(name, workload), rec)
    run = project.doit(f"build:{name}")
    assert {f"lower:{name}/{w}" for w in convs} <= run.ran and f"link:{name}" in run.ran
    x = model_inputs(project.root, name)
    ours = run_library(project.library(name), x)
    ref = reference_output(project, name, x)
    assert float(ours.std()) > 0.05 * float(abs(ours).max())  # logits spread out, all checked
    assert_close(ours, ref)
    assert_close(ours, onnx_output(project.root, name, x), rel=1e-4)


def test_the_shipped_resnet50_records_pass_the_builds_checks(tmp_path):
    """A TVM upgrade that makes the shipped records stale (or unappliable) fails here."""
    import shutil

    from conftest import cli, make_project

    project = make_project(tmp_path / "p", {"resnet50": (REPO / "models" / "resnet50.toml").read_text()})
    shutil.copytree(REPO / "schedules" / "resnet50", project.root / "schedules" / "resnet50")
    shipped = len(list((REPO / "schedules" / "resnet50").glob("*.json")))
    assert shipped > 0
    proc = cli(project, "check", "resnet50", check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"checked {shipped} record file(s): 0 with problems" in proc.stdout
