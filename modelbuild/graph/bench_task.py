"""The doit task that benchmarks a built model: doit bench:<model> [runs=10 warmup=2 target=llvm].

One sub-task per model, after build:<model>; it always runs (a measurement is
never up to date). Its result goes to build/<model>/bench.json and is printed
as a table. Loading the task stays cheap: TVM is imported only when it runs.
"""

from __future__ import annotations

from doit.task import Task, dict_to_task

from ..core.digits import is_decimal
from ..core.paths import Project
from ..measure import RUNS_MAX
from .actions import invalid, step


def run(project: Project, model: str, target: str, runs: int, warmup: int) -> None:
    from rich.console import Console

    from ..measure import benchmark

    console = Console(highlight=False, soft_wrap=True, emoji=False)  # doit shows a task's stdout (verbosity 2)

    def on_progress(phase, done, total):
        if done == 1:
            console.print(f"bench {model}: {phase}, {total} run(s) ...")

    layout = project.model(model)
    result = benchmark.measure_built(layout, model=model, target=target, runs=runs,
                                     warmup=warmup, on_progress=on_progress)
    console.print(benchmark.table(result))
    console.print(f"saved {layout.benchmark}")


def int_var(var, name: str, default: int, minimum: int,
            maximum: int = RUNS_MAX) -> int:
    """A whole-number doit variable (``runs=10``); a clear load-time error otherwise."""
    text = var(name, str(default))
    if not is_decimal(text) or not minimum <= int(text) <= maximum:
        raise invalid(f"{name}={text}: expected a whole number from {minimum} to {maximum}")
    return int(text)


def bench_task(project: Project, model: str, target: str, runs: int, warmup: int) -> Task:
    layout = project.model(model)
    task = dict_to_task({
        "name": f"bench:{model}",
        "doc": f"benchmark {layout.library}",
        "actions": [(step, [run, project, model, target, runs, warmup])],
        "task_dep": [f"build:{model}"],
        "file_dep": [str(layout.library)],
        "uptodate": [False],
        "verbosity": 2,
    })
    task.subtask_of = "bench"
    return task
