"""Tuning on the executor's Dask workers: MetaSchedule's builder and runner, as Dask tasks.

MetaSchedule's search (evolutionary, XGBoost cost model, gradient task scheduler
weighted by calls) stays in the tune process; only the candidates go out. For
each candidate, ``DaskBuilder.build`` submits a build task (tune_worker.build)
and returns at once, naming the task's future instead of a path; ``DaskRunner.run``
submits the measurement with that future as input, so Dask runs it where the
built bytes are (or moves them, worker to worker). A round's candidates thus
build and measure on every worker at once, and the round ends when all are back.

A worker that dies takes only its in-flight tasks: Dask runs them again on
another worker (serve allows one retry), and a candidate that still fails comes
back as an error result, which MetaSchedule records as a failed trial. A lost
scheduler stops the tune (``ExecutorLost``): what was measured is in the
database already, and ``tune --resume`` goes on from there.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field

from ..core.errors import BuildError
from . import tune_worker

EVALUATOR = {"number": 3, "repeat": 1, "min_repeat_ms": 100,  # MetaSchedule's defaults
             "enable_cpu_cache_flush": False}
PROBE_TIMEOUT = 120  # seconds for every worker to report its CPU (the first imports TVM)


class ExecutorLost(Exception):
    """The scheduler went away mid-tune: the tune stops; the database keeps what was measured.
    (MetaSchedule's C++ hands it back as another exception: ``Stats.lost`` says it was this.)"""


@dataclass
class Stats:
    """What the cluster did so far, for the progress line and bench/tune_speed.py."""

    started: float = field(default_factory=time.perf_counter)
    done: int = 0
    errors: int = 0
    build_s: list = field(default_factory=list)
    measure_s: list = field(default_factory=list)
    workers_used: set = field(default_factory=set)
    rounds: int = 0
    rounds_s: float = 0.0  # from each round's first build submitted to its last result back
    round_start: float | None = None
    round_end: float | None = None
    lost: str | None = None  # why the executor went away, once it has
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, result: dict) -> None:
        with self.lock:
            self.done += 1
            self.round_end = time.perf_counter()
            self.errors += result.get("secs") is None
            self.workers_used.add(result.get("worker"))
            self.build_s.append(result.get("build_s", 0.0))
            if result.get("secs") is not None:
                self.measure_s.append(result.get("measure_s", 0.0))

    def new_round(self) -> None:
        """A round's candidates go out: the previous round's span is counted."""
        with self.lock:
            self._close_round()
            self.rounds += 1
            self.round_start = time.perf_counter()

    def _close_round(self) -> None:
        if self.round_start is not None and self.round_end is not None:
            self.rounds_s += max(0.0, self.round_end - self.round_start)
        self.round_start = self.round_end = None

    def cluster_seconds(self) -> float:
        """Seconds the rounds spent on the workers (the rest: the tune process's search)."""
        with self.lock:
            self._close_round()
            return self.rounds_s

    def per_minute(self) -> float:
        elapsed = time.perf_counter() - self.started
        return 60 * self.done / elapsed if elapsed > 0 else 0.0


def probe_workers(client) -> dict[str, dict]:
    """Every worker's CPU, features, host and code, asked of all at once."""
    try:
        client.wait_for_workers(1, timeout=30)
        answers = client.run(tune_worker.probe, on_error="return")
    except (OSError, TimeoutError) as err:
        raise BuildError(f"the executor has no worker to tune on ({type(err).__name__})",
                         hint="start `python -m modelbuild serve`, or workers for the "
                              "cluster's scheduler") from None
    failed = {w: a for w, a in answers.items() if isinstance(a, BaseException)}
    if failed:
        first = next(iter(failed.items()))
        raise BuildError(f"{len(failed)} worker(s) could not report their CPU: {first[0]}: "
                         f"{first[1]}")
    if not answers:
        raise BuildError("the executor has no worker to tune on",
                         hint="start `python -m modelbuild serve`, or workers for its scheduler")
    return answers


def check_cpus(answers: dict[str, dict], mcpu: str | None) -> str:
    """The one CPU every worker has (LLVM's name and features); a BuildError naming the odd
    ones out when they differ, or when it is not the target's ``mcpu``."""
    kinds: dict[tuple, list[str]] = {}
    for worker, info in answers.items():
        kinds.setdefault((info["cpu"], tuple(info["features"])), []).append(worker)
    if len(kinds) > 1:
        common = max(kinds.values(), key=len)
        odd = [f"{w} ({answers[w]['cpu']}"
               + (", faked by " + tune_worker.FAKE_CPU_ENV if answers[w]["faked"] else "")
               + (", other features" if answers[w]["cpu"] == answers[common[0]]["cpu"] else "")
               + ")" for ws in kinds.values() if ws is not common for w in ws]
        raise BuildError(f"the executor's workers have different CPUs: most are "
                         f"{answers[common[0]]['cpu']} ({len(common)}), the odd ones out: "
                         + ", ".join(sorted(odd)),
                         hint="measurements are only comparable on one kind of CPU: tune with "
                              "workers of one kind (--per-cpu is not supported yet)")
    cpu = next(iter(answers.values()))["cpu"]
    if mcpu and mcpu != cpu:
        raise BuildError(f"the executor's workers are {cpu} but the target is mcpu={mcpu}: "
                         "their measurements would not be of the CPU the records are for",
                         hint=f"tune with --mcpu {cpu}, or on workers with that CPU")
    return cpu


def code_check(answers: dict[str, dict]) -> dict:
    """What every worker must run (this process's TVM and code); a BuildError otherwise."""
    from .worker import describe

    expected = tune_worker.identity()
    other = [w for w, a in answers.items() if a["identity"] != expected]
    if other:
        raise BuildError(f"worker(s) {', '.join(sorted(other))} run other code than this tune: "
                         f"{describe(answers[other[0]]['identity'])}; this tune: "
                         f"{describe(expected)}",
                         hint="restart `python -m modelbuild serve` (or the cluster's workers) "
                              "with this TVM and modelbuild")
    return expected


def builder_and_runner(client, expected: dict, stats: Stats):
    """MetaSchedule's PyBuilder and PyRunner submitting to ``client``'s workers."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.builder import BuilderResult, PyBuilder
    from tvm.s_tir.meta_schedule.runner import PyRunner, PyRunnerFuture, RunnerResult

    pending: dict[str, object] = {}

    def submit(func, *args):
        try:
            return client.submit(func, expected, *args, pure=False,
                                 key=f"tune-{func.__name__}-{os.urandom(6).hex()}")
        except Exception as err:  # noqa: BLE001 - a closed client: the scheduler is gone
            stats.lost = f"{type(err).__name__}: {err}"
            raise ExecutorLost(stats.lost) from None

    @derived_object
    class DaskBuilder(PyBuilder):
        def build(self, build_inputs):
            import tvm

            out = []
            stats.new_round()
            for one in build_inputs:
                future = submit(tune_worker.build, tvm.ir.save_json(one.mod),
                                one.target.export())
                pending[future.key] = future
                out.append(BuilderResult(f"dask:{future.key}", None))
            return out

    @derived_object
    class DaskFuture(PyRunnerFuture):
        def __init__(self, future):
            super().__init__()
            self.future = future

        def done(self):
            return self.future.done()

        def result(self):
            return RunnerResult(*_result(client, self.future, stats))

    @derived_object
    class DaskRunner(PyRunner):
        def run(self, runner_inputs):
            return [DaskFuture(submit(tune_worker.measure,
                                      pending.pop(str(one.artifact_path)[len("dask:"):]),
                                      [a.as_json() for a in one.args_info], EVALUATOR,
                                      str(one.device_type)))
                    for one in runner_inputs]

    return DaskBuilder(), DaskRunner()


def _result(client, future, stats: Stats) -> tuple:
    """(run_secs, error) of one measurement; ExecutorLost when the scheduler is gone."""
    try:
        result = future.result()
    except Exception as err:  # noqa: BLE001 - a lost worker (twice) or scheduler, in words
        if client.status != "running":  # reconnecting, or given up: the scheduler is gone
            stats.lost = f"{type(err).__name__}"
            raise ExecutorLost(stats.lost) from None
        name = type(err).__name__
        result = {"secs": None, "worker": None,
                  "error": ("its worker died running it twice (KilledWorker)"
                            if name == "KilledWorker" else f"{name}: {err}")}
    stats.add(result)
    if result["secs"] is None:
        return None, f"modelbuild cluster tune: {result['error']}"
    return result["secs"], None
