"""Tuning on the executor's Dask workers: check them before any work, count what they do.

Before a cluster tune, every worker is asked (all at once) for its CPU, its
features and the code it runs: a mixed cluster or other code is refused by name.
``Stats`` counts the chunks that come back (tune_coordinator.py runs them).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..core.errors import BuildError
from . import tune_worker

PROBE_TIMEOUT = 120  # seconds for every worker to report its CPU (the first imports TVM)


class ExecutorLost(Exception):
    """The scheduler went away mid-tune: the tune stops; the database keeps what was measured.
    (MetaSchedule's C++ hands it back as another exception: ``Stats.lost`` says it was this.)"""


@dataclass
class Stats:
    """What the cluster did so far, for the progress line, --json and bench/tune_speed.py."""

    started: float = field(default_factory=time.perf_counter)
    done: int = 0
    errors: int = 0  # trials whose candidate failed to build or run
    chunks: int = 0
    lost_chunks: int = 0
    chunk_s: list = field(default_factory=list)  # each chunk's seconds on its worker
    build_s: list = field(default_factory=list)  # per candidate
    measure_s: list = field(default_factory=list)  # per candidate, the measuring lock held
    lock_wait_s: float = 0.0
    trained: int = 0  # the most measurements a chunk's cost model was trained on
    workers_used: set = field(default_factory=set)
    last_error: str | None = None  # the last lost chunk's reason
    lost: str | None = None  # why the executor went away, once it has

    def add(self, result: dict, failed: int) -> None:
        """A chunk is back, its records committed (``failed`` of them without a time)."""
        self.chunks += 1
        self.done += len(result["records"])
        self.errors += failed
        self.workers_used.add(result["worker"])
        self.chunk_s.append(result["seconds"])
        self.build_s += result["build_s"]
        self.measure_s += result["measure_s"]
        self.lock_wait_s += result["lock_wait_s"]
        self.trained = max(self.trained, result["trained"])

    def add_lost(self, why: str) -> None:
        self.lost_chunks += 1
        self.last_error = why

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
