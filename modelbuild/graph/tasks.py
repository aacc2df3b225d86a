"""The doit task graph of a modelbuild project.

Per model M:  partition:M -> lower:M/<w> -> codegen:M/<w> -> link:M, and build:M.
The workload list comes from partition's manifest, so under ``doit run`` the
per-workload tasks are created once partition:M has been processed (doit's
delayed task creation, one loader per model: building one model never
partitions another). Commands that only inspect (``doit list``, ``clean``,
``forget``) see the tasks of every model that has a manifest.

Loading tasks must stay cheap: no TVM import here.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
from dataclasses import dataclass
from pathlib import Path

from doit.exceptions import TaskFailed
from doit.loader import create_after
from doit.task import DelayedLoader, Task, dict_to_task
from doit.tools import config_changed

from . import codegen, fingerprint, link, lower, partition
from . import manifest as manifest_mod
from .cache import Cache
from .cached_step import Step, Uptodate
from .errors import BuildError
from .layout import Project
from .models import ModelSpec
from .targets import TargetSpec

# Bump when an artifact's format or how it is made changes: every task reruns.
ARTIFACT_VERSION = 1

DOCS = {
    "partition": "Import a model, fuse it into workloads (one TIR file each), build its graph.",
    "lower": "Apply a workload's schedule record (schedules/<model>/<workload>.json or .py) to its TIR.",
    "codegen": "Compile one scheduled workload to an object file.",
    "link": "Link a model's objects and graph into build/<model>/<model>.so.",
    "build": "Build a model's library: doit build:<model> [target=llvm].",
}


# The modelbuild modules whose code decides each step's output: editing one
# reruns that step (the build tool's own version is an input, as in Bazel).
# The target's own hooks (its entry's ``sources``) are added to every step.
STEP_SOURCES = {
    "partition": ("partition.py", "provenance.py", "manifest.py", "workloads.py", "toolchain.py",
                  "models.py", "targets.py"),
    "lower": ("lower.py", "records.py", "workloads.py", "python_schedule.py", "fingerprint.py",
              "targets.py"),
    "codegen": ("codegen.py", "toolchain.py", "targets.py", "fingerprint.py"),
    "link": ("link.py", "toolchain.py", "targets.py"),
}


@functools.lru_cache(maxsize=None)
def _code_digest(files: tuple[str, ...]) -> str:
    here = Path(__file__).parent
    digest = hashlib.sha256()
    for name in files:
        digest.update(name.encode() + b"\0" + (here / name).read_bytes())
    return digest.hexdigest()[:16]


def _clean_with_stamp(task) -> None:
    """doit clean: remove a cached step's outputs and their stamps (the cache keeps its copy)."""
    for target in task.targets:
        for path in (Path(target), fingerprint.stamp_path(Path(target))):
            if path.is_file():
                print(f"{task.name} - removing file '{path}'")
                path.unlink()


def step(fn, *args):
    """Run one build step; a BuildError becomes a clean task failure (no traceback)."""
    try:
        fn(*args)
    except BuildError as err:
        return TaskFailed(str(err))
    return None


def _tvm_version() -> str:
    try:
        return importlib.metadata.version("apache-tvm")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


@dataclass(frozen=True)
class Context:
    """What every task of one doit invocation shares."""

    project: Project
    models: dict[str, ModelSpec]
    target: TargetSpec

    @functools.cached_property
    def config(self) -> dict:
        """Every non-file input that changes an artifact: declared via config_changed."""
        return {
            "artifact_version": ARTIFACT_VERSION,
            "tvm": _tvm_version(),
            "target": self.target.key(),
            "passes": list(partition.PASSES),
        }

    def config_for(self, step: str) -> dict:
        """The config of one kind of step, including the digest of the code that runs it."""
        return {**self.config, "code": _code_digest(STEP_SOURCES[step] + self.target.sources)}


def _subtask(basename: str, name: str, **fields) -> Task:
    task = dict_to_task({"name": f"{basename}:{name}", **fields})
    task.subtask_of = basename
    return task


def partition_task(ctx: Context, spec: ModelSpec) -> Task:
    layout = ctx.project.model(spec.name)
    return _subtask(
        "partition", spec.name,
        doc=f"partition {spec.name}",
        actions=[(step, [partition.run, spec, layout, ctx.target]),
                 (fingerprint.write_stamp, [layout.manifest, ctx.config_for("partition"), None])],
        file_dep=[str(p) for p in spec.source_files()],
        targets=[str(layout.manifest)],
        uptodate=[config_changed(ctx.config_for("partition"))],
        clean=[_clean_with_stamp],
    )


def unit_tasks(ctx: Context, model: str):
    """lower, codegen and link tasks of one model, from its manifest."""
    layout = ctx.project.model(model)
    man = manifest_mod.read(layout.manifest)
    if man is None:
        raise BuildError(f"no manifest for model '{model}' at {layout.manifest}",
                         hint=f"run `doit partition:{model}` first")
    cache = Cache.of(ctx.project)
    objects = []
    for w in man.workloads:
        present = layout.record_files(w.name)
        record_files = [layout.record(w.name), layout.python_record(w.name)]
        lowered = Step(f"lower:{model}/{w.name}", "lowered", cache, layout.lowered(w.name),
                       functools.partial(fingerprint.lower_inputs, ctx.config_for("lower"),
                                         layout.workload(w.name), record_files, w.name))
        yield _subtask(
            "lower", f"{model}/{w.name}",
            doc=f"apply {present[0] if present else 'the default schedule'} to {w.name}",
            actions=[(step, [lowered.build, lower.run, layout.workload(w.name), record_files,
                             layout.lowered(w.name), ctx.target, w.name])],
            targets=[str(layout.lowered(w.name))],
            uptodate=[Uptodate(lowered)],
            clean=[_clean_with_stamp],
        )
        artifact = layout.object(w.name, ctx.target.artifact_suffix)
        compiled = Step(f"codegen:{model}/{w.name}", "object", cache, artifact,
                        functools.partial(fingerprint.codegen_inputs, ctx.config_for("codegen"),
                                          layout.lowered(w.name), w.name))
        yield _subtask(
            "codegen", f"{model}/{w.name}",
            doc=f"compile {w.name} for {ctx.target.name}",
            actions=[(step, [compiled.build, codegen.run, layout.lowered(w.name),
                             artifact, ctx.target, w.name])],
            task_dep=[f"lower:{model}/{w.name}"],
            targets=[str(artifact)],
            uptodate=[Uptodate(compiled)],
            clean=[_clean_with_stamp],
        )
        objects.append(artifact)
    graph = [layout.graph_dir / name for name in man.graph_objects]
    link_config = link_config_of(ctx)
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


def link_config_of(ctx: Context) -> dict:
    return {**ctx.config_for("link"), "cc": _compiler_or_none()}


def _compiler_or_none() -> str:
    from .toolchain import compiler

    try:
        return compiler()
    except BuildError:
        return "none"


def link_placeholder(ctx: Context, model: str) -> Task:
    """Stands for link:<model> until partition:<model> ran; then creates the model's tasks."""
    loader = DelayedLoader(functools.partial(unit_tasks, ctx, model), executed=f"partition:{model}")
    task = Task(f"link:{model}", None, loader=loader, doc=f"link {model} (after partition)")
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
                         "uptodate": [ctx.project.model(model).manifest.is_file()]})
    task.subtask_of = "_warm"
    return task


def group(basename: str, task_dep=()) -> dict:
    return {"basename": basename, "name": None, "doc": DOCS[basename], "task_dep": list(task_dep)}


# ---------------------------------------------------------------------------
# Task creators, imported by dodo.py. doit calls them in the order of their
# line numbers here, which task__mode relies on.

_STATE = {"listing": False}
_BASENAMES = ("partition", "lower", "codegen", "link", "build")


@create_after()
def task__mode():
    """(internal) Runs at load time only for commands that do not execute tasks."""
    # doit defers a delayed creator when it will run tasks, and calls it right
    # away for list/clean/forget/...: so being called here means "listing".
    _STATE["listing"] = True
    yield from ()


@functools.lru_cache(maxsize=None)
def context(root: Path | None = None, target: str | None = None) -> Context:
    from doit import get_var

    from . import models, targets

    project = Project(root or Path("."))  # relative: a moved project keeps its state
    try:
        found = models.discover(project.models_dir)
        spec = targets.resolve(target or get_var("target", None))
    except BuildError as err:
        raise invalid(str(err)) from None
    return Context(project, found, spec)


def invalid(message: str):
    """A load-time error for doit to print (it prefixes "ERROR: " itself)."""
    from doit.exceptions import InvalidDodoFile

    return InvalidDodoFile(message.removeprefix("error: "))


def check_requested(argv: list[str], ctx: Context, basenames=_BASENAMES) -> None:
    """Name an unknown model clearly, instead of doit's generic 'invalid parameter'."""
    for arg in argv:
        base, sep, rest = arg.partition(":")
        if not sep or base not in basenames or arg.startswith("-"):
            continue
        model = rest.split("/", 1)[0]
        if model not in ctx.models:
            known = ", ".join(ctx.models) or "(none)"
            raise invalid(
                f"unknown model '{model}' in '{arg}'. Known models: {known}.\n"
                f"  hint: declare it in models/{model}.toml, or drop models/{model}.onnx "
                "into the project")


def task_partition():
    """Import a model, fuse it into workloads (one TIR file each), build its graph."""
    ctx = context()
    import sys

    check_requested(sys.argv[1:], ctx)
    yield group("partition", [f"partition:{m}" for m in ctx.models])
    for spec in ctx.models.values():
        yield partition_task(ctx, spec)


def task_link():
    """Link a model's objects and graph into build/<model>/<model>.so."""
    ctx = context()
    units: dict[str, list[Task]] = {}
    if _STATE["listing"]:
        for m in ctx.models:
            if manifest_mod.read(ctx.project.model(m).manifest) is not None:
                units[m] = list(unit_tasks(ctx, m))
    yield group("lower", [t.name for ts in units.values() for t in ts if t.subtask_of == "lower"])
    yield group("codegen", [t.name for ts in units.values() for t in ts if t.subtask_of == "codegen"])
    yield group("link", [f"link:{m}" for m in ctx.models])
    for m in ctx.models:
        if m in units:
            yield from units[m]
        else:
            yield link_placeholder(ctx, m)


def task_build():
    """Build a model's library: doit build:<model> [target=llvm]."""
    ctx = context()
    yield group("build", [f"build:{m}" for m in ctx.models])
    for m in ctx.models:
        yield build_task(ctx, m)
        yield warm_task(ctx, m)
