"""Time one workload's kernel on this machine: what the build runs now (the default
schedule, or the workload's active record) against a new record's (how keep-if-faster
decides)."""

from __future__ import annotations

from ..measure.latency import device, use_physical_cores
from ..targets.registry import TargetSpec

# A record is kept only when it beats the default by more than this fraction: two timings
# of one kernel on this machine differ by a percent or so, and a record that ties with the
# default only pins a schedule that the build tool's own rule would improve on.
KEEP_MARGIN = 0.02


def faster_enough(default_s: float, record_s: float) -> bool:
    """Whether a record timed at ``record_s`` beats the default's ``default_s`` by the margin."""
    return record_s < default_s * (1 - KEEP_MARGIN)


def kernel_seconds(func, name: str, target_spec: TargetSpec, *, number: int = 5,
                   repeat: int = 5) -> float:
    """Best-of-``repeat`` mean run time of ``func`` compiled alone, on zero inputs, on the
    threads a library runs on (``use_physical_cores``: it was one thread of two on a
    2-core machine, which is not how the kernel runs in the model)."""
    use_physical_cores()
    import numpy as np
    import tvm

    target = tvm.target.Target(target_spec.tvm_target)
    lib = tvm.tirx.build(tvm.IRModule({name: func.with_attr("global_symbol", name)}), target=target)
    dev = device(target_spec.device)
    args = [tvm.runtime.tensor(np.zeros([int(d) for d in p.shape], str(p.dtype)), dev)
            for p in func.params]
    timer = lib.time_evaluator(name, dev, number=number, repeat=repeat)
    return float(min(timer(*args).results))


def default_schedule(func, name: str, target_spec: TargetSpec):
    """``func`` as a build schedules it without a record: the target's default schedule
    (its entry's hook), else TVM's (applied when it is compiled)."""
    import tvm

    from ..core.workloads import copy

    if target_spec.default_schedule is None:
        return copy(func)
    return target_spec.default_schedule(copy(func), name, tvm.target.Target(target_spec.tvm_target))


def record_speedup(func, name: str, record, target_spec: TargetSpec,
                   active=None) -> dict[str, float]:
    """Seconds measured side by side: ``default``, the workload as the build schedules it
    without a record; ``record``, with ``record``; and with ``active`` = (its TIR, the
    workload's active record, schedules/active.py) that the new one would replace,
    ``active``, as the build runs it now. An active record that no longer applies (stale,
    broken: the build would fail on it) is not timed."""
    import tvm

    from ..core.errors import BuildError
    from ..core.workloads import copy
    from .apply import apply_record

    scheduled = apply_record(copy(func), name, record, tvm.target.Target(target_spec.tvm_target))
    seconds = {"default": kernel_seconds(default_schedule(func, name, target_spec), name,
                                         target_spec),
               "record": kernel_seconds(scheduled, name, target_spec)}
    if active is not None:
        active_func, active_record = active
        try:
            now = active_record.apply(copy(active_func), target_spec)
        except BuildError:
            return seconds
        seconds["active"] = kernel_seconds(now, name, target_spec)
    return seconds
