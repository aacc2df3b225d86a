"""One chunk of a tune: MetaSchedule's search on one workload for a few trials, from its records.

A cluster tune (cluster/tune_coordinator.py) splits the model's budget into chunks;
each runs here, on a worker: a complete MetaSchedule tune of ONE task (its
evolutionary search, an XGBoost cost model trained first on the task's records so
far, the task's design space) for ``trials`` trials, starting from an in-memory
database seeded with those records, so the search goes on from the best found so
far instead of starting again. Candidates are built in this process and timed by
``timed`` (the caller holds its machine's measuring lock around the timing).
Records go in and out as JSON text: no paths, no shared file system.

The coordinator's side: ``task_mod`` (the IRModule a workload is tuned and stored
as), ``load_records`` and ``commit`` (its MetaSchedule JSON database in work_dir).
"""

from __future__ import annotations

import itertools
import json
import tempfile
import time
from pathlib import Path
from typing import Callable

FAILED = 1e10  # MetaSchedule's run time for a candidate that failed to build or run


def task_mod(func, target):
    """The IRModule MetaSchedule tunes and stores for ``func`` (as a TuneContext holds it).
    ``target``'s intrinsics only are loaded first: a TuneContext imports every target's."""
    from ..core.workloads import normalize
    from . import intrinsics

    return intrinsics.tune_context(normalize(func), target).mod


def mean_secs(record_json: str) -> float | None:
    """A record's mean run time in seconds (None: it failed), from its JSON text."""
    secs = json.loads(record_json)[1]
    if not secs or min(float(s) for s in secs) >= FAILED:
        return None
    return sum(float(s) for s in secs) / len(secs)


def load_records(work_dir: Path, mods: dict) -> dict[str, list[str]]:
    """Each workload's records in the database in ``work_dir`` (JSON text), oldest first."""
    import tvm_ffi
    from tvm.s_tir import meta_schedule as ms

    out: dict[str, list[str]] = {name: [] for name in mods}
    if not (work_dir / "database_tuning_record.json").is_file():
        return out
    db = ms.database.JSONDatabase(work_dir=str(work_dir))
    by_hash = {tvm_ffi.structural_hash(mod): name for name, mod in mods.items()}
    for record in db.get_all_tuning_records():
        name = by_hash.get(tvm_ffi.structural_hash(record.workload.mod))
        if name is not None:
            out[name].append(json.dumps(record.as_json()))
    return out


def commit(db, mod, records: list[str]) -> None:
    """Append ``records`` (JSON text) of ``mod`` to ``db`` (a JSONDatabase writes each line)."""
    from tvm.s_tir import meta_schedule as ms

    workload = db.commit_workload(mod)
    for text in records:
        db.commit_tuning_record(ms.database.TuningRecord.from_json(json.loads(text), workload))


def _seeded(mod, records: list[str]):
    """An in-memory database holding ``mod`` and its records, and the records themselves."""
    from tvm.s_tir import meta_schedule as ms

    db = ms.database.MemoryDatabase()
    workload = db.commit_workload(mod)
    seeded = [ms.database.TuningRecord.from_json(json.loads(t), workload) for t in records]
    for record in seeded:
        db.commit_tuning_record(record)
    return db, seeded


def _pretrain(model, ctx, seeded: list) -> None:
    """The cost model trained on the task's records so far (the search continues, informed)."""
    from tvm.s_tir.meta_schedule.runner import RunnerResult

    if not seeded:
        return
    candidates = [r.as_measure_candidate() for r in seeded]
    results = [RunnerResult([float(s) for s in r.run_secs], None) if r.run_secs
               else RunnerResult(None, "failed") for r in seeded]
    model.update(ctx, candidates, results)


def tune_one(mod, target, records: list[str], trials: int, *, seed: int, threads: int,
             warmup: int, timed: Callable, timings: dict) -> tuple[list[str], int]:
    """Tune ``mod`` for ``trials`` trials from ``records``; (its new records as JSON text,
    how many measurements the cost model was trained on). ``timings`` gets the seconds
    spent building and measuring (``build_s``, ``measure_s`` lists, one per candidate)."""
    from tvm.s_tir import meta_schedule as ms

    from . import intrinsics
    from .sample import tvm_seed
    from .tune import SEARCH, callbacks

    db, seeded = _seeded(mod, records)
    ctx = intrinsics.tune_context(mod, target, space_generator="post-order-apply",
                         search_strategy=SEARCH, task_name="chunk",
                         rand_state=tvm_seed(seed),
                         num_threads=threads)
    model = ms.cost_model.XGBModel(num_warmup_samples=warmup, verbose_eval=0,
                                   num_tuning_cores=threads)
    _pretrain(model, ctx, seeded)
    with tempfile.TemporaryDirectory(prefix="modelbuild-chunk-") as tmp:
        builder, runner = _in_process(Path(tmp), timed, timings)
        ms.tune.tune_tasks(tasks=[ctx], task_weights=[1.0], work_dir=tmp,
                           max_trials_global=trials, num_trials_per_iter=trials,
                           builder=builder, runner=runner, database=db, cost_model=model,
                           task_scheduler="round-robin",
                           measure_callbacks=callbacks(ms, remove_artifacts=False))
    new = db.get_all_tuning_records()[len(seeded):]
    return ([json.dumps(r.as_json()) for r in new],
            model.data_size if model.booster is not None else 0)


def _in_process(tmp: Path, timed: Callable, timings: dict):
    """MetaSchedule's builder and runner, in this process: build to ``tmp``, time with
    ``timed(path, args_info, device_type) -> run seconds``."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.builder import BuilderResult, PyBuilder
    from tvm.s_tir.meta_schedule.runner import PyRunner, PyRunnerFuture, RunnerResult
    from tvm.support.tar import tar

    from ..core.errors import summarize
    from .tune import build_candidate

    numbers = itertools.count()

    @derived_object
    class Builder(PyBuilder):
        def build(self, build_inputs):
            out = []
            for one in build_inputs:
                start = time.perf_counter()
                path = tmp / f"candidate{next(numbers)}.{tar.output_format}"
                try:
                    build_candidate(one.mod, one.target).export_library(str(path), fcompile=tar)
                    out.append(BuilderResult(str(path), None))
                except Exception as err:  # noqa: BLE001 - its record says why
                    out.append(BuilderResult(None, f"build failed: {summarize(err)}"))
                timings["build_s"].append(time.perf_counter() - start)
            return out

    @derived_object
    class Done(PyRunnerFuture):
        def __init__(self, result):
            super().__init__()
            self.value = result

        def done(self):
            return True

        def result(self):
            return self.value

    @derived_object
    class Runner(PyRunner):
        def run(self, runner_inputs):
            out = []
            for one in runner_inputs:
                try:
                    secs = timed(str(one.artifact_path), [a.as_json() for a in one.args_info],
                                 str(one.device_type))
                    out.append(Done(RunnerResult(secs, None)))
                except Exception as err:  # noqa: BLE001 - a candidate that fails to run
                    out.append(Done(RunnerResult(None, f"run failed: {summarize(err)}")))
            return out

    return Builder(), Runner()
