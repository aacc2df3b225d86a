"""Time one workload's kernel on this machine: the default schedule against a record's
(how keep-if-faster decides)."""

from __future__ import annotations

from ..targets.registry import TargetSpec


def kernel_seconds(func, name: str, target_spec: TargetSpec, *, number: int = 5,
                   repeat: int = 5) -> float:
    """Best-of-``repeat`` mean run time of ``func`` compiled alone, on zero inputs."""
    import numpy as np
    import tvm

    target = tvm.target.Target(target_spec.tvm_target)
    lib = tvm.tirx.build(tvm.IRModule({name: func.with_attr("global_symbol", name)}), target=target)
    args = [tvm.runtime.tensor(np.zeros([int(d) for d in p.shape], str(p.dtype))) for p in func.params]
    timer = lib.time_evaluator(name, tvm.cpu(), number=number, repeat=repeat)
    return float(min(timer(*args).results))


def record_speedup(func, name: str, record, target_spec: TargetSpec) -> tuple[float, float]:
    """(default seconds, scheduled seconds) measured side by side."""
    import tvm

    from ..core.workloads import copy
    from .apply import apply_record

    scheduled = apply_record(copy(func), name, record, tvm.target.Target(target_spec.tvm_target))
    return (kernel_seconds(copy(func), name, target_spec),
            kernel_seconds(scheduled, name, target_spec))
