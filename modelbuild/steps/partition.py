"""partition: model -> one TIR PrimFunc file per fused workload, the graph, a manifest.

The model is read and imported by onnx_import.py. The passes are those of
``relax.get_pipeline("zero")`` without a database (graph_passes.py). The graph (Relax
``main`` with its constants) does not depend on schedules, so its VM executable is built
here once, as object files (graph_objects.py), and link only links.
"""

from __future__ import annotations

import contextlib
from concurrent.futures import ThreadPoolExecutor

from ..core import atomic, collector, filecheck, manifest, onnx_files
from ..core.errors import BuildError, summarize
from ..core.paths import ModelPaths
from ..core.models import ModelSpec
from ..core.passes import PASSES, default_layout
from ..targets.registry import TargetSpec
from . import compute_variants
from .graph_objects import build_graph
from .onnx_import import import_model_traced
from .tvm_limits import tvm_limits


def fuse(mod, target, block: int | None = None):
    """Run partition's passes: the fused module whose PrimFuncs are the workloads;
    ``block``: the channel block of the blocked layout (None: NCHW)."""
    return fuse_stages(mod, target, block)[PASSES[-1]]


def fuse_stages(mod, target, block: int | None = None) -> dict:
    """Partition's passes (core/passes.py) one by one: the module after each, by pass name
    ("import" for ``mod`` itself)."""
    from .graph_passes import pipeline

    stages = {"import": mod}
    with target:
        for name, apply in pipeline(block):
            try:
                mod = apply(mod)
            except Exception as err:  # noqa: BLE001 - raised again unless the layout is why
                if name not in _AFTER_CONVERSION or block is None:
                    raise
                mod = _unconverted(stages, block, err)
                if name != "ConvertLayout":
                    mod = apply(mod)
            stages[name] = mod
    return stages


_AFTER_CONVERSION = ("ConvertLayout", "LegalizeOps")  # may fail on what ConvertLayout made


def _unconverted(stages: dict, block: int, err: Exception):
    """The graph as ConvertLayout leaves it when it cannot carry it (blocked_layout.convert),
    for a graph ConvertLayout converted into one TVM cannot fold or legalize (a reduction
    over the channel axis keeping it: the layout_transform back is not a bijection).
    Replaces the ConvertLayout stage, says so on stderr."""
    from .blocked_layout import say_unblocked
    from .constant_folding import fold_constants

    say_unblocked(f"TVM cannot legalize this graph in NCHW{block}c", err)
    before = stages[PASSES[PASSES.index("ConvertLayout") - 1]]
    stages["ConvertLayout"] = fold_constants()(before)
    return stages["ConvertLayout"]


def channel_block(spec: ModelSpec, target_spec: TargetSpec) -> int | None:
    """The channel block the model is built with (None: NCHW); a spec without a layout
    (not chosen by a build's context) gets the target's default."""
    can_block = target_spec.vector_floats is not None
    if (spec.layout or default_layout(target_spec.kind, can_block)) == "NCHW":
        return None
    return target_spec.vector_floats(target_spec.tvm_target)


def workloads_of(fused) -> dict:
    import tvm

    funcs = {gv.name_hint: f for gv, f in fused.functions.items() if isinstance(f, tvm.tirx.PrimFunc)}
    return dict(sorted(funcs.items()))


def calls_of(fused) -> dict[str, int]:
    """How many times the graph (Relax ``main``) calls each workload per run."""
    from tvm import ir

    call_tir = ir.Op.get("relax.call_tir")
    counts: dict[str, int] = {}
    for block in fused["main"].body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, ir.Call) and value.op.same_as(call_tir):
                name = value.args[0].name_hint
                counts[name] = counts.get(name, 0) + 1
    return counts


def _inputs_of(fused):
    params = fused["main"].params
    return tuple((p.name, tuple(int(d) for d in p.ty.shape), str(p.ty.dtype))
                 for p in params)


def _provenance(operators, stages, workloads) -> tuple[tuple, tuple, str]:
    """(operators, the layout's workloads, "") or ((), (), why not): provenance is best
    effort and never fails a build."""
    from . import provenance

    if operators is None:
        return (), (), "the ONNX importer of this TVM version did not keep its tensor map"
    try:
        return (*provenance.trace(operators, stages, set(workloads)), "")
    except Exception as err:  # noqa: BLE001 - reported in the manifest, shown by explain
        return (), (), f"{type(err).__name__}: {err}"


@contextlib.contextmanager
def _declared_shapes(spec: ModelSpec):
    """With shapes declared in [inputs], TVM refusing them while it compiles the model (a
    0-long image a convolution cannot slide over, a tensor past int32's indices) is the
    declaration's error, not an internal one."""
    if not spec.inputs:
        yield
        return
    try:
        yield
    except BuildError:
        raise
    except Exception as err:  # noqa: BLE001 - reported against the declared shapes
        shapes = ", ".join(f"{k} = {v}" for k, v in spec.inputs.items())
        raise BuildError(f"TVM cannot build the model with the shapes in [inputs] ({shapes}): "
                         f"{summarize(err, limit=1)}", file=spec.declaration,
                         hint="give [inputs] the shapes the model takes") from None


@contextlib.contextmanager
def _beside(work):
    """Runs ``work()`` in a thread while the body runs, and waits for it on the way out,
    whatever the body did; yields its Future (``result()``: its value, or its error
    raised). TVM lets go of Python's lock in its C++ calls, so the graph's export (LLVM
    writing the weights, mostly) takes the second core while the variants' TIR is made:
    a clean resnet50 partition 0.15-0.2 s shorter, serial builds included."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="modelbuild-graph") as pool:
        yield pool.submit(work)


def run(source: onnx_files.ModelBytes, spec: ModelSpec, layout: ModelPaths,
        target_spec: TargetSpec) -> None:
    """Partition the model ``spec`` declares, from its bytes as read for the step's key."""
    tvm = collector.import_tvm()

    from ..core.workloads import structural_hash

    target = tvm.target.Target(target_spec.tvm_target)
    imported, operators, external = import_model_traced(spec, source)
    block = channel_block(spec, target_spec)
    with tvm_limits(spec, imported, target), _declared_shapes(spec):
        stages = fuse_stages(imported, target, block)
    fused = stages[PASSES[-1]]
    funcs = workloads_of(fused)

    def graph() -> list[str]:
        with tvm_limits(spec, imported, target), _declared_shapes(spec):
            return build_graph(fused, set(funcs), target, layout.graph_dir,
                               target_spec.pack_graph_imports)

    with _beside(graph) as objects:
        for name, func in funcs.items():
            atomic.write_text(layout.workload(name), tvm.ir.save_json(func))
        atomic.sweep(layout.workloads_dir.glob("*.json"), lambda p: p.stem in funcs)
        variant_files = compute_variants.write(layout, stages, PASSES, target, funcs, block)
        traced, layout_changes, error = _provenance(operators, stages, funcs)
        hashes = {n: structural_hash(f) for n, f in funcs.items()}
    objects = objects.result()
    calls = calls_of(fused)
    written = ([layout.workload(n) for n in funcs] + variant_files
               + [layout.graph_dir / o for o in objects])
    digests = {path: filecheck.hashed(path) for path in written}
    manifest.write(layout.manifest, manifest.Manifest(
        model=spec.name,
        workloads=tuple(manifest.Workload(n, hashes[n], calls.get(n, 0)) for n in funcs),
        graph_objects=tuple(objects),
        inputs=_inputs_of(fused),
        operators=traced,
        layout_changes=layout_changes,
        provenance_error=error,
        external_data=external,
        outputs=tuple((str(p.relative_to(layout.partition_dir)), p.stat().st_size, digests[p][0])
                      for p in written),
    ))
    # The check of the step's output (partition_output.py) reads what this hashed
    # from the memo, not the files again (the graph's weights are ~50 MB for resnet50).
    filecheck.write_checked(layout.partition_checked, {
        str(path): [sig, digest] for path, (digest, sig) in digests.items() if sig is not None})
