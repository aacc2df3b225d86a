"""A model's current workloads, for commands that work on records (import, check, ...).

They come from partition's output; the model is partitioned first (through
doit, so the build's state stays consistent) when it is not up to date.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from . import manifest as manifest_mod
from . import models
from .errors import BuildError
from .layout import ModelLayout, Project


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
