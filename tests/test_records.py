"""Record files: parsing, validation messages, pretty format (no TVM needed)."""

import json
from pathlib import Path

import pytest

from modelbuild.core.errors import BuildError
from modelbuild.schedules import records
from modelbuild.targets.registry import resolve

TRACE = [[["GetBlock", [], ["conv", "main"], ["b0"]],
          ["SamplePerfectTile", ["l1"], [4, 64], ["v2", "v3", "v4", "v5"]]],
         [[1, [2, 4, 8, 1]]]]


def record_json(**over):
    data = {"format": records.FORMAT, "workload": "conv", "workload_hash": "123",
            "target": {"kind": "llvm"}, "run_secs": None, "trace": TRACE}
    data.update(over)
    return json.dumps(data)


def test_pretty_format_parses_back_to_the_same_record(tmp_path):
    rec = records.parse(record_json(run_secs=[0.5], source="tuned"), Path("conv.json"), "conv")
    path = tmp_path / "conv.json"
    records.save(path, rec)
    text = path.read_text()
    assert '      [1, [2, 4, 8, 1]]' in text  # one decision per line, easy to edit
    again = records.load(path, "conv")
    assert again.canonical() == rec.canonical()
    assert again.run_secs == [0.5] and again.source == "tuned"


def test_canonical_ignores_formatting_but_not_decisions():
    a = records.parse(record_json(), Path("a.json"))
    b = records.parse(json.dumps(json.loads(record_json()), indent=7), Path("b.json"))
    changed = json.loads(record_json())
    changed["trace"][1][0][1] = [4, 2, 8, 1]
    c = records.parse(json.dumps(changed), Path("c.json"))
    assert a.canonical() == b.canonical() != c.canonical()


@pytest.mark.parametrize("text, needle", [
    ('{"format": ', "invalid JSON at line 1"),
    ("[1, 2]", "must be a JSON object"),
    (record_json(trace=[1, 2, 3]), "trace must be [instructions, decisions]"),
    (record_json(workload="other"), "record is for workload 'other'"),
    (record_json(target="llvm"), "target must be a TVM target object"),
    (record_json(colour="blue"), "unknown field(s): colour"),
    (record_json(format="v0"), "expected 'modelbuild.record/1'"),
])
def test_bad_records_name_the_file_and_the_problem(text, needle):
    with pytest.raises(BuildError) as info:
        records.parse(text, Path("schedules/m/conv.json"), "conv")
    message = str(info.value)
    assert needle in message
    assert "schedules/m/conv.json" in message and "workload conv" in message


def test_missing_fields_are_listed():
    data = json.loads(record_json())
    del data["workload_hash"], data["trace"]
    with pytest.raises(BuildError, match="missing field\\(s\\): workload_hash, trace"):
        records.parse(json.dumps(data), Path("x.json"))


def test_record_for_another_target_is_refused():
    rec = records.parse(record_json(target={"kind": "cuda"}), Path("conv.json"))
    with pytest.raises(BuildError, match="made for target 'cuda', this build is for 'llvm'"):
        records.check_target(rec, resolve("llvm"))


@pytest.mark.slow
def test_a_schedules_folder_that_is_a_link_loop_is_named_not_taken_for_two_records(tiny_copy):
    """schedules/<model> a link to itself: every lower failed with "two records for one
    workload: X.json, X.py" (neither exists), and `check` said "0 record file(s) - ok"."""
    from conftest import cli

    folder = tiny_copy.root / "schedules" / "tiny"
    if folder.exists():
        import shutil

        shutil.rmtree(folder)
    folder.parent.mkdir(exist_ok=True)
    folder.symlink_to("tiny")
    run = tiny_copy.doit("build:tiny", check=False)
    assert run.returncode != 0 and "two records" not in run.output, run.output
    assert "Too many levels of symbolic links" in run.output, run.output
    checked = cli(tiny_copy, "check", "tiny", check=False)
    assert checked.returncode == 1, checked.stdout
    assert "schedules folder cannot be read" in checked.stdout, checked.stdout
    for args in (["select", "tiny", "mean", "default"], ["sample", "tiny", "mean", "-n", "1"]):
        done = cli(tiny_copy, *args, check=False)  # an internal error, before
        assert done.returncode == 1 and "internal error" not in done.stderr, done.stderr
        assert "a link that leads back to itself" in done.stderr, done.stderr
