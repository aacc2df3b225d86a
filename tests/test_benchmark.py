"""bench: end-to-end latency and per-workload time of the built library (CLI and doit task)."""

import json
import subprocess
import sys

import pytest
from conftest import sha256

from modelbuild.core import manifest


def workload_names(project, model="tiny"):
    man = manifest.read(project.root / "build" / model / "partition" / "manifest.msgpack")
    return {w.name for w in man.workloads}


def bench(project, *args):
    proc = subprocess.run([sys.executable, "-m", "modelbuild", "bench", "tiny", *args],
                          cwd=project.root, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def check_result(result, project):
    names = workload_names(project)
    assert set(result["workloads"]) == names
    assert result["model"] == "tiny" and result["target"] == "llvm" and result["runs"] == 3
    assert result["library_sha256"] == sha256(project.library("tiny"))
    lat = result["latency_ms"]
    assert 0 < lat["min"] <= lat["median"] <= lat["max"] and lat["stdev"] >= 0
    called = {n: r for n, r in result["workloads"].items() if r["calls"]}
    # the convolutions, the pool and the classifier run; every called workload took time
    assert len(called) >= 4, result["workloads"]
    assert all(r["median_ms"] > 0 and 0 < r["share"] < 1 for r in called.values())
    # the VM's own calls are apart, never under a workload's name
    assert result["vm_calls"] and not set(result["vm_calls"]) & names


def test_bench_json_has_a_positive_row_per_workload(tiny_copy):
    result = json.loads(bench(tiny_copy, "--runs", "3", "--warmup", "1", "--json"))
    check_result(result, tiny_copy)
    saved = json.loads((tiny_copy.root / "build" / "tiny" / "bench.json").read_text())
    assert saved == result


@pytest.mark.slow
def test_bench_table_names_the_workloads(tiny_copy):
    out = bench(tiny_copy, "--runs", "3")
    result = json.loads((tiny_copy.root / "build" / "tiny" / "bench.json").read_text())
    for name, row in result["workloads"].items():
        assert name in out and (row["calls"] or "not called" in out)
    assert f"end to end {result['latency_ms']['median']:.3f} ms median" in out
    assert "saved " in out


@pytest.mark.slow
def test_doit_bench_task_builds_then_benchmarks(tiny_copy, tiny_variants):
    from modelbuild.schedules import records

    workload, variants = tiny_variants
    records.save(tiny_copy.record("tiny", workload), variants[0])
    run = tiny_copy.doit("bench:tiny", "runs=3")
    # bench depends on the build: the edited workload is rebuilt first, then benchmarked
    assert {f"lower:tiny/{workload}", "link:tiny", "bench:tiny"} <= run.ran
    check_result(json.loads((tiny_copy.root / "build" / "tiny" / "bench.json").read_text()),
                 tiny_copy)
    assert all(name in run.stdout for name in workload_names(tiny_copy))
    # a measurement is never up to date
    assert "bench:tiny" in tiny_copy.doit("bench:tiny", "runs=3").ran


def test_unknown_model_is_named(tiny_copy):
    run = tiny_copy.doit("bench:nosuch", check=False)
    assert run.returncode != 0 and "unknown model 'nosuch'" in run.output


def test_no_build_refuses_a_library_built_for_another_target(tiny_copy):
    """--no-build --target c timed the llvm library and saved bench.json saying c."""
    bench_json = tiny_copy.root / "build" / "tiny" / "bench.json"
    before = bench_json.read_bytes() if bench_json.exists() else None
    proc = subprocess.run([sys.executable, "-m", "modelbuild", "bench", "tiny", "--no-build",
                           "--runs", "1", "--target", "c"], cwd=tiny_copy.root,
                          capture_output=True, text=True)
    assert proc.returncode == 1 and "was built for {" in proc.stderr, proc.stderr
    assert 'not for {"kind": "c"}' in proc.stderr and "doit build:tiny target=c" in proc.stderr
    assert (bench_json.read_bytes() if bench_json.exists() else None) == before
    ok = subprocess.run([sys.executable, "-m", "modelbuild", "bench", "tiny", "--no-build",
                         "--runs", "1"], cwd=tiny_copy.root, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr


@pytest.mark.slow
def test_a_thread_count_tvm_would_misread_is_refused(tiny_copy):
    """TVM takes TVM_NUM_THREADS=abc, 0 or -5 as one thread, and starts 100000 threads if
    asked (bench then ran for minutes)."""
    import os

    for value in ("abc", "0", "-5", "100000"):
        proc = subprocess.run([sys.executable, "-m", "modelbuild", "bench", "tiny", "--no-build",
                               "--runs", "1"], cwd=tiny_copy.root, capture_output=True, text=True,
                              env={**os.environ, "TVM_NUM_THREADS": value}, timeout=120)
        assert proc.returncode == 1, proc.stderr
        assert f"TVM_NUM_THREADS={value}: expected a number of threads from 1 to" in proc.stderr


def test_bench_with_the_library_but_no_manifest_names_the_manifest(tiny_copy, cli_main):
    """The manifest alone deleted: bench said "no library ... at <the library's path>"."""
    (tiny_copy.root / "build" / "tiny" / "partition" / "manifest.msgpack").unlink()
    proc = cli_main(tiny_copy, "bench", "tiny", "--no-build", "--runs", "1", check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "is there, but not the manifest of its partition" in proc.stderr, proc.stderr


@pytest.mark.slow
def test_a_ctrl_c_while_each_kernel_is_timed_is_an_interrupt_not_an_internal_error(tiny_copy):
    """A Ctrl-C landed in the instrument (the Python function the VM calls around each kernel
    to time it) and came back from TVM as a bare RuntimeError: bench and sweep said "internal
    error ... RuntimeError" (exit 2) instead of "interrupted"."""
    script = (
        "import os, signal, sys, threading\n"
        "from pathlib import Path\n"
        "from modelbuild.core import manifest\n"
        "from modelbuild.measure import benchmark\n"
        "man = manifest.read(Path('build/tiny/partition/manifest.msgpack'))\n"
        "def on_progress(phase, done, total):\n"
        "    if phase == 'profiling' and done == 1:  # the instrument runs from here on\n"
        "        threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)).start()\n"
        "try:\n"
        "    benchmark.measure(Path(sys.argv[1]), man, model='tiny', target='llvm',\n"
        "                      runs=50000, warmup=0, on_progress=on_progress)\n"
        "    print('finished')\n"
        "except KeyboardInterrupt:\n"
        "    print('KeyboardInterrupt')\n"
        "except Exception as err:\n"
        "    print(type(err).__name__, err)\n")
    proc = subprocess.run([sys.executable, "-c", script, str(tiny_copy.library("tiny"))],
                          cwd=tiny_copy.root, capture_output=True, text=True, timeout=300)
    assert proc.stdout.strip() == "KeyboardInterrupt", proc.stdout + proc.stderr
