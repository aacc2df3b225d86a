"""`python -m modelbuild export`: a model's records -> a MetaSchedule JSONDatabase."""

from __future__ import annotations

from pathlib import Path

from ..core.errors import BuildError
from ..schedules import records
from ..schedules.active import record_files
from .output import console
from .workspace import workloads_of


def run(args) -> int:
    from ..schedules import msdb

    project, _, funcs = workloads_of(args)
    layout = project.model(args.model)
    recs = [records.load(p, expected_workload=p.stem) for p in record_files(layout)]
    unknown = [r.workload for r in recs if r.workload not in funcs]
    if unknown:
        raise BuildError(f"records for workloads the model does not have: {', '.join(unknown)}",
                         hint=f"python -m modelbuild check {args.model}")
    count = msdb.export_database(recs, funcs, Path(args.out_dir))
    console.print(f"exported {count} record(s) of {args.model} to {args.out_dir}")
    return 0
