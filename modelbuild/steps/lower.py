"""lower: apply one workload's schedule record to its PrimFunc.

The record (schedules/active.py) says how it applies: a MetaSchedule trace exactly
as ``relax.transform.MetaScheduleApplyDatabase`` applies it inside ``tvm.compile``
(schedules/apply.py), a Python schedule by its function, and no record the target's
default schedule: its entry's ``default_schedule`` hook (targets/registry.py) if it
has one, else TVM's, applied at codegen.

The step computes from bytes already read (the workload's TIR, the record's files):
the build keys the step with the very bytes it lowers (issue 19).
"""

from __future__ import annotations

from pathlib import Path

from ..core import atomic, collector
from ..core.workloads import load_json
from ..schedules.active import Active
from ..targets.registry import TargetSpec


def lowered(workload: bytes, record: Active, target_spec: TargetSpec, name: str) -> bytes:
    """``name``'s scheduled TIR, from its TIR (``workload``, as partition wrote it) and its
    active record, read once (``schedules.active.active``)."""
    tvm = collector.import_tvm()

    func = load_json(workload.decode("utf-8"))
    return tvm.ir.save_json(record.apply(func, target_spec)).encode("utf-8")


def run(workload_file: Path, record: Active, out_file: Path, target_spec: TargetSpec,
        name: str) -> None:
    """Write ``name``'s scheduled TIR to ``out_file`` (the workload read from its file)."""
    atomic.write_bytes(out_file, lowered(workload_file.read_bytes(), record, target_spec, name))
