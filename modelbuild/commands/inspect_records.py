"""`python -m modelbuild inspect`: a model's workloads with their record status (no TVM)."""

from __future__ import annotations

import json

from rich.markup import escape
from rich.table import Table

from ..schedules import status
from .output import console
from .workspace import choice_of, ensure_partitioned, project_of


def run(args) -> int:
    project = project_of(args)
    choice = choice_of(args)
    man = ensure_partitioned(project, args.model, choice)
    rows = status.rows(project.model(args.model), man, choice.resolve().tvm_target)
    if args.json:
        print(json.dumps([r.to_json() for r in rows], indent=2))
        return 0
    table = Table(title=f"{args.model}: {len(rows)} workloads")
    for col in ("workload", "status", "run time", "variant", "record"):
        table.add_column(col)
    for r in rows:
        secs = f"{r.run_secs * 1e3:.3f} ms" if r.run_secs is not None else ""
        variant = (f"{r.variant} of {r.variants}" if r.variant else
                   (f"- of {r.variants}" if r.variants else ""))
        table.add_row(r.workload, r.status, secs, variant, escape(r.record or r.note))
    console.print(table)
    return 0
