"""The project and model a command works on, and the model's current workloads.

Workloads come from partition's output; the model is partitioned first (through
doit, so the build's state stays consistent) when it is not up to date.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ..core import manifest as manifest_mod
from ..core import models
from ..core.errors import BuildError
from ..core.layout import ModelLayout, Project
from ..targets import registry
from ..targets.registry import TargetSpec


def model_layout(project: Project, model: str) -> ModelLayout:
    found = models.discover(project.models_dir)
    if model not in found:
        known = ", ".join(found) or "(none)"
        raise BuildError(f"unknown model '{model}'. Known models: {known}.",
                         hint=f"declare it in models/{model}.toml, or drop models/{model}.onnx")
    return project.model(model)


def ensure_partitioned(project: Project, model: str, target: str = "llvm") -> manifest_mod.Manifest:
    layout = model_layout(project, model)
    proc = subprocess.run([sys.executable, "-m", "doit", f"partition:{model}", f"target={target}"],
                          cwd=project.root, capture_output=True, text=True)
    if proc.returncode != 0:
        raise BuildError(f"partition of '{model}' failed:\n{proc.stdout}{proc.stderr}")
    man = manifest_mod.read(layout.manifest)
    if man is None:
        raise BuildError(f"no manifest at {layout.manifest} after partition:{model}")
    return man


def load_workloads(project: Project, model: str, target: str = "llvm") -> dict:
    """name -> PrimFunc of every workload of the model, partitioning it first if needed."""
    import tvm

    man = ensure_partitioned(project, model, target)
    layout = project.model(model)
    return {w.name: tvm.ir.load_json(layout.workload(w.name).read_text()) for w in man.workloads}


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

    root = Path(args.project).resolve() if args.project else find_root()
    registry.load_project_targets(root, settings.read(root).get("targets"))
    return Project(root)


def workloads_of(args) -> tuple[Project, TargetSpec, dict]:
    """(project, target spec, name -> PrimFunc) for the command's model, partitioned."""
    project = project_of(args)
    spec = registry.resolve(args.target)
    return project, spec, load_workloads(project, args.model, spec.name)


def require(model: str, funcs: dict, names) -> None:
    """A clear error for workload names the model does not have."""
    missing = sorted(set(names) - set(funcs))
    if missing:
        raise BuildError(f"model '{model}' has no workload '{', '.join(missing)}'",
                         hint=f"`python -m modelbuild inspect {model}` lists them")
