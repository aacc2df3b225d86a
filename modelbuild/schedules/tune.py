"""Tune a model's workloads with MetaSchedule on this machine, into a database.

The database is an ordinary MetaSchedule work_dir (database_workload.json,
database_tuning_record.json); ``msdb.import_database`` turns it into records.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from ..targets.registry import TargetSpec


def cost_model_name() -> str:
    """MetaSchedule's XGBoost cost model when xgboost is installed, else random."""
    try:
        import xgboost  # noqa: F401
    except ImportError:
        return "random"
    return "xgb"


def search_strategy_name() -> str:
    """Evolutionary search needs a cost model to be worth its cost; without one,
    replaying random traces from the design space measures the same kind of
    candidates without scoring thousands of them per round."""
    return "evolutionary" if cost_model_name() == "xgb" else "replay-trace"


def build_candidate(mod, target, _params=None):
    """MetaSchedule's default_build without importing every tensor intrinsic.

    The default imports tvm.s_tir.tensor_intrin (CUDA, ROCm, ARM: about 15 s)
    in each builder process, and the builder starts new processes for every
    batch of candidates: most of a tuning run went there. Plain CPU schedules
    use no tensor intrinsics.
    """
    from tvm.driver import build as tvm_build
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    return tvm_build(mod, target=target)


def tune(funcs: dict, target_spec: TargetSpec, work_dir: Path, trials_per_workload: int,
         *, seed: int = 1, on_measured: Callable[[str, int], None] | None = None) -> None:
    """Tune every workload in ``funcs`` for ``trials_per_workload`` measured trials.

    All workloads in one MetaSchedule run (round-robin), so the builder and
    runner start once; ``on_measured(workload, n)`` is called after each batch.
    """
    import tvm
    from tvm.ir.utils import derived_object
    from tvm.s_tir import meta_schedule as ms

    from ..core.workloads import normalize
    from .sample import tuning_target

    names = list(funcs)

    @derived_object
    class Progress(ms.measure_callback.PyMeasureCallback):
        def apply(self, task_scheduler, task_id, measure_candidates, builder_results,
                  runner_results):
            if on_measured:
                on_measured(names[task_id], len(runner_results))

    target = tvm.target.Target(tuning_target(target_spec))
    work_dir.mkdir(parents=True, exist_ok=True)
    tasks = [ms.TuneContext(mod=normalize(func), target=target, space_generator="post-order-apply",
                            search_strategy=search_strategy_name(), task_name=name,
                            rand_state=seed + i)
             for i, (name, func) in enumerate(funcs.items())]
    ms.tune.tune_tasks(
        tasks=tasks, task_weights=[1.0] * len(tasks), work_dir=str(work_dir),
        max_trials_global=trials_per_workload * len(tasks),
        max_trials_per_task=trials_per_workload,
        num_trials_per_iter=min(trials_per_workload, 64),
        builder=ms.builder.LocalBuilder(f_build=build_candidate),
        cost_model=cost_model_name(), task_scheduler="round-robin",
        measure_callbacks=[*ms.measure_callback.MeasureCallback.create("default"), Progress()])
