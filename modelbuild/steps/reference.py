"""What a user does today: tvm.compile of the whole model with the same records.

The yardstick for correctness (tests) and speed (bench): MetaSchedule traces are
applied through MetaSchedule's own MetaScheduleApplyDatabase pass, Python
schedules by their function, and the workloads without a record get the target's
default schedule (its entry's hook), as the build applies them.
"""

from __future__ import annotations

from pathlib import Path

from ..core.models import ModelSpec
from ..schedules import records as records_mod
from ..schedules.active import Active, Invalid, Python, Trace, Variant, records_in
from ..targets.registry import TargetSpec


def traces(recs: list[Active]) -> list[records_mod.Record]:
    """The MetaSchedule traces among ``recs`` (BuildError for one that does not parse)."""
    out = []
    for rec in recs:
        if isinstance(rec, Invalid):
            raise rec.error
        if isinstance(rec, Trace) or (isinstance(rec, Variant) and rec.record is not None):
            out.append(rec.record)
    return out


def compile_model(spec: ModelSpec, schedules_dir: Path, target_spec: TargetSpec):
    """tvm.compile(model) with the records in ``schedules_dir`` applied."""
    import tvm
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms

    from ..core.workloads import normalize
    from ..core.passes import PASSES
    from .compute_variants import variant_workloads
    from .onnx_import import import_model
    from .partition import channel_block, fuse_stages, workloads_of

    target = tvm.target.Target(target_spec.tvm_target)
    # relax.get_pipeline("zero") under a database is these fusion passes followed by
    # MetaScheduleApplyDatabase; fusing once lets the database hold the fused workloads.
    block = channel_block(spec, target_spec)
    stages = fuse_stages(import_model(spec), target, block)
    fused = stages[PASSES[-1]]
    funcs = workloads_of(fused)
    # each file read once; a record of a workload the model no longer has is ignored, as
    # the build ignores it
    recs = [r for r in records_in(schedules_dir) if r.workload in funcs]
    _use_computes(fused, funcs, [r for r in recs if isinstance(r, Variant)],
                  lambda: variant_workloads(stages, PASSES, target, funcs, block))
    for rec in recs:
        if isinstance(rec, Python):
            scheduled = rec.apply(funcs[rec.workload], target_spec)
            fused.update_func(fused.get_global_var(rec.workload), scheduled)
    db = ms.database.MemoryDatabase()
    for rec in traces(recs):
        workload = db.commit_workload(normalize(funcs[rec.workload]))
        db.commit_tuning_record(ms.database.TuningRecord.from_json(
            [rec.trace, rec.run_secs or [1.0], rec.target, None], workload))
    with target, db:
        mod = relax.transform.MetaScheduleApplyDatabase()(fused)
    if target_spec.default_schedule is not None:
        for gv, func in list(mod.functions.items()):
            if isinstance(func, tvm.tirx.PrimFunc) and not (func.attrs and
                                                            func.attrs.get("tirx.is_scheduled")):
                mod.update_func(gv, target_spec.default_schedule(func, gv.name_hint, target))
    return tvm.compile(mod, target)


def _use_computes(fused, funcs: dict, chosen: list, made) -> None:
    """The workloads whose record names another compute get that compute's TIR, in
    ``fused`` and ``funcs`` (``made()``: every variant's TIR, by variant and workload)."""
    if not chosen:
        return
    variants = made()
    for rec in chosen:
        if rec.workload in variants.get(rec.compute, {}):
            funcs[rec.workload] = variants[rec.compute][rec.workload]
            fused.update_func(fused.get_global_var(rec.workload), funcs[rec.workload])
