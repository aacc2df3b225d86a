"""The model read for partition: its ONNX file (with its external data) loaded, its inputs
checked against the shapes declared in [inputs], and imported by TVM's ONNX importer as a
Relax IRModule, each error said as the model's with what to do about it."""

from __future__ import annotations

import contextlib

from ..core import onnx_files
from ..core.errors import BuildError, summarize
from ..core.models import ModelSpec, check_exists
from .input_names import identifier_input_names
from .resize_scales import refuse_inexact_scales


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
            mod = _from_onnx(from_onnx, model, shapes)
    except Exception as err:
        raise BuildError(f"TVM cannot import this ONNX model: {summarize(err)}",
                         file=spec.onnx_path, hint=_import_hint(err, spec)) from None
    if not traced or not tensors:
        return mod, None, external
    from . import provenance

    return mod, provenance.onnx_operators(model.graph, tensors), external


def _from_onnx(from_onnx, model, shapes: dict):
    """TVM's import of ``model`` with the input shapes ``shapes``. Where it fails with an
    empty (0) dimension among them, the import again with each such dimension symbolic,
    then bound to 0: as tvm.compile builds the model (TVM's importer takes a 0 in the
    file for a symbolic dimension), its shapes static as partition needs them. Its Trilu
    with a run-time ``k`` builds ``reshape(arange(0, rows), (rows, 1))``, refused for 0
    rows ("The type is not populated"), not for symbolic ones."""
    from tvm import relax

    try:
        return from_onnx(model, shape_dict=shapes or None, keep_params_in_input=False)
    except Exception as err:
        symbolic, zeros = _empty_dimensions_symbolic(shapes)
        if not zeros:
            raise
        try:
            mod = from_onnx(model, shape_dict=symbolic, keep_params_in_input=False)
        except Exception:
            raise err from None  # TVM's reason for the shapes as they are
    return relax.transform.BindSymbolicVars(zeros)(mod)


def _empty_dimensions_symbolic(shapes: dict) -> tuple[dict, dict]:
    """(``shapes`` with each 0 a symbolic dimension of its own, each of those -> 0)."""
    from tvm import tirx

    zeros: dict = {}
    symbolic = {}
    for name, dims in shapes.items():
        symbolic[name] = list(dims)
        for i, dim in enumerate(dims):
            if dim == 0:
                symbolic[name][i] = tirx.Var(f"empty{len(zeros)}", "int64")
                zeros[symbolic[name][i]] = 0
    return symbolic, zeros


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
