"""sweep: build and benchmark once per variant; the user's active record is never lost."""

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace

import pytest
from conftest import sha256, tiny_conv_workload

from modelbuild.commands import sweep, sweep_plan, sweep_records
from modelbuild.core.errors import BuildError
from modelbuild.core.paths import Project
from modelbuild.graph import build_lock
from modelbuild.schedules import records


def add_variants(project, workload, recs, broken=()):
    """recs as variants 1, 2, ... of workload; numbers in ``broken`` get an invalid file."""
    folder = project.root / "schedules" / "tiny" / "variants" / workload
    folder.mkdir(parents=True, exist_ok=True)
    recs = list(recs)
    for k in range(1, len(recs) + len(broken) + 1):
        path = folder / f"{k}.json"
        if k in broken:
            path.write_text("{ not json")
        else:
            records.save(path, replace(recs.pop(0), path=path))


def run_sweep(project, *args):
    return subprocess.run([sys.executable, "-m", "modelbuild", "sweep", "tiny", *args],
                          cwd=project.root, capture_output=True, text=True, check=False)


def read_json(project, name):
    return json.loads((project.root / "build" / "tiny" / "sweeps" / f"{name}.json").read_text())


@pytest.mark.slow
def test_sweep_restores_the_active_record_and_goes_on_after_a_failed_build(tiny_copy,
                                                                           tiny_variants):
    workload, recs = tiny_variants
    add_variants(tiny_copy, workload, recs[:2], broken=(2,))
    # the user's active record is not one of the variants
    records.save(tiny_copy.record("tiny", workload), recs[2])
    tiny_copy.doit("build:tiny")
    active, library = tiny_copy.record("tiny", workload).read_bytes(), sha256(tiny_copy.library("tiny"))

    proc = run_sweep(tiny_copy, "--workload", workload, "--runs", "3", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"failed 2: lower:tiny/{workload}: error:" in proc.stderr and "invalid JSON" in proc.stderr

    result = json.loads(proc.stdout)
    assert result == read_json(tiny_copy, workload)
    assert [r["variants"][workload] for r in result["rows"]] == [1, 2, 3]
    assert [r["ok"] for r in result["rows"]] == [True, False, True]
    for row in (result["rows"][0], result["rows"][2]):
        assert row["latency_ms"]["median"] > 0 and row["workload_ms"][workload] > 0
        assert row["build_seconds"] > 0 and row["library_sha256"] != library
        assert isinstance(row["cache_hits"], int) and row["cache_hits"] >= 0
    png = tiny_copy.root / "build" / "tiny" / "sweeps" / f"{workload}.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # restored byte for byte, and the library rebuilt from it
    assert not result["selected"] and "restored the active records" in proc.stderr
    assert tiny_copy.record("tiny", workload).read_bytes() == active
    assert sha256(tiny_copy.library("tiny")) == library
    assert tiny_copy.doit("build:tiny").ran == set()


@pytest.mark.slow
def test_select_fastest_makes_the_fastest_variant_active(tiny_copy, tiny_variants):
    workload, recs = tiny_variants
    add_variants(tiny_copy, workload, recs[:2])
    assert not tiny_copy.record("tiny", workload).exists()
    proc = run_sweep(tiny_copy, "--workload", workload, "--runs", "3", "--select-fastest", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(proc.stdout)
    assert [r["variants"][workload] for r in result["rows"]] == [1, 2]
    fastest = result["rows"][result["fastest"]]
    medians = [r["latency_ms"]["median"] for r in result["rows"]]
    assert fastest["latency_ms"]["median"] == min(medians) and result["selected"]
    chosen = tiny_copy.root / fastest["files"][workload]
    assert tiny_copy.record("tiny", workload).read_bytes() == chosen.read_bytes()
    assert f"selected the fastest, {fastest['variants'][workload]}" in proc.stderr
    assert result["after"][workload] == f"variant {fastest['variants'][workload]}"
    assert tiny_copy.doit("build:tiny").ran == set()


@pytest.mark.slow
def test_select_fastest_keeps_the_user_s_own_record_as_a_variant(tiny_copy, tiny_variants):
    """The user's own active record (no variant's copy) was not a contestant, and the
    fastest variant replaced it: it was nowhere after the sweep."""
    workload, recs = tiny_variants
    add_variants(tiny_copy, workload, recs[:2])
    mine = tiny_copy.record("tiny", workload)
    records.save(mine, replace(recs[-1], path=mine))
    found = mine.read_bytes()
    proc = run_sweep(tiny_copy, "--workload", workload, "--variants", "1,default", "--runs", "3",
                     "--select-fastest", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    kept = tiny_copy.root / "schedules" / "tiny" / "variants" / workload / "3.json"
    assert kept.is_file() and kept.read_bytes() == found, proc.stderr
    assert json.loads(proc.stdout)["found_kept_as_variant"] == {workload: 3}
    assert f"{workload}: the record the sweep found (no variant's copy) is kept as variant 3" \
        in proc.stderr
    assert not mine.exists() or mine.read_bytes() != found  # the fastest is active


def test_too_many_builds_are_refused_before_building_anything(tiny_copy, tiny_variants):
    workload, recs = tiny_variants
    add_variants(tiny_copy, workload, recs)
    stamp = tiny_copy.library("tiny").stat().st_mtime_ns
    proc = run_sweep(tiny_copy, "--workload", workload, "--max-builds", "2")
    assert proc.returncode != 0
    assert "would take 3 builds" in proc.stderr and "--max-builds 2" in proc.stderr
    assert "nothing was built" in proc.stderr
    assert tiny_copy.library("tiny").stat().st_mtime_ns == stamp
    assert not tiny_copy.record("tiny", workload).exists()
    assert not (tiny_copy.root / "build" / "tiny" / "sweeps").exists()


def _sweep_held_at_its_first_build(project, workload, *args, first=1):
    """A running sweep of ``workload``, held at its first build with variant ``first`` the
    active record: this test holds the model's build lock, which that build waits for, so
    the sweep can neither end nor go on while the test acts, however slow the machine (it
    had ended before a signal sent once "1: built" was read reached it). Returns the
    sweep's process and the release of the lock, which the sweep then needs to go on."""
    lock = build_lock.hold(build_lock.lock_file(Project(project.root), "tiny"))
    variant = project.root / "schedules" / "tiny" / "variants" / workload / f"{first}.json"
    mine = project.record("tiny", workload)
    proc = subprocess.Popen([sys.executable, "-m", "modelbuild", "sweep", "tiny", "--workload",
                             workload, "--runs", "3", *args], cwd=project.root,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while not (mine.is_file() and mine.read_bytes() == variant.read_bytes()):
        if proc.poll() is not None or time.monotonic() > deadline:
            os.close(lock)
            proc.kill()
            pytest.fail(f"the sweep never made variant {first} active: {proc.stdout.read()}")
        time.sleep(0.01)
    return proc, lambda: os.close(lock)


@pytest.mark.slow
@pytest.mark.parametrize("sig, words", [(signal.SIGINT, "sweep interrupted"),
                                        (signal.SIGTERM, "sweep terminated"),
                                        (signal.SIGHUP, "sweep hung up")])
def test_ctrl_c_kill_or_a_closed_terminal_restores_the_active_record(tiny_copy, tiny_variants,
                                                                     sig, words):
    """SIGTERM and SIGHUP ended the sweep at once, a variant left as the active record."""
    workload, recs = tiny_variants
    add_variants(tiny_copy, workload, recs)
    mine = tiny_copy.record("tiny", workload)
    mine.parent.mkdir(parents=True, exist_ok=True)
    records.save(mine, replace(recs[-1], path=mine))
    before = mine.read_bytes()
    proc, release = _sweep_held_at_its_first_build(tiny_copy, workload)
    proc.send_signal(sig)
    release()
    out = proc.stdout.read()
    assert proc.wait(timeout=120) == 128 + sig, out
    assert words in out, out
    assert mine.read_bytes() == before
    assert tiny_copy.doit("build:tiny").ran == set()


@pytest.mark.slow
@pytest.mark.parametrize("then", ["sweep", "select"])
def test_a_sweep_killed_outright_gives_the_user_s_record_back_at_the_next_sweep_or_select(
        tiny_copy, tiny_variants, then):
    """SIGKILL (the OOM killer) left a variant active and the user's own record nowhere: the
    next sweep restored "as before" the variant. The records a sweep found are kept on disk
    until it puts them back; the next sweep or select of the model puts them back first."""
    workload, recs = tiny_variants
    add_variants(tiny_copy, workload, recs[:2])
    mine = tiny_copy.record("tiny", workload)
    mine.parent.mkdir(parents=True, exist_ok=True)
    records.save(mine, replace(recs[-1], path=mine))  # no variant's copy: the user's own
    before = mine.read_bytes()
    proc, release = _sweep_held_at_its_first_build(tiny_copy, workload)
    proc.kill()
    proc.wait(timeout=60)
    release()  # its build goes on, orphaned, as after an OOM kill
    assert mine.read_bytes() != before  # killed with variant 1 active
    built = tiny_copy.doit("build:tiny")
    assert "warning: a sweep of tiny was killed before it put back" in built.stderr, built.output
    if then == "sweep":
        done = run_sweep(tiny_copy, "--workload", workload, "--variants", "2", "--runs", "1")
        assert done.returncode == 0, done.stdout + done.stderr
        assert mine.read_bytes() == before
    else:
        done = subprocess.run([sys.executable, "-m", "modelbuild", "select", "tiny", workload,
                               "2"], cwd=tiny_copy.root, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr
        kept = tiny_copy.root / "schedules" / "tiny" / "variants" / workload / "3.json"
        assert kept.read_bytes() == before and "kept as variant 3" in done.stdout
    assert f"was killed before it put back the active records it found: {workload}: put " \
           "back" in done.stdout, done.stdout
    assert "warning: a sweep" not in tiny_copy.doit("build:tiny").stderr


def _a_sweep_over_the_users_record(project, tiny_variants, *args, first=1):
    """Two variants and the user's own active record (no variant's copy), and a sweep held
    at its first build (_sweep_held_at_its_first_build): (workload, records, the active
    record's path, its bytes before the sweep, the sweep's process, the lock's release)."""
    workload, recs = tiny_variants
    add_variants(project, workload, recs[:2])
    mine = project.record("tiny", workload)
    records.save(mine, replace(recs[-1], path=mine))
    found = mine.read_bytes()
    proc, release = _sweep_held_at_its_first_build(project, workload, *args, first=first)
    return workload, recs, mine, found, proc, release


@pytest.mark.slow
def test_a_record_written_after_a_killed_sweep_stays_and_the_found_one_becomes_a_variant(
        tiny_copy, tiny_variants):
    """Recovering a killed sweep's journal wrote the record it found over one the user
    wrote since the kill, keeping it nowhere."""
    workload, recs, mine, found, proc, release = _a_sweep_over_the_users_record(tiny_copy,
                                                                                 tiny_variants)
    proc.kill()
    proc.wait(timeout=60)
    release()
    since = replace(recs[0], path=mine, source="hand")
    records.save(mine, since)
    written = mine.read_bytes()
    done = subprocess.run([sys.executable, "-m", "modelbuild", "select", "tiny", "reshape",
                           "default"], cwd=tiny_copy.root, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert mine.read_bytes() == written
    kept = tiny_copy.root / "schedules" / "tiny" / "variants" / workload / "3.json"
    assert kept.read_bytes() == found, done.stdout
    assert "your record since stays active; the one the sweep found is variant 3" in done.stdout


@pytest.mark.slow
def test_a_record_the_user_edits_during_a_sweep_is_active_after_it(tiny_copy, tiny_variants):
    """The sweep wrote its next variant, then the record it found, over an edit the user
    saved while it ran: the edit was nowhere afterwards (exit 0)."""
    # the sweep of variant 2 alone has put it in place (building it now): the user saves
    workload, recs, mine, found, proc, release = _a_sweep_over_the_users_record(
        tiny_copy, tiny_variants, "--variants", "2", first=2)
    records.save(mine, replace(recs[0], path=mine, source="hand", run_secs=[0.123]))
    edit = mine.read_bytes()
    release()
    out = proc.stdout.read()
    assert proc.wait(timeout=300) == 0, out
    assert mine.read_bytes() == edit, out
    folder = tiny_copy.root / "schedules" / "tiny" / "variants" / workload
    kept = {p.name: p.read_bytes() for p in folder.glob("*.json")}
    assert kept["3.json"] == edit and kept["4.json"] == found, sorted(kept)
    line = (f"{workload}: your record, edited during the sweep, is active (and variant 3); "
            "the one the sweep found is variant 4")
    assert line in " ".join(out.split()), out
    [saved] = (tiny_copy.root / "build" / "tiny" / "sweeps").glob("*.json")
    assert json.loads(saved.read_text())["edited_during_sweep"] == [line]


@pytest.mark.slow
@pytest.mark.parametrize("journal", ["folder", "garbage", "long-name", "path-name"])
def test_a_damaged_or_crafted_sweep_journal_is_one_error(tiny_copy, tiny_variants, journal):
    import msgpack

    workload, _ = tiny_variants
    path = tiny_copy.root / "build" / "tiny" / ".sweep-records.msgpack"
    if journal == "folder":
        path.mkdir()
    elif journal == "garbage":
        path.write_bytes(b"\xc1\xc1")
    else:
        name = "w" * 300 if journal == "long-name" else "../../notes"
        path.write_bytes(msgpack.packb({name: b"{}"}))
    done = subprocess.run([sys.executable, "-m", "modelbuild", "select", "tiny", workload,
                           "default"], cwd=tiny_copy.root, capture_output=True, text=True)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "a killed sweep's record of the active records is" in done.stderr, done.stderr
    assert "internal error" not in done.stderr
    assert not (tiny_copy.root / "notes.json").exists()


@pytest.mark.slow
def test_select_keeps_a_hand_edited_active_record_as_a_variant(tiny_copy, tiny_variants):
    """`select M W k` (or default) overwrote (or deleted) an active record no variant is a
    copy of, silently: now it becomes the next variant first, and select says so."""
    workload, recs = tiny_variants
    add_variants(tiny_copy, workload, recs[:2])
    mine = tiny_copy.record("tiny", workload)
    records.save(mine, replace(recs[-1], path=mine))
    before = mine.read_bytes()

    def select(k):
        return subprocess.run([sys.executable, "-m", "modelbuild", "select", "tiny", workload,
                               k], cwd=tiny_copy.root, capture_output=True, text=True)

    for missing in ("9", "9" * 40):  # no such variant: refused before anything is kept
        refused = select(missing)
        assert refused.returncode == 1 and "no variant 9" in refused.stderr, refused.stderr
        assert "have: 1, 2" in refused.stderr and mine.read_bytes() == before
    first = select("default")
    assert first.returncode == 0 and "kept as variant 3" in first.stdout, first.stdout
    assert not mine.exists()
    assert (mine.parent / "variants" / workload / "3.json").read_bytes() == before
    assert "kept" not in select("1").stdout  # a variant's copy: nothing to keep
    again = select("3")
    assert again.returncode == 0 and "kept" not in again.stdout
    assert mine.read_bytes() == before
    assert "kept" not in select("default").stdout  # variant 3's copy: nothing to keep


@pytest.mark.slow
def test_a_second_sweep_or_a_select_during_a_sweep_is_refused(tiny_copy, tiny_variants):
    """A second sweep took the first's variant for the user's record and restored that."""
    workload, recs = tiny_variants
    add_variants(tiny_copy, workload, recs)
    proc, release = _sweep_held_at_its_first_build(tiny_copy, workload)
    try:
        second = run_sweep(tiny_copy, "--workload", workload, "--runs", "3")
        chose = subprocess.run([sys.executable, "-m", "modelbuild", "select", "tiny", workload,
                                "2"], cwd=tiny_copy.root, capture_output=True, text=True)
        # import and tune write active records too: the sweep's restore deleted theirs
        imported, tuned = (subprocess.run([sys.executable, "-m", "modelbuild", *args],
                                          cwd=tiny_copy.root, capture_output=True, text=True)
                           for args in (["import", "tiny", str(tiny_copy.root / "db")],
                                        ["tune", "tiny", "--total-trials", "2", "--local"]))
    finally:
        proc.send_signal(signal.SIGINT)
        release()
        out = proc.stdout.read()
        proc.wait(timeout=120)
    assert second.returncode == 1, second.stdout + second.stderr
    assert "another sweep of tiny runs in this project (pid" in second.stderr, second.stderr
    assert chose.returncode == 1 and "a sweep of tiny runs in this project" in chose.stderr
    for refused, what in ((imported, "import"), (tuned, "tune")):
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert "a sweep of tiny runs in this project" in refused.stderr, refused.stderr
        assert f"{what} once the sweep has ended" in refused.stderr
    assert not tiny_copy.record("tiny", workload).exists(), out  # the first one restored it


def test_select_refuses_a_workload_a_python_schedule_drives_or_the_model_lacks(tiny_copy):
    workload = tiny_conv_workload(tiny_copy)
    python = tiny_copy.root / "schedules" / "tiny" / f"{workload}.py"
    python.parent.mkdir(parents=True, exist_ok=True)
    python.write_text("def schedule(sch):\n    pass\n")
    for variant in ("default", "1"):
        chose = subprocess.run([sys.executable, "-m", "modelbuild", "select", "tiny", workload,
                                variant], cwd=tiny_copy.root, capture_output=True, text=True)
        assert chose.returncode == 1 and "scheduled by a Python file" in chose.stderr
    assert not tiny_copy.record("tiny", workload).exists()
    chose = subprocess.run([sys.executable, "-m", "modelbuild", "select", "tiny", "no_such",
                            "default"], cwd=tiny_copy.root, capture_output=True, text=True)
    assert chose.returncode == 1 and "has no workload 'no_such'" in chose.stderr


# -- the plan, without building -----------------------------------------------------

@pytest.fixture
def two_workloads(tmp_path):
    project = Project(tmp_path)
    layout = project.model("m")
    for w, count in (("a", 3), ("b", 2)):
        layout.variants_dir(w).mkdir(parents=True)
        for k in range(1, count + 1):
            (layout.variants_dir(w) / f"{k}.json").write_text("{}")
    return layout


def test_plan_one_at_a_time_and_cross(two_workloads):
    one = sweep_plan.plan(two_workloads, ["a", "b"], None, "one-at-a-time")
    assert one == [{"a": 1}, {"a": 2}, {"a": 3}, {"b": 1}, {"b": 2}]
    cross = sweep_plan.plan(two_workloads, ["a", "b"], None, "cross")
    assert len(cross) == 6 and {"a": 3, "b": 2} in cross
    assert sweep_plan.plan(two_workloads, ["a", "b"], [2, None], "cross") == [
        {"a": 2, "b": 2}, {"a": 2, "b": None}, {"a": None, "b": 2}, {"a": None, "b": None}]
    assert sweep_plan.plan_size_text(cross, ["a", "b"], "cross") == "3 x 2 variants, cross product"
    with pytest.raises(BuildError, match="no variant 3 of workload 'b'"):
        sweep_plan.plan(two_workloads, ["a", "b"], [3], "one-at-a-time")
    assert sweep_plan.parse_variants("2, default,2") == [2, None]


def test_restore_brings_back_no_record_and_exact_bytes(two_workloads):
    layout = two_workloads
    layout.record("a").write_bytes(b"mine, not a variant\n")
    saved = sweep_records.snapshot(layout, ["a", "b"])
    active = sweep_records.ActiveRecords(layout, saved)
    active.activate({"a": 2, "b": 1})
    assert layout.record("b").is_file()
    assert active.finish(None) == []
    assert layout.record("a").read_bytes() == b"mine, not a variant\n"
    assert not layout.record("b").exists()
    # an edit saved meanwhile is active at the end, and kept as a variant on the way
    active = sweep_records.ActiveRecords(layout, sweep_records.snapshot(layout, ["a", "b"]))
    active.activate({"a": 2})
    layout.record("a").write_bytes(b"edited during the sweep\n")
    active.activate({"a": 3})
    assert (layout.variants_dir("a") / "4.json").read_bytes() == b"edited during the sweep\n"
    assert active.finish(None) == ["a: your record, edited during the sweep, is active (and "
                                   "variant 4); the one the sweep found is variant 5"]
    assert layout.record("a").read_bytes() == b"edited during the sweep\n"
    assert (layout.variants_dir("a") / "5.json").read_bytes() == b"mine, not a variant\n"


def test_fastest_by_latency_or_by_the_swept_workloads():
    def row(k, latency, workload):
        return sweep.Row({"w": k}, {}, True, latency_ms={"median": latency},
                         workload_ms={"w": workload})

    run = sweep.Sweep(Project(None), "m", ["w"], [])
    run.rows = [row(1, 10.0, 3.0), sweep.Row({"w": 2}, {}, False, reason="x"), row(3, 12.0, 1.0)]
    assert run.fastest() == 0
    run.by = "workload"
    assert run.fastest() == 2


def test_a_name_too_long_for_a_file_is_refused_before_building_and_a_long_default_shortened():
    with pytest.raises(BuildError, match="--name is 300 characters"):
        sweep_plan.check_sweep_name("a" * 300)
    long = sweep_plan.default_name(["w" * 120, "v" * 120], "cross")
    assert len(long) <= 200 and long.startswith("w" * 120 + "+")
    assert long != sweep_plan.default_name(["w" * 120, "v" * 121], "cross")
    sweep_plan.check_sweep_name(long)
