"""Tune a model's workloads with MetaSchedule on this machine, into a database.

The database is an ordinary MetaSchedule work_dir (database_workload.json,
database_tuning_record.json); ``msdb.import_database`` turns it into records.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from ..targets.registry import TargetSpec

COST_MODEL = "xgb"            # MetaSchedule's XGBoost cost model (xgboost-cpu)
SEARCH = "evolutionary"        # its evolutionary search, guided by the cost model
TASK_SCHEDULER = "gradient"    # trials go where weight x latency gain is largest


def trials_per_round(total_trials: int, workloads: int) -> int:
    """Candidates measured per round of one workload: MetaSchedule's 64 when the budget is
    large; smaller for small budgets, so every workload gets a first round and the gradient
    scheduler still has trials left to place."""
    share = total_trials // max(1, 2 * workloads)
    return max(4, min(64, share - share % 4 if share >= 8 else share or 4))


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


def fastest(runner_results) -> float | None:
    """The fastest measured candidate of a round (mean of its run times), in seconds."""
    means = [sum(float(s) for s in r.run_secs) / len(r.run_secs) for r in runner_results
             if r.error_msg is None and r.run_secs]
    return min(means) if means else None


def measured_so_far(work_dir: Path) -> int:
    """How many trials the MetaSchedule database in ``work_dir`` holds (one line each)."""
    try:
        with open(work_dir / "database_tuning_record.json", "rb") as f:
            return sum(1 for line in f if line.strip())
    except OSError:
        return 0


def callbacks(ms, remove_artifacts: bool = True) -> list:
    """MetaSchedule's default measure callbacks (add to the database, update the cost
    model); a builder of our own has no artifact folder to remove."""
    return [cb for cb in ms.measure_callback.MeasureCallback.create("default")
            if remove_artifacts or type(cb).__name__ != "RemoveBuildArtifact"]


def warmup_samples(total_trials: int) -> int:
    """Measurements the XGBoost model sees before it guides the search (MetaSchedule: 100);
    a small budget lowers that, to a quarter of it."""
    return min(100, max(8, total_trials // 4))


def cost_model(total_trials: int):
    """MetaSchedule's XGBoost model; it predicts at random until it has seen
    ``warmup_samples`` measurements."""
    from tvm.s_tir import meta_schedule as ms

    return ms.cost_model.XGBModel(num_warmup_samples=warmup_samples(total_trials),
                                  verbose_eval=0)


def tune(funcs: dict, target_spec: TargetSpec, work_dir: Path, total_trials: int, *,
         weights: dict[str, float] | None = None, max_per_workload: int | None = None,
         seed: int = 1, on_measured: Callable[[str, int, float | None], None] | None = None,
         runner=None, builder=None) -> int:
    """Tune ``funcs`` (name -> PrimFunc) with ``total_trials`` measured trials in all.

    One MetaSchedule run over every workload, so the builder and runner start
    once: the XGBoost cost model guides an evolutionary search, and the gradient
    task scheduler gives each round to the workload whose ``weights[name]`` (how
    many times the graph calls it) times its expected latency gain is largest.
    ``on_measured(workload, n, best)`` is called after each round (``best``: the round's
    fastest candidate in seconds, None if none ran); ``builder`` and ``runner``: where
    candidates are built and run (None: this machine). Returns how many measured candidates the
    XGBoost model was trained on (0: it never trained, and guided nothing).
    """
    import tvm
    from tvm.ir.utils import derived_object
    from tvm.s_tir import meta_schedule as ms

    from ..core.workloads import normalize
    from . import intrinsics
    from .sample import tuning_target, tvm_seed

    names = list(funcs)

    @derived_object
    class Progress(ms.measure_callback.PyMeasureCallback):
        def apply(self, task_scheduler, task_id, measure_candidates, builder_results,
                  runner_results):
            if on_measured:
                on_measured(names[task_id], len(runner_results), fastest(runner_results))

    target = tvm.target.Target(tuning_target(target_spec))
    work_dir.mkdir(parents=True, exist_ok=True)
    tasks = [intrinsics.tune_context(normalize(func), target, space_generator="post-order-apply",
                                     search_strategy=SEARCH, task_name=name,
                                     rand_state=tvm_seed(seed + i))
             for i, (name, func) in enumerate(funcs.items())]
    weights = weights or {}
    model = cost_model(total_trials)
    ms.tune.tune_tasks(
        tasks=tasks, task_weights=[float(max(1, weights.get(n, 1))) for n in names],
        work_dir=str(work_dir), max_trials_global=total_trials,
        max_trials_per_task=max_per_workload or total_trials,
        num_trials_per_iter=trials_per_round(total_trials, len(tasks)),
        builder=builder if builder is not None else ms.builder.LocalBuilder(
            f_build=build_candidate),
        runner=runner if runner is not None else "local",
        cost_model=model, task_scheduler=TASK_SCHEDULER,
        measure_callbacks=[*callbacks(ms, remove_artifacts=builder is None), Progress()])
    return model.data_size if model.booster is not None else 0
