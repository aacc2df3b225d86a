"""`python -m modelbuild inspect`: a model's workloads with their record status (no TVM)."""

from __future__ import annotations

import argparse
import json

from rich.markup import escape
from rich.table import Table

from ..schedules import status
from . import options
from .output import console
from .workspace import resolve_model

HELP = "list a model's workloads with their record status"


def arguments(p: argparse.ArgumentParser) -> None:
    """This command's arguments (``python -m modelbuild inspect --help``)."""
    options.model(p)
    options.json_output(p)
    options.target(p)


def run(args) -> int:
    ws = resolve_model(args)
    man = ws.partitioned().manifest
    rows = status.rows(ws.layout, man, ws.spec.tvm_target)
    if args.json:
        print(json.dumps([r.to_json() for r in rows], indent=2))
        return 0
    table = Table(title=f"{args.model}: {len(rows)} workloads")
    for col in ("workload", "status", "compute", "run time", "variant", "record"):
        table.add_column(col)
    for r in rows:
        secs = f"{r.run_secs * 1e3:.3f} ms" if r.run_secs is not None else ""
        variant = (f"{r.variant} of {r.variants}" if r.variant else
                   (f"- of {r.variants}" if r.variants else ""))
        others = [c for c in r.computes if c != r.compute]
        compute = r.compute + (f" (or {', '.join(others)})" if others else "")
        table.add_row(r.workload, r.status, compute, secs, variant, escape(r.record or r.note))
    console.print(table)
    return 0
