"""The lower and codegen actions: in this process (``_lower``), or shipped to an executor's
worker (``_lower_on``, ``_codegen_on``: the same step, its inputs and output as bytes; the
worker side is worker.py, the connection executor.py)."""

from __future__ import annotations

from pathlib import Path

from ..core import atomic
from ..schedules.active import Active
from ..steps import lower
from ..targets.registry import TargetSpec
from . import worker
from .executor import Executor


def _lower(workload: bytes, record: Active, layout, name: str, target: TargetSpec) -> None:
    """The lower action, given the workload's TIR and its record as the step read them for
    its key (fingerprint.lower_inputs: once, when the step runs, not when tasks load)."""
    atomic.write_bytes(layout.lowered(name), lower.lowered(workload, record, target, name))


def _lower_on(workload: bytes, record: Active, executor: Executor, layout, name: str,
              target: TargetSpec) -> None:
    """The lower action on an executor's worker: the same step, given the same bytes and
    the same record object (its files' bytes inside), the output as bytes."""
    args = {"workload": workload, "record": record, "target": target, "name": name}
    out = executor.run(f"lower:{layout.name}/{name}", "lower",
                       worker.identity("lower", target.sources), args)
    atomic.write_bytes(layout.lowered(name), out)


def _codegen_on(lowered: bytes, executor: Executor, layout, name: str, output: Path,
                target: TargetSpec) -> None:
    """The codegen action on an executor's worker, given the lowered TIR the step read."""
    args = {"lowered": lowered, "target": target, "name": name}
    out = executor.run(f"codegen:{layout.name}/{name}", "codegen",
                       worker.identity("codegen", target.sources), args)
    atomic.write_bytes(output, out)
