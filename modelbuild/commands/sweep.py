"""Variant sweep: build and benchmark a model once per schedule variant of some workloads.

For each step of the plan the variants are made active (schedules/<model>/<W>.json),
the model is built by `doit build:<model>` in a subprocess (the state users
use; each rebuild touches only the varied workloads) and benchmarked. Afterwards
the active records are restored byte for byte, "no record" included, and the
model rebuilt, also after a failure or Ctrl-C; or, with select_fastest, the
fastest step's variants become the active records.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
from dataclasses import asdict, dataclass, field

from rich.console import Console
from rich.markup import escape

from ..core import atomic, interrupts
from ..core import manifest as manifest_mod
from ..core.errors import BuildError
from ..core.paths import ModelPaths, Project
from ..graph import build_lock
from ..measure import benchmark
from ..schedules import variants
from ..targets import registry
from . import buildrun, options
from .output import console, errors
from .sweep_plan import (MODES, Step, check_sweep_name, default_name, parse_variants,
                         plan_size_text, prepare)
from .sweep_plot import label, plot
from .sweep_records import ActiveRecords, describe, keep_journal, recover, snapshot
from .sweep_table import table
from .workspace import resolve_model

# What "fastest" means: the end-to-end median, or the sum of the swept workloads'
# medians (less exposed to noise in the rest of the model on a busy machine).
CRITERIA = ("latency", "workload")


@dataclass


class Row:
    """One built and benchmarked step of a sweep (or a failed build)."""

    variants: Step
    files: dict  # workload -> the variant's record file, relative to the project
    ok: bool
    reason: str | None = None
    build_seconds: float = 0.0
    cache_hits: int | None = None
    latency_ms: dict | None = None
    workload_ms: dict = field(default_factory=dict)
    library_sha256: str | None = None


@dataclass


class Sweep:
    project: Project
    model: str
    workloads: list[str]
    steps: list[Step]
    mode: str = "one-at-a-time"
    target: registry.Choice = registry.Choice()
    runs: int = 10
    warmup: int = 2
    by: str = "latency"
    rows: list[Row] = field(default_factory=list)

    @property
    def layout(self) -> ModelPaths:
        return self.project.model(self.model)

    def run_step(self, step: Step, records: ActiveRecords, man, on_phase) -> Row:
        layout = self.layout
        records.activate(step)
        files = {w: (str(variants.chosen_file(layout, w, k).relative_to(self.project.root))
                     if k is not None else None) for w, k in step.items()}
        on_phase("building")
        built = buildrun.build(self.project, self.model, self.target)
        row = Row(dict(step), files, built.ok, build_seconds=round(built.seconds, 3),
                  cache_hits=built.cache_hits)
        if not built.ok:
            row.reason = built.reason
            return row
        on_phase("benchmarking")
        result = benchmark.measure(layout.library, man, model=self.model, target=self.target.name,
                                   runs=self.runs, warmup=self.warmup)
        row.latency_ms = result["latency_ms"]
        row.workload_ms = {w: result["workloads"][w]["median_ms"] for w in self.workloads}
        row.library_sha256 = result["library_sha256"]
        return row

    def score(self, row: Row) -> float:
        if self.by == "workload":
            return sum(row.workload_ms.values())
        return row.latency_ms["median"]

    def fastest(self) -> int | None:
        ok = [i for i, r in enumerate(self.rows) if r.ok]
        return min(ok, key=lambda i: self.score(self.rows[i])) if ok else None

    def to_json(self, before: dict, after: dict, selected: bool, edits: list[str],
                kept: dict | None = None) -> dict:
        return {"model": self.model, "target": str(self.target), "mode": self.mode,
                "workloads": self.workloads, "runs": self.runs, "warmup": self.warmup,
                "before": before, "after": after, "edited_during_sweep": edits,
                "found_kept_as_variant": dict(sorted((kept or {}).items())),
                "fastest": self.fastest(),
                "fastest_by": self.by, "selected": selected,
                "rows": [asdict(r) for r in self.rows]}


_STOPPING = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


def execute(sweep: Sweep, *, select_fastest: bool, name: str, console: Console) -> int:
    """Run every step, then restore (or select the fastest), rebuild, save and print."""
    from rich.progress import Progress

    layout, workloads = sweep.layout, sweep.workloads
    man = manifest_mod.read(layout.manifest)
    saved = snapshot(layout, workloads)
    records = ActiveRecords(layout, saved)
    before = {w: describe(layout, w) for w in workloads}
    chosen = None
    edits: list[str] = []
    keep_journal(layout, saved)
    try:
        with Progress(console=console, transient=True) as progress:
            bar = progress.add_task("sweep", total=len(sweep.steps))
            for step in sweep.steps:
                text = label(step, workloads)

                def on_phase(phase, text=text):
                    progress.update(bar, description=f"{phase} {text}")

                row = sweep.run_step(step, records, man, on_phase)
                sweep.rows.append(row)
                progress.advance(bar)
                outcome = (f"{row.latency_ms['median']:.4f} ms" if row.ok
                           else f"[red]failed[/red]: {escape(row.reason or '')}")
                console.print(f"  {escape(text)}: built in {row.build_seconds:.2f} s, {outcome}")
        if select_fastest and sweep.fastest() is not None:
            chosen = sweep.rows[sweep.fastest()].variants
    finally:
        # a second Ctrl-C (or kill) must not cut the records' restore short
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _STOPPING)
        try:
            edits = records.finish(chosen)
            layout.sweep_journal.unlink(missing_ok=True)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        with console.status("rebuilding with the active records ..."):
            final = buildrun.build(sweep.project, sweep.model, sweep.target)
        if not final.ok:
            console.print(f"[red]the final build failed[/red]: {escape(final.reason)}")
    after = {w: describe(layout, w) for w in workloads}
    path = layout.sweep(name)
    atomic.write_text(path, json.dumps(sweep.to_json(before, after, chosen is not None, edits,
                                                     records.kept),
                                       indent=2, sort_keys=True) + "\n")
    plot(sweep, path.with_suffix(".png"))
    console.print(table(sweep))
    for row in sweep.rows:
        if not row.ok:
            console.print(f"[red]failed[/red] {escape(label(row.variants, workloads))}: "
                          f"{escape(row.reason or '')}")
    shown = path.relative_to(sweep.project.root)
    console.print(f"saved {shown} and {shown.with_suffix('.png')}")
    if chosen is not None:
        row = sweep.rows[sweep.fastest()]
        console.print(f"[green]selected[/green] the fastest, {escape(label(chosen, workloads))} "
                      f"({sweep.score(row):.4f} ms by {sweep.by}); active now: "
                      + ", ".join(f"{w}: {after[w]}" for w in chosen))
        for w, k in sorted(records.kept.items()):
            if w not in records.edited:
                console.print(f"{w}: the record the sweep found (no variant's copy) is kept "
                              f"as variant {k}")
    else:
        why = " (no variant built)" if select_fastest else ""
        console.print(f"restored the active records as before the sweep{why}: "
                      + ", ".join(f"{w}: {before[w]}" for w in workloads))
    for line in edits:
        console.print(escape(line))
    if not final.ok:
        return 1
    console.print(f"rebuilt {sweep.model} with the active records in {final.seconds:.2f} s")
    return 0 if any(r.ok for r in sweep.rows) else 1


@contextlib.contextmanager
def _stopped_as_ctrl_c():
    """SIGTERM (kill) and SIGHUP (the terminal closed) stop a sweep as Ctrl-C does, so the
    user's records are put back: they ended it at once, with a variant active. Yields the
    (words, signal) of the one that came, if one did."""
    came: list = []

    def stop(signum, _frame):
        came[:] = [{signal.SIGTERM: "terminated", signal.SIGHUP: "hung up"}[signum], signum]
        interrupts.note(signum)  # landing in the benchmark's instrument, it is no failure
        raise KeyboardInterrupt

    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield came
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


HELP = "build and benchmark the model once per variant of some workloads"


def arguments(p: argparse.ArgumentParser) -> None:
    """This command's arguments (``python -m modelbuild sweep --help``)."""
    options.model(p)
    p.add_argument("--workload", action="append", required=True,
                   help="a workload whose variants to sweep (repeatable)")
    p.add_argument("--variants", help="comma-separated variant numbers, 'default' for no record, "
                                      "compute names (winograd: the default schedule on it) "
                                      "(default: every sampled variant)")
    p.add_argument("--mode", choices=MODES, default="one-at-a-time",
                   help="with several workloads: vary one at a time, the others at their "
                        "active record (default), or build their cross product")
    p.add_argument("--max-builds", type=options.positive, default=16,
                   help="refuse a plan of more builds than this (default 16)")
    p.add_argument("--select-fastest", action="store_true",
                   help="make the fastest variant(s) the active record; without it the active "
                        "records are restored as they were")
    p.add_argument("--by", choices=CRITERIA, default="latency",
                   help="fastest by end-to-end median latency (default), or by the swept "
                        "workloads' median time (steadier on a busy machine)")
    options.timing(p, "timed runs per variant (default 10)")
    p.add_argument("--name", help="results go to build/<model>/sweeps/<name>.json and .png "
                                  "(default: the workload names)")
    options.json_output(p, "print the result (the saved JSON) on stdout; progress goes to stderr")
    options.target(p)


def run(args) -> int:
    """`python -m modelbuild sweep`; with --json, the result is printed as JSON on stdout and
    everything else goes to stderr."""
    if args.name is not None:
        check_sweep_name(args.name)
    ws = resolve_model(args)
    project, choice = ws.project, ws.choice
    choice.resolve()
    out = errors if args.json else console
    workloads = list(dict.fromkeys(args.workload))
    steps = prepare(project, args.model, workloads, parse_variants(args.variants),
                    args.mode, args.max_builds, choice)
    name = args.name or default_name(workloads, args.mode)
    sweep = Sweep(project, args.model, workloads, steps, args.mode, choice, args.runs,
                  args.warmup, args.by)
    lock = build_lock.sweep_lock_file(project, args.model)
    try:
        build_lock.hold(lock)  # held to the end: its variants would pass for the user's records
    except build_lock.Busy:
        raise BuildError(f"another sweep of {args.model} runs in this project"
                         f"{build_lock.holder(lock) or ''}: the active records are its "
                         "variants until it ends and restores them",
                         hint="wait for it to end, then sweep") from None
    build_lock.refuse_during_tune(project, args.model)
    recovered = recover(project.model(args.model))
    if recovered:
        out.print(f"a sweep of {args.model} was killed before it put back the active records "
                  f"it found: {'; '.join(recovered)}")
    then = "select the fastest" if args.select_fastest else "restore the active records"
    out.print(f"sweep {args.model}: {len(steps)} builds "
              f"({plan_size_text(steps, workloads, args.mode)}), "
              f"{args.runs} timed runs each; then {then} and rebuild")
    try:
        with _stopped_as_ctrl_c() as stopped_by:
            code = execute(sweep, select_fastest=args.select_fastest, name=name, console=out)
    except KeyboardInterrupt:
        out.print(f"[red]sweep {stopped_by[0] if stopped_by else 'interrupted'}[/red]: the "
                  "active records are as before the sweep, and the model was rebuilt with them")
        return 128 + (stopped_by[1] if stopped_by else signal.SIGINT)
    if args.json:
        print(project.model(args.model).sweep(name).read_text(), end="")
    return code
