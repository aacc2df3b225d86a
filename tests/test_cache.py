"""The content-addressed artifact cache, observed through real doit runs and its CLI."""

import json
import os
import shutil
import subprocess
import sys
import time

import pytest
from conftest import (
    assert_close,
    make_project,
    model_inputs,
    patched_env,
    reference_output,
    run_library,
    sha256,
)
from onnx_models import repeated_conv_model, tiny_model

from modelbuild.core.paths import Project as Layout
from modelbuild.cache import store as cache


def _cache_cli(project, *args, env=None):
    return subprocess.run([sys.executable, "-m", "modelbuild", "cache", *args],
                          cwd=project.root, capture_output=True, text=True, env=env)


def _stats(project, env=None) -> dict:
    proc = _cache_cli(project, "stats", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_switching_back_to_an_earlier_record_only_links(tiny_copy, tiny_variants):
    workload, variants = tiny_variants
    x = model_inputs(tiny_copy.root, "tiny")
    tiny_copy.set_record("tiny", workload, variants[0])
    tiny_copy.doit("build:tiny")
    first = run_library(tiny_copy.library("tiny"), x)
    first_lib = sha256(tiny_copy.library("tiny"))
    tiny_copy.set_record("tiny", workload, variants[1])
    assert tiny_copy.doit("build:tiny").ran == {f"lower:tiny/{workload}",
                                                f"codegen:tiny/{workload}", "link:tiny"}
    tiny_copy.set_record("tiny", workload, variants[0])
    back = tiny_copy.doit("build:tiny")
    assert back.ran == {"link:tiny"}
    assert back.from_cache == {f"lower:tiny/{workload}", f"codegen:tiny/{workload}"}
    assert "cache: 2 hits, 0 misses" in back.stdout
    assert _stats(tiny_copy)["last_build"] == {"hit": 2, "miss": 0, "corrupt": 0, "upload": 0,
                                               "remote_hit": 0, "remote_corrupt": 0}
    assert sha256(tiny_copy.library("tiny")) == first_lib
    assert (run_library(tiny_copy.library("tiny"), x) == first).all()
    assert tiny_copy.doit("build:tiny").ran == set()


@pytest.mark.slow
def test_two_models_sharing_workloads_compile_them_once(tmp_path):
    # Same architecture, different weights: the same workloads, in two models.
    project = make_project(tmp_path / "p", {"tiny": tiny_model(seed=1), "twin": tiny_model(seed=2)})
    first = project.doit("build:tiny")
    assert first.ran_kind("codegen")
    second = project.doit("build:twin")
    assert second.ran == {"partition:twin", "link:twin"}
    assert {t for t in second.from_cache if t.startswith("codegen:")} == {
        t.replace("tiny", "twin") for t in first.ran_kind("codegen")}
    # its one miss is its own partition (another model): no kernel was compiled again
    events = (project.root / "build" / ".cache-events").read_text().split("\n")
    assert [e.split(" ")[1] for e in events if e.startswith("miss ")] == ["partition"]
    x = model_inputs(project.root, "twin")
    assert_close(run_library(project.library("twin"), x), reference_output(project, "twin", x))


def _cache_line(output: str) -> str:
    return next((ln.strip() for ln in output.splitlines() if ln.strip().startswith("cache:")), "")


@pytest.mark.slow
def test_two_builds_of_one_project_at_once_count_their_own_hits_and_misses(tmp_path):
    """doit build:a beside doit build:b (other models: other locks): each summary counts its
    own steps. They shared one event log: b's start emptied it under a, and a's summary
    counted b's steps."""
    project = make_project(tmp_path / "p", {"a": tiny_model(), "b": repeated_conv_model()})
    linking, go = tmp_path / "a-is-linking", tmp_path / "go"
    env = patched_env(tmp_path / "site", f"""
import time
from pathlib import Path
from modelbuild.steps import link
_run = link.run
def run(objects, graph, library, *args, **kwargs):  # a's link waits for b's whole build
    if Path(library).name == "a.so":
        Path({str(linking)!r}).touch()
        deadline = time.monotonic() + 600
        while not Path({str(go)!r}).exists() and time.monotonic() < deadline:
            time.sleep(0.02)
    return _run(objects, graph, library, *args, **kwargs)
link.run = run
""")
    a = subprocess.Popen([sys.executable, "-m", "doit", "build:a"], cwd=project.root, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        for _ in range(3000):
            if linking.exists() or a.poll() is not None:
                break
            time.sleep(0.05)
        assert linking.exists(), a.communicate()[0]
        b = project.doit("build:b")
    finally:
        go.touch()
        out_a = a.communicate(timeout=300)[0]
    assert a.returncode == 0, out_a
    steps_a = len([ln for ln in out_a.splitlines() if ln.startswith(".  ")]) - 1  # not the link
    steps_b = len(b.ran) - 1
    assert steps_a != steps_b  # so that a count of the other's steps shows
    assert _cache_line(out_a) == f"cache: 0 hits, {steps_a} misses", out_a
    assert _cache_line(b.output) == f"cache: 0 hits, {steps_b} misses", b.output
    stats = _stats(project)["last_build"]  # the last run to end: a's
    assert (stats["hit"], stats["miss"]) == (0, steps_a), stats


def test_stale_run_logs_a_build_cannot_remove_or_read_do_not_stop_it(tiny_copy):
    """A run's log named by a pid no system has, and an hour-old folder at a dead run's log
    name, ended every later build in a traceback (OverflowError, IsADirectoryError)."""
    build = tiny_copy.root / "build"
    (build / ".cache-events.99999999999999999999").write_text("")
    folder = build / ".cache-events.999999"
    folder.mkdir()
    (folder / "mine.txt").write_text("a user's file")
    os.utime(folder, (time.time() - 3600, time.time() - 3600))
    tiny_copy.library("tiny").unlink()
    run = tiny_copy.doit("build:tiny")
    assert "Traceback" not in run.output and "link:tiny" in run.ran, run
    assert (folder / "mine.txt").read_text() == "a user's file"


@pytest.mark.slow
def test_two_processes_fill_one_cache_at_once(tmp_path):
    shared = tmp_path / "shared-cache"
    env = {**os.environ, cache.ENV: str(shared)}
    projects = [make_project(tmp_path / name, {"tiny": tiny_model()}) for name in ("a", "b")]
    procs = [subprocess.Popen([sys.executable, "-m", "doit", "build:tiny"], cwd=p.root, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for p in projects]
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    for project in projects:
        x = model_inputs(project.root, "tiny")
        assert_close(run_library(project.library("tiny"), x), reference_output(project, "tiny", x))
    assert not (projects[0].root / "build" / ".cache").exists()  # the shared one was used
    assert _stats(projects[0], env)["kinds"]["object"]["entries"] >= 1


@pytest.mark.slow
def test_a_corrupt_entry_is_rebuilt_and_reported_not_linked(tiny_copy, tiny_variants):
    workload, variants = tiny_variants
    x = model_inputs(tiny_copy.root, "tiny")
    tiny_copy.set_record("tiny", workload, variants[0])
    tiny_copy.doit("build:tiny")
    expected = run_library(tiny_copy.library("tiny"), x)
    stamp = json.loads((tiny_copy.root / "build" / "tiny" / "objects" / f"{workload}.o.stamp").read_text())
    entry = cache.Cache.of(Layout(tiny_copy.root)).path("object", stamp["key"])
    tiny_copy.set_record("tiny", workload, variants[1])
    tiny_copy.doit("build:tiny")
    data = bytearray(entry.read_bytes())
    data[-100:] = bytes(100)  # damage the object's tail; size and header unchanged
    entry.write_bytes(bytes(data))
    tiny_copy.set_record("tiny", workload, variants[0])
    run = tiny_copy.doit("build:tiny")
    assert f"codegen:tiny/{workload}" in run.ran  # rebuilt, not restored
    assert f"lower:tiny/{workload}" in run.from_cache
    assert f"cache entry object/{stamp['key']} was corrupt" in run.stdout
    assert _stats(tiny_copy)["last_build"]["corrupt"] == 1
    assert (run_library(tiny_copy.library("tiny"), x) == expected).all()
    assert cache.Cache.of(Layout(tiny_copy.root)).get("object", stamp["key"]) is not None


def test_a_damaged_output_in_build_is_replaced(tiny_copy, tiny_variants):
    workload, _ = tiny_variants
    obj = tiny_copy.root / "build" / "tiny" / "objects" / f"{workload}.o"
    good = obj.read_bytes()
    obj.write_bytes(good[: len(good) // 2])
    run = tiny_copy.doit("build:tiny")
    assert f"codegen:tiny/{workload}" in run.from_cache
    assert obj.read_bytes() == good
    assert "link:tiny" in run.uptodate  # the library was linked from these very bytes


def test_cache_location_from_pyproject_and_environment(tiny_copy, tmp_path):
    (tiny_copy.root / "pyproject.toml").write_text('[tool.modelbuild]\ncache-dir = "elsewhere"\n')
    assert _stats(tiny_copy)["location"] == str(tiny_copy.root / "elsewhere")
    env = {**os.environ, cache.ENV: str(tmp_path / "env-cache")}
    assert _stats(tiny_copy, env)["location"] == str(tmp_path / "env-cache")


def test_cache_prune_removes_the_least_recently_used_and_clear_removes_all(tiny_copy):
    before = _stats(tiny_copy)
    assert before["entries"] > 0 and before["kinds"]["lowered"]["entries"] > 0
    store = cache.Cache.of(Layout(tiny_copy.root))
    entries = sorted(store.entries())  # by path: an order unrelated to use
    for age, (path, _, _) in enumerate(entries):  # the first entry is the oldest used
        os.utime(path, (1_000_000 + age, 1_000_000 + age))
    sizes = [size for _, size, _ in entries]
    keep = len(entries) // 2  # room for exactly the most recently used half
    proc = _cache_cli(tiny_copy, "prune", "--max-size", str(sum(sizes[-keep:])))
    assert proc.returncode == 0 and f"removed {len(entries) - keep} " in proc.stdout
    assert sorted(p for p, _, _ in store.entries()) == [p for p, _, _ in entries[-keep:]]
    after = _stats(tiny_copy)
    assert after["entries"] == keep and after["bytes"] == sum(sizes[-keep:])
    bad = _cache_cli(tiny_copy, "prune", "--max-size", "lots")
    assert bad.returncode == 1 and "not a size" in bad.stderr and not bad.stdout
    assert _cache_cli(tiny_copy, "clear").returncode == 0
    assert _stats(tiny_copy)["entries"] == 0
    # An emptied cache costs nothing on a no-op: outputs are checked against their stamps.
    assert tiny_copy.doit("build:tiny").ran == set()


@pytest.mark.slow
def test_clear_and_prune_remove_cache_entries_only_wherever_the_cache_points(tiny_copy, tmp_path):
    """`MODELBUILD_CACHE=. cache clear` removed the project's models/, schedules/ and
    build/ (clear removed every folder in the cache's), and a shared folder's other
    contents: the cache is allowed to live among other files."""
    shared = tmp_path / "shared"
    other = shared / "someapp" / "ab" / ("ab" + "0" * 62)  # shaped like an entry, not ours
    other.parent.mkdir(parents=True)
    other.write_text("precious")
    (shared / "object").mkdir()
    (shared / "object" / "notes.txt").write_text("mine")
    env = {**os.environ, cache.ENV: str(shared)}
    shutil.rmtree(tiny_copy.root / "build")
    run = tiny_copy.doit("build:tiny", env=env)  # entries into the shared folder
    assert run.ran and _stats(tiny_copy, env)["entries"] > 0
    for args in (("prune", "--max-size", "0"), ("clear",)):
        proc = _cache_cli(tiny_copy, *args, env=env)
        assert proc.returncode == 0, proc.stderr
    assert _stats(tiny_copy, env)["entries"] == 0
    assert other.read_text() == "precious" and (shared / "object" / "notes.txt").read_text() == "mine"
    here = {**os.environ, cache.ENV: "."}  # the project itself
    names = sorted(p.name for p in tiny_copy.root.iterdir())
    proc = _cache_cli(tiny_copy, "clear", env=here)
    assert proc.returncode == 0 and sorted(p.name for p in tiny_copy.root.iterdir()) == names
    assert tiny_copy.library("tiny").is_file() and (tiny_copy.root / "models" / "tiny.onnx").is_file()


@pytest.mark.slow
def test_a_section_moved_to_another_disk_by_a_link_is_counted_and_cleared(tiny_copy, tmp_path):
    """With the object section a link to another folder (a larger disk), builds read and
    wrote through it, but `cache stats` counted none of it and `cache clear` said "removed"
    while every object stayed, and the next build restored them."""
    shared, disk = tmp_path / "cache", tmp_path / "bigger-disk"
    shared.mkdir()
    disk.mkdir()
    (shared / "object").symlink_to(disk)
    env = {**os.environ, cache.ENV: str(shared)}
    shutil.rmtree(tiny_copy.root / "build")
    tiny_copy.doit("build:tiny", env=env)
    objects = list(disk.glob("??/*"))
    assert objects and _stats(tiny_copy, env)["kinds"]["object"]["entries"] == len(objects)
    assert _cache_cli(tiny_copy, "clear", env=env).returncode == 0
    assert not list(disk.glob("??/*")) and (shared / "object").is_symlink()
    shutil.rmtree(tiny_copy.root / "build")
    assert tiny_copy.doit("build:tiny", env=env).ran_kind("codegen")  # nothing left to restore

    a_file = {**os.environ, cache.ENV: str(tmp_path / "a-file")}
    (tmp_path / "a-file").write_text("not a cache")
    proc = _cache_cli(tiny_copy, "stats", env=a_file)
    assert proc.returncode == 1 and "not a folder" in proc.stderr, proc.stdout + proc.stderr
