"""`python -m modelbuild import`: a MetaSchedule database -> record files."""

from __future__ import annotations

import argparse

from pathlib import Path

from ..graph import build_lock
from ..schedules.timing import KEEP_MARGIN
from . import options
from .layout_note import nchw_note
from .output import console
from .tune import print_import
from .workspace import resolve_model

HELP = "import a MetaSchedule database into record files"


def arguments(p: argparse.ArgumentParser) -> None:
    """This command's arguments (``python -m modelbuild import --help``)."""
    options.model(p)
    p.add_argument("work_dir", help="directory with database_workload.json and "
                                    "database_tuning_record.json")
    p.add_argument("--source", default="tuned", help="what to call these records (tuned/hand/...)")
    p.add_argument("--keep-if-faster", action="store_true",
                   help="time each record here against what the build runs now (the "
                        "workload's active record, else the default schedule); keep only "
                        f"those more than {KEEP_MARGIN * 100:.0f}%% faster")
    options.json_output(p)
    options.target(p)


def run(args) -> int:
    from ..schedules import msdb

    ws = resolve_model(args)
    build_lock.refuse_during_sweep(ws.project, args.model, "import")
    build_lock.refuse_while_tuning(Path(args.work_dir), "import once it has ended (a tune "
                                                        "imports its records itself)")
    msdb.validate_files(Path(args.work_dir))  # before the model is partitioned
    project, spec, funcs = ws.project, ws.spec, ws.partitioned().functions()
    report = msdb.import_database(Path(args.work_dir), args.model, funcs,
                                  project.model(args.model), source=args.source,
                                  keep_if_faster=spec if args.keep_if_faster else None,
                                  variant_funcs=ws.partitioned().variant_functions(),
                                  validated=True)
    note = nchw_note(project.models_dir, args.model, ws.spec, Path(args.work_dir), funcs,
                     len(report.unmatched)) if report.unmatched else None
    print_import(report, args.work_dir, args.json, extra={"note": note} if note else None)
    if note and not args.json:
        console.print(note, markup=False, highlight=False)
    return 0
