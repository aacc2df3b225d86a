"""The project and model a command works on, and the model's current workloads.

``resolve_model(args)`` is the one way a command gets them: a ``Workspace`` (project,
model, layout, target choice); its ``partitioned()`` gives the manifest and, through
``functions()``, the workloads. Workloads come from partition's output; the model is
partitioned first (through doit, so the build's state stays consistent) when it is not
up to date.
"""

from __future__ import annotations

import atexit
import functools
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..core import manifest as manifest_mod
from ..core import onnx_files
from ..core import models
from ..core.errors import BuildError, no_workload, unknown_model
from ..core.paths import ModelPaths, Project
from ..core.workloads import load_json
from ..schedules.compute_record import computes
from ..targets import registry
from ..targets.registry import TargetSpec
from .output import errors


def model_layout(project: Project, model: str) -> ModelPaths:
    found, refused = models.discover_all(project.models_dir)
    if model in refused:
        raise refused[model]
    if model not in found:
        raise unknown_model(model, found)
    return project.model(model)


def choice_of(args) -> registry.Choice:
    """The target a command's arguments choose (--target, --mcpu)."""
    return registry.Choice(getattr(args, "target", None) or registry.DEFAULT_TARGET,
                           getattr(args, "mcpu", None))


@dataclass(frozen=True)
class Partitioned:
    manifest: manifest_mod.Manifest
    layout: ModelPaths  # where its workload files are: build/<model>/, or a private folder

    def functions(self) -> dict:
        """name -> PrimFunc of every workload of the partition."""
        return {w.name: load_json(self.layout.workload(w.name).read_text())
                for w in self.manifest.workloads}

    def variant_functions(self) -> dict:
        """(workload, compute) -> PrimFunc of every other compute partition made
        (steps/compute_variants.py), e.g. ("fused_conv2d_add_relu", "winograd")."""
        out = {}
        for w in self.manifest.workloads:
            for compute in computes(self.layout, w.name)[1:]:
                out[w.name, compute] = load_json(
                    self.layout.workload(w.name, compute).read_text())
        return out


@dataclass(frozen=True)
class Workspace:
    """What a command about one model works on: the project, the model (known to exist),
    its layout under build/, and the target chosen."""

    project: Project
    model: str
    layout: ModelPaths
    choice: registry.Choice

    @property
    def spec(self) -> TargetSpec:
        return self.choice.resolve()

    def partitioned(self) -> Partitioned:
        """The model's partition (see ``partitioned``), made once per workspace: a command
        asking twice (import: the workloads, then the other computes) partitions once."""
        return self._partition

    @functools.cached_property
    def _partition(self) -> Partitioned:
        return partitioned(self.project, self.model, self.choice)

    def require(self, funcs: dict, names) -> None:
        """A clear error for workload names the model does not have."""
        missing = sorted(set(names) - set(funcs))
        if missing:
            raise no_workload(self.model, missing)


def resolve_model(args) -> Workspace:
    """The workspace of a command's ``--project``, ``model``, ``--target`` and ``--mcpu``."""
    project = project_of(args)
    return Workspace(project, args.model, model_layout(project, args.model), choice_of(args))


def partitioned(project: Project, model: str,
                choice: registry.Choice = registry.Choice()) -> Partitioned:
    """The model's workloads as a build for ``target`` would make them, leaving the build's
    state as it is: the build's own partition when it is current for that target; when
    the model was never partitioned, a `doit partition:<model>` (what the first build
    does anyway); otherwise (partitioned for another target, or the model changed since)
    a private partition in a temporary folder, gone when the command ends."""
    from ..cache.store import Cache
    from ..graph.tasks import Context, partition_current

    layout = model_layout(project, model)
    ctx = Context(project, models.discover_all(project.models_dir)[0], choice.resolve(),
                  Cache.of(project))
    man = manifest_mod.read(layout.manifest)
    if man is not None and partition_current(ctx, ctx.models[model]):
        return Partitioned(man, layout)
    if man is None and not layout.partition_dir.exists():
        proc = subprocess.run([sys.executable, "-m", "doit", f"partition:{model}",
                               *choice.doit_vars()], cwd=project.root, capture_output=True,
                              text=True)
        if proc.returncode != 0:
            raise BuildError(f"partition of '{model}' failed:\n{proc.stdout}{proc.stderr}")
        man = manifest_mod.read(layout.manifest)
        if man is None:
            raise BuildError(f"no manifest at {layout.manifest} after partition:{model}")
        return Partitioned(man, layout)
    return _private_partition(project, ctx, model)


def _private_partition(project: Project, ctx, model: str) -> Partitioned:
    from ..steps import partition

    errors.print(f"note: the build's partition of {model} is not current for target "
                 f"{ctx.target.name} (the model, its declaration, the target or modelbuild's "
                 f"code changed since it was made; `python -m modelbuild why {model}` says "
                 "which); partitioning it privately (build/ is left as it is)")
    folder = Path(tempfile.mkdtemp(prefix=f"modelbuild-{model}-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    private = ModelPaths(Project(folder), model)
    spec = ctx.models[model]
    partition.run(onnx_files.read(spec.onnx_path), spec, private, ctx.target)
    return Partitioned(manifest_mod.read(private.manifest), private)


def find_root(start: Path | None = None) -> Path:
    """The project root: the nearest directory upwards holding dodo.py and models/."""
    here = (start or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if (candidate / "dodo.py").is_file() and (candidate / "models").is_dir():
            return candidate
    raise BuildError(f"not inside a modelbuild project (no dodo.py and models/ above {here})")


def project_of(args) -> Project:
    """The project of a command: ``--project DIR``, else found upwards from here. Targets
    the project registers (``[tool.modelbuild] targets``) are loaded with it."""
    from ..core import settings

    if args.project:
        root = Path(args.project).resolve()
        if not ((root / "dodo.py").is_file() and (root / "models").is_dir()):
            raise BuildError(f"--project {args.project}: not a modelbuild project "
                             "(no dodo.py and models/ there)")
    else:
        root = find_root()
    registry.load_project_targets(root, settings.resolve(root).get("targets"))
    return Project(root)
