"""The files an ONNX model is made of: the model file and, for a model saved with
external data, the files holding its tensors. Parses the model without its
tensor data (imports onnx, never TVM)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from . import regular_file
from .digest import bytes_digest
from .errors import BuildError


def external_locations(model) -> tuple[str, ...]:
    """The external data files a loaded ModelProto refers to (relative to its folder)."""
    from onnx import external_data_helper

    return tuple(sorted({external_data_helper.ExternalDataInfo(t).location
                         for t in external_data_helper._get_all_tensors(model)
                         if external_data_helper.uses_external_data(t)}))


@dataclass(frozen=True)
class ModelBytes:
    """An ONNX model as read once: the model file's bytes and those of its external data
    files, by location (relative to the model's folder). Partition's key is their digest
    and partition builds from these very bytes, so an edit during the build (and its undo)
    is either in this build or the next, never filed under the other version's key."""

    model: bytes
    external: dict = field(default_factory=dict)  # location -> bytes


def external_locations_in(data: bytes) -> tuple[str, ...]:
    """The external data files the model in ``data`` refers to; () when it has none or is
    not readable as ONNX (partition then reports what is wrong with it)."""
    import onnx

    try:
        model = onnx.load_model_from_string(data)
    except Exception:  # noqa: BLE001 - partition names the problem when it loads the bytes
        return ()
    return external_locations(model)


def read(onnx_path: Path, known_external=None) -> ModelBytes:
    """The model file and its external data files, each read once. ``known_external(digest)``:
    the locations of the external data files of the model bytes of that sha256, when known
    without parsing them (a stamp), else None: they are parsed from the bytes just read. A
    location outside the model's folder is refused, as onnx refuses it."""
    data = read_regular(onnx_path)
    names = known_external(bytes_digest(data)) if known_external else None
    if names is None:
        names = external_locations_in(data)
    return ModelBytes(data, {name: read_regular(inside(onnx_path.parent, name))
                             for name in names})


def inside(folder: Path, location: str) -> Path:
    """``folder / location`` for an external data location that stays in the folder."""
    parts = Path(location).parts
    if not location or Path(location).is_absolute() or ".." in parts:
        raise BuildError(f"the model's external data location {location!r} is outside the "
                         "model's folder", file=folder,
                         hint="save the model with its external data files beside it "
                              "(onnx.save_model(..., save_as_external_data=True))")
    return folder / location


def read_regular(path: Path) -> bytes:
    """A regular file's bytes; a folder, a pipe or a device is refused (reading a pipe waits
    forever, /dev/zero never ends). FileNotFoundError when it is missing."""
    try:
        return regular_file.read_bytes(path)
    except regular_file.NotRegular:
        raise BuildError("not a regular file (a folder, a pipe or a device)", file=path,
                         hint="the model's files must be ordinary files") from None


def load(source: ModelBytes):
    """(the ModelProto with its tensors, its external data locations), from the bytes read:
    the files are not opened again. Raises what onnx raises for bytes that are no model, and
    ValueError for a tensor outside its external file."""
    import onnx
    from onnx import external_data_helper

    model = onnx.load_model_from_string(source.model)
    locations = external_locations(model)
    for tensor in external_data_helper._get_all_tensors(model):
        if not external_data_helper.uses_external_data(tensor):
            continue
        info = external_data_helper.ExternalDataInfo(tensor)
        data = source.external[info.location]
        start = info.offset or 0
        end = len(data) if info.length is None else start + info.length
        if start > len(data) or end > len(data):
            raise ValueError(f"tensor {tensor.name!r}: bytes {start}..{end} are past the end of "
                             f"{info.location} ({len(data)} bytes)")
        tensor.raw_data = data[start:end]
        tensor.data_location = onnx.TensorProto.DEFAULT
        del tensor.external_data[:]
    return model, locations
