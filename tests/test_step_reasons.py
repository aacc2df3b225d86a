"""`Step.decide(explain=True)`: the build's own decision carries its reasons, and `why`
prints exactly those (it does not work them out a second time)."""

import json
import subprocess
import sys
from pathlib import Path

from conftest import tiny_conv_workload

from modelbuild.decision.cached_step import CURRENT, RESTORE
from modelbuild.decision.context import load_context
from modelbuild.decision.step_builders import codegen_step, lower_step


def _why(project) -> dict:
    proc = subprocess.run([sys.executable, "-m", "modelbuild", "why", "tiny", "--json"],
                          cwd=project.root, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return {v["task"]: v for v in json.loads(proc.stdout)}


def test_why_prints_the_reasons_the_decision_returned(tiny_copy, monkeypatch):
    workload = tiny_conv_workload(tiny_copy)
    monkeypatch.chdir(tiny_copy.root)  # doit's state names files relative to the root
    ctx = load_context(Path("."), None)
    step = lower_step(ctx, "tiny", workload)
    assert step.decide(explain=True).action == CURRENT
    assert step.decide(explain=True).reasons == ()

    step.output.unlink()  # its stamp stays: the cache still has the output for these inputs
    decision = step.decide(explain=True)
    assert decision.action == RESTORE
    assert decision.reasons == ("output missing", "restore (local cache)")
    assert step.decide().reasons == ()  # the build's uptodate check does not ask for words

    verdicts = _why(tiny_copy)
    assert verdicts[f"lower:tiny/{workload}"]["reasons"] == list(decision.reasons)
    assert f"codegen:tiny/{workload}" not in verdicts  # same lowered TIR: codegen is current
    run = tiny_copy.doit("build:tiny")
    assert run.from_cache == {f"lower:tiny/{workload}"} and not run.ran


def test_codegen_names_its_upstream_in_its_reasons(tiny_copy, monkeypatch):
    workload = tiny_conv_workload(tiny_copy)
    monkeypatch.chdir(tiny_copy.root)
    ctx = load_context(Path("."), None)
    step = codegen_step(ctx, "tiny", workload, "0" * 64, "lower:tiny/x restored from the cache")
    decision = step.decide(explain=True)
    assert decision.action != CURRENT
    assert "upstream output changed (lower:tiny/x restored from the cache)" in decision.reasons


def test_why_prints_the_link_s_own_decision(tiny_copy, monkeypatch):
    """The link is decided as lower and codegen are (its stamp, not doit's state): `why`
    prints the reasons its decision returned, and the build acts on that decision."""
    import os

    from modelbuild.core import manifest
    from modelbuild.decision.cached_step import RUN
    from modelbuild.decision.step_builders import link_step

    monkeypatch.chdir(tiny_copy.root)
    ctx = load_context(Path("."), None)
    link = link_step(ctx, "tiny", manifest.read(ctx.project.model("tiny").manifest))
    (ctx.project.build_dir / ".doit.db").unlink()
    assert link.decide(explain=True).action == CURRENT

    os.truncate(link.output, 1000)
    decision = link.decide(explain=True)
    assert decision.action == RUN
    assert decision.reasons == (f"output modified since it was built: {link.output} (not the "
                                "bytes the link wrote)",)
    assert link.decide().reasons == ()
    assert _why(tiny_copy)["link:tiny"]["reasons"] == list(decision.reasons)
    assert tiny_copy.doit("build:tiny").ran == {"link:tiny"}
    assert link.decide().action == CURRENT
