"""What a user does today: tvm.compile of the whole model with the same records.

The yardstick for correctness (tests) and speed (bench): the records are
applied through MetaSchedule's own MetaScheduleApplyDatabase pass.
"""

from __future__ import annotations

from pathlib import Path

from . import records as records_mod
from .models import ModelSpec
from .targets import TargetSpec


def load_records(schedules_dir: Path) -> list[records_mod.Record]:
    if not schedules_dir.is_dir():
        return []
    return [records_mod.load(p, expected_workload=p.stem) for p in sorted(schedules_dir.glob("*.json"))]


def compile_model(spec: ModelSpec, schedules_dir: Path, target_spec: TargetSpec):
    """tvm.compile(model) with the records in ``schedules_dir`` applied."""
    import tvm
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms

    from .partition import import_model, fuse, workloads_of
    from .workloads import normalize

    target = tvm.target.Target(target_spec.tvm_target)
    # relax.get_pipeline("zero") under a database is these fusion passes followed by
    # MetaScheduleApplyDatabase; fusing once lets the database hold the fused workloads.
    fused = fuse(import_model(spec), target)
    funcs = workloads_of(fused)
    db = ms.database.MemoryDatabase()
    for rec in load_records(schedules_dir):
        workload = db.commit_workload(normalize(funcs[rec.workload]))
        db.commit_tuning_record(ms.database.TuningRecord.from_json(
            [rec.trace, rec.run_secs or [1.0], rec.target, None], workload))
    with target, db:
        mod = relax.transform.MetaScheduleApplyDatabase()(fused)
    return tvm.compile(mod, target)
