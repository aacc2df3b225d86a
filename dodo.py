"""modelbuild: `doit list` shows the tasks; `doit build:<model> [target=llvm]` builds one.

Models are declared in models/, schedule records live in schedules/<model>/,
everything built goes to build/. The tasks themselves are made by
modelbuild/graph/tasks.py, from what this doit invocation was given.
"""

import sys
from pathlib import Path

from doit import get_var

from modelbuild.core import collector
from modelbuild.graph.doit_state import make_build_dir, set_aside_if_damaged
from modelbuild.graph.reporter import ModelbuildReporter
from modelbuild.graph.tasks import BuildGraph

ROOT = Path(__file__).resolve().parent
# A build process ends when its tasks do: Python's last collections need not walk its objects.
collector.no_final_walk()
# doit keeps its state in build/, which must exist before doit opens it.
make_build_dir(ROOT / "build")
set_aside_if_damaged(ROOT / "build" / ".doit.db")  # a damaged one: one warning, a new one

DOIT_CONFIG = {
    "default_tasks": ["build"],
    "dep_file": "build/.doit.db",
    "backend": "sqlite3",
    "verbosity": 1,
    "reporter": ModelbuildReporter,
}

# The task creators of this invocation: its variables (target=, runs=, warmup=) and the
# task names asked for (so that an unknown model is named clearly).
_graph = BuildGraph(ROOT, var=get_var, requested=sys.argv[1:])
task_partition = _graph.task_partition
task_lower = _graph.task_lower
task_codegen = _graph.task_codegen
task_link = _graph.task_link
task_build = _graph.task_build
task_bench = _graph.task_bench
