"""The modelbuild command line: schedule records and measurements (`python -m modelbuild --help`).

Building stays with doit (`doit build:<model>`); these commands make, check
and inspect the records a build uses, and time what it built.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from . import records, targets
from .errors import BuildError
from .layout import Project
from .units import format_size, parse_size

console = Console(highlight=False, soft_wrap=True)  # paths stay whole


def _project(args) -> Project:
    from .workspace import find_root

    return Project(Path(args.project).resolve() if args.project else find_root())


def _workloads(args):
    """(project, target spec, name -> PrimFunc) for the command's model, partitioned."""
    from .workspace import load_workloads

    project = _project(args)
    spec = targets.resolve(args.target)
    return project, spec, load_workloads(project, args.model, spec.name)


def _require(model: str, funcs: dict, names) -> None:
    missing = sorted(set(names) - set(funcs))
    if missing:
        raise BuildError(f"model '{model}' has no workload '{', '.join(missing)}'",
                         hint=f"`python -m modelbuild inspect {model}` lists them")


def cmd_tune(args) -> int:
    from rich.progress import Progress

    from . import msdb, tuning

    project, spec, funcs = _workloads(args)
    if args.workload:
        _require(args.model, funcs, args.workload)
        funcs = {k: v for k, v in funcs.items() if k in args.workload}
    if args.trials is not None:
        per = args.trials
    else:
        per = max(1, args.total_trials // max(1, len(funcs)))
    work_dir = Path(args.work_dir) if args.work_dir else project.build_dir / args.model / "tuning"
    console.print(f"tuning {len(funcs)} workload(s) of {args.model} for {spec.name}: "
                  f"{per} trials each, cost model {tuning.cost_model_name()}, search "
                  f"{tuning.search_strategy_name()}, database {work_dir}")
    with Progress(console=console, transient=False, redirect_stdout=False,
                  redirect_stderr=False) as progress:
        bar = progress.add_task("tuning", total=per * len(funcs))

        def on_measured(name, count):
            progress.update(bar, advance=count, description=f"measured {name}")

        tuning.tune(funcs, spec, work_dir, per, seed=args.seed, on_measured=on_measured)
        progress.update(bar, completed=per * len(funcs), description="tuned")
    report = msdb.import_database(work_dir, args.model, funcs, project.model(args.model),
                                  source="tuned", only=set(funcs),
                                  keep_if_faster=spec if args.keep_if_faster else None)
    _print_import(report, work_dir)
    return 0


def _print_import(report, work_dir) -> None:
    table = Table(title=f"import from {work_dir}")
    table.add_column("result")
    table.add_column("count", justify="right")
    table.add_column("workloads")
    for label, names in (("written", report.written), ("unchanged", report.unchanged),
                         ("skipped: no valid record", report.skipped),
                         ("left out: not faster than default", report.not_faster),
                         ("unmatched: not in the model", report.unmatched)):
        table.add_row(label, str(len(names)), escape(", ".join(names)))
    console.print(table)
    console.print(f"matched {report.matched}, unmatched {len(report.unmatched)}, "
                  f"skipped {len(report.skipped)}")


def cmd_import(args) -> int:
    from . import msdb

    project, spec, funcs = _workloads(args)
    report = msdb.import_database(Path(args.work_dir), args.model, funcs,
                                  project.model(args.model), source=args.source,
                                  keep_if_faster=spec if args.keep_if_faster else None)
    _print_import(report, args.work_dir)
    return 0


def cmd_export(args) -> int:
    from . import msdb
    from .check import record_files

    project, _, funcs = _workloads(args)
    layout = project.model(args.model)
    recs = [records.load(p, expected_workload=p.stem) for p in record_files(layout)]
    unknown = [r.workload for r in recs if r.workload not in funcs]
    if unknown:
        raise BuildError(f"records for workloads the model does not have: {', '.join(unknown)}",
                         hint=f"python -m modelbuild check {args.model}")
    count = msdb.export_database(recs, funcs, Path(args.out_dir))
    console.print(f"exported {count} record(s) of {args.model} to {args.out_dir}")
    return 0


def cmd_sample(args) -> int:
    from . import variants

    project, spec, funcs = _workloads(args)
    _require(args.model, funcs, [args.workload])
    with console.status(f"sampling {args.count} variant(s) of {args.workload} ..."):
        paths = variants.sample(project.model(args.model), args.workload, funcs[args.workload],
                                spec, args.count, seed=args.seed)
    for path in paths:
        console.print(f"wrote {path}")
    console.print(f"make one active with: python -m modelbuild select {args.model} "
                  f"{args.workload} <k>")
    return 0


def cmd_select(args) -> int:
    from . import variants
    from .workspace import model_layout

    project = _project(args)
    layout = model_layout(project, args.model)
    k = None if args.variant == "default" else int(args.variant)
    path = variants.select(layout, args.workload, k)
    if k is None:
        console.print(f"{args.workload}: no active record; builds with TVM's default schedule")
    else:
        console.print(f"{args.workload}: variant {k} is now {path}")
    return 0


def cmd_check(args) -> int:
    from . import check

    project, spec, funcs = _workloads(args)
    checked, problems = check.check_model(project.model(args.model), funcs, spec)
    for problem in problems:
        console.print(f"[red]{escape(str(problem.file))}[/red]: workload {problem.workload}: "
                      f"{escape(problem.message)}")
    verdict = "[red]problems[/red]" if problems else "[green]ok[/green]"
    console.print(f"{args.model}: checked {checked} record file(s): {len(problems)} "
                  f"with problems - {verdict}")
    return 1 if problems else 0


def cmd_inspect(args) -> int:
    from . import inspect_records
    from .workspace import ensure_partitioned

    project = _project(args)
    man = ensure_partitioned(project, args.model, args.target)
    rows = inspect_records.rows(project.model(args.model), man)
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


def cmd_explain(args) -> int:
    from . import explain
    from .workspace import ensure_partitioned

    if args.workload and args.node:
        raise BuildError("give a workload or --node, not both")
    project = _project(args)
    man = ensure_partitioned(project, args.model, args.target)
    layout = project.model(args.model)
    if args.node:
        report = explain.node_report(layout, man, args.node)
    elif args.workload:
        report = explain.workload_report(layout, man, args.workload)
    else:
        report = explain.model_report(layout, man)
    if args.json:
        print(json.dumps(report, indent=2))
    elif args.node:
        explain.render_node(console, report)
    elif args.workload:
        explain.render_workload(console, report, project.root)
    else:
        explain.render_model(console, report)
    return 0


def cmd_watch(args) -> int:
    from .watch import watch
    from .workspace import model_layout

    project = _project(args)
    model_layout(project, args.model)
    targets.resolve(args.target)
    return watch(project, args.model, args.target, bench=args.bench)


def cmd_why(args) -> int:
    from . import why
    from .workspace import model_layout

    project = _project(args)
    model_layout(project, args.model)
    verdicts = why.explain(project, args.model, args.target)
    if args.json:
        print(json.dumps([v.to_json() for v in verdicts], indent=2))
        return 0
    runs = [v for v in verdicts if v.action == why.RUN]
    restores = [v for v in verdicts if v.action == why.RESTORE]
    target = args.target or targets.DEFAULT_TARGET
    if not verdicts:
        console.print(f"{args.model} (target {target}): nothing will run; "
                      f"`doit build:{args.model}` is up to date")
        return 0
    console.print(f"{args.model} (target {target}): {len(runs)} task(s) will run, "
                  f"{len(restores)} will be restored from the cache")
    for v in verdicts:
        label = "run    " if v.action == why.RUN else "restore"
        console.print(f"  {label} {escape(v.task)}")
        for reason in v.reasons:
            console.print(f"            {escape(reason)}")
    return 0


def cmd_cache(args) -> int:
    from . import cache

    project = _project(args)
    store = cache.Cache.of(project)
    if args.action == "clear":
        count, size = store.clear()
        console.print(f"cache {store.root}: removed {count} entries ({format_size(size)})")
        return 0
    if args.action == "prune":
        if args.max_size is None:
            raise BuildError("cache prune needs --max-size", hint="e.g. --max-size 500M")
        try:
            limit = parse_size(args.max_size)
        except ValueError as err:
            raise BuildError(str(err)) from None
        count, size = store.prune(limit)
        console.print(f"cache {store.root}: removed {count} least recently used entries "
                      f"({format_size(size)}); limit {format_size(limit)}")
        return 0
    entries = store.entries()
    kinds: dict[str, list[int]] = {}
    for path, size, _ in entries:
        kinds.setdefault(path.parent.parent.name, []).append(size)
    last = cache.last_run(project)
    stats = {"location": str(store.root), "entries": len(entries),
             "bytes": sum(size for _, size, _ in entries),
             "kinds": {k: {"entries": len(v), "bytes": sum(v)} for k, v in sorted(kinds.items())},
             "last_build": last}
    if args.json:
        print(json.dumps(stats, indent=2))
        return 0
    console.print(f"cache {stats['location']}: {stats['entries']} entries, {format_size(stats['bytes'])}")
    for kind, info in stats["kinds"].items():
        console.print(f"  {kind}: {info['entries']} entries, {format_size(info['bytes'])}")
    if last is None:
        console.print("last build: no record of one in this project")
    else:
        console.print(f"last build: {last['hit']} hits, {last['miss']} misses, "
                      f"{last['corrupt']} corrupt entries rebuilt")
    return 0


def _progress_callback(progress):
    """A benchmark progress callback driving one rich progress bar per phase."""
    bars = {}

    def on_progress(phase, done, total):
        if phase not in bars:
            bars[phase] = progress.add_task(phase, total=total)
        progress.update(bars[phase], completed=done)
    return on_progress


def cmd_bench(args) -> int:
    from rich.progress import Progress

    from . import benchmark, buildrun, manifest
    from .workspace import model_layout

    project = _project(args)
    layout = model_layout(project, args.model)
    targets.resolve(args.target)
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    if args.build:
        with err.status(f"doit build:{args.model} target={args.target} ..."):
            run = buildrun.build(project, args.model, args.target)
        if not run.ok:
            raise BuildError(f"build of '{args.model}' failed: {run.reason}",
                             hint=f"doit build:{args.model} shows the whole output")
    man = manifest.read(layout.manifest)
    if man is None or not layout.library.is_file():
        raise BuildError(f"no library of '{args.model}' at {layout.library}",
                         hint=f"doit build:{args.model}")
    with Progress(console=err, transient=True) as progress:
        result = benchmark.measure(layout.library, man, model=args.model, target=args.target,
                                   runs=args.runs, warmup=args.warmup,
                                   on_progress=_progress_callback(progress))
    benchmark.save(layout.benchmark, result)
    if args.json:
        print(json.dumps(result, indent=2, sort_keys=True))
    else:
        console.print(benchmark.table(result))
        console.print(f"saved {layout.benchmark.relative_to(project.root)}")
    return 0


def cmd_sweep(args) -> int:
    from . import sweep

    project = _project(args)
    targets.resolve(args.target)
    workloads = list(dict.fromkeys(args.workload))
    steps = sweep.prepare(project, args.model, workloads, sweep.parse_variants(args.variants),
                          args.mode, args.max_builds, args.target)
    name = args.name or "+".join(workloads) + ("-cross" if args.mode == "cross" else "")
    run = sweep.Sweep(project, args.model, workloads, steps, args.mode, args.target, args.runs,
                      args.warmup, args.by)
    then = "select the fastest" if args.select_fastest else "restore the active records"
    console.print(f"sweep {args.model}: {len(steps)} builds "
                  f"({sweep.plan_size_text(steps, workloads, args.mode)}), "
                  f"{args.runs} timed runs each; then {then} and rebuild")
    try:
        return sweep.run(run, select_fastest=args.select_fastest, name=name, console=console)
    except KeyboardInterrupt:
        console.print("[red]sweep interrupted[/red]: the active records are as before the "
                      "sweep, and the model was rebuilt with them")
        return 130


def build_parser() -> argparse.ArgumentParser:
    from . import sweep

    parser = argparse.ArgumentParser(prog="python -m modelbuild", description=__doc__.split("\n\n")[0])
    parser.add_argument("--project", help="project directory (default: found upwards from here)")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("tune", help="tune a model's workloads with MetaSchedule and write records")
    p.add_argument("model")
    p.add_argument("--workload", action="append", help="only this workload (repeatable)")
    p.add_argument("--trials", type=int, help="measured trials per workload")
    p.add_argument("--total-trials", type=int, default=64,
                   help="trial budget split over the workloads when --trials is not given")
    p.add_argument("--work-dir", help="MetaSchedule database directory "
                                      "(default: build/<model>/tuning)")
    p.add_argument("--target", default="llvm")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--keep-if-faster", action=argparse.BooleanOptionalAction, default=True,
                   help="time each tuned record against the default schedule here and keep "
                        "it only if faster (default: on)")
    p.set_defaults(func=cmd_tune)

    p = sub.add_parser("import", help="import a MetaSchedule database into record files")
    p.add_argument("model")
    p.add_argument("work_dir", help="directory with database_workload.json and "
                                    "database_tuning_record.json")
    p.add_argument("--source", default="tuned", help="what to call these records (tuned/hand/...)")
    p.add_argument("--keep-if-faster", action="store_true",
                   help="time each record against the default schedule here; keep only faster ones")
    p.add_argument("--target", default="llvm")
    p.set_defaults(func=cmd_import)

    p = sub.add_parser("export", help="write a model's records as a MetaSchedule JSONDatabase")
    p.add_argument("model")
    p.add_argument("out_dir")
    p.add_argument("--target", default="llvm")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("sample", help="sample valid schedule variants of one workload "
                                      "(no measurement)")
    p.add_argument("model")
    p.add_argument("workload")
    p.add_argument("-n", "--count", type=int, default=3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--target", default="llvm")
    p.set_defaults(func=cmd_sample)

    p = sub.add_parser("select", help="make one sampled variant the active record")
    p.add_argument("model")
    p.add_argument("workload")
    p.add_argument("variant", help="variant number, or 'default' for no record")
    p.set_defaults(func=cmd_select)

    p = sub.add_parser("check", help="validate every record against the current model")
    p.add_argument("model")
    p.add_argument("--target", default="llvm")
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("inspect", help="list a model's workloads with their record status")
    p.add_argument("model")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--target", default="llvm")
    p.set_defaults(func=cmd_inspect)

    p = sub.add_parser("explain", help="which model operators each workload computes; one "
                                       "workload's record, artifacts and time")
    p.add_argument("model")
    p.add_argument("workload", nargs="?", help="one workload (default: all of them)")
    p.add_argument("--node", help="which workload computes this operator (ONNX node name)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--target", default="llvm")
    p.set_defaults(func=cmd_explain)

    p = sub.add_parser("watch", help="rebuild a model in one warm process on every edit")
    p.add_argument("model")
    p.add_argument("--bench", action="store_true", help="print end-to-end latency after each rebuild")
    p.add_argument("--target", default="llvm")
    p.set_defaults(func=cmd_watch)

    p = sub.add_parser("why", help="dry run: which tasks the next build runs, and why")
    p.add_argument("model")
    p.add_argument("--target", help="the target the build would use (default: llvm)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_why)

    p = sub.add_parser("cache", help="the artifact cache: stats, prune --max-size SIZE, clear")
    p.add_argument("action", choices=("stats", "prune", "clear"))
    p.add_argument("--max-size", help="prune: keep at most this much (e.g. 500M, 2G)")
    p.add_argument("--json", action="store_true", help="stats: machine-readable output")
    p.set_defaults(func=cmd_cache)

    p = sub.add_parser("bench", help="time the built library end to end and per workload")
    p.add_argument("model")
    p.add_argument("--runs", type=_positive, default=10, help="timed runs (default 10)")
    p.add_argument("--warmup", type=_natural, default=2, help="untimed runs first (default 2)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--build", action=argparse.BooleanOptionalAction, default=True,
                   help="run `doit build:<model>` first, so the library matches the records "
                        "(default: on)")
    p.add_argument("--target", default="llvm")
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("sweep", help="build and benchmark the model once per variant of "
                                     "some workloads")
    p.add_argument("model")
    p.add_argument("--workload", action="append", required=True,
                   help="a workload whose variants to sweep (repeatable)")
    p.add_argument("--variants", help="comma-separated variant numbers, 'default' for no record "
                                      "(default: every sampled variant)")
    p.add_argument("--mode", choices=sweep.MODES, default="one-at-a-time",
                   help="with several workloads: vary one at a time, the others at their "
                        "active record (default), or build their cross product")
    p.add_argument("--max-builds", type=_positive, default=16,
                   help="refuse a plan of more builds than this (default 16)")
    p.add_argument("--select-fastest", action="store_true",
                   help="make the fastest variant(s) the active record; without it the active "
                        "records are restored as they were")
    p.add_argument("--by", choices=sweep.CRITERIA, default="latency",
                   help="fastest by end-to-end median latency (default), or by the swept "
                        "workloads' median time (steadier on a busy machine)")
    p.add_argument("--runs", type=_positive, default=10, help="timed runs per variant (default 10)")
    p.add_argument("--warmup", type=_natural, default=2, help="untimed runs first (default 2)")
    p.add_argument("--name", help="results go to build/<model>/sweeps/<name>.json and .png "
                                  "(default: the workload names)")
    p.add_argument("--target", default="llvm")
    p.set_defaults(func=cmd_sweep)
    return parser


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, not {text!r}")
    return int(text)


def _natural(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, not {text!r}")
    return int(text)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except BuildError as err:
        console.print(f"[red]{escape(str(err))}[/red]")
        return 1


if __name__ == "__main__":
    sys.exit(main())
