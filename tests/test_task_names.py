"""Tasks named on doit's command line, one kind at a time, as README's "The task graph"
shows them: each brings what it depends on up to date first, and none ends in a traceback."""

from __future__ import annotations


def test_one_codegen_task_by_name_lowers_first_after_a_record_edit(tiny_copy, tiny_variants):
    workload, records = tiny_variants
    tiny_copy.set_record("tiny", workload, records[0])
    run = tiny_copy.doit(f"codegen:tiny/{workload}")
    assert "Traceback" not in run.output, run.output
    assert run.ran == {f"lower:tiny/{workload}", f"codegen:tiny/{workload}"}, run.output
    # the build then only links: what codegen made is what the build uses
    assert tiny_copy.doit("build:tiny").ran == {"link:tiny"}


def test_every_kind_by_name_and_together(tiny_copy):
    for args in (["codegen"], ["lower"], ["lower", "codegen"], ["codegen", "lower"],
                 ["link:tiny"], ["list", "--all"]):
        run = tiny_copy.doit(*args)
        assert "Traceback" not in run.output, (args, run.output)
    listed = tiny_copy.doit("list", "--all").stdout.split()
    assert len([t for t in listed if t.startswith("lower:")]) == len(set(
        t for t in listed if t.startswith("lower:")))
