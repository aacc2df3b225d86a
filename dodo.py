"""modelbuild: `doit list` shows the tasks; `doit build:<model> [target=llvm]` builds one.

Models are declared in models/, schedule records live in schedules/<model>/,
everything built goes to build/. The tasks themselves are in modelbuild/tasks.py.
"""

from pathlib import Path

from modelbuild.bench_tasks import task_bench  # noqa: F401
from modelbuild.reporter import ModelbuildReporter
from modelbuild.tasks import task__mode, task_build, task_link, task_partition  # noqa: F401

# doit keeps its state in build/, which must exist before doit opens it.
(Path(__file__).resolve().parent / "build").mkdir(exist_ok=True)

DOIT_CONFIG = {
    "default_tasks": ["build"],
    "dep_file": "build/.doit.db",
    "backend": "sqlite3",
    "verbosity": 1,
    "reporter": ModelbuildReporter,
}
