"""`python -m modelbuild tune`: tune a model's workloads with MetaSchedule, import the records."""

from __future__ import annotations

import json
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from ..core import requires
from .output import console, errors
from .workspace import require, workloads_of


def run(args) -> int:
    from rich.progress import Progress

    from ..schedules import msdb
    from ..schedules import tune as tuning

    requires.require(requires.TUNING, "tuning")  # before any work: one clear line, no traceback
    project, spec, funcs = workloads_of(args)
    if args.workload:
        require(args.model, funcs, args.workload)
        funcs = {k: v for k, v in funcs.items() if k in args.workload}
    if args.trials is not None:
        per = args.trials
    else:
        per = max(1, args.total_trials // max(1, len(funcs)))
    work_dir = Path(args.work_dir) if args.work_dir else project.build_dir / args.model / "tuning"
    out = errors if args.json else console  # with --json, stdout holds the JSON alone
    out.print(f"tuning {len(funcs)} workload(s) of {args.model} for {spec.name}: "
                  f"{per} trials each, cost model {tuning.cost_model_name()}, search "
                  f"{tuning.search_strategy_name()}, database {work_dir}")
    with Progress(console=out, transient=False, redirect_stdout=False,
                  redirect_stderr=False) as progress:
        bar = progress.add_task("tuning", total=per * len(funcs))

        def on_measured(name, count):
            progress.update(bar, advance=count, description=f"measured {name}")

        tuning.tune(funcs, spec, work_dir, per, seed=args.seed, on_measured=on_measured)
        progress.update(bar, completed=per * len(funcs), description="tuned")
    report = msdb.import_database(work_dir, args.model, funcs, project.model(args.model),
                                  source="tuned", only=set(funcs),
                                  keep_if_faster=spec if args.keep_if_faster else None)
    print_import(report, work_dir, args.json)
    return 0


def print_import(report, work_dir, as_json: bool = False) -> None:
    """The import's outcome: a table and a summary line, or (``as_json``) the report as JSON."""
    if as_json:
        print(json.dumps({"database": str(work_dir), **report.to_json()}, indent=2))
        return
    table = Table(title=f"import from {work_dir}")
    table.add_column("result")
    table.add_column("count", justify="right")
    table.add_column("workloads")
    slower = [f"{n} ({report.timings[n]['record_ms']:.3f} >= {report.timings[n]['default_ms']:.3f} ms)"
              for n in report.not_faster]
    for label, names in (("written", report.written), ("unchanged", report.unchanged),
                         ("skipped: no valid record", report.skipped),
                         ("left out: not faster than default", slower),
                         ("unmatched: not in the model", report.unmatched)):
        table.add_row(label, str(len(names)), escape(", ".join(names)))
    console.print(table)
    console.print(f"matched {report.matched}, unmatched {len(report.unmatched)}, "
                  f"skipped {len(report.skipped)}")
