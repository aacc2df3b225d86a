"""`python -m modelbuild export`: a model's records -> a MetaSchedule JSONDatabase."""

from __future__ import annotations

import argparse

from pathlib import Path

from ..core.errors import BuildError
from ..schedules import records
from ..schedules.active import Invalid, Python, Trace, Variant, records_in, with_computes
from . import options
from .output import console
from .workspace import resolve_model

HELP = "write a model's records as a MetaSchedule JSONDatabase"


def arguments(p: argparse.ArgumentParser) -> None:
    """This command's arguments (``python -m modelbuild export --help``)."""
    options.model(p)
    p.add_argument("out_dir", type=options.text)
    p.add_argument("--force", action="store_true",
                   help="replace a MetaSchedule database already in out_dir (a tune's trials "
                        "there are lost)")
    options.target(p)


def run(args) -> int:
    """A MetaSchedule JSONDatabase of the model's active records; a Python schedule goes in
    as the trace of what its function does; a record naming a compute goes in as its trace of
    that compute's TIR (MetaSchedule's database has no field for the choice of compute: a
    trace is filed under the TIR it schedules), one with no trace is left out."""
    from ..core.workloads import structural_hash
    from ..schedules import msdb

    ws = resolve_model(args)
    out_dir = Path(args.out_dir)
    msdb.make_out_dir(out_dir)  # before the model is partitioned
    _refuse_to_replace(out_dir, args.force)
    project, spec, funcs = ws.project, ws.spec, ws.partitioned().functions()
    layout = project.model(args.model)
    found = records_in(layout.records_dir)
    unknown = [rec.workload for rec in found if rec.workload not in funcs]
    if unknown:
        raise BuildError(f"records for workloads the model does not have: {', '.join(unknown)}",
                         hint=f"python -m modelbuild check {args.model}")
    recs, left_out = [], []
    variant_funcs = ws.partitioned().variant_functions()
    for rec in found:
        if isinstance(rec, Variant):
            rec = with_computes(rec, ["direct", *(c for w, c in variant_funcs
                                                  if w == rec.workload)])
        if isinstance(rec, Python):
            func = funcs[rec.workload]
            recs.append(records.Record(rec.path, rec.workload, structural_hash(func),
                                       dict(spec.tvm_target), rec.trace(func), None, "python",
                                       args.model))
        elif isinstance(rec, Invalid):
            raise rec.error
        elif isinstance(rec, Trace):
            recs.append(rec.record)
        elif isinstance(rec, Variant) and rec.record is None:
            left_out.append(rec.workload)
        elif isinstance(rec, Variant):
            funcs[rec.workload] = variant_funcs[rec.workload, rec.compute]
            recs.append(rec.record)
    count = msdb.export_database(recs, funcs, Path(args.out_dir))
    traced = sum(isinstance(rec, Python) for rec in found)
    note = f" ({traced} Python schedule(s) as the traces of their functions)" if traced else ""
    console.print(f"exported {count} record(s) of {args.model} to {args.out_dir}{note}")
    if left_out:
        console.print(f"not exported: {', '.join(left_out)} (a compute with the default "
                      "schedule: MetaSchedule's database holds traces, not a choice of compute)")
    return 0


def _refuse_to_replace(out_dir: Path, force: bool) -> None:
    """BuildError when ``out_dir`` holds a database (a tune's trials, which ``tune --resume``
    goes on from): the export writes its files anew. With ``force``, only while a tune
    writes it."""
    from ..graph import build_lock
    from ..schedules import msdb

    build_lock.refuse_while_tuning(out_dir, "export to another folder")
    there = [name for name in (msdb.WORKLOAD_FILE, msdb.RECORD_FILE)
             if (out_dir / name).exists() and not _empty(out_dir / name)]
    if there and not force:
        raise BuildError(f"a MetaSchedule database is in this folder already ({there[0]}): the "
                         "export would replace it", file=out_dir,
                         hint="export to a new folder, or pass --force to replace it")


def _empty(path: Path) -> bool:
    try:
        return path.is_file() and path.stat().st_size == 0
    except OSError:
        return False
