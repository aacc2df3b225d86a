"""`tune` on the project's executor: a real distributed.LocalCluster of two worker processes
on 127.0.0.1, found through $MODELBUILD_EXECUTOR, tuning two of the tiny model's workloads.

What these tests can show: chunks of the search go to both workers, the records they give build
and match onnxruntime, a killed worker costs no measured trial, a mixed cluster is
refused by name. What they cannot: that timings stay clean. Both workers share this
machine's 2 cores (and the tune process, and other test runs); the per-host lock
keeps two measurements from overlapping, not a build from running beside one.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
from conftest import assert_close, cli, load_library, model_inputs, onnx_output, run_library

distributed = pytest.importorskip("distributed")
pytestmark = pytest.mark.slow  # tuning on Dask workers: the full suite only

TRIALS = 8  # four chunks of 2: the coordinator's first pass gives each workload one


# The tiny model's matrix product and its mean: what is shown here (chunks spread, trials
# kept, resumed, refused) is the same for any two workloads, and these two sample, build and
# time several times faster than its convolutions, whose search took most of this file's time.
CHEAP = ("fused_matmul_add2", "mean")


def _workloads(project) -> list[str]:
    from modelbuild.core import manifest

    man = manifest.read(project.root / "build" / "tiny" / "partition" / "manifest.msgpack")
    names = sorted(w.name for w in man.workloads if w.name in CHEAP)
    assert len(names) == 2, sorted(w.name for w in man.workloads)
    return names


def _records(work_dir) -> list[str]:
    path = work_dir / "database_tuning_record.json"
    return [ln for ln in path.read_text().splitlines() if ln.strip()] if path.is_file() else []


@pytest.fixture
def cluster(monkeypatch):
    """A LocalCluster of two single-thread worker processes; its address as the executor.
    A killed worker's measuring lock is free again within seconds (Dask's default: 30)."""
    import dask

    with dask.config.set({"distributed.scheduler.locks.lease-timeout": "4s",
                          "distributed.scheduler.locks.lease-validation-interval": "1s"}), \
            distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  host="127.0.0.1", dashboard_address=None) as lc, \
            distributed.Client(lc, set_as_default=False) as client:
        monkeypatch.setenv("MODELBUILD_EXECUTOR", lc.scheduler_address)
        yield lc, client


def _tune(project, *extra, check=True):
    args = ["tune", "tiny", *[a for w in _workloads(project) for a in ("--workload", w)],
            "--no-keep-if-faster", "--json", *extra]
    return cli(project, *args, check=check)


def test_candidates_run_on_both_workers_and_the_records_match_onnxruntime(tiny_copy, cluster):
    lc, client = cluster
    proc = _tune(tiny_copy, "--total-trials", str(TRIALS))
    report = json.loads(proc.stdout)
    tuning = report["tuning"]
    assert tuning["measured_on"].startswith(f"executor {lc.scheduler_address} (2 workers")
    assert sorted(tuning["workers_used"]) == sorted(client.scheduler_info()["workers"])
    assert sum(tuning["trials"].values()) == TRIALS and len(tuning["trials"]) == 2
    assert sorted(report["written"]) == _workloads(tiny_copy)
    assert len(_records(tiny_copy.root / "build" / "tiny" / "tuning")) == TRIALS
    tiny_copy.doit("build:tiny")
    inputs = model_inputs(tiny_copy.root, "tiny")
    assert_close(run_library(load_library(tiny_copy.library("tiny")), inputs),
                 onnx_output(tiny_copy.root, "tiny", inputs))


def _in_flight(client) -> list[str]:
    """Workers running a chunk of the search now."""
    return [w for w, keys in client.processing().items()
            if any(str(k).startswith("tune-") for k in keys)]


def test_a_worker_killed_mid_tune_loses_no_trial_and_resume_goes_on(tiny_copy, cluster):
    _, client = cluster
    work_dir = tiny_copy.root / "build" / "tiny" / "tuning"
    args = [sys.executable, "-m", "modelbuild", "tune", "tiny", "--no-keep-if-faster",
            "--total-trials", str(TRIALS),
            *[a for w in _workloads(tiny_copy) for a in ("--workload", w)]]
    tune = subprocess.Popen(args, cwd=tiny_copy.root, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    pids = client.run(os.getpid)
    deadline = time.monotonic() + 420  # the first round: about a minute alone
    while not (_records(work_dir) and _in_flight(client)):  # a round in, the next one out
        assert tune.poll() is None and time.monotonic() < deadline, tune.communicate()
        time.sleep(0.05)
    victim = _in_flight(client)[0]
    os.kill(pids[victim], signal.SIGKILL)
    out, err = tune.communicate(timeout=300)
    assert "Traceback" not in out + err
    assert tune.returncode in (0, 1), err  # finished, or stopped with one clear line
    before = _records(work_dir)
    assert before
    proc = _tune(tiny_copy, "--total-trials", str(len(before) + 4), "--resume")
    report = json.loads(proc.stdout)
    after = _records(work_dir)
    assert after[:len(before)] == before  # no trial lost
    assert report["tuning"]["resumed_from"] == len(before)
    assert len(before) < len(after) <= len(before) + 4


def test_workers_with_different_cpus_are_refused_by_name(tiny_copy, cluster, tmp_path):
    lc, client = cluster
    first = set(client.scheduler_info()["workers"])
    env = {**os.environ, "MODELBUILD_TEST_FAKE_CPU": "fakecpu"}
    worker = subprocess.Popen(
        [sys.executable, "-m", "distributed.cli.dask_worker", lc.scheduler_address,
         "--nthreads", "1", "--no-dashboard", "--host", "127.0.0.1"], env=env,
        stdout=open(tmp_path / "worker.log", "wb"), stderr=subprocess.STDOUT,  # noqa: SIM115
        start_new_session=True)
    try:
        client.wait_for_workers(3, timeout=120)
        (odd,) = set(client.scheduler_info()["workers"]) - first
        proc = _tune(tiny_copy, "--total-trials", "4", check=False)
        assert proc.returncode == 1 and "Traceback" not in proc.stderr
        assert "the executor's workers have different CPUs" in proc.stderr
        assert f"the odd ones out: {odd} (fakecpu, faked by MODELBUILD_TEST_FAKE_CPU)" in \
            proc.stderr.replace("\n", " ")
        assert not _records(tiny_copy.root / "build" / "tiny" / "tuning")
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(60)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("env, args, needle", [
    ({"MODELBUILD_EXECUTOR": "tcp://127.0.0.1:{port}"}, [], "does not answer"),
    ({}, ["--resume"], "--resume: no tuning database with trials in"),
    ({}, ["--per-cpu"], "--per-cpu is not supported yet"),
])
def test_bad_cluster_tune_requests_are_one_clear_line(tiny_built, monkeypatch, env, args, needle):
    for key, value in env.items():
        monkeypatch.setenv(key, value.format(port=_free_port()))
    proc = cli(tiny_built, "tune", "tiny", "--total-trials", "4", "--work-dir",
               str(tiny_built.root / "no-such-db"), *args, check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert needle in proc.stderr.replace("\n", " ")


def test_ctrl_c_keeps_the_trials_measured_and_says_how_to_go_on(tiny_copy, cluster):
    work_dir = tiny_copy.root / "build" / "tiny" / "tuning"
    args = [sys.executable, "-m", "modelbuild", "tune", "tiny", "--no-keep-if-faster",
            "--total-trials", str(TRIALS), *[a for w in _workloads(tiny_copy)
                                             for a in ("--workload", w)]]
    tune = subprocess.Popen(args, cwd=tiny_copy.root, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 420  # the first round: about a minute alone
    while not _records(work_dir):
        assert tune.poll() is None and time.monotonic() < deadline, tune.communicate()
        time.sleep(0.05)
    tune.send_signal(signal.SIGINT)
    out, err = tune.communicate(timeout=120)
    kept = len(_records(work_dir))
    assert tune.returncode == 130 and "Traceback" not in out + err, err
    said = "".join((out + err).split())  # rich folds long lines, paths too
    assert "".join(f"stopped: the {kept} trials measured so far are in {work_dir}".split()) in said


def test_a_lost_scheduler_stops_the_tune_in_one_line_and_keeps_its_trials(tiny_copy, tmp_path):
    """`serve` killed outright (scheduler and workers) mid-tune."""
    log = open(tmp_path / "serve.log", "wb")  # noqa: SIM115 - closed with the test
    serve = subprocess.Popen([sys.executable, "-m", "modelbuild", "serve", "--workers", "2"],
                             cwd=tiny_copy.root, stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while not (tiny_copy.root / "build" / ".executor.json").is_file():
            assert serve.poll() is None and time.monotonic() < deadline, "serve did not start"
            time.sleep(0.2)
        work_dir = tiny_copy.root / "build" / "tiny" / "tuning"
        tune = subprocess.Popen([sys.executable, "-m", "modelbuild", "tune", "tiny",
                                 "--no-keep-if-faster", "--total-trials", "16", "--workload",
                                 _workloads(tiny_copy)[0]], cwd=tiny_copy.root,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        while not _records(work_dir):
            assert tune.poll() is None and time.monotonic() < deadline + 120, tune.communicate()
            time.sleep(0.05)
        os.killpg(serve.pid, signal.SIGKILL)
        out, err = tune.communicate(timeout=180)
    finally:
        if serve.poll() is None:
            os.killpg(serve.pid, signal.SIGKILL)
        serve.wait()
    kept = len(_records(work_dir))
    assert tune.returncode == 1 and "Traceback" not in out + err, out + err
    assert "theexecutorwentawaymid-tune" in "".join(err.split())
    assert "".join(f"the {kept} trials measured so far are in {work_dir}".split()) in \
        "".join(err.split())
