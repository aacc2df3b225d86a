"""The lower and codegen actions: in this process (``_lower``), or shipped to an executor's
worker (``_lower_on``, ``_codegen_on``: the same step, its inputs and output as bytes; the
worker side is worker.py, the connection executor.py)."""

from __future__ import annotations

import os
from pathlib import Path

from ..core import atomic
from ..schedules import python_schedule
from ..schedules.active import PYTHON, active
from ..steps import lower
from ..targets.registry import TargetSpec
from . import worker
from .executor import Executor


def _lower(layout, name: str, target: TargetSpec) -> None:
    """The lower action: the record is looked up when the step runs, not when tasks load."""
    lower.run(layout.workload(name), active(layout, name), layout.lowered(name), target, name)


def _record_files(layout, name: str) -> tuple[dict[str, bytes], list[str]]:
    """The workload's record files and, for a Python schedule, its helper modules, by their
    path relative to the record's folder; and which of them are the record."""
    record = active(layout, name)
    files = {p.name: p.read_bytes() for p in record.files}
    if record.kind == PYTHON:
        for helper in python_schedule.helpers(record.path).values():
            rel = os.path.relpath(helper, record.path.parent)
            files[helper.name if rel.startswith("..") else rel] = helper.read_bytes()
    return files, [p.name for p in record.files]


def _lower_on(executor: Executor, layout, name: str, target: TargetSpec) -> None:
    """The lower action on an executor's worker: the same step, inputs and output as bytes."""
    files, record = _record_files(layout, name)
    args = {"workload": layout.workload(name).read_bytes(), "records": files,
            "record_files": record, "target": target, "name": name}
    out = executor.run(f"lower:{layout.name}/{name}", "lower",
                       worker.identity("lower", target.sources), args)
    atomic.write_bytes(layout.lowered(name), out)


def _codegen_on(executor: Executor, layout, name: str, output: Path, target: TargetSpec) -> None:
    args = {"lowered": layout.lowered(name).read_bytes(), "target": target, "name": name}
    out = executor.run(f"codegen:{layout.name}/{name}", "codegen",
                       worker.identity("codegen", target.sources), args)
    atomic.write_bytes(output, out)
