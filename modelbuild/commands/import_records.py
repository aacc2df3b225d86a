"""`python -m modelbuild import`: a MetaSchedule database -> record files."""

from __future__ import annotations

from pathlib import Path

from .tune import print_import
from .workspace import workloads_of


def run(args) -> int:
    from ..schedules import msdb

    project, spec, funcs = workloads_of(args)
    report = msdb.import_database(Path(args.work_dir), args.model, funcs,
                                  project.model(args.model), source=args.source,
                                  keep_if_faster=spec if args.keep_if_faster else None)
    print_import(report, args.work_dir, args.json)
    return 0
