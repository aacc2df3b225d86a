"""Apply a record's trace to a workload exactly as ``tvm.compile`` does, and refuse one that
TVM would silently change: ``MetaScheduleApplyDatabase`` over a one-record database.

Used by lower (the build), check (before a build) and keep-if-faster (timing).
"""

from __future__ import annotations

from pathlib import Path

from ..core.errors import BuildError, summarize
from ..targets.registry import TargetSpec
from . import records


def _does_not_apply(err: Exception, name: str, record: records.Record) -> BuildError:
    return BuildError(f"the schedule trace does not apply: {summarize(err)}",
                      file=record.path, workload=name,
                      hint="fix the edited instruction or decision, or delete the file "
                           "to use the target's default schedule")


def check_decisions(func, name: str, record: records.Record) -> None:
    """Refuse a trace whose decisions TVM would silently change when replaying it.

    TVM repairs a sampling decision that does not fit (e.g. tile factors whose
    product is not the loop extent) instead of failing; the user who edited the
    number would get a different schedule than the one they wrote.
    """
    from tvm.s_tir import Schedule
    from tvm.s_tir.schedule import Trace

    from ..core.workloads import normalize
    from .records import plain

    sch = Schedule(normalize(func), error_render_level="detail")
    try:
        Trace.apply_json_to_schedule(record.trace, sch)
    except Exception as err:  # TVM raises its own error types for a failed schedule primitive
        raise _does_not_apply(err, name, record) from None
    insts = record.trace[0]
    replayed = {int(i): v for i, v in plain(sch.trace.as_json())[1]}
    for index, wanted in record.trace[1]:
        got = replayed.get(int(index))
        if got == wanted:
            continue
        kind = insts[index][0] if 0 <= index < len(insts) else "?"
        detail = ""
        if kind == "SamplePerfectTile" and isinstance(got, list):
            extent = 1
            for factor in got:
                extent *= factor
            detail = f" (the factors must multiply to the loop extent {extent})"
        raise BuildError(
            f"the schedule trace does not apply: decision for instruction {index} "
            f"({kind}) is {wanted}, which this workload cannot take{detail}; "
            f"TVM would use {got} instead",
            file=record.path, workload=name,
            hint="edit the decision to a valid value, or delete the file to use "
                 "the target's default schedule")


def apply_record(func, name: str, record: records.Record, target):
    """``func`` scheduled by ``record``'s trace; raises BuildError when it does not apply."""
    import tvm
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms

    from ..core.workloads import normalize

    check_decisions(func, name, record)
    db = ms.database.MemoryDatabase()
    workload = db.commit_workload(normalize(func))
    run_secs = record.run_secs or [1.0]  # a database only returns records with a run time
    try:
        db.commit_tuning_record(ms.database.TuningRecord.from_json(
            [record.trace, run_secs, record.target, None], workload))
        with target, db:
            mod = relax.transform.MetaScheduleApplyDatabase()(tvm.IRModule({name: func}))
    except Exception as err:
        raise _does_not_apply(err, name, record) from None
    return mod[name]


def checked_record(record_file: Path, func, name: str, target_spec: TargetSpec) -> records.Record:
    """The record in ``record_file``, validated against the workload as the build needs it:
    JSON shape, workload name and hash (stale?), target. Raises BuildError."""
    return check_record(records.load(record_file, expected_workload=name), func, name,
                        target_spec)


def check_record(record: records.Record, func, name: str,
                 target_spec: TargetSpec) -> records.Record:
    """``record`` (parsed), validated against the workload as the build needs it: workload
    hash (stale?), target. Raises BuildError."""
    from ..core.workloads import structural_hash

    records.check_target(record, target_spec)
    current = structural_hash(func)
    if record.workload_hash != current:
        raise BuildError(
            f"stale record: it was made for workload hash {record.workload_hash}, "
            f"but the model's workload '{name}' now hashes to {current} "
            "(the model or the partition passes changed)",
            file=record.path, workload=name,
            hint="re-tune or re-sample this workload, or delete the file to build "
                 "it with the target's default schedule")
    return record
