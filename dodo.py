"""modelbuild: `doit list` shows the tasks; `doit build:<model> [target=llvm]` builds one.

Models are declared in models/, schedule records live in schedules/<model>/,
everything built goes to build/. The tasks themselves are in modelbuild/tasks.py.
"""

from modelbuild.tasks import task__mode, task_build, task_link, task_partition  # noqa: F401

DOIT_CONFIG = {
    "default_tasks": ["build"],
    "dep_file": "build/.doit.db",
    "backend": "sqlite3",
    "verbosity": 1,
}
