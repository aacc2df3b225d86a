"""Whose failure it is: a model partition cannot build is a limit of TVM when
``tvm.compile`` fails on it too, and a modelbuild bug when it does not.

A differential run found models TVM imports but cannot compile (a Range whose end comes
from a Shape, OneHot on a negative axis, an empty Slice) reported as "internal error ...
a modelbuild bug or an unexpected TVM failure". Where plain ``tvm.compile`` of the
imported model fails as well, that is one clear error of the model's; otherwise the
internal error stands, as a bug to report. The check runs only after a failure.
"""

from __future__ import annotations

import contextlib

from ..core.errors import BuildError, summarize


@contextlib.contextmanager
def tvm_limits(spec, imported, target):
    """Around partition's passes and graph build of ``imported`` (the model as TVM
    imported it) for ``target``."""
    try:
        yield
    except BuildError:
        raise
    except Exception as err:
        if not _tvm_compile_fails(imported, target):
            raise
        raise BuildError(
            f"TVM cannot compile this model: {summarize(err, limit=1)}", file=spec.onnx_path,
            hint="tvm.compile fails on it as well (a limitation of this TVM version, not of "
                 "modelbuild): export the model with other operators or another opset, or "
                 "give the operator constant inputs") from None


def _tvm_compile_fails(imported, target) -> bool:
    import tvm

    try:
        tvm.compile(imported, target)
    except Exception:  # noqa: BLE001 - any failure of TVM's own path is the answer
        return True
    return False
