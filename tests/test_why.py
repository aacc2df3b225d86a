"""`python -m modelbuild why`: the dry run names what the next build runs, and why;
the real doit run then does that (what may stop early is said to)."""

import json
import subprocess
import sys

import pytest
from conftest import tiny_conv_workload

from modelbuild.schedules import records


def _why(project, *args) -> list[dict]:
    proc = subprocess.run([sys.executable, "-m", "modelbuild", "why", "tiny", "--json", *args],
                          cwd=project.root, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _predicted(verdicts, action):
    return {v["task"] for v in verdicts if v["action"] == action}


def _assert_doit_agrees(project, verdicts, *args):
    run = project.doit("build:tiny", *args)
    assert run.ran == _predicted(verdicts, "run")
    assert run.from_cache == _predicted(verdicts, "restore")
    return run


def test_why_after_no_change_says_nothing_will_run(tiny_copy):
    proc = subprocess.run([sys.executable, "-m", "modelbuild", "why", "tiny"],
                          cwd=tiny_copy.root, capture_output=True, text=True)
    assert proc.returncode == 0 and "nothing will run" in proc.stdout
    assert _why(tiny_copy) == []
    _assert_doit_agrees(tiny_copy, [])


def test_why_after_doit_clean_does_not_say_never_built(tiny_copy):
    """`doit clean` removes outputs and stamps: the steps were built, so "never built"
    (what `why` said) was wrong; it cannot tell a cleaned step from a new one."""
    tiny_copy.doit("clean")
    verdicts = _why(tiny_copy)
    assert verdicts and all(v["action"] in ("run", "restore") for v in verdicts), verdicts
    text = json.dumps(verdicts)
    assert "never built" not in text and "not built (or cleaned)" in text, verdicts
    _assert_doit_agrees(tiny_copy, verdicts)


def test_why_names_the_edited_record_and_decision(tiny_copy, tiny_variants):
    workload, variants = tiny_variants
    path = tiny_copy.record("tiny", workload)
    path.parent.mkdir(parents=True, exist_ok=True)
    records.save(path, variants[0])
    first = _why(tiny_copy)
    assert f"record {path.relative_to(tiny_copy.root)} added" in " ".join(
        r for v in first for r in v["reasons"])
    _assert_doit_agrees(tiny_copy, first)
    # Edit one tile decision by hand, as a user would.
    data = json.loads(path.read_text())
    insts, decisions = data["trace"]
    index, old = next((i, v) for i, v in decisions
                      if insts[i][0] == "SamplePerfectTile" and v[-1] != v[-2])
    new = [*old[:-2], old[-1], old[-2]]
    for d in decisions:
        if d[0] == index:
            d[1] = new
    path.write_text(json.dumps(data, indent=1))
    verdicts = _why(tiny_copy)
    lower = next(v for v in verdicts if v["task"] == f"lower:tiny/{workload}")
    assert lower["action"] == "run"
    assert (f"trace decision {index}: {json.dumps(old)} -> {json.dumps(new)}"
            in " ".join(lower["reasons"]))
    assert _predicted(verdicts, "run") == {f"lower:tiny/{workload}", f"codegen:tiny/{workload}",
                                           "link:tiny"}
    _assert_doit_agrees(tiny_copy, verdicts)
    # Going back: lower and codegen come from the cache; why says so.
    records.save(path, variants[0])
    back = _why(tiny_copy)
    assert _predicted(back, "restore") == {f"lower:tiny/{workload}", f"codegen:tiny/{workload}"}
    _assert_doit_agrees(tiny_copy, back)


@pytest.mark.slow
def test_why_names_a_target_change(tiny_copy):
    verdicts = _why(tiny_copy, "--target", "c")
    assert verdicts
    for v in verdicts:
        assert "target changed (llvm -> c)" in " ".join(v["reasons"]), v
        # the other target's own modules are no edit of modelbuild's code
        assert "modelbuild's code" not in " ".join(v["reasons"]), v
    workload = tiny_conv_workload(tiny_copy)
    assert {"partition:tiny", f"lower:tiny/{workload}", "link:tiny"} <= _predicted(verdicts, "run")
    _assert_doit_agrees(tiny_copy, verdicts, "target=c")
    assert _why(tiny_copy, "--target", "c") == []


def test_a_deleted_object_is_restored_and_why_lists_no_link(tiny_copy):
    """The restored object has the bytes the library was linked from: doit does not relink,
    and why said it would."""
    workload = tiny_conv_workload(tiny_copy)
    (tiny_copy.root / "build" / "tiny" / "objects" / f"{workload}.o").unlink()
    verdicts = _why(tiny_copy)
    assert _predicted(verdicts, "restore") == {f"codegen:tiny/{workload}"}
    assert _predicted(verdicts, "run") == set()
    _assert_doit_agrees(tiny_copy, verdicts)


@pytest.mark.slow
def test_why_says_what_may_stop_early_and_the_build_stops_there(tiny_copy):
    """A comment in a Python schedule reruns lower, which makes the same TIR: codegen and
    link are listed as "may change", and do not run."""
    workload = tiny_conv_workload(tiny_copy)
    path = tiny_copy.root / "schedules" / "tiny" / f"{workload}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("def schedule(sch):\n    pass\n")
    tiny_copy.doit("build:tiny")
    path.write_text("def schedule(sch):\n    pass  # a comment schedules nothing\n")
    verdicts = _why(tiny_copy)
    assert _predicted(verdicts, "run") == {f"lower:tiny/{workload}", f"codegen:tiny/{workload}",
                                           "link:tiny"}
    for v in verdicts:
        if not v["task"].startswith("lower:"):
            assert any("may change" in r for r in v["reasons"]), v
    assert tiny_copy.doit("build:tiny").ran == {f"lower:tiny/{workload}"}


@pytest.mark.slow
def test_after_a_failed_build_in_the_other_layout_why_predicts_no_link(tiny_copy):
    """A `layout=NCHW` build that failed (the record of `mean`, a workload of both layouts,
    is stale there) left NCHW's manifest: `why` walked its workloads and predicted a link
    that the next build, which restores the NCHWc partition first, does not run."""
    from conftest import sampled_records

    [rec] = sampled_records(tiny_copy, "tiny", "mean", 1)
    records.save(tiny_copy.record("tiny", "mean"), rec)
    tiny_copy.doit("build:tiny")
    failed = tiny_copy.doit("build:tiny", "layout=NCHW", check=False)
    assert failed.returncode != 0 and "stale record" in failed.output, failed.output
    verdicts = _why(tiny_copy)
    assert _predicted(verdicts, "run") == set(), verdicts
    restored = _predicted(verdicts, "restore")
    assert "partition:tiny" in restored, verdicts
    run = tiny_copy.doit("build:tiny")
    # doit prints partition as run (the outputs NCHW's declared are gone): it restores
    assert run.ran == {"partition:tiny"}, run.output
    assert run.from_cache == restored - {"partition:tiny"}, run.output


def test_without_doit_s_state_nothing_relinks_and_why_says_so(tiny_copy):
    """The link is decided by its stamp, as the other steps are: doit's state file gone
    (deleted, or set aside when damaged), `why` said the link runs, and the build relinked."""
    (tiny_copy.root / "build" / ".doit.db").unlink()
    assert _why(tiny_copy) == []
    _assert_doit_agrees(tiny_copy, [])


def test_an_object_edited_with_its_mtime_kept_is_restored_and_why_lists_no_link(tiny_copy):
    """codegen restores the object the library was linked from before the link is decided:
    `why` listed the link, which the build then found current."""
    import os

    obj = tiny_copy.root / "build" / "tiny" / "objects" / f"{tiny_conv_workload(tiny_copy)}.o"
    before, data = os.stat(obj), bytearray(obj.read_bytes())
    data[-50] ^= 0x01
    obj.write_bytes(bytes(data))
    os.utime(obj, ns=(before.st_atime_ns, before.st_mtime_ns))
    verdicts = _why(tiny_copy)
    assert _predicted(verdicts, "restore") == {f"codegen:tiny/{obj.stem}"}, verdicts
    assert _predicted(verdicts, "run") == set(), verdicts
    _assert_doit_agrees(tiny_copy, verdicts)
