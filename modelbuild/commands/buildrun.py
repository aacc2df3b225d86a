"""Run `doit build:<model>` in a subprocess, exactly as a user would, and read how it went.

The build keeps the state users use (build/.doit.db): afterwards a plain
`doit build:<model>` finds everything up to date.
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass

from ..core.paths import Project
from ..targets.registry import Choice


@dataclass(frozen=True)


class BuildRun:
    ok: bool
    seconds: float
    output: str
    cache_hits: int | None  # None: the build wrote no cache events

    @property
    def reason(self) -> str:
        """Why a build failed, in one line: the reporter's "failed <task>: ..." summary."""
        lines = [ln.strip() for ln in self.output.splitlines() if ln.strip()]
        failed = [ln[len("failed "):] for ln in lines if ln.startswith("failed ")]
        errors = [ln for ln in lines if ln.startswith("error:")]
        return (failed or errors or lines[-1:] or ["doit failed without output"])[0]


def cache_hits(project: Project, run: int) -> int | None:
    """Cache hits of doit run ``run`` (its main process's pid), None when it logged none.
    Its own log: another build of the project at the same time counts its own."""
    from ..cache import events

    counts = events.last_run(project, run)
    return None if counts is None else counts["hit"]


def build(project: Project, model: str, choice: Choice = Choice()) -> BuildRun:
    start = time.perf_counter()
    with subprocess.Popen([sys.executable, "-m", "doit", f"build:{model}", *choice.doit_vars()],
                          cwd=project.root, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True) as proc:
        try:
            out, err = proc.communicate()
        except BaseException:  # as subprocess.run: the build does not outlive us
            proc.kill()
            raise
    seconds = time.perf_counter() - start
    return BuildRun(proc.returncode == 0, seconds, out + err, cache_hits(project, proc.pid))
