"""The files an ONNX model is made of: the model file and, for a model saved with
external data, the files holding its tensors. Parses the model without its
tensor data (imports onnx, never TVM)."""

from __future__ import annotations

from pathlib import Path


def external_locations(model) -> tuple[str, ...]:
    """The external data files a loaded ModelProto refers to (relative to its folder)."""
    from onnx import external_data_helper

    return tuple(sorted({external_data_helper.ExternalDataInfo(t).location
                         for t in external_data_helper._get_all_tensors(model)
                         if external_data_helper.uses_external_data(t)}))


def external_data(onnx_path: Path) -> tuple[str, ...]:
    """The external data files of the model at ``onnx_path``; () when it has none or is not
    readable as ONNX (partition then reports what is wrong with it)."""
    import onnx

    try:
        model = onnx.load(str(onnx_path), load_external_data=False)
    except Exception:  # noqa: BLE001 - partition names the problem when it reads the file
        return ()
    return external_locations(model)
