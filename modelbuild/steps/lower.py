"""lower: apply one workload's schedule record to its PrimFunc.

The record's trace is applied exactly as ``relax.transform.MetaScheduleApplyDatabase``
applies it inside ``tvm.compile`` (schedules/apply.py). No record means the
target's default schedule: its entry's ``default_schedule`` hook (targets/registry.py)
if it has one, else TVM's default, applied at codegen.
"""

from __future__ import annotations

from pathlib import Path

from ..core import atomic
from ..core.errors import BuildError
from ..schedules import python_schedule
from ..schedules.active import CONFLICT, PYTHON, Active
from ..schedules.apply import apply_record, checked_record
from ..targets.registry import TargetSpec


def run(workload_file: Path, record: Active, out_file: Path, target_spec: TargetSpec,
        name: str) -> None:
    """Write ``name``'s scheduled TIR to ``out_file``.

    ``record``: the workload's active record, a MetaSchedule trace (.json) or a
    Python schedule function (.py); none for the default schedule.
    """
    import tvm

    func = tvm.ir.load_json(workload_file.read_text())
    if record.kind == CONFLICT:
        raise BuildError(f"two records for one workload: {', '.join(map(str, record.files))}",
                         file=record.files[0], workload=name, hint="delete the one not meant")
    if record.kind == PYTHON:
        func = python_schedule.apply(func, name, record.path)
    elif record.path is not None:
        checked = checked_record(record.path, func, name, target_spec)
        func = apply_record(func, name, checked, tvm.target.Target(target_spec.tvm_target))
    elif target_spec.default_schedule is not None:
        func = target_spec.default_schedule(func, name, tvm.target.Target(target_spec.tvm_target))
    atomic.write_text(out_file, tvm.ir.save_json(func))
