"""`python -m modelbuild tune`: tune a model's workloads with MetaSchedule, import the records."""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import time
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from ..core import free_space, requires
from ..core.errors import BuildError
from ..graph import build_lock
from ..measure import latency
from ..schedules import rpc
from ..schedules.timing import KEEP_MARGIN
from . import options, tune_cluster
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
    budget = p.add_mutually_exclusive_group()  # --total-trials was dropped beside --trials
    budget.add_argument("--trials", type=options.positive,
                        help="at most this many measured trials per workload (total: this "
                             "times the workloads)")
    budget.add_argument("--total-trials", type=options.positive, default=64,
                        help="measured trials in all, placed by MetaSchedule's gradient task "
                             "scheduler, workloads weighted by their calls per run (default 64)")
    p.add_argument("--work-dir", help="MetaSchedule database directory "
                                      "(default: build/<model>/tuning)")
    options.target(p)
    p.add_argument("--seed", type=options.seed, default=1)
    p.add_argument("--keep-if-faster", action=argparse.BooleanOptionalAction, default=True,
                   help="time each tuned record here against what the build runs now (the "
                        "workload's active record, else the default schedule) and keep it "
                        f"only if more than {KEEP_MARGIN * 100:.0f}%% faster (default: on)")
    p.add_argument("--rpc", metavar="HOST:PORT",
                   help="measure on the devices of this TVM RPC tracker (candidates are still "
                        "built here); needs --key")
    p.add_argument("--key", help="with --rpc: the device key its servers registered with")
    p.add_argument("--resume", action="store_true",
                   help="go on from the database in --work-dir: the trials already there "
                        "count toward the budget")
    p.add_argument("--local", action="store_true",
                   help="tune on this machine even when the project has an executor (a running "
                        "`serve`, `executor` in pyproject.toml or $MODELBUILD_EXECUTOR)")
    p.add_argument("--per-cpu", action="store_true",
                   help="tune a mixed cluster per CPU kind (not supported yet: refused)")
    options.json_output(p, "print the import's outcome as JSON (progress goes to stderr)")


def _chosen(args, ws, funcs: dict, calls: dict, out) -> dict:
    """The workloads to tune: those named, else those worth it (99% of the time)."""
    if args.workload:
        ws.require(funcs, args.workload)
        return {k: v for k, v in funcs.items() if k in args.workload}
    chosen = {k: v for k, v in funcs.items() if calls.get(k, 0) > 0 and worth_tuning(v)}
    if not args.all_workloads:
        with out.status("timing each workload's default schedule ..."):
            chosen = where_the_time_is(chosen, calls, ws.spec)
    return chosen


def _budget(args, work_dir: Path, chosen: dict) -> tuple[int, int | None, int]:
    """(total trials, per-workload cap, trials already in the database with --resume)."""
    from ..schedules import msdb
    from ..schedules import tune as tuning

    total, per = ((args.trials * len(chosen), args.trials) if args.trials is not None
                  else (args.total_trials, None))
    if args.resume and not tuning.measured_so_far(work_dir):
        raise BuildError(f"--resume: no tuning database with trials in {work_dir}",
                         hint="tune without --resume to start one (--work-dir names another)")
    # the trials of these workloads: another tune's of other workloads are not theirs
    already = msdb.trials_for(work_dir, chosen) if args.resume else 0
    return total, per, already


def _tune(chosen, spec, work_dir, budget, calls, args, out, place) -> dict[str, int]:
    """Run the search with one progress line; trials measured per workload."""
    from rich.progress import Progress

    from ..schedules import tune as tuning

    total, per, already = budget
    measured: dict[str, int] = {}
    best: dict[str, float] = {}
    with Progress(console=out, transient=False, redirect_stdout=False,
                  redirect_stderr=False) as progress:
        bar = progress.add_task("tuning", total=total, completed=already)

        def on_measured(name, count, fastest):
            if interrupted:  # MetaSchedule has just saved the round: stop here
                raise KeyboardInterrupt
            measured[name] = measured.get(name, 0) + count
            if fastest is not None:
                best[name] = min(best.get(name, fastest), fastest)
            done = already + sum(measured.values())
            rate = 60 * sum(measured.values()) / max(1e-9, time.perf_counter() - started)
            progress.update(bar, completed=done, description=tune_cluster.line(
                done, total, tune_cluster.estimate(best, calls, len(chosen)), rate,
                place["cluster"].live_workers() if place["cluster"] else None))

        started = time.perf_counter()
        in_process = place["cluster"] is None  # MetaSchedule's own loop, in this process
        with _interrupt_noted(defer=in_process, say=out.print) as interrupted:
            try:
                how = {"weights": calls, "max_per_workload": per, "seed": args.seed,
                       "on_measured": on_measured}
                place["trained"] = (
                    place["cluster"].tune(chosen, spec, work_dir, total - already, **how)
                    if place["cluster"] else
                    tuning.tune(chosen, spec, work_dir, total - already, **how,
                                runner=place["runner"], builder=place["builder"]))
            except BaseException as err:
                _stopped(err, interrupted, place["cluster"], work_dir, out)
                raise
        progress.update(bar, description="tuned")
    return measured


@contextlib.contextmanager
def _interrupt_noted(defer: bool = False, say=print):
    """Ctrl-C noted as such: raised inside one of MetaSchedule's Python callbacks, it comes
    back out of TVM's C++ as a RuntimeError. ``defer``: MetaSchedule's search runs in this
    process, where a KeyboardInterrupt raised in the middle of its C++ ended the process
    (std::terminate, a segfault); the first Ctrl-C is only noted, and the tune stops when
    the round in progress is saved (on_measured raises it); a second one stops it at once."""
    interrupted: list[bool] = []

    def handler(signum, frame):
        interrupted.append(True)
        if not defer or len(interrupted) > 1:
            raise KeyboardInterrupt
        say("stopping once the round in progress is measured and saved (Ctrl-C again: at "
            "once, which may lose it)")

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield interrupted
    finally:
        signal.signal(signal.SIGINT, previous)


def _stopped(err: BaseException, interrupted: list, cluster, work_dir: Path, out) -> None:
    """A tune stopped by Ctrl-C or a lost executor: say where its trials are, one line."""
    from ..schedules import tune as tuning

    kept = f"the {tuning.measured_so_far(work_dir)} trials measured so far are in {work_dir}"
    if interrupted or isinstance(err, KeyboardInterrupt):
        out.print(f"stopped: {kept}; the same tune with --resume goes on from there")
        raise KeyboardInterrupt from None
    if cluster is not None and cluster.stats.lost is not None:
        raise BuildError(f"the executor went away mid-tune ({cluster.stats.lost}); {kept}",
                         hint="restart it and rerun the same tune with --resume") from None


def _rpc_place(args) -> dict | None:
    """With --rpc: measured on an RPC tracker's devices (built here), checked at once."""
    if args.rpc or args.key:
        if not (args.rpc and args.key):
            raise BuildError("--rpc and --key go together: the tracker's HOST:PORT and the "
                             "device key its servers registered with")
        tracker = (*rpc.parse_address(args.rpc), args.key)
        rpc.check(*tracker)  # within seconds, before any work: the tracker and a server
        return {"cluster": None, "builder": None, "runner": rpc.runner(*tracker),
                "where": f"rpc {args.rpc} key {args.key}"}
    return None


def _place(args, ws) -> dict:
    """Where the search runs: the executor's workers (a chunk each), or this machine."""
    if args.local and args.per_cpu:
        raise BuildError("--per-cpu is for a cluster's workers; --local tunes on this machine")
    cluster = None if args.local else tune_cluster.connect(ws.project, ws.spec, args.per_cpu)
    if cluster is None:
        return {"cluster": None, "builder": None, "runner": None, "where": "this machine"}
    return {"cluster": cluster, "builder": None, "runner": None,
            "where": f"executor {cluster.address} ({cluster.workers} workers, {cluster.cpu})"}


def run(args) -> int:
    from ..schedules import msdb
    from ..schedules import tune as tuning
    from ..schedules.sample import tuning_target

    requires.require(requires.TUNING, "tuning")  # before any work: one clear line, no traceback
    latency.use_physical_cores()  # candidates are measured on the threads the library runs on
    place = _rpc_place(args)
    ws = resolve_model(args)
    project, choice, spec = ws.project, ws.choice, ws.spec
    tuning_target(spec)  # a target MetaSchedule cannot tune for, said before any work
    # before the partition: a file's path or an unwritable one, another tune of the database
    # or a sweep of the model, said now
    work_dir = Path(args.work_dir) if args.work_dir else project.build_dir / args.model / "tuning"
    msdb.make_out_dir(work_dir)
    # TVM's database writer leaves a truncated line, unsaid, when the disk fills up
    free_space.require(work_dir, 0, "the tuning database")
    _hold_database(work_dir)
    # held before looking for a sweep, which takes its lock before looking for tunes: of
    # a tune and a sweep started at once, one sees the other
    build_lock.hold_shared(build_lock.tunes_lock_file(project, args.model))
    build_lock.refuse_during_sweep(project, args.model, "tune")
    out = errors if args.json else console  # with --json, stdout holds the JSON alone
    place = place or _place(args, ws)
    part = ws.partitioned()
    funcs = part.functions()
    calls = {w.name: w.calls for w in part.manifest.workloads}
    chosen = _chosen(args, ws, funcs, calls, out)
    budget = _budget(args, work_dir, chosen)
    total, _, already = budget
    skipped = len(funcs) - len(chosen)
    out.print(f"tuning {len(chosen)} workload(s) of {args.model} for {choice}"
              + (f" (the {skipped} others, element-wise, unused or under 1% of the time, keep "
                 "the default schedule)" if skipped and not args.workload else "")
              + f": {total} trials in all, weighted by calls per run; cost model "
                f"{tuning.COST_MODEL}, search {tuning.SEARCH}, task scheduler "
                f"{tuning.TASK_SCHEDULER}, database {work_dir}"
              + (f"; resuming: {already} trials there already" if args.resume else "")
              + (f"; measured on RPC tracker {args.rpc}, key {args.key}" if args.rpc else "")
              + (f"; {place['cluster'].describe()}" if place["cluster"] else ""))
    start = time.perf_counter()
    measured = (_tune(chosen, spec, work_dir, budget, calls, args, out, place)
                if total > already else {})
    seconds = time.perf_counter() - start
    build_lock.refuse_during_sweep(project, args.model, f"import {work_dir}")  # begun meanwhile
    report = msdb.import_database(work_dir, args.model, funcs, project.model(args.model),
                                  source="tuned", only=set(chosen),
                                  keep_if_faster=spec if args.keep_if_faster else None)
    summary = _summary(measured, calls, chosen, seconds, place, spec, already)
    if not args.json:
        _say(out, summary, measured, calls)
    print_import(report, work_dir, args.json, extra={"tuning": summary})
    return 0


def _hold_database(work_dir: Path) -> None:
    """This tune's hold on its database until it exits (build_lock.tune_lock_file)."""
    lock = build_lock.tune_lock_file(work_dir)
    try:
        build_lock.hold(lock)
    except build_lock.Busy:
        raise BuildError(f"another tune writes this database{build_lock.holder(lock) or ''}",
                         file=work_dir, hint="wait for it, or give this tune its own "
                                             "--work-dir") from None


def _summary(measured, calls, chosen, seconds, place, spec, already) -> dict:
    from ..schedules import tune as tuning

    done = sum(measured.values())
    cluster = place["cluster"]
    return {"trials": dict(sorted(measured.items())), "calls": {n: calls[n] for n in chosen},
            "seconds": round(seconds, 1), "resumed_from": already,
            "trials_per_minute": round(60 * done / seconds, 1) if seconds > 0 else None,
            "cost_model": tuning.COST_MODEL, "cost_model_trained_on": place.get("trained", 0),
            "search": tuning.SEARCH,
            "task_scheduler": tuning.TASK_SCHEDULER, "target": spec.tvm_target,
            "measured_on": place["where"],
            **(tune_cluster.summary(cluster, seconds) if cluster else {})}


def _say(out, summary: dict, measured: dict, calls: dict) -> None:
    from ..schedules import tune as tuning

    trained, done = summary["cost_model_trained_on"], sum(measured.values())
    out.print(f"measured {done} trials in {summary['seconds']:.0f} s "
              f"({summary['trials_per_minute']} per minute); the {tuning.COST_MODEL} cost "
              + (f"model was trained on {trained} of them" if trained else
                 "model never trained (too few trials): the search was random")
              + "; per workload (calls per run): "
              + ", ".join(f"{n} {k} ({calls[n]})" for n, k in sorted(measured.items(),
                                                               key=lambda kv: -kv[1]))
              + (f"; {summary['chunks']} chunks ran on {len(summary['workers_used'])} of "
                 f"{summary['workers']} workers" if "workers" in summary else ""))


def _against(name: str, timing: dict) -> str:
    """A left-out record's time against what it was held to: the active record's, or the
    default schedule's."""
    if "active_ms" in timing:
        return (f"{name} ({timing['record_ms']:.3f} against the active record's "
                f"{timing['active_ms']:.3f} ms)")
    return f"{name} ({timing['record_ms']:.3f} against the default's {timing['default_ms']:.3f} ms)"


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
    slower = [_against(n, report.timings[n]) for n in report.not_faster]
    for label, names in (("written", report.written), ("unchanged", report.unchanged),
                         ("skipped: no valid record", report.skipped),
                         (f"left out: not {KEEP_MARGIN:.0%} faster than what builds now",
                          slower),
                         ("left out: TVM's code for it computes other numbers", report.wrong),
                         ("left out: scheduled by a Python file", report.python),
                         ("the active record it replaced, kept as a variant",
                          [f"{n} (variant {k})" for n, k in report.kept.items()]),
                         ("left out: the active record is yours, and schedules/<model>/"
                          "variants/ cannot take it", report.not_kept),
                         ("unmatched: not in the model", report.unmatched)):
        table.add_row(label, str(len(names)), escape(", ".join(names)))
    console.print(table)
    console.print(f"matched {report.matched}, unmatched {len(report.unmatched)}, "
                  f"skipped {len(report.skipped)}")
