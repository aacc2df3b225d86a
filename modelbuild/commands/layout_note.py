"""Why a database's workloads are not a model's when the layout is why: import's note for
a model built channel-blocked (NCHWc) and a database of its NCHW workloads, as TVM's
standard flow (``relax.get_pipeline("zero")``, ``extract_tasks``) tunes them."""

from __future__ import annotations

from pathlib import Path

from ..core import interrupts, models
from ..core.passes import default_layout
from ..targets.registry import TargetSpec


def nchw_note(project_models: Path, model: str, target_spec: TargetSpec, work_dir: Path,
              funcs: dict, unmatched: int) -> str | None:
    """The note, when the model builds blocked and the database at ``work_dir`` has some
    of its NCHW workloads (other than those the same in both layouts: ``funcs``, the
    model's workloads, had them matched); else None. Made only for an import with
    ``unmatched`` workloads: it partitions the model in NCHW (in memory). Best effort:
    never fails the import."""
    from ..steps import partition

    spec = models.discover(project_models)[model]
    if partition.channel_block(spec, target_spec) is None:
        return None
    try:
        names = _known_in_nchw(spec, target_spec, work_dir, funcs)
    except Exception:  # noqa: BLE001 - a note only; the import's report stands without it
        interrupts.check()
        return None
    if not names:
        return None
    layout = spec.layout or default_layout(target_spec.kind)
    return (f"note: {model} builds {layout}; {len(names)} of the {unmatched} unmatched "
            f"workloads are {model}'s in NCHW (as TVM's standard flow tunes them): to use "
            f"this database, {_declare_nchw(spec)}, then import again")


def _declare_nchw(spec) -> str:
    """How to declare the model NCHW, in words, for its declaration as it is."""
    toml = spec.onnx_path.with_suffix(".toml") if spec.declaration == spec.onnx_path \
        else spec.declaration
    where = f"{toml.parent.name}/{toml.name}"
    if spec.declaration == spec.onnx_path:
        return f'write {where}: onnx = "{spec.onnx_path.name}" and layout = "NCHW"'
    if spec.layout:
        return f'set layout = "NCHW" in {where}'
    return f'add layout = "NCHW" to {where}'


def _known_in_nchw(spec, target_spec: TargetSpec, work_dir: Path, funcs: dict) -> list[str]:
    """The model's NCHW workloads the database has, but those in ``funcs`` too."""
    import tvm

    from ..core.workloads import structural_hash
    from ..schedules import msdb
    from ..steps import onnx_import, partition

    target = tvm.target.Target(target_spec.tvm_target)
    fused = partition.fuse(onnx_import.import_model(spec), target, None)
    either = {structural_hash(f) for f in funcs.values()}
    nchw = {n: f for n, f in partition.workloads_of(fused).items()
            if structural_hash(f) not in either}
    return msdb.known(work_dir, nchw)
