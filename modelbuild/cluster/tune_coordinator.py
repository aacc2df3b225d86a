"""A cluster tune's coordinator: the search runs on the workers, one chunk at a time each.

The model's budget is split into chunks (tune_plan.chunk_size trials). A free
worker gets the next chunk the plan gives (one workload, MetaSchedule's gradient
by calls: tune_plan.py) and runs a whole MetaSchedule search of that workload for
those trials on its own threads, from the workload's records so far
(tune_worker.tune_chunk). Its new records come back as JSON text and are committed
to the tune's database in work_dir as each chunk arrives, so Ctrl-C, a lost worker
or a lost scheduler keeps every committed trial.

A worker that dies loses only its chunk: Dask runs it again elsewhere (serve
allows one retry), and a chunk lost for good gives its trials back to the plan. A
lost scheduler stops the tune (``ExecutorLost``); ``tune --resume`` goes on.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable

from ..core.errors import BuildError
from . import tune_plan, tune_worker
from .cluster_tune import ExecutorLost, Stats

POLL_S = 0.1  # how often the wait for chunks looks at them and at the scheduler
WORKERS_S = 30  # how long a tune with budget left waits for a worker, when none is left


def _workers(client, stats: Stats) -> list[str]:
    """The live workers; ExecutorLost when there are none within WORKERS_S (the client
    forgets them as soon as the scheduler goes: before its status says so)."""
    try:
        workers = client.scheduler_info().get("workers", {})
        if not workers:
            client.wait_for_workers(1, timeout=WORKERS_S)
            workers = client.scheduler_info().get("workers", {})
        return sorted(workers)
    except Exception as err:  # noqa: BLE001 - a lost scheduler, in words
        stats.lost = f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
        raise ExecutorLost(stats.lost) from None


class Coordinator:
    """Chunks out to free workers, records back into the database, until the budget is spent."""

    def __init__(self, client, expected: dict, stats: Stats, tasks: dict, target,
                 work_dir: Path, plan: tune_plan.Plan, *, records: dict, seed: int, warmup: int,
                 on_measured: Callable | None):
        from tvm.s_tir import meta_schedule as ms

        self.client, self.expected, self.stats, self.plan = client, expected, stats, plan
        self.tasks, self.target, self.seed, self.warmup = tasks, target, seed, warmup
        self.on_measured = on_measured
        self.records = records  # each workload's records so far, JSON text
        work_dir.mkdir(parents=True, exist_ok=True)
        self.db = ms.database.JSONDatabase(work_dir=str(work_dir))
        self.in_flight: dict = {}  # future -> (workload, trials, worker)

    def run(self) -> None:
        try:
            self._fill()
            while self.in_flight:
                done = [f for f in self.in_flight if f.done()]
                self._check_scheduler()
                for future in done:
                    self._back(future, *self.in_flight.pop(future))
                if done:
                    self._fill()
                else:
                    time.sleep(POLL_S)
        finally:
            self._cancel()

    def _fill(self) -> None:
        """A chunk for each free worker while the plan has one."""
        busy = {worker for _, _, worker in self.in_flight.values()}
        for worker in _workers(self.client, self.stats):
            if worker in busy:
                continue
            chunk = self.plan.next_chunk()
            if chunk is None:
                break
            self._submit(worker, *chunk)

    def _submit(self, worker: str, name: str, trials: int) -> None:
        import tvm

        task = self.plan.tasks[name]
        request = {"mod": tvm.ir.save_json(self.tasks[name]), "target": self.target.export(),
                   "records": self.records[name], "trials": trials, "warmup": self.warmup,
                   "seed": self.seed + 1000 * list(self.tasks).index(name) + len(task.history)
                   + task.chunks_in_flight + task.lost}
        try:
            future = self.client.submit(tune_worker.tune_chunk, self.expected, request,
                                        pure=False, workers=[worker], allow_other_workers=True,
                                        key=f"tune-chunk-{os.urandom(6).hex()}")
        except Exception as err:  # noqa: BLE001 - a closed client: the scheduler is gone
            self.plan.lost(name, trials)
            self.stats.lost = f"{type(err).__name__}: {err}"
            raise ExecutorLost(self.stats.lost) from None
        self.in_flight[future] = (name, trials, worker)

    def _check_scheduler(self) -> None:
        if self.client.status != "running":  # reconnecting, or given up: the scheduler is gone
            self.stats.lost = self.stats.lost or f"client {self.client.status}"
            raise ExecutorLost(self.stats.lost)

    def _back(self, future, name: str, trials: int, worker: str) -> None:
        """A chunk is back: its records committed, the plan and the progress told."""
        from ..schedules.tune_chunk import commit, mean_secs

        if future.status == "cancelled":  # not by this tune: the scheduler's connection went
            self.stats.lost = self.stats.lost or "its chunks were cancelled: connection lost"
            raise ExecutorLost(self.stats.lost)
        try:
            result = future.result()
        except Exception as err:  # noqa: BLE001 - its worker died (twice), in words
            self._check_scheduler()
            kind = type(err).__name__
            self.plan.lost(name, trials)
            self.stats.add_lost("its worker died running it twice (KilledWorker)"
                                if kind == "KilledWorker" else f"{kind}: {err}")
            return
        if result["error"] is not None:
            self.plan.lost(name, trials)
            self.stats.add_lost(result["error"])
            return
        commit(self.db, self.tasks[name], result["records"])
        self.records[name] += result["records"]
        times = [t for t in map(mean_secs, result["records"]) if t is not None]
        fastest = min(times) if times else None
        self.plan.finished(name, trials, len(result["records"]), fastest)
        self.stats.add(result, failed=len(result["records"]) - len(times))
        if self.on_measured:
            self.on_measured(name, len(result["records"]), fastest)

    def _cancel(self) -> None:
        """Chunks still out when the tune stops (Ctrl-C, an error): their results unwanted."""
        if self.in_flight and self.client.status == "running":
            try:
                self.client.cancel(list(self.in_flight))
            except Exception:  # noqa: BLE001 - the scheduler went away meanwhile: nothing to stop
                pass


def tune(client, expected: dict, stats: Stats, funcs: dict, target_spec, work_dir: Path,
         total_trials: int, *, weights: dict, max_per_workload: int | None = None, seed: int = 1,
         on_measured: Callable | None = None) -> int:
    """Tune ``funcs`` (name -> PrimFunc) on the workers with ``total_trials`` in all, going on
    from the records in ``work_dir``; how many measurements the cost model was trained on
    (the most of any chunk; 0: it never trained)."""
    import tvm

    from ..schedules.sample import tuning_target
    from ..schedules.tune import warmup_samples
    from ..schedules.tune_chunk import load_records, mean_secs, task_mod

    target = tvm.target.Target(tuning_target(target_spec))
    mods = {name: task_mod(func, target) for name, func in funcs.items()}
    records = load_records(work_dir, mods)
    best = {}
    for name, texts in records.items():
        times = [t for t in map(mean_secs, texts) if t is not None]
        if times:
            best[name] = min(times)
    plan = tune_plan.Plan(total_trials, tune_plan.chunk_size(total_trials, len(funcs)),
                          {n: float(weights.get(n, 1)) for n in funcs},
                          cap=max_per_workload, best=best)
    Coordinator(client, expected, stats, mods, target, work_dir, plan, records=records,
                seed=seed, warmup=warmup_samples(total_trials), on_measured=on_measured).run()
    if not stats.done and stats.lost_chunks:
        raise BuildError(f"every chunk of the tune was lost ({stats.lost_chunks}); the last: "
                         f"{stats.last_error}", hint="see the executor's worker logs")
    return stats.trained
