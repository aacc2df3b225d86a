"""doit's console output, plus timings, a live progress bar and a closing summary.

Lines keep doit's own markers (".  task" ran, "-- task" up to date), so the
output reads like any doit run and scripts can parse it. On a terminal a
transient rich progress bar below the task lines shows how far a long build
is; it disappears when the build ends. A failed step's message (file, workload, what
to do) is repeated at the end, in red.
"""

from __future__ import annotations

import os
import sys
import time
from collections import Counter
from pathlib import Path

from doit.reporter import ConsoleReporter
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)

from ..cache import events
from ..core import manifest as manifest_mod
from ..core.paths import Project
from ..decision.cached_step import restored_from_cache
from ..steps import kinds
from . import build_lock

_KINDS = kinds.NAMES  # partition, lower, codegen, link


def _model_of(task_name: str) -> str | None:
    base, sep, rest = task_name.partition(":")
    return (rest.split("/", 1)[0]
            if sep and base in (*_KINDS, kinds.BUILD.name, kinds.BENCH.name) else None)


class ModelbuildReporter(ConsoleReporter):
    desc = "modelbuild console output with progress and summary"
    show_uptodate = True  # a "-- task" line for each task that was up to date

    def __init__(self, outstream, options):
        super().__init__(outstream, options)
        self.console = Console(file=outstream, highlight=False, soft_wrap=True, emoji=False)
        self.project = Project(Path.cwd())
        self.started: dict[str, float] = {}
        self.ran: Counter = Counter()
        self.uptodate = 0
        self.from_cache = 0
        self.seconds: dict[str, float] = {}
        self.models: set[str] = set()
        self.t0 = time.perf_counter()
        self.progress: Progress | None = None
        self.bar = None
        self.locks = build_lock.ModelLocks()

    # -- progress -------------------------------------------------------------
    def _expected_total(self) -> int:
        total = 0
        for model in self.models:
            man = manifest_mod.read(self.project.model(model).manifest)
            total += sum((len(man.workloads) if man else 0) if kind.per_workload else 1
                         for kind in kinds.PIPELINE)
        return total

    def initialize(self, tasks, selected_tasks):
        for name in selected_tasks:
            model = _model_of(name)
            if model:
                self.models.add(model)
            elif name in (*_KINDS, kinds.BUILD.name, kinds.BENCH.name):
                self.models.update(m for m in (_model_of(t) for t in tasks) if m)
        # before any step, or uptodate check, writes: one run at a time per model
        self.locks.acquire(self.project, self.models, sys.stderr.write)
        events.start_run(self.project, os.getpid())  # the steps log to this run's file
        if self.console.is_terminal:
            # Task lines are printed through the same console, above the bar; the
            # steps' own output is left alone (no stdout/stderr redirection).
            self.progress = Progress(TextColumn("[bold]modelbuild"), BarColumn(),
                                     MofNCompleteColumn(), TimeElapsedColumn(),
                                     TextColumn("{task.description}"),
                                     console=self.console, transient=True,
                                     redirect_stdout=False, redirect_stderr=False)
            self.progress.start()
            self.bar = self.progress.add_task("", total=self._expected_total() or None)

    def _advance(self, description: str = "") -> None:
        if self.progress is not None:
            self.progress.update(self.bar, advance=1, description=description)

    def write(self, text):
        if self.progress is not None:
            self.console.print(text, end="", markup=False, highlight=False)
        else:
            super().write(text)

    # -- doit hooks -------------------------------------------------------------
    def execute_task(self, task):
        if task.actions and task.name[0] != "_":
            self.started[task.name] = time.perf_counter()
            self.write(f".  {task.title()}\n")
            if self.progress is not None:
                self.progress.update(self.bar, description=task.name)

    def add_success(self, task):
        if task.name in self.started:
            self.seconds[task.name] = time.perf_counter() - self.started[task.name]
            self.ran[task.name.split(":", 1)[0]] += 1
            self._advance(task.name)
            if task.name.startswith("partition:") and self.progress is not None:
                self.progress.update(self.bar, total=self._expected_total() or None)

    def skip_uptodate(self, task):
        if task.name[0] != "_" and task.actions:
            self.uptodate += 1
            source = restored_from_cache(task)
            self.from_cache += bool(source)
            if self.show_uptodate:
                note = {None: "", "remote": "  (from remote cache)"}.get(source, "  (from cache)")
                self.write(f"-- {task.title()}{note}\n")
            self._advance()

    def complete_run(self):
        try:
            self._summary()
        finally:
            events.end_run(self.project, os.getpid())
            self.locks.release()

    def _summary(self):
        if self.progress is not None:
            self.progress.stop()
        for result in self.failures:  # what the failed task printed, if anything
            task = result["task"]
            out = "".join(a.out or "" for a in task.actions) + "".join(a.err or "" for a in task.actions)
            if task.executed and out.strip():
                self.write(f"{task.name} output:\n{out}\n")
        if self.runtime_errors:
            self.write("Execution aborted.\n" + "\n".join(self.runtime_errors) + "\n")
        elapsed = time.perf_counter() - self.t0
        parts = [f"{self.ran[k]} {k}" for k in (*_KINDS, kinds.BENCH.name) if self.ran[k]]
        # doit reports from its `finally`: a Ctrl-C on its way out is the exception in flight
        interrupted = isinstance(sys.exc_info()[1], KeyboardInterrupt)
        failed = bool(self.failures or self.runtime_errors)
        ran = ("ran " + ", ".join(parts)) if parts else ("nothing else ran" if failed or interrupted
                                                         else "nothing to rebuild")
        status = ("[yellow]interrupted[/yellow]" if interrupted
                  else "[red]failed[/red]" if failed else "[green]done[/green]")
        restored = f" ({self.from_cache} from cache)" if self.from_cache else ""
        self.console.print(f"modelbuild: {status} - {ran}; {self.uptodate} up to date{restored}; "
                           f"{elapsed:.1f} s")
        counts = events.last_run(self.project, os.getpid())
        if counts and any(counts.values()):
            remote = f" ({counts['remote_hit']} from the remote)" if counts["remote_hit"] else ""
            uploads = f", {counts['upload']} uploaded" if counts["upload"] else ""
            self.console.print(f"  cache: {counts['hit']} hits{remote}, {counts['miss']} misses"
                               f"{uploads}")
        self._refused(events.refused_entries(self.project, os.getpid()))
        slow = sorted(self.seconds.items(), key=lambda kv: -kv[1])[:3]
        if slow and sum(self.ran.values()) > 3:
            self.console.print("  slowest: " + ", ".join(f"{n} {s:.2f} s" for n, s in slow))
        for result in self.failures:
            first = result["exception"].get_msg().strip().splitlines()[:1] or ["?"]
            self.console.print(f"  [red]failed[/red] {escape(result['task'].name)}: "
                               f"{escape(first[0])}")
        sys.stdout.flush()


    def _refused(self, refused: list[tuple[str, str, str]]) -> None:
        """A line per cache entry not used; one line for all those refused for their
        signature, when there are several (a changed public key refuses every one)."""
        untrusted = Counter(why for _, _, why in refused if why in events.UNTRUSTED)
        said = set()
        for entry, where, why in refused:
            if untrusted[why] > 1:
                if why not in said:
                    said.add(why)
                    places = {w for _, w, y in refused if y == why}
                    self.console.print(f"  [yellow]warning[/yellow]: {untrusted[why]} "
                                       f"{_ENTRIES[places.pop() if len(places) == 1 else None]} "
                                       f"were {why}; none was used")
                continue
            self.console.print(f"  [yellow]warning[/yellow]: {_ENTRY[where].format(escape(entry))} "
                               f"was {why}; it was not used")


_ENTRY = {events.LOCAL_COPY: "cache entry {}", events.REMOTE_ENTRY: "remote cache entry {}",
          events.BOTH: "cache entry {} (here and in the remote cache)"}
_ENTRIES = {events.LOCAL_COPY: "cache entries", events.REMOTE_ENTRY: "remote cache entries",
            events.BOTH: "cache entries (here and in the remote cache)",
            None: "cache entries (here or in the remote cache)"}


class WatchReporter(ModelbuildReporter):
    """Watch mode's: a line per rebuilt task is enough, no line per up-to-date one."""

    desc = "modelbuild console output for watch mode"
    show_uptodate = False
