"""The doit task graph of a modelbuild project.

Per model M:  partition:M -> lower:M/<w> -> codegen:M/<w> -> link:M, and build:M.
The workload list comes from partition's manifest, so under ``doit run`` the
per-workload tasks are created once partition:M has been processed: ``link:M``
stands for them until then (doit's delayed task creation, one loader per model:
building one model never partitions another). Commands that do not execute
tasks (``doit list``, ``clean``, ``forget``) call the delayed creators
``task_lower`` and ``task_codegen`` at once (doit's rule for a creator marked
``create_after``), which list the workloads of every model that has a manifest.

A ``BuildGraph`` is made per doit invocation, by dodo.py, from what that
invocation was given: the project root, the ``target=`` variable, the task names
asked for. Loading tasks must stay cheap: no TVM import here.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

from doit.loader import create_after
from doit.task import DelayedLoader, Task, dict_to_task
from doit.tools import config_changed

from ..core import atomic, models, settings
from ..core import manifest as manifest_mod
from ..core.digest import file_digest
from ..core.errors import BuildError
from ..core.layout import ModelLayout, Project
from ..core.models import ModelSpec
from ..core.passes import PASSES
from ..schedules import python_schedule
from ..schedules.active import PYTHON, active
from ..steps import codegen, link, lower, partition
from ..targets import registry
from ..targets.registry import TargetSpec
from . import bench_task, code, environment, fingerprint, worker
from . import executor as executor_mod
from .actions import invalid, step
from .cache import Cache
from .cached_step import Step, Uptodate
from .executor import Executor
from .cache_entries import LoweredOutput, ObjectOutput
from .partition_output import PartitionOutput

# Bump when an artifact's format or how it is made changes: every task reruns.
ARTIFACT_VERSION = 1

DOCS = {
    "partition": "Import a model, fuse it into workloads (one TIR file each), build its graph.",
    "lower": "Apply a workload's schedule record (schedules/<model>/<workload>.json or .py) to its TIR.",
    "codegen": "Compile one scheduled workload to an object file.",
    "link": "Link a model's objects and graph into build/<model>/<model>.so.",
    "build": "Build a model's library: doit build:<model> [target=llvm] [mcpu=<cpu>].",
    "bench": "Benchmark a model's library: doit bench:<model> [runs=10 warmup=2] -> "
             "build/<model>/bench.json.",
}
BASENAMES = ("partition", "lower", "codegen", "link", "build")


@dataclass(frozen=True)
class Context:
    """What every task of one doit invocation shares."""

    project: Project
    models: dict[str, ModelSpec]
    target: TargetSpec
    cache: Cache  # the artifact cache every step uses (one remote connection per process)
    executor: Executor | None = None  # where lower and codegen run (None: in this process)

    @functools.cached_property
    def config(self) -> dict:
        """Every non-file input that changes an artifact: declared via config_changed."""
        return {
            "artifact_version": ARTIFACT_VERSION,
            "tvm": environment.tvm_identity(),
            "target": self.target.key(),
            "passes": list(PASSES),
        }

    @functools.cached_property
    def _step_configs(self) -> dict:
        return {}

    def config_for(self, step_name: str) -> dict:
        """The config of one kind of step, including the digest of the code that runs it
        (found once per step kind: every workload's step shares it)."""
        if step_name not in self._step_configs:
            sources = code.step_sources(step_name, self.target.sources)
            self._step_configs[step_name] = {**self.config, "code": code.digest(sources)}
        return self._step_configs[step_name]

    def link_config(self) -> dict:
        return {**self.config_for("link"), "cc": _compiler_or_none()}


def load_context(root: Path, target: str | None, mcpu: str | None = None) -> Context:
    """The project at ``root`` (its models, its registered targets) and the target chosen."""
    table = settings.read(root)
    registry.load_project_targets(root, table.get("targets"))
    # Paths stay relative to the project root, where doit runs: a moved project keeps its
    # state (doit's keys are the paths as given).
    project = Project(Path("."))
    return Context(project, models.discover(project.models_dir),
                   registry.resolve(target, mcpu=mcpu), Cache.of(project),
                   executor_mod.configured(project))


def _compiler_or_none() -> str:
    """The linking compiler's identity (path and version), "none" when there is none (link
    then fails with the reason)."""
    from ..targets.toolchain import identity

    try:
        return identity()
    except BuildError:
        return "none"


# -- the tasks of one model -------------------------------------------------------

def _subtask(basename: str, name: str, **fields) -> Task:
    task = dict_to_task({"name": f"{basename}:{name}", **fields})
    task.subtask_of = basename
    return task


def _remove_outputs(paths, task=None) -> None:
    """doit clean: remove a step's outputs and their stamps (the cache keeps its copy)."""
    for target in paths if paths is not None else task.targets:
        for path in (Path(target), fingerprint.stamp_path(Path(target))):
            if path.is_file():
                print(f"{task.name if task else ''} - removing file '{path}'")
                path.unlink()


def _clean_with_stamp(task) -> None:
    _remove_outputs(None, task)


def _external_data(spec: ModelSpec, layout: ModelLayout, onnx_digest: str) -> tuple[str, ...]:
    """The external data files of the model's ONNX file: those the last partition's stamp
    lists when the ONNX file is the same (no onnx import on a no-op build), else read
    from the ONNX file."""
    stamp = fingerprint.read_stamp(layout.manifest)
    sources = ((stamp or {}).get("inputs") or {}).get("sources") or {}
    if isinstance(sources.get("onnx"), dict) and sources["onnx"].get("sha256") == onnx_digest:
        return tuple(sources.get("external") or {})
    from ..core.onnx_files import external_data

    return external_data(spec.onnx_path)


def partition_inputs_of(config: dict, spec: ModelSpec, layout: ModelLayout, root: Path) -> dict:
    """What decides partition's output: the settings, the model's name and the content of
    every file it reads (the declaration, the ONNX file, its external data files). Files are
    named for ``why`` under "file", which the cache key leaves out: the same model in
    another checkout, or read from another virtual environment, finds the same entry."""
    def source(path: Path) -> dict:
        return {"file": os.path.relpath(path, root), "sha256": file_digest(path)}

    onnx = source(spec.onnx_path)
    external = _external_data(spec, layout, onnx["sha256"])
    return {"step": "partition", "model": spec.name, "config": config,
            "sources": {"declaration": source(spec.declaration), "onnx": onnx,
                        "external": {name: source(spec.onnx_path.parent / name)
                                     for name in external}}}


def partition_step(ctx: Context, spec: ModelSpec) -> Step:
    layout = ctx.project.model(spec.name)
    return Step(f"partition:{spec.name}", "partition", ctx.cache, layout.manifest,
                functools.partial(partition_inputs_of, ctx.config_for("partition"), spec, layout,
                                  ctx.project.root),
                PartitionOutput(layout))


def partition_inputs(ctx: Context, spec: ModelSpec) -> dict | None:
    """partition's inputs now (None when a file it reads is missing)."""
    return partition_step(ctx, spec).current_inputs()


def partition_task(ctx: Context, spec: ModelSpec) -> Task:
    layout = ctx.project.model(spec.name)
    previous = manifest_mod.read(layout.manifest)
    outputs = [layout.partition_dir / rel for rel, _, _ in previous.outputs] if previous else []
    cached = partition_step(ctx, spec)
    return _subtask(
        "partition", spec.name,
        doc=f"partition {spec.name}",
        actions=[(step, [cached.build, partition.run, spec, layout, ctx.target])],
        targets=[str(layout.manifest), *map(str, outputs)],
        uptodate=[Uptodate(cached)],
        clean=[_clean_with_stamp],
    )


def partition_current(ctx: Context, spec: ModelSpec) -> bool:
    """Whether the model's partition in build/ is what a build for ``ctx.target`` would make
    of the model as it is now (its stamp, its inputs' digests, its outputs): read only."""
    cached = partition_step(ctx, spec)
    inputs = cached.current_inputs()
    return inputs is not None and cached.is_current(inputs)


def lower_step(ctx: Context, model: str, workload: str,
               workload_digest: str | None = None) -> Step:
    """``workload_digest``: the workload TIR's digest when known without the file (a prediction)."""
    layout = ctx.project.model(model)
    return Step(f"lower:{model}/{workload}", "lowered", ctx.cache,
                layout.lowered(workload),
                functools.partial(fingerprint.lower_inputs, ctx.config_for("lower"), layout,
                                  workload, workload_digest),
                LoweredOutput(layout.lowered(workload)))


def codegen_step(ctx: Context, model: str, workload: str,
                 lowered_digest: str | None = None) -> Step:
    """``lowered_digest``: the lowered TIR's digest when known without the file (a prediction)."""
    layout = ctx.project.model(model)
    output = layout.object(workload, ctx.target.artifact_suffix)
    return Step(f"codegen:{model}/{workload}", "object", ctx.cache, output,
                functools.partial(fingerprint.codegen_inputs, ctx.config_for("codegen"),
                                  layout.lowered(workload), workload, lowered_digest),
                ObjectOutput(output, workload, ctx.target.artifact_suffix))


def _lower(layout, name: str, target: TargetSpec) -> None:
    """The lower action: the record is looked up when the step runs, not when tasks load."""
    lower.run(layout.workload(name), active(layout, name), layout.lowered(name), target, name)


def _record_files(layout, name: str) -> tuple[dict[str, bytes], list[str]]:
    """The workload's record files and, for a Python schedule, its helper modules, by their
    path relative to the record's folder; and which of them are the record."""
    record = active(layout, name)
    files = {p.name: p.read_bytes() for p in record.files}
    if record.kind == PYTHON:
        for helper in python_schedule.helpers(record.path).values():
            rel = os.path.relpath(helper, record.path.parent)
            files[helper.name if rel.startswith("..") else rel] = helper.read_bytes()
    return files, [p.name for p in record.files]


def _lower_on(executor: Executor, layout, name: str, target: TargetSpec) -> None:
    """The lower action on an executor's worker: the same step, inputs and output as bytes."""
    files, record = _record_files(layout, name)
    args = {"workload": layout.workload(name).read_bytes(), "records": files,
            "record_files": record, "target": target, "name": name}
    out = executor.run(f"lower:{layout.name}/{name}", "lower",
                       worker.identity("lower", target.sources), args)
    atomic.write_bytes(layout.lowered(name), out)


def _codegen_on(executor: Executor, layout, name: str, output: Path, target: TargetSpec) -> None:
    args = {"lowered": layout.lowered(name).read_bytes(), "target": target, "name": name}
    out = executor.run(f"codegen:{layout.name}/{name}", "codegen",
                       worker.identity("codegen", target.sources), args)
    atomic.write_bytes(output, out)


def unit_tasks(ctx: Context, model: str, kinds=("lower", "codegen", "link")):
    """The lower, codegen and link tasks of one model, from its manifest."""
    layout = ctx.project.model(model)
    man = manifest_mod.read(layout.manifest)
    if man is None:
        raise BuildError(f"no manifest for model '{model}' at {layout.manifest}",
                         hint=f"run `doit partition:{model}` first")
    objects = []
    for w in man.workloads:
        record = active(layout, w.name)
        lowered = lower_step(ctx, model, w.name)
        if "lower" in kinds:
            yield _subtask(
                "lower", f"{model}/{w.name}",
                doc=f"apply {record.path or 'the default schedule'} to {w.name}",
                actions=[(step, [lowered.build, _lower, layout, w.name, ctx.target])
                         if ctx.executor is None else
                         (step, [lowered.build, _lower_on, ctx.executor, layout, w.name,
                                 ctx.target])],
                targets=[str(layout.lowered(w.name))],
                uptodate=[Uptodate(lowered)],
                clean=[_clean_with_stamp],
            )
        compiled = codegen_step(ctx, model, w.name)
        if "codegen" in kinds:
            yield _subtask(
                "codegen", f"{model}/{w.name}",
                doc=f"compile {w.name} for {ctx.target.name}",
                actions=[(step, [compiled.build, codegen.run, layout.lowered(w.name),
                                 compiled.output, ctx.target, w.name])
                         if ctx.executor is None else
                         (step, [compiled.build, _codegen_on, ctx.executor, layout, w.name,
                                 compiled.output, ctx.target])],
                task_dep=[f"lower:{model}/{w.name}"],
                targets=[str(compiled.output)],
                uptodate=[Uptodate(compiled)],
                clean=[_clean_with_stamp],
            )
        objects.append(compiled.output)
    if "link" in kinds:
        graph = [layout.graph_dir / name for name in man.graph_objects]
        link_config = ctx.link_config()
        yield _subtask(
            "link", model,
            doc=f"link {layout.library}",
            actions=[(step, [link.run, objects, graph, layout.library, ctx.target]),
                     (fingerprint.write_stamp, [layout.library, link_config, None])],
            file_dep=[str(p) for p in [*objects, *graph]],
            targets=[str(layout.library)],
            uptodate=[config_changed(link_config)],
            clean=[_clean_with_stamp],
        )


def link_placeholder(ctx: Context, model: str) -> Task:
    """Stands for link:<model> until partition:<model> ran; then creates the model's tasks."""
    layout = ctx.project.model(model)
    loader = DelayedLoader(functools.partial(unit_tasks, ctx, model), executed=f"partition:{model}")
    task = Task(f"link:{model}", None, loader=loader, doc=f"link {model} (after partition)",
                clean=[(_remove_outputs, [[str(layout.library)]])])
    task.subtask_of = "link"
    return task


def build_task(ctx: Context, model: str) -> Task:
    return _subtask("build", model, doc=f"build {ctx.project.model(model).library}",
                    actions=None, task_dep=[f"link:{model}", f"_warm:{model}"])


def _import_tvm() -> None:
    import tvm  # noqa: F401


def warm_task(ctx: Context, model: str) -> Task:
    """Imports TVM while partition runs, when the model is not partitioned yet: under
    `doit -n N` the other workers are idle then, and each would import TVM (over a
    second) only once partition is done. Serial builds import it anyway; a model
    that has a manifest skips it, so a no-op build still never imports TVM."""
    task = dict_to_task({"name": f"_warm:{model}", "actions": [(_import_tvm,)],
                         "uptodate": [ctx.project.model(model).manifest.is_file()
                                      or ctx.executor is not None]})
    task.subtask_of = "_warm"
    return task


def group(basename: str, task_dep=()) -> dict:
    return {"basename": basename, "name": None, "doc": DOCS[basename], "task_dep": list(task_dep)}


def check_requested(requested: list[str], ctx: Context, basenames=BASENAMES) -> None:
    """Name an unknown model or workload clearly, instead of doit's generic 'invalid parameter'
    (or, for a workload's task, silently running nothing)."""
    for arg in requested:
        base, sep, rest = arg.partition(":")
        if not sep or base not in basenames or arg.startswith("-"):
            continue
        model, _, workload = rest.partition("/")
        if model not in ctx.models:
            known = ", ".join(ctx.models) or "(none)"
            raise invalid(
                f"unknown model '{model}' in '{arg}'. Known models: {known}.\n"
                f"  hint: declare it in models/{model}.toml, or drop models/{model}.onnx "
                "into the project")
        if base in ("lower", "codegen"):
            man = manifest_mod.read(ctx.project.model(model).manifest)
            if man is None:
                raise invalid(f"'{arg}': model '{model}' is not partitioned yet, so its workloads "
                              f"are not known.\n  hint: doit build:{model} (or partition:{model})")
            if not workload or man.workload(workload) is None:
                raise invalid(f"'{arg}': model '{model}' has no workload '{workload}'.\n"
                              f"  hint: `doit list --all` or `python -m modelbuild inspect {model}` "
                              "lists them")


# -- the task creators dodo.py exposes ----------------------------------------------

class BuildGraph:
    """The task creators of one doit invocation, over the project at ``root``.

    ``var(name, default)``: doit's command-line variables (``target=``, ``runs=``; dodo.py
    passes ``doit.get_var``); ``requested``: the command-line arguments, so that an
    unknown model in a task name is named clearly.
    """

    def __init__(self, root: Path, var=None, requested=()):
        self.root = Path(root)
        self.var = var or (lambda name, default=None: default)
        self.requested = list(requested)

    @functools.cached_property
    def context(self) -> Context:
        try:
            return load_context(self.root, self.var("target", None), self.var("mcpu", None))
        except BuildError as err:
            raise invalid(str(err)) from None

    def creators(self) -> dict:
        """The ``task_*`` functions doit loads, by name."""
        return {"task_partition": self.task_partition, "task_lower": self.task_lower,
                "task_codegen": self.task_codegen, "task_link": self.task_link,
                "task_build": self.task_build, "task_bench": self.task_bench}

    def task_partition(self):
        """Import a model, fuse it into workloads (one TIR file each), build its graph."""
        ctx = self.context
        check_requested(self.requested, ctx)
        yield group("partition", [f"partition:{m}" for m in ctx.models])
        for spec in ctx.models.values():
            yield partition_task(ctx, spec)

    def _partitioned_units(self, kind: str):
        """The ``kind`` tasks of every model that has a manifest (for commands that list)."""
        ctx = self.context
        units = [t for m in ctx.models if manifest_mod.read(ctx.project.model(m).manifest)
                 for t in unit_tasks(ctx, m, kinds=(kind,))]
        yield group(kind, [t.name for t in units])
        yield from units

    @create_after()
    def task_lower(self):
        """Apply a workload's schedule record (schedules/<model>/<workload>.json or .py) to its TIR."""
        yield from self._partitioned_units("lower")

    @create_after()
    def task_codegen(self):
        """Compile one scheduled workload to an object file."""
        yield from self._partitioned_units("codegen")

    def task_link(self):
        """Link a model's objects and graph into build/<model>/<model>.so."""
        ctx = self.context
        yield group("link", [f"link:{m}" for m in ctx.models])
        for m in ctx.models:
            yield link_placeholder(ctx, m)

    def task_build(self):
        """Build a model's library: doit build:<model> [target=llvm] [mcpu=<cpu>]."""
        ctx = self.context
        yield group("build", [f"build:{m}" for m in ctx.models])
        for m in ctx.models:
            yield build_task(ctx, m)
            yield warm_task(ctx, m)

    def task_bench(self):
        """Benchmark a model's library: doit bench:<model> [runs=10 warmup=2] -> build/<model>/bench.json."""
        ctx = self.context
        check_requested(self.requested, ctx, ("bench",))
        runs = bench_task.int_var(self.var, "runs", 10, 1)
        warmup = bench_task.int_var(self.var, "warmup", 2, 0)
        yield group("bench", [f"bench:{m}" for m in ctx.models])
        for m in ctx.models:
            yield bench_task.bench_task(ctx.project, m, ctx.target.name, runs, warmup)
