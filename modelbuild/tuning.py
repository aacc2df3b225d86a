"""Tune a model's workloads with MetaSchedule on this machine, into a database.

The database is an ordinary MetaSchedule work_dir (database_workload.json,
database_tuning_record.json); ``msdb.import_database`` turns it into records.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from .targets import TargetSpec


def cost_model_name() -> str:
    """MetaSchedule's XGBoost cost model when xgboost is installed, else random."""
    try:
        import xgboost  # noqa: F401
    except ImportError:
        return "random"
    return "xgb"


def tune(funcs: dict, target_spec: TargetSpec, work_dir: Path, trials_per_workload: int,
         *, seed: int = 1, on_workload: Callable[[str, int, int], None] | None = None) -> None:
    """Tune each workload in ``funcs`` for ``trials_per_workload`` measured trials.

    One workload at a time, so progress can be shown per workload; every
    workload's records accumulate in the one database in ``work_dir``.
    """
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from .sampling import tuning_target
    from .workloads import normalize

    target = tvm.target.Target(tuning_target(target_spec))
    work_dir.mkdir(parents=True, exist_ok=True)
    database = ms.database.JSONDatabase(work_dir=str(work_dir), allow_missing=True)
    for index, (name, func) in enumerate(funcs.items()):
        if on_workload:
            on_workload(name, index, len(funcs))
        task = ms.TuneContext(mod=normalize(func), target=target,
                              space_generator="post-order-apply",
                              search_strategy="evolutionary", task_name=name,
                              rand_state=seed + index)
        ms.tune.tune_tasks(tasks=[task], task_weights=[1.0], work_dir=str(work_dir / "logs" / name),
                           max_trials_global=trials_per_workload,
                           max_trials_per_task=trials_per_workload,
                           num_trials_per_iter=min(trials_per_workload, 64),
                           database=database, cost_model=cost_model_name())
