"""lower: apply one workload's schedule record to its PrimFunc.

The record's trace is applied exactly as ``relax.transform.MetaScheduleApplyDatabase``
applies it inside ``tvm.compile``: through that pass, over a one-record database.
No record means TVM's default schedule for the target, applied at codegen.
"""

from __future__ import annotations

from pathlib import Path

from . import atomic, records
from .errors import BuildError
from .targets import TargetSpec


def apply_record(func, name: str, record: records.Record, target):
    """``func`` scheduled by ``record``'s trace; raises BuildError when it does not apply."""
    import tvm
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms

    from .workloads import normalize

    db = ms.database.MemoryDatabase()
    workload = db.commit_workload(normalize(func))
    run_secs = record.run_secs or [1.0]  # a database only returns records with a run time
    db.commit_tuning_record(ms.database.TuningRecord.from_json(
        [record.trace, run_secs, record.target, None], workload))
    try:
        with target, db:
            mod = relax.transform.MetaScheduleApplyDatabase()(tvm.IRModule({name: func}))
    except Exception as err:  # TVM raises its own error types for a failed schedule primitive
        raise BuildError(f"the schedule trace does not apply: {_first_lines(err)}",
                         file=record.path, workload=name,
                         hint="fix the edited instruction or decision, or delete the file "
                              "to use TVM's default schedule") from None
    return mod[name]


def _first_lines(err: Exception, limit: int = 12) -> str:
    lines = [ln for ln in str(err).strip().splitlines() if ln.strip()]
    keep = [ln for ln in lines if not ln.lstrip().startswith(("File ", "Stack trace", "0:", "1:"))]
    text = "\n    ".join((keep or lines)[:limit])
    return text


def run(workload_file: Path, record_file: Path | None, out_file: Path, target_spec: TargetSpec,
        name: str) -> None:
    """Write ``name``'s scheduled TIR to ``out_file``."""
    import tvm

    from .workloads import structural_hash

    func = tvm.ir.load_json(workload_file.read_text())
    if record_file is not None and record_file.exists():
        record = records.load(record_file, expected_workload=name)
        records.check_target(record, target_spec)
        current = structural_hash(func)
        if record.workload_hash != current:
            raise BuildError(
                f"stale record: it was made for workload hash {record.workload_hash}, "
                f"but the model's workload '{name}' now hashes to {current} "
                "(the model or the partition passes changed)",
                file=record_file, workload=name,
                hint="re-tune or re-sample this workload, or delete the file to build "
                     "it with TVM's default schedule")
        func = apply_record(func, name, record, tvm.target.Target(target_spec.tvm_target))
    atomic.write_text(out_file, tvm.ir.save_json(func))
