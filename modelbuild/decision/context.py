"""What every task of one doit invocation shares: the project, its models, the target, the
cache, the executor, and the settings each kind of step is keyed by."""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from pathlib import Path

from ..cache.store import Cache
from ..cluster import executor as executor_mod
from ..cluster.executor import Executor
from ..core import models, settings
from ..core.errors import BuildError
from ..core.paths import Project
from ..core.models import ModelSpec
from ..core.passes import PASSES, default_layout
from ..steps import code, environment
from ..targets import registry
from ..targets.registry import TargetSpec

# Bump when an artifact's format or how it is made changes: every task reruns.
ARTIFACT_VERSION = 1


@dataclass(frozen=True)
class Context:
    """What every task of one doit invocation shares."""

    project: Project
    models: dict[str, ModelSpec]
    target: TargetSpec
    cache: Cache  # the artifact cache every step uses (one remote connection per process)
    executor: Executor | None = None  # where lower and codegen run (None: in this process)
    refused: dict = field(default_factory=dict)  # models/ declarations refused: name -> error
    run_models: tuple = ()  # the models the command line asks for (their locks go together)
    query: bool = False  # `doit list --status`, `doit info`: look, lock nothing, restore nothing

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


def load_context(root: Path, target: str | None, mcpu: str | None = None,
                 layout: str | None = None) -> Context:
    """The project at ``root`` (its models, its registered targets) and the target chosen;
    ``layout``: every model's layout for this build (``doit build:M layout=NCHWc``), else
    each model's declared one, else the target's default."""
    config = settings.resolve(root)
    registry.load_project_targets(root, config.get("targets"))
    # Paths stay relative to the project root, where doit runs: a moved project keeps its
    # state (doit's keys are the paths as given).
    project = Project(Path("."))
    found, refused = models.discover_all(project.models_dir)
    chosen = registry.resolve(target, mcpu=mcpu)
    return Context(project, _with_layouts(found, layout, chosen), chosen,
                   Cache.of(project, config), executor_mod.configured(project, config), refused)


def _with_layouts(found: dict, override: str | None, target: TargetSpec) -> dict:
    """Each model with the layout it is built in (part of partition's key)."""
    if override is not None:
        models.check_layout(override, where="layout (the doit variable)")
    out = {}
    for name, spec in found.items():
        layout = (override or spec.layout
                  or default_layout(target.kind, target.vector_floats is not None))
        if layout != "NCHW" and target.vector_floats is None:
            raise BuildError(f"model '{name}': layout {layout} needs a CPU target; target "
                             f"{target.name} takes NCHW only", file=spec.declaration,
                             hint="build it with layout=NCHW, or for target=llvm")
        out[name] = dataclasses.replace(spec, layout=layout)
    return out


def _compiler_or_none() -> str:
    """The linking compiler's identity (path and version), "none" when there is none (link
    then fails with the reason)."""
    from ..targets.toolchain import identity

    try:
        return identity()
    except BuildError:
        return "none"
