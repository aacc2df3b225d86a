"""The kinds of step a model's build is made of, said once.

Per model M: partition:M -> lower:M/<w> -> codegen:M/<w> -> link:M (then build:M, and
bench:M on request). Each entry names the doit basename, the cache section its outputs
are kept in (on-disk names: they are part of cache paths, so "lowered" and "object"
stay), the step module whose code (with everything it imports) decides its output, the
doit doc string, and the kind it runs after. The task creators (graph/tasks.py), the reporter,
the code digests (code.py) and the worker read this table instead of their own lists.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StepKind:
    name: str              # doit basename: "lower" -> tasks lower:<model>/<workload>
    cache: str | None      # the cache section of its outputs (None: not cached)
    source: str | None     # the step module that runs it, relative to modelbuild/
    doc: str               # doit's doc string of the group task
    upstream: str | None   # the kind whose output it reads
    per_workload: bool = False


PARTITION = StepKind(
    "partition", "partition", "steps/partition.py",
    "Import a model, fuse it into workloads (one TIR file each), build its graph.", None)
LOWER = StepKind(
    "lower", "lowered", "steps/lower.py",
    "Apply a workload's schedule record (schedules/<model>/<workload>.json or .py) to its TIR.",
    "partition", per_workload=True)
CODEGEN = StepKind(
    "codegen", "object", "steps/codegen.py",
    "Compile one scheduled workload to an object file.", "lower", per_workload=True)
LINK = StepKind(
    "link", None, "steps/link.py",
    "Link a model's objects and graph into build/<model>/<model>.so.", "codegen")
BUILD = StepKind(
    "build", None, None,
    "Build a model's library: doit build:<model> [target=llvm] [mcpu=<cpu>].", "link")
BENCH = StepKind(
    "bench", None, None,
    "Benchmark a model's library: doit bench:<model> [runs=10 warmup=2] -> "
    "build/<model>/bench.json.", "build")

PIPELINE = (PARTITION, LOWER, CODEGEN, LINK)  # the steps that make a library, in order
ALL = (*PIPELINE, BUILD, BENCH)
BY_NAME = {kind.name: kind for kind in ALL}
NAMES = tuple(kind.name for kind in PIPELINE)
SOURCES = {kind.name: kind.source for kind in ALL if kind.source}  # code.py's step modules
