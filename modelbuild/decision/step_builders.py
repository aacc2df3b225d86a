"""The cached steps of a model (cached_step.Step): what each reads, where its output is,
which cache section keeps it; and its link (link_check.Link). The task creators (graph/tasks.py)
and `why` (plan.py) build the same steps, so both act on the same decision."""

from __future__ import annotations

import functools
import os
from pathlib import Path

from ..core import onnx_files
from ..core.digest import bytes_digest, file_digest
from ..core.paths import ModelPaths
from ..core.manifest import Manifest
from ..core.models import ModelSpec, check_exists
from ..steps import kinds
from ..steps.partition_output import PartitionOutput
from . import fingerprint, link_check, reasons
from .cache_entries import LoweredOutput, ObjectOutput
from .cached_step import Step
from .context import Context


def _stamped_external(paths: ModelPaths, onnx_digest: str) -> tuple[str, ...] | None:
    """The external data files of the model's ONNX bytes of sha256 ``onnx_digest``, as the
    last partition's stamp lists them when it was made from those bytes (no onnx parse on a
    no-op build); None otherwise."""
    stamp = fingerprint.read_stamp(paths.manifest)
    sources = ((stamp or {}).get("inputs") or {}).get("sources")
    if (isinstance(sources, dict) and isinstance(sources.get("onnx"), dict)
            and sources["onnx"].get("sha256") == onnx_digest
            and isinstance(sources.get("external", {}), dict)
            and all(isinstance(name, str) for name in sources.get("external", {}))):
        return tuple(sources.get("external", {}))
    return None


def layout_of(spec: ModelSpec, config: dict) -> str:
    """The layout the model is built in: chosen by the build (context.py), else declared,
    else the target's default."""
    import json

    from ..core.passes import default_layout

    if spec.layout:
        return spec.layout
    try:
        target = json.loads(config["target"])
        kind = target.get("kind") or target["tvm_target"]["kind"]
    except (KeyError, TypeError, ValueError, AttributeError):
        kind = "llvm"
    return default_layout(kind)


def partition_inputs_of(config: dict, spec: ModelSpec, paths: ModelPaths,
                        root: Path) -> fingerprint.Inputs:
    """What decides partition's output: the settings, the model's name, its declared input
    shapes as this doit run read them, and the content of every file it reads (the
    declaration, the ONNX file, its external data files). Files are named for ``why`` under
    "file", which the cache key leaves out: the same model in another checkout, or read from
    another virtual environment, finds the same entry.

    Given: the ONNX bytes read here (onnx_files.ModelBytes), which partition builds from:
    the key and the output come from the same bytes (issue 19). The declaration was parsed
    when doit loaded the tasks: what partition takes from it (the shapes; the layout) is
    keyed as parsed, so an edit since is this build's or the next, never filed under it."""
    def described(path: Path, digest: str) -> dict:
        return {"file": os.path.relpath(path, root), "sha256": digest}

    check_exists(spec)  # a regular file: a folder, a pipe or /dev/zero is said, not read
    source = onnx_files.read(spec.onnx_path, functools.partial(_stamped_external, paths))
    return fingerprint.Inputs(
        {"step": "partition", "model": spec.name, "layout": layout_of(spec, config),
         "config": config, "declared_inputs": spec.inputs,
         "sources": {"declaration": described(spec.declaration, file_digest(spec.declaration)),
                     "onnx": described(spec.onnx_path, bytes_digest(source.model)),
                     "external": {name: described(spec.onnx_path.parent / name,
                                                  bytes_digest(data))
                                  for name, data in source.external.items()}}},
        (source,))


def partition_step(ctx: Context, spec: ModelSpec) -> Step:
    paths = ctx.project.model(spec.name)
    return Step(f"partition:{spec.name}", kinds.PARTITION.cache, ctx.cache, paths.manifest,
                functools.partial(partition_inputs_of, ctx.config_for("partition"), spec, paths,
                                  ctx.project.root),
                PartitionOutput(paths), reasons.partition)


def partition_current(ctx: Context, spec: ModelSpec) -> bool:
    """Whether the model's partition in build/ is what a build for ``ctx.target`` would make
    of the model as it is now (its stamp, its inputs' digests, its outputs): read only."""
    cached = partition_step(ctx, spec)
    inputs = cached.current_inputs()
    return inputs is not None and cached.is_current(inputs)


def lower_step(ctx: Context, model: str, workload: str, recorded: dict | None = None) -> Step:
    """``recorded``: partition's outputs' digests by path, when known without the files (a
    prediction)."""
    paths = ctx.project.model(model)
    return Step(f"lower:{model}/{workload}", kinds.LOWER.cache, ctx.cache,
                paths.lowered(workload),
                functools.partial(fingerprint.lower_inputs, ctx.config_for("lower"), paths,
                                  workload, recorded),
                store=LoweredOutput(paths.lowered(workload)),
                why=functools.partial(reasons.lower, paths, workload))


def codegen_step(ctx: Context, model: str, workload: str,
                 lowered_digest: str | None = None, upstream: str | None = None) -> Step:
    """``lowered_digest``: the lowered TIR's digest when known without the file (a prediction);
    ``upstream``: how that TIR comes about, for the reasons (by default lower's task name)."""
    paths = ctx.project.model(model)
    upstream = upstream or f"lower:{model}/{workload}"
    output = paths.object(workload, ctx.target.artifact_suffix)
    return Step(f"codegen:{model}/{workload}", kinds.CODEGEN.cache, ctx.cache, output,
                functools.partial(fingerprint.codegen_inputs, ctx.config_for("codegen"),
                                  paths.lowered(workload), workload, lowered_digest),
                store=ObjectOutput(output, workload, ctx.target.artifact_suffix),
                why=functools.partial(reasons.codegen, upstream))


def link_step(ctx: Context, model: str, man: Manifest, will_be: dict | None = None,
              refresh: bool = False) -> link_check.Link:
    """The link of the workloads and graph files ``man`` lists (the manifest on disk, or the
    one partition will leave, where `why` knows it before the build). ``will_be``: the
    inputs as the steps before the link will leave them (a prediction: link_check.Link);
    ``refresh``: the build's check, which remembers what it verified."""
    paths = ctx.project.model(model)
    return link_check.Link(
        f"link:{model}", paths.library, ctx.link_config(),
        tuple(paths.object(w.name, ctx.target.artifact_suffix) for w in man.workloads),
        tuple(paths.graph_dir / name for name in man.graph_objects),
        paths.partition_checked, will_be, refresh, reasons.link)
