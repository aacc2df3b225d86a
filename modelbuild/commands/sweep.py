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
import itertools
import json
import re
import signal
from dataclasses import asdict, dataclass, field
from pathlib import Path

import msgpack

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..core import atomic, interrupts, regular_file
from ..core import manifest as manifest_mod
from ..core.errors import BuildError, no_workload
from ..core.layout import ModelLayout, Project
from ..graph import build_lock
from ..measure import benchmark
from ..schedules import variants
from ..targets import registry
from . import buildrun, options
from .output import console, errors
from .sweep_plot import label, legend, plot
from .workspace import model_layout, partitioned, resolve_model

MODES = ("one-at-a-time", "cross")
# What "fastest" means: the end-to-end median, or the sum of the swept workloads'
# medians (less exposed to noise in the rest of the model on a busy machine).
CRITERIA = ("latency", "workload")

Step = dict  # workload -> variant number, None for "no record" (the target's default schedule), or
# a compute's name (the default schedule on that compute: variants.choose)


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


def plan(layout: ModelLayout, workloads: list[str], chosen: list | None, mode: str) -> list[Step]:
    """The steps of the sweep: one-at-a-time varies one workload per step, cross all at once."""
    per = {}
    for w in workloads:
        have = variants.existing(layout, w)
        if chosen is None:
            if not have:
                raise BuildError(f"no sampled variants of workload '{w}' in "
                                 f"{layout.variants_dir(w)}", workload=w,
                                 hint=f"python -m modelbuild sample {layout.name} {w} -n 3")
            per[w] = list(have)
        else:
            missing = [k for k in chosen if isinstance(k, int) and k not in have]
            variants.check_computes(layout, w, [k for k in chosen if isinstance(k, str)])
            if missing:
                raise BuildError(f"no variant {', '.join(map(str, missing))} of workload '{w}' "
                                 f"(have: {', '.join(map(str, have)) or 'none'})", workload=w,
                                 hint=f"python -m modelbuild sample {layout.name} {w} -n N")
            per[w] = list(chosen)
    if mode == "cross":
        return [dict(zip(workloads, combo)) for combo in itertools.product(*per.values())]
    return [{w: k} for w in workloads for k in per[w]]


def plan_size_text(steps: list[Step], workloads, mode: str) -> str:
    counts = {w: len({s[w] for s in steps if w in s}) for w in workloads}
    sep = " x " if mode == "cross" else " + "
    how = "cross product" if mode == "cross" else "one workload at a time"
    return f"{sep.join(str(counts[w]) for w in workloads)} variants, {how}"


# -- the active records -------------------------------------------------------------


def snapshot(layout: ModelLayout, workloads) -> dict[str, bytes | None]:
    """The active record of each workload as bytes, None where there is none."""
    return {w: layout.record(w).read_bytes() if layout.record(w).is_file() else None
            for w in workloads}


def restore(layout: ModelLayout, saved: dict[str, bytes | None]) -> None:
    for w, data in saved.items():
        if data is None:
            layout.record(w).unlink(missing_ok=True)
        elif not layout.record(w).is_file() or layout.record(w).read_bytes() != data:
            atomic.write_bytes(layout.record(w), data)


def keep_journal(layout: ModelLayout, saved: dict[str, bytes | None]) -> None:
    """Keep the active records a sweep found (``layout.sweep_journal``) until it has put them
    back: a sweep killed outright (SIGKILL, the OOM killer, a power cut) leaves the file, and
    the next sweep or select of the model puts them back first (a build warns)."""
    atomic.write_bytes(layout.sweep_journal, msgpack.packb(saved))


def recover(layout: ModelLayout) -> list[str]:
    """Put back the active records a killed sweep of the model found (its journal), and
    remove the journal; returns what it did, a line per workload (none: no sweep was
    killed). Called with the model's sweep lock held: no sweep of it runs.

    Only what the sweep may have left is replaced: an active record that is a variant's
    copy, the one a compute's selection writes, or none. One the user wrote since the
    kill stays active, and the record the sweep found becomes a variant instead."""
    path = layout.sweep_journal
    try:
        saved = msgpack.unpackb(regular_file.read_limited(path, _JOURNAL_MOST))
    except regular_file.NotRegular:
        raise _bad_journal(path, "not a file") from None
    except FileNotFoundError:
        return []
    except (OSError, ValueError, msgpack.UnpackException) as err:
        raise _bad_journal(path, f"unreadable ({str(err) or type(err).__name__})") from None
    if not isinstance(saved, dict) or not all(
            isinstance(w, str) and _WORKLOAD.fullmatch(w) and (d is None or isinstance(d, bytes))
            for w, d in saved.items()):
        raise _bad_journal(path, "not one a sweep writes")
    said = []
    for w, data in sorted(saved.items()):
        if variants.sweep_may_have_left(layout, w):
            restore(layout, {w: data})
            said.append(f"{w}: put back")
        elif data is not None and variants.read_active(layout, w) != data:
            k = variants.keep_as_variant(layout, w, data)
            said.append(f"{w}: your record since stays active; the one the sweep found is "
                        f"variant {k}")
    path.unlink(missing_ok=True)
    return said


def _bad_journal(path: Path, what: str) -> BuildError:
    return BuildError(f"a killed sweep's record of the active records is {what}", file=path,
                      hint="check the active records in schedules/ by hand, then remove it")


_JOURNAL_MOST = 256 * 1024 * 1024  # records of a few workloads: far less
_WORKLOAD = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,199}")  # a file name in schedules/<model>/


@dataclass
class ActiveRecords:
    """The swept workloads' active records as the sweep found them (``saved``), and the
    edits the user saved to them while it runs (the record files stay the user's to edit).
    The sweep itself only ever puts there a variant's copy, a compute's selection, no
    record, or the record it found: anything else is the user's. Such an edit is kept as a
    variant before the sweep writes over it, and is the active record again when the sweep
    ends; the record the sweep found becomes a variant, as after a killed sweep. (An edit
    saved in the instant between the sweep's look and its write is not seen.)"""

    layout: ModelLayout
    saved: dict[str, bytes | None]
    # the user's edits, by workload: (their bytes, the variant they are kept as)
    edited: dict[str, tuple[bytes, int]] = field(default_factory=dict)
    # records the sweep found, the user's own, kept as variants before the fastest replaced
    # them (--select-fastest): workload -> variant
    kept: dict[str, int] = field(default_factory=dict)

    def _keep_an_edit(self, w: str) -> None:
        now = variants.read_active(self.layout, w)
        if now is not None and now != self.saved.get(w) \
                and not variants.made_by_select(self.layout, w, now):
            self.edited[w] = (now, variants.keep_as_variant(self.layout, w, now))

    def activate(self, step: Step) -> None:
        """The step's variants active; every other swept workload as it was before the
        sweep."""
        for w, data in self.saved.items():
            self._keep_an_edit(w)
            if w in step:
                variants.choose(self.layout, w, step[w])
            else:
                restore(self.layout, {w: data})

    def finish(self, chosen: Step | None) -> list[str]:
        """The chosen variants active (None: the records as the sweep found them), except
        where the user edited a record meanwhile: that edit is active. Returns what became
        of those edits, a line per workload. A record the sweep found that is the user's
        own (no variant's copy: edited by hand, tuned, imported) and that the chosen
        variant replaces is first kept as a variant (``kept``), as `select` keeps it."""
        for w in chosen or {}:
            found = self.saved.get(w)
            if found is not None and not variants.made_by_select(self.layout, w, found):
                self.kept[w] = variants.keep_as_variant(self.layout, w, found)
        self.activate(chosen or {})
        said = []
        for w, (data, k) in sorted(self.edited.items()):
            atomic.write_bytes(self.layout.record(w), data)
            found = self.saved.get(w)
            line = f"{w}: your record, edited during the sweep, is active (and variant {k})"
            if found is not None and found != data:
                line += (f"; the one the sweep found is variant "
                         f"{variants.keep_as_variant(self.layout, w, found)}")
            said.append(line)
        return said


def describe(layout: ModelLayout, w: str) -> str:
    if not layout.record(w).is_file():
        return "no record"
    k = variants.active_variant(layout, w)
    return f"variant {k}" if k is not None else "a record that is not a variant"


# -- running ------------------------------------------------------------------------

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
    def layout(self) -> ModelLayout:
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


def _ms(value: float) -> str:
    """About four significant digits, never an exponent: 0.0182, 9.447, 36.19, 632.4."""
    digits = 4 if value < 1 else 3 if value < 10 else 2 if value < 100 else 1
    return f"{value:.{digits}f}"


def table(sweep: Sweep) -> Table:
    """One row per step: its variant(s), workload time(s), latency, build time, cache hits.

    Several workloads are numbered W1, W2, ... (the title names them), so the
    table stays narrow; a failed build's reason is printed below the table.
    """
    workloads, fastest = sweep.workloads, sweep.fastest()
    many = len(workloads) > 1
    table = Table(title=f"{sweep.model}: sweep of {legend(workloads) if many else workloads[0]} "
                        f"({sweep.mode})", box=box.SIMPLE_HEAD,
                  caption=f"medians of {sweep.runs} runs; latency: end to end; fastest by "
                          + ("latency" if sweep.by == "latency" else
                             "the swept workloads' time"))
    table.add_column("variant", justify="left" if many else "right")
    for i, _ in enumerate(workloads, 1):
        table.add_column(f"W{i} ms" if many else "workload ms", justify="right")
    for col in ("latency ms", "stdev", "build s", "cache hits" if not many else "hits"):
        table.add_column(col, justify="right")
    table.add_column("status", no_wrap=True)
    for i, row in enumerate(sweep.rows):
        cells = [label(row.variants, workloads, short=True)]
        if row.ok:
            lat = row.latency_ms
            cells += [_ms(row.workload_ms[w]) for w in workloads]
            cells += [_ms(lat["median"]), _ms(lat["stdev"])]
            status = "[green]fastest[/green]" if i == fastest else "ok"
        else:
            cells += ["-"] * (len(workloads) + 2)
            status = "[red]failed[/red]"
        hits = "-" if row.cache_hits is None else str(row.cache_hits)
        table.add_row(*cells, f"{row.build_seconds:.2f}", hits, status)
    return table


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


def check_workloads(layout: ModelLayout, man, workloads) -> None:
    if man is not None:
        unknown = [w for w in workloads if man.workload(w) is None]
        if unknown:
            raise no_workload(layout.name, unknown)
    for w in workloads:
        if layout.python_record(w).is_file():
            raise BuildError("the workload is scheduled by a Python file; a sweep makes JSON "
                             "variants active", file=layout.python_record(w), workload=w,
                             hint="move the .py record aside while sweeping")


def prepare(project: Project, model: str, workloads: list[str], chosen: list | None, mode: str,
            max_builds: int, target: registry.Choice) -> list[Step]:
    """The plan, refused before anything is built when it is too big or cannot work."""
    layout = model_layout(project, model)
    if mode not in MODES:
        raise BuildError(f"unknown mode '{mode}' (one of: {', '.join(MODES)})")
    workloads = list(dict.fromkeys(workloads))
    check_workloads(layout, manifest_mod.read(layout.manifest), workloads)
    steps = plan(layout, workloads, chosen, mode)
    if len(steps) > max_builds:
        raise BuildError(
            f"the sweep would take {len(steps)} builds ({plan_size_text(steps, workloads, mode)}), "
            f"more than --max-builds {max_builds}; nothing was built",
            hint=f"pass --max-builds {len(steps)}, "
                 + ("choose fewer with --variants, or use --mode one-at-a-time" if mode == "cross"
                    else "or choose fewer with --variants"))
    check_workloads(layout, partitioned(project, model, target).manifest, workloads)
    return steps


def parse_variants(text: str | None) -> list | None:
    """"1,2,default" -> [1, 2, None]; None: every sampled variant."""
    if text is None:
        return None
    out = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        if part == "default":
            out.append(None)
        elif part.isdigit() or part.isidentifier():  # a number, or a compute's name
            out.append(int(part) if part.isdigit() else part)
        else:
            raise BuildError(f"--variants {text}: '{part}' is not a variant number, 'default' "
                             "or a compute")
    if not out:
        raise BuildError(f"--variants {text!r} names no variant",
                         hint="e.g. --variants default,1,2 (or leave it out: every variant)")
    return list(dict.fromkeys(out))


_SWEEP_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+=-]*$")
_NAME_MAX = 200  # file systems take 255 bytes a name; ".json", ".png" and a temporary's prefix


def default_name(workloads: list[str], mode: str) -> str:
    """The workload names, joined; when that is too long for a file name, its start and a
    digest of the whole (each set of workloads keeps its own file)."""
    import hashlib

    name = "+".join(workloads) + ("-cross" if mode == "cross" else "")
    if len(name) <= _NAME_MAX:
        return name
    return name[:_NAME_MAX - 17] + "-" + hashlib.sha256(name.encode()).hexdigest()[:16]


def check_sweep_name(name: str) -> None:
    """A sweep's name is a file name in build/<model>/sweeps/: nothing that leaves it."""
    if len(name) > _NAME_MAX:
        raise BuildError(f"--name is {len(name)} characters: a file name takes {_NAME_MAX} "
                         "at most here", hint="give a shorter name")
    if not _SWEEP_NAME.match(name) or ".." in name:
        raise BuildError(f"--name {name!r} is not a plain file name: the sweep's results go to "
                         "build/<model>/sweeps/<name>.json",
                         hint="use letters, digits and '_', '.', '+', '=', '-' (no '/' or '..')")


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
