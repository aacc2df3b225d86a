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

This module holds the doit task dictionaries only: the kinds of step are steps/kinds.py,
what a doit run shares decision/context.py, the cached steps decision/step_builders.py, the
lower and codegen actions (here or on an executor) cluster/executor_steps.py.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import signal
from pathlib import Path

from doit.loader import create_after
from doit.task import DelayedLoader, Task, dict_to_task

from ..cache.events import run_events_file
from ..cluster.executor_steps import (codegen_on_worker, lower_here, lower_on_worker,
                                      partition_on_worker)
from ..core import atomic, collector
from ..core import manifest as manifest_mod
from ..core.errors import BuildError, no_workload, unknown_model
from ..core.models import ModelSpec
from ..decision import fingerprint, link_check
from ..decision.cached_step import Uptodate
from ..decision.context import Context, load_context
from ..decision.step_builders import (codegen_step, link_step, lower_step, partition_current,
                                      partition_step)
from ..schedules.active import located
from ..steps import codegen, link, partition
from ..steps.kinds import ALL, BENCH, BUILD, BY_NAME, CODEGEN, LINK
from . import bench_task, build_lock, ctrl_c, doit_state, doit_workers, model_errors
from .actions import invalid, step

# Context, load_context and partition_current are imported from here by commands.
__all__ = ["BuildGraph", "Context", "load_context", "partition_current", "unit_tasks"]

BASENAMES = tuple(kind.name for kind in ALL if kind is not BENCH)  # bench is checked apart


# -- the tasks of one model -------------------------------------------------------

def _subtask(basename: str, name: str, **fields) -> Task:
    task = dict_to_task({"name": f"{basename}:{name}", **fields})
    task.subtask_of = basename
    return task


def _remove_outputs(paths, owner: str = "") -> None:
    """doit clean: remove a step's outputs and their stamps (the cache keeps its copy).
    (Not named ``task``: doit passes its task to a parameter of that name, and refuses
    one with a default.)"""
    for target in paths:
        for path in (Path(target), fingerprint.stamp_path(Path(target))):
            if path.is_file():
                print(f"{owner} - removing file '{path}'")
                path.unlink()


def _remove_others(paths, workloads: set) -> None:
    """After a link: the lowered TIR and objects of workloads the model no longer has (an
    earlier layout's, CPU's or model's), with their stamps, and temporary files that a
    killed step left. The library never used them (link takes the manifest's); they only
    piled up. Their cache entries stay. Another process's temporary files stay too."""
    for folder in (paths.lowered("x").parent, paths.object("x").parent):
        if folder.is_dir():
            atomic.sweep(folder.iterdir(), lambda p: p.name.split(".", 1)[0] in workloads)


def _clean_with_stamp(task) -> None:
    _remove_outputs(task.targets, task.name)


def _held(ctx: Context, model: str) -> build_lock.Held:
    """What takes the run's build locks before a step of ``model`` is checked or cleaned."""
    return build_lock.Held(ctx.project, model, ctx.run_models)


def _locked(ctx: Context, model: str) -> list:
    """The uptodate check that takes the run's build locks first; none for a query (`doit
    info`, `doit list --status`), which neither waits nor writes."""
    return [] if ctx.query else [_held(ctx, model)]


def partition_task(ctx: Context, spec: ModelSpec) -> Task:
    paths = ctx.project.model(spec.name)
    previous = manifest_mod.read(paths.manifest)
    outputs = [paths.partition_dir / rel for rel, _, _ in previous.outputs] if previous else []
    cached = partition_step(ctx, spec)
    run = (partition.run if ctx.executor is None
           else functools.partial(partition_on_worker, ctx.executor))
    return _subtask(
        "partition", spec.name,
        doc=f"partition {spec.name}",
        actions=[(step, [cached.build, run, spec, paths, ctx.target])],
        targets=[str(paths.manifest), *map(str, outputs)],
        uptodate=[*_locked(ctx, spec.name), Uptodate(cached, restore=not ctx.query)],
        clean=[_held(ctx, spec.name), _clean_with_stamp,  # and the memo of its files' digests
               (_remove_outputs, [[str(paths.partition_checked)], f"partition:{spec.name}"])],
    )


def unit_tasks(ctx: Context, model: str, kinds=("lower", "codegen", "link"),
               man: manifest_mod.Manifest | None = None):
    """The lower, codegen and link tasks of one model, from its manifest (``man``: the one
    partition will leave, where `why` knows it before the build; else the one on disk)."""
    paths = ctx.project.model(model)
    man = man or manifest_mod.read(paths.manifest)
    if man is None:
        raise BuildError(f"no manifest for model '{model}' at {paths.manifest}",
                         hint=f"run `doit partition:{model}` first")
    for w in man.workloads:
        record = located(paths, w.name)
        lowered = lower_step(ctx, model, w.name)
        if "lower" in kinds:
            yield _subtask(
                "lower", f"{model}/{w.name}",
                doc=f"apply {record[0] if record else 'the default schedule'} to {w.name}",
                actions=[(step, [lowered.build, lower_here, paths, w.name, ctx.target])
                         if ctx.executor is None else
                         (step, [lowered.build, lower_on_worker, ctx.executor, paths, w.name,
                                 ctx.target])],
                targets=[str(paths.lowered(w.name))],
                uptodate=[*_locked(ctx, model), Uptodate(lowered, restore=not ctx.query)],
                clean=[_held(ctx, model), _clean_with_stamp],
            )
        compiled = codegen_step(ctx, model, w.name)
        if "codegen" in kinds:
            yield _subtask(
                "codegen", f"{model}/{w.name}",
                doc=f"compile {w.name} for {ctx.target.name}",
                actions=[(step, [compiled.build, codegen.compile_to, compiled.output, ctx.target,
                                 w.name])
                         if ctx.executor is None else
                         (step, [compiled.build, codegen_on_worker, ctx.executor, paths, w.name,
                                 compiled.output, ctx.target])],
                task_dep=[f"{CODEGEN.upstream}:{model}/{w.name}"],
                targets=[str(compiled.output)],
                uptodate=[*_locked(ctx, model), Uptodate(compiled, restore=not ctx.query)],
                clean=[_held(ctx, model), _clean_with_stamp],
            )
    if "link" in kinds:
        linking = link_step(ctx, model, man, refresh=True)
        yield _subtask(
            "link", model,
            doc=f"link {paths.library}",
            actions=[(step, [link_check.linked, link.run, list(linking.objects),
                             list(linking.graph), paths.library, ctx.target, linking.config,
                             paths.partition_checked]),
                     (_remove_others, [paths, {w.name for w in man.workloads}])],
            # after the steps that write its inputs; whether it runs is its own decision
            task_dep=[f"partition:{model}", *(f"{LINK.upstream}:{model}/{w.name}"
                                              for w in man.workloads)],
            targets=[str(paths.library)],
            uptodate=[*_locked(ctx, model), Uptodate(linking)],
            clean=[_held(ctx, model), _clean_with_stamp],
        )


def link_placeholder(ctx: Context, model: str) -> Task:
    """Stands for link:<model> until partition:<model> ran; then creates the model's tasks."""
    paths = ctx.project.model(model)
    loader = DelayedLoader(functools.partial(unit_tasks, ctx, model), executed=f"partition:{model}")
    task = Task(f"link:{model}", None, loader=loader, doc=f"link {model} (after partition)",
                clean=[_held(ctx, model),
                       (_remove_outputs, [[str(paths.library)], f"link:{model}"])])
    task.subtask_of = "link"
    return task


def build_task(ctx: Context, model: str) -> Task:
    return _subtask("build", model, doc=f"build {ctx.project.model(model).library}",
                    actions=None, task_dep=[f"{BUILD.upstream}:{model}", f"_warm:{model}"])


def _import_tvm() -> None:
    collector.import_tvm()


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
    return {"basename": basename, "name": None, "doc": BY_NAME[basename].doc, "task_dep": list(task_dep)}


VARIABLES = ("target", "mcpu", "layout", "runs", "warmup")  # what `doit ... name=value` sets


def check_variables(requested: list[str]) -> None:
    """A `name=value` argument doit takes as a variable must be one the tasks read: doit
    ignores any other, and `doit build:m layuot=NCHW` built the default layout, exit 0."""
    import difflib

    for arg in requested:
        name, sep, value = arg.partition("=")
        if not sep or arg.startswith("-"):
            continue  # a task name, or one of doit's options
        if name in VARIABLES and not value.strip():
            raise invalid(f"'{arg}' gives {name} no value (leave it out for the default)")
        if name not in VARIABLES:
            close = difflib.get_close_matches(name, VARIABLES, n=1)
            raise invalid(f"unknown variable '{name}' in '{arg}'; doit build and bench take "
                          f"{', '.join(f'{v}=' for v in VARIABLES)}"
                          + (f" (did you mean {close[0]}=?)" if close else ""))


def run_models(requested: list[str], models) -> tuple[str, ...]:
    """The models of the tasks a doit command line asks for, as the reporter counts them
    (every model for a kind's name alone, or for no task named: doit's default, build):
    a run takes their build locks together (build_lock.Held)."""
    named, everything, tasks = set(), False, False
    for arg in requested:
        base, sep, rest = arg.partition(":")
        if arg.startswith("-") or "=" in arg or base not in (*BASENAMES, BENCH.name):
            continue  # doit's options and their values, variables, commands
        tasks = True
        if sep:
            named.add(rest.split("/", 1)[0])
        else:
            everything = True
    return tuple(sorted(models if everything or not tasks else named & set(models)))


def check_requested(requested: list[str], ctx: Context, basenames=BASENAMES) -> None:
    """Name an unknown model or workload clearly, instead of doit's generic 'invalid parameter'
    (or, for a workload's task, silently running nothing)."""
    if (err := model_errors.check(requested, ctx.refused, basenames)) is not None:
        raise invalid(str(err))
    for arg in requested:
        base, sep, rest = arg.partition(":")
        if not sep or base not in basenames or arg.startswith("-"):
            continue
        model, _, workload = rest.partition("/")
        if model not in ctx.models:
            raise invalid(str(unknown_model(model, ctx.models, where=f" in '{arg}'")))
        if base in ("lower", "codegen"):
            man = manifest_mod.read(ctx.project.model(model).manifest)
            if man is None:
                raise invalid(f"'{arg}': model '{model}' is not partitioned yet, so its workloads "
                              f"are not known.\n  hint: doit build:{model} (or partition:{model})")
            if not workload or man.workload(workload) is None:
                err = no_workload(model, workload, hint=f"`doit list --all` or "
                                  f"`python -m modelbuild inspect {model}` lists them")
                raise invalid(f"'{arg}': {str(err).removeprefix('error: ')}")


def _warn_killed_sweeps(ctx: Context) -> None:
    """A sweep killed outright left its variants as the active records (and its journal of
    the user's own): a build of the model uses them, so it says so, once per model."""
    import sys

    for model in ctx.run_models:
        paths = ctx.project.model(model)
        if paths.sweep_journal.exists() and \
                not build_lock.held(build_lock.sweep_lock_file(ctx.project, model)):
            print(f"warning: a sweep of {model} was killed before it put back the active "
                  f"records it found ({paths.sweep_journal}): the active records may be its "
                  f"variants; `python -m modelbuild select` (or sweep) of {model} puts back "
                  "the ones it left (a record you wrote since stays)", file=sys.stderr)


# -- the task creators dodo.py exposes ----------------------------------------------

_PRINTING_COMMANDS = ("list", "info", "help", "dumpdb", "tabcompletion")


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
        ctrl_c.quiet_exit()  # from here on, a Ctrl-C is one line, not doit's traceback
        doit_workers.watch_workers()  # doit -n N: a worker that dies stops the build
        doit_state.save_quietly()  # doit's state unsaved (a full disk): a warning
        if self.requested[:1] and self.requested[0] in _PRINTING_COMMANDS:
            # `doit list | head`: end as Unix tools do when the reader goes, not with doit's
            # BrokenPipeError traceback (these commands write nothing else, talk to no one)
            signal.signal(signal.SIGPIPE, signal.SIG_DFL)

    @functools.cached_property
    def context(self) -> Context:
        check_variables(self.requested)  # before the variables are read
        try:
            ctx = load_context(self.root, self.var("target", None), self.var("mcpu", None),
                               self.var("layout", None))
        except BuildError as err:
            raise invalid(str(err)) from None
        query = self.requested[:1] in (["list"], ["info"])
        # the steps log their hits and misses to this doit run's own file (workers too)
        events = None if query else run_events_file(ctx.project, os.getpid())
        return dataclasses.replace(ctx, run_models=run_models(self.requested, ctx.models),
                                   query=query, cache=dataclasses.replace(ctx.cache, events=events))

    def creators(self) -> dict:
        """The ``task_*`` functions doit loads, by name."""
        return {"task_partition": self.task_partition, "task_lower": self.task_lower,
                "task_codegen": self.task_codegen, "task_link": self.task_link,
                "task_build": self.task_build, "task_bench": self.task_bench}

    def task_partition(self):
        """Import a model, fuse it into workloads (one TIR file each), build its graph."""
        ctx = self.context
        check_requested(self.requested, ctx)
        model_errors.warn(self.requested, ctx.refused)
        if not ctx.query:
            _warn_killed_sweeps(ctx)
        yield group("partition", [f"partition:{m}" for m in ctx.models])
        for spec in ctx.models.values():
            yield partition_task(ctx, spec)

    def _partitioned_units(self, kind: str, upstream: str | None = None):
        """The ``kind`` tasks of every model that has a manifest (for commands that name
        them, and `doit list`). doit knows a task only once its creator ran, and runs a
        creator only for a name asked for: so here a task depends on the whole group of
        its ``upstream`` kind (which runs that creator), not on one task of it
        (`doit codegen:M/W` runs the lower steps, most of them up to date)."""
        ctx = self.context
        units = [t for m in ctx.models if manifest_mod.read(ctx.project.model(m).manifest)
                 for t in unit_tasks(ctx, m, kinds=(kind,))]
        for task in units if upstream else ():
            task.task_dep = [upstream]
        yield group(kind, [t.name for t in units])
        yield from units

    @create_after()
    def task_lower(self):
        """Apply a workload's schedule record (schedules/<model>/<workload>.json or .py) to its TIR."""
        yield from self._partitioned_units("lower")

    @create_after()
    def task_codegen(self):
        """Compile one scheduled workload to an object file."""
        yield from self._partitioned_units("codegen", upstream=CODEGEN.upstream)

    def task_link(self):
        """Link a model's objects and graph into build/<model>/<model>.so."""
        ctx = self.context
        yield group("link", [f"link:{m}" for m in ctx.models])
        cleaning = self.requested[:1] == ["clean"]  # the real task: clean follows its inputs
        for m in ctx.models:
            if cleaning and manifest_mod.read(ctx.project.model(m).manifest) is not None:
                yield from unit_tasks(ctx, m, kinds=("link",))
            else:
                yield link_placeholder(ctx, m)

    def task_build(self):
        """Build a model's library: doit build:<model> [target=llvm] [mcpu=<cpu>] [layout=NCHWc]."""
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
