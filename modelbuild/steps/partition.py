"""partition: model -> one TIR PrimFunc file per fused workload, the graph, a manifest.

The passes are those of ``relax.get_pipeline("zero")`` without a database.
The graph (Relax ``main`` with its constants) does not depend on schedules, so
its VM executable is built here once, as object files, and link only links.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ..core import atomic, collector, filecheck, free_space, manifest, onnx_files
from ..core.errors import BuildError, summarize
from ..core.layout import ModelLayout
from ..core.models import ModelSpec, check_exists
from ..core.passes import PASSES, default_layout
from ..targets import toolchain
from ..targets.registry import TargetSpec
from . import compute_variants
from .input_names import identifier_input_names
from .resize_scales import refuse_inexact_scales
from .tvm_limits import tvm_limits

def import_model(spec: ModelSpec, source: onnx_files.ModelBytes | None = None):
    """The model as a Relax IRModule (weights bound as constants). ``source``: the model's
    bytes as already read (None: read them now)."""
    return _import(spec, traced=False, source=source)[0]


def import_model_traced(spec: ModelSpec, source: onnx_files.ModelBytes | None = None):
    """The model as a Relax IRModule, its operators with the Relax expressions of their
    outputs (for provenance; None if the importer did not keep them), and the external
    data files it read."""
    return _import(spec, traced=True, source=source)


def load_onnx(spec: ModelSpec, source: onnx_files.ModelBytes | None = None):
    """(the ONNX model with its tensors, the external data files it reads, relative to its
    folder): a model saved with external data keeps its weights in other files. Built from
    ``source``, the bytes already read (None: the files are read now, once each)."""
    try:
        if source is None:  # (given bytes were read where the file is: a worker may not see it)
            check_exists(spec)
            source = onnx_files.read(spec.onnx_path)
        model, external = onnx_files.load(source)
    except BuildError:
        raise
    except Exception as err:
        raise BuildError(f"cannot read ONNX model: {summarize(err)}", file=spec.onnx_path,
                         hint="check that it is an ONNX model file, with its external data "
                              "files beside it") from None
    if not model.graph.output:
        # protobuf reads an empty file, and some other bytes, as a model with nothing set
        empty = not model.ir_version and not model.graph.node
        what = ("not an ONNX model: no IR version, no graph" if empty
                else "the model's graph has no outputs: there is nothing to compute")
        if not source.model:
            what += " (the file is empty)"
        raise BuildError(what, file=spec.onnx_path,
                         hint="check that it is an ONNX model file (onnx.save writes one)")
    return model, tuple(external)


def _check_inputs(model, spec: ModelSpec) -> None:
    """Declared shapes name real inputs; every input gets a static shape."""
    initializers = {i.name for i in model.graph.initializer}
    inputs = [v for v in model.graph.input if v.name not in initializers]
    names = [v.name for v in inputs]
    unknown = sorted(set(spec.inputs) - set(names))
    if unknown:
        raise BuildError(f"[inputs] names {', '.join(unknown)}, which the model does not have; "
                         f"its inputs: {', '.join(names)}", file=spec.declaration)
    for value in inputs:
        if value.name in spec.inputs:
            _check_rank(value, spec)
            continue
        # a dim_value of 0 is a static, empty dimension (TVM builds it); only a dim_param
        # or an unset dimension is symbolic
        dims = [d.dim_value if d.HasField("dim_value") else None
                for d in value.type.tensor_type.shape.dim]
        if None in dims:
            seen = ", ".join(str(d) if d is not None else (dim.dim_param or "?")
                             for d, dim in zip(dims, value.type.tensor_type.shape.dim))
            example = ", ".join(str(1 if d is None else d) for d in dims)
            declare = (f'onnx = "{spec.onnx_path.name}"\n    ' if spec.declaration == spec.onnx_path
                       else "")
            raise BuildError(
                f"model input '{value.name}' has no static shape ([{seen}]): modelbuild builds "
                "for one shape", file=spec.declaration,
                hint=f"declare it in models/{spec.name}.toml, e.g.\n    {declare}[inputs]\n"
                     f"    {value.name} = [{example}]")



def _check_rank(value, spec: ModelSpec) -> None:
    """A declared shape has the ONNX input's rank, where the ONNX file gives one (the
    sizes may differ: [inputs] may build a model for another size than its file's)."""
    tensor = value.type.tensor_type
    if not value.type.HasField("tensor_type") or not tensor.HasField("shape"):
        return
    dims = [str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?")
            for d in tensor.shape.dim]
    declared = spec.inputs[value.name]
    if len(declared) != len(dims):
        raise BuildError(
            f"[inputs] {value.name} = {list(declared)} has {len(declared)} dimension"
            f"{'s' if len(declared) != 1 else ''}; the model's input '{value.name}' has "
            f"{len(dims)} ([{', '.join(dims)}])", file=spec.declaration,
            hint=f"give {value.name} {len(dims)} sizes in [inputs]")

def _empty_dimension_shapes(model, spec: ModelSpec) -> dict:
    """The ONNX shapes of undeclared inputs with an empty (0) dimension: TVM's importer
    takes a 0 for a symbolic dimension unless the shape is given to it."""
    initializers = {i.name for i in model.graph.initializer}
    out = {}
    for value in model.graph.input:
        dims = [d.dim_value for d in value.type.tensor_type.shape.dim]
        if value.name not in initializers and value.name not in spec.inputs and 0 in dims:
            out[value.name] = dims
    return out


def _import(spec: ModelSpec, traced: bool, source: onnx_files.ModelBytes | None = None):
    from tvm.relax.frontend.onnx import from_onnx

    model, external = load_onnx(spec, source)
    _check_inputs(model, spec)
    refuse_inexact_scales(model, {**_empty_dimension_shapes(model, spec), **spec.inputs},
                          spec.onnx_path)
    try:
        shapes = identifier_input_names(
            model, {**_empty_dimension_shapes(model, spec), **spec.inputs})
        with _importer_tensors() if traced else contextlib.nullcontext({}) as tensors:
            mod = from_onnx(model, shape_dict=shapes or None, keep_params_in_input=False)
    except Exception as err:
        raise BuildError(f"TVM cannot import this ONNX model: {summarize(err)}",
                         file=spec.onnx_path, hint=_import_hint(err, spec)) from None
    if not traced or not tensors:
        return mod, None, external
    from . import provenance

    return mod, provenance.onnx_operators(model.graph, tensors), external


def _import_hint(err: Exception, spec: ModelSpec) -> str:
    """What to do about an import failure, from its cause."""
    text = f"{type(err).__name__} {err}".lower()
    if isinstance(err, NotImplementedError) or "opnotimplemented" in text or \
            "not supported" in text or "not implemented" in text:
        return ("this TVM version's ONNX importer does not support an operator (or an "
                "attribute) of the model: export it with other operators or another opset "
                "(onnx.version_converter)")
    if spec.inputs and any(word in text for word in ("shape", "dimension", "rank", "broadcast")):
        return (f"check the shapes declared in {spec.declaration} [inputs] against what the "
                "model expects; if they are right (onnxruntime runs the model with them), this "
                "is a TVM importer limitation: rerun with MODELBUILD_TRACEBACK=1 for the "
                "traceback")
    return ("check the model with onnx.checker.check_model and onnxruntime; if both accept it, "
            "this is a TVM importer limitation: rerun with MODELBUILD_TRACEBACK=1 for the "
            "traceback")


@contextlib.contextmanager
def _importer_tensors():
    """Keeps the ONNX importer's map of tensor name -> Relax expression, which from_onnx
    drops when it returns. The import itself runs unchanged."""
    from tvm.relax.frontend.onnx import onnx_frontend

    importer = onnx_frontend.ONNXGraphImporter
    original = importer.from_onnx
    tensors: dict = {}

    def from_onnx(self, graph, opset):
        mod = original(self, graph, opset)
        tensors.update(getattr(self, "_nodes", None) or {})  # a private attribute
        return mod

    importer.from_onnx = from_onnx
    try:
        yield tensors
    finally:
        importer.from_onnx = original


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


def _capture_objects(executable, out_dir: Path, fpack_imports=None) -> list[str]:
    """Let export_library write the executable's objects into out_dir, and keep them there
    instead of linking (returns their names). ``fpack_imports``: the target's way of
    packing the executable's imports (None: export_library's object file)."""

    captured: list[str] = []

    def keep(_file_name, files, **kwargs):
        options = list(kwargs.get("options") or [])
        for i, path in enumerate(map(Path, files)):
            name = f"graph{i}.o"
            if path.suffix == ".o":
                os.replace(path, out_dir / name)
            elif path.suffix in (".c", ".cc", ".cpp"):  # compile it the way the final link would
                toolchain.compile_object(path, out_dir / name, options, "the graph's C module")
            else:  # a file of the target's fpack_imports: its link reads it
                name = f"graph{i}{path.suffix}"
                os.replace(path, out_dir / name)
            captured.append(name)

    keep.get_target_triple = toolchain.target_triple
    executable.export_library(str(out_dir / "graph.so"), fcompile=keep, workspace_dir=str(out_dir),
                              fpack_imports=fpack_imports)
    return captured


def build_graph(fused, workload_names, target, out_dir: Path, fpack_imports=None) -> list[str]:
    """The VM executable of the graph, as object files in out_dir (returns their names).

    Mirrors ``relax.build`` (what ``tvm.compile`` runs) but leaves the workloads
    out of the TIR it compiles: their objects come from codegen.
    """
    import tvm
    from tvm import relax
    from tvm.relax import vm_build

    with target:
        mod = relax.get_pipeline("default")(fused)
    attrs = dict(mod.attrs) if mod.attrs else {}
    builder = relax.ExecBuilder()
    leftover = vm_build._vmcodegen(builder, mod, "bytecode")
    extra = {gv: f for gv, f in leftover.functions.items()
             if isinstance(f, tvm.tirx.PrimFunc) and gv.name_hint not in workload_names}
    executable = vm_build._vmlink(
        builder, target, tir_mod=tvm.IRModule(extra, attrs=leftover.attrs) if extra else None,
        ext_libs=attrs.get("external_mods", []), params=dict(attrs.get("const_name_to_constant", {})))
    # Objects are made in a private directory, then each is renamed into place:
    # a link running meanwhile (or another doit process partitioning the same
    # model, which makes the same bytes) never sees a half-written object.
    out_dir.mkdir(parents=True, exist_ok=True)
    free_space.require(out_dir.parent, constant_bytes(fused), "the graph's objects (its weights)",
                       margin=4 * 1024 * 1024)
    with tempfile.TemporaryDirectory(dir=out_dir.parent, prefix=".graph-") as private:
        names = _capture_objects(executable, Path(private), fpack_imports)
        for name in names:
            atomic.commit(Path(private) / name, out_dir / name)
    atomic.sweep(out_dir.iterdir(), lambda p: p.name in names)
    return names


def constant_bytes(mod) -> int:
    """The size of the tensors the graph's functions hold (its weights): about what the
    graph's object, which LLVM writes, takes on disk (at most: equal tensors are kept once)."""
    import math

    import tvm
    from tvm import relax

    total = 0

    def visit(expr):
        nonlocal total
        if isinstance(expr, tvm.ir.expr.Constant) and isinstance(expr.value, tvm.runtime.Tensor):
            tensor = expr.value
            total += math.prod(tensor.shape) * tvm.runtime.DataType(str(tensor.dtype)).bits // 8

    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
    return total


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


def run(source: onnx_files.ModelBytes, spec: ModelSpec, layout: ModelLayout,
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
    # The check of the step's output (graph/partition_output.py) reads what this hashed
    # from the memo, not the files again (the graph's weights are ~50 MB for resnet50).
    filecheck.write_checked(layout.partition_checked, {
        str(path): [sig, digest] for path, (digest, sig) in digests.items() if sig is not None})
