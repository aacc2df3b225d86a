"""`python -m modelbuild tune`: tune a model's workloads with MetaSchedule, import the records."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from ..core import requires
from ..core.errors import BuildError
from ..schedules import rpc
from . import options
from .output import console, errors
from .workspace import resolve_model


def worth_tuning(func) -> bool:
    """Whether a workload computes a reduction (a convolution, a matrix product, a pooling):
    element-wise workloads move memory, and the default schedule already does that well."""
    from tvm.s_tir import Schedule

    from ..core.workloads import normalize

    sch = Schedule(normalize(func))
    blocks = sch.get_child_blocks(sch.get_sblock("root", func_name="main"))
    return any(int(iv.iter_type) == 2 for b in blocks for iv in sch.get(b).iter_vars)


def where_the_time_is(funcs: dict, calls: dict, spec, share: float = 0.99) -> dict:
    """The workloads that take ``share`` of the model's time with the default schedule
    (each timed here alone, times its calls per run), slowest first: trials spent on the
    rest could win at most the remaining 1%."""
    from ..schedules.timing import default_schedule, kernel_seconds

    cost = {n: calls.get(n, 1) * kernel_seconds(default_schedule(f, n, spec), n, spec,
                                                number=1, repeat=3)
            for n, f in funcs.items()}
    total, kept, chosen = sum(cost.values()), 0.0, {}
    for name in sorted(cost, key=lambda n: -cost[n]):
        if kept >= share * total:
            break
        chosen[name] = funcs[name]
        kept += cost[name]
    return chosen


HELP = "tune a model's workloads with MetaSchedule and write records"


def arguments(p: argparse.ArgumentParser) -> None:
    """This command's arguments (``python -m modelbuild tune --help``)."""
    options.model(p)
    p.add_argument("--workload", action="append", help="only this workload (repeatable)")
    p.add_argument("--all-workloads", action="store_true",
                   help="tune every workload with a reduction, not only those taking 99%% of "
                        "the time with the default schedule")
    p.add_argument("--trials", type=options.positive,
                   help="at most this many measured trials per workload (total: this times the "
                        "workloads)")
    p.add_argument("--total-trials", type=options.positive, default=64,
                   help="measured trials in all, placed by MetaSchedule's gradient task "
                        "scheduler, workloads weighted by their calls per run (default 64)")
    p.add_argument("--work-dir", help="MetaSchedule database directory "
                                      "(default: build/<model>/tuning)")
    options.target(p)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--keep-if-faster", action=argparse.BooleanOptionalAction, default=True,
                   help="time each tuned record against the default schedule here and keep "
                        "it only if faster (default: on)")
    p.add_argument("--rpc", metavar="HOST:PORT",
                   help="measure on the devices of this TVM RPC tracker (candidates are still "
                        "built here); needs --key")
    p.add_argument("--key", help="with --rpc: the device key its servers registered with")
    options.json_output(p, "print the import's outcome as JSON (progress goes to stderr)")


def run(args) -> int:
    import time

    from rich.progress import Progress

    from ..schedules import msdb
    from ..schedules import tune as tuning

    requires.require(requires.TUNING, "tuning")  # before any work: one clear line, no traceback
    tracker = None
    if args.rpc or args.key:
        if not (args.rpc and args.key):
            raise BuildError("--rpc and --key go together: the tracker's HOST:PORT and the "
                             "device key its servers registered with")
        tracker = (*rpc.parse_address(args.rpc), args.key)
        rpc.check(*tracker)  # within seconds, before any work: the tracker and a server
    ws = resolve_model(args)
    project, choice, spec = ws.project, ws.choice, ws.spec
    part = ws.partitioned()
    funcs = part.functions()
    calls = {w.name: w.calls for w in part.manifest.workloads}
    if args.workload:
        ws.require(funcs, args.workload)
        chosen = {k: v for k, v in funcs.items() if k in args.workload}
    else:
        chosen = {k: v for k, v in funcs.items() if calls.get(k, 0) > 0 and worth_tuning(v)}
        if not args.all_workloads:
            with (errors if args.json else console).status("timing each workload's default "
                                                           "schedule ..."):
                chosen = where_the_time_is(chosen, calls, spec)
    if args.trials is not None:
        total, per = args.trials * len(chosen), args.trials
    else:
        total, per = args.total_trials, None
    work_dir = Path(args.work_dir) if args.work_dir else project.build_dir / args.model / "tuning"
    out = errors if args.json else console  # with --json, stdout holds the JSON alone
    skipped = len(funcs) - len(chosen)
    out.print(f"tuning {len(chosen)} workload(s) of {args.model} for {choice}"
              + (f" (the {skipped} others, element-wise, unused or under 1% of the time, keep "
                 "the default schedule)" if skipped and not args.workload else "")
              + f": {total} trials in all, weighted by calls per run; cost model "
                f"{tuning.COST_MODEL}, search {tuning.SEARCH}, task scheduler "
                f"{tuning.TASK_SCHEDULER}, database {work_dir}"
              + (f"; measured on RPC tracker {args.rpc}, key {args.key}" if tracker else ""))
    measured: dict[str, int] = {}
    start = time.perf_counter()
    with Progress(console=out, transient=False, redirect_stdout=False,
                  redirect_stderr=False) as progress:
        bar = progress.add_task("tuning", total=total)

        def on_measured(name, count):
            measured[name] = measured.get(name, 0) + count
            progress.update(bar, advance=count, description=f"measured {name}")

        trained = tuning.tune(chosen, spec, work_dir, total, weights=calls,
                              max_per_workload=per, seed=args.seed, on_measured=on_measured,
                              runner=rpc.runner(*tracker) if tracker else None)
        progress.update(bar, completed=total, description="tuned")
    seconds = time.perf_counter() - start
    report = msdb.import_database(work_dir, args.model, chosen, project.model(args.model),
                                  source="tuned", only=set(chosen),
                                  keep_if_faster=spec if args.keep_if_faster else None)
    done = sum(measured.values())
    summary = {"trials": dict(sorted(measured.items())), "calls": {n: calls[n] for n in chosen},
               "seconds": round(seconds, 1),
               "trials_per_minute": round(60 * done / seconds, 1) if seconds > 0 else None,
               "cost_model": tuning.COST_MODEL, "cost_model_trained_on": trained,
               "search": tuning.SEARCH,
               "task_scheduler": tuning.TASK_SCHEDULER, "target": spec.tvm_target,
               "measured_on": f"rpc {args.rpc} key {args.key}" if tracker else "this machine"}
    if not args.json:
        out.print(f"measured {done} trials in {seconds:.0f} s "
                  f"({summary['trials_per_minute']} per minute); the {tuning.COST_MODEL} cost "
                  + (f"model was trained on {trained} of them" if trained else
                     "model never trained (too few trials): the search was random")
                  + "; per workload (calls per run): "
                  + ", ".join(f"{n} {k} ({calls[n]})" for n, k in sorted(measured.items(),
                                                                   key=lambda kv: -kv[1])))
    print_import(report, work_dir, args.json, extra={"tuning": summary})
    return 0


def print_import(report, work_dir, as_json: bool = False, extra: dict | None = None) -> None:
    """The import's outcome: a table and a summary line, or (``as_json``) the report as JSON."""
    if as_json:
        print(json.dumps({"database": str(work_dir), **report.to_json(), **(extra or {})},
                         indent=2))
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
