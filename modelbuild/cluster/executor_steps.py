"""The partition, lower and codegen actions: in this process (``lower_here``; partition.run
itself), or shipped to an executor's worker (``partition_on_worker``, ``lower_on_worker``,
``codegen_on_worker``: the same step, its inputs and output as bytes; the worker side is
worker.py, the connection executor.py). A serve's scheduler that does not prove to be that
serve gets none of them: they run here (``Executor.here``)."""

from __future__ import annotations

from pathlib import Path

from ..core import atomic
from ..core.errors import BuildError
from ..schedules.active import Active
from ..steps import codegen, lower, partition
from ..steps.partition_output import PartitionOutput, entry_problem
from ..targets.registry import TargetSpec
from . import worker
from .executor import Executor


def partition_on_worker(executor: Executor, source, spec, layout, target: TargetSpec) -> None:
    """The partition action on an executor's worker, whose TVM is imported already (this
    process then never imports it): given the ONNX bytes the step read, it sends back the
    output as the cache holds it, which is checked as a cache entry is before it is
    written here (partition_output.entry_problem)."""
    import sys

    import msgpack

    if executor.here():
        return partition.run(source, spec, layout, target)
    args = {"source": source, "spec": spec, "target": target}
    raw = executor.run(f"partition:{layout.name}", "partition",
                       worker.identity("partition", target.sources), args)
    try:
        out = msgpack.unpackb(raw)
    except (ValueError, msgpack.UnpackException):
        out = None
    if not (isinstance(out, dict) and isinstance(out.get("output"), bytes)
            and isinstance(out.get("stderr"), str)):
        out, problem = {"stderr": ""}, "not the bundle a worker's partition sends"
    else:
        problem = entry_problem(out["output"])
    if out["stderr"]:
        sys.stderr.write(out["stderr"])
    if problem is not None:
        raise BuildError(f"partition:{layout.name}: the executor's worker sent back no "
                         f"partition output: {problem}", hint="nothing of it was written; "
                         "rerun the build, and restart the workers if it happens again")
    PartitionOutput(layout).unpack(out["output"])


def lower_here(workload: bytes, record: Active, layout, name: str, target: TargetSpec) -> None:
    """The lower action, given the workload's TIR and its record as the step read them for
    its key (fingerprint.lower_inputs: once, when the step runs, not when tasks load)."""
    atomic.write_bytes(layout.lowered(name), lower.lowered(workload, record, target, name))


def lower_on_worker(workload: bytes, record: Active, executor: Executor, layout, name: str,
              target: TargetSpec) -> None:
    """The lower action on an executor's worker: the same step, given the same bytes and
    the same record object (its files' bytes inside), the output as bytes."""
    if executor.here():
        return lower_here(workload, record, layout, name, target)
    args = {"workload": workload, "record": record, "target": target, "name": name}
    out = executor.run(f"lower:{layout.name}/{name}", "lower",
                       worker.identity("lower", target.sources), args)
    atomic.write_bytes(layout.lowered(name), out)


def codegen_on_worker(lowered: bytes, executor: Executor, layout, name: str, output: Path,
                target: TargetSpec) -> None:
    """The codegen action on an executor's worker, given the lowered TIR the step read."""
    if executor.here():
        return codegen.compile_to(lowered, output, target, name)
    args = {"lowered": lowered, "target": target, "name": name}
    out = executor.run(f"codegen:{layout.name}/{name}", "codegen",
                       worker.identity("codegen", target.sources), args)
    atomic.write_bytes(output, out)
