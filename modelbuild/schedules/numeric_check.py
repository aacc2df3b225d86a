"""Does a scheduled workload compute what the workload computes? Run both and compare.

A MetaSchedule trace that applies without error can still make TVM emit wrong code: a
differential run found sampled Winograd records (a ComputeAt of the padded input, an
rfactor of the weights' transform) whose libraries were off by 40-200% of the output,
as plain ``tvm.compile`` with the same record is. Nothing in TVM checks a schedule's
numbers (MetaSchedule times its candidates, it never compares them), so the commands that
make records (``sample``, ``tune``, ``import``) run each one once against the workload
as written, unscheduled (TVM's own plain lowering: no schedule of ours or TVM's to trust),
on random inputs, and keep only those that agree.

Both are compiled for this machine's CPU with LLVM's generic target (a record for another
CPU's vector width still runs here); a target whose kernels cannot run here (cuda) is not
checked.
"""

from __future__ import annotations

# Far above float32's rounding of a reordered reduction (1e-6 of the output's scale), far
# below what a wrong schedule gives (whole elements wrong: 1e-1 and up).
TOLERANCE = 1e-3


def _buffers(func, seed: int) -> list:
    """A fresh array per parameter of ``func``: floats random (outputs too, so that an
    element a schedule leaves unwritten differs), integers and booleans zero (an index
    input stays in range)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    out = []
    for param in func.params:  # buffers (TVM 0.27), as kernel timing reads them too
        shape, dtype = [int(d) for d in param.shape], str(param.dtype)
        if dtype.startswith(("float", "bfloat")):
            out.append(rng.standard_normal(shape).astype(dtype))
        else:
            out.append(np.zeros(shape, dtype))
    return out


def _run(func, name: str, arrays: list) -> list:
    import numpy as np
    import tvm

    target = tvm.target.Target({"kind": "llvm"})
    lib = tvm.tirx.build(tvm.IRModule({name: func.with_attr("global_symbol", name)}),
                         target=target)
    dev = tvm.cpu()
    args = [tvm.runtime.tensor(np.array(a), dev) for a in arrays]
    lib[name](*args)
    return [a.numpy() for a in args]


class Reference:
    """The workload ``func`` run once, unscheduled, on random inputs: what each scheduled
    version of it is compared with (``difference``, ``agrees``)."""

    def __init__(self, func, name: str, target_spec, seed: int = 0):
        self.name = name
        self.arrays = None
        self.want = None
        if target_spec.kind not in ("llvm", "c"):
            return
        try:
            self.arrays = _buffers(func, seed)
            self.want = _run(func, name, self.arrays)
        except Exception:  # noqa: BLE001 - not checkable here
            self.want = None

    def difference(self, scheduled) -> float | None:
        """The largest difference over every buffer after one call on the same inputs,
        relative to that buffer's largest value; None where it cannot be told here (a
        target whose kernels do not run on this CPU, a kernel LLVM's generic CPU cannot
        compile)."""
        import numpy as np

        if self.want is None:
            return None
        try:
            got = _run(scheduled, self.name, self.arrays)
        except Exception:  # noqa: BLE001 - not checkable here (an intrinsic of another CPU)
            return None
        worst = 0.0
        for w, g in zip(self.want, got):
            if w.size == 0:
                continue
            w64, g64 = w.astype(np.float64), g.astype(np.float64)
            if not np.array_equal(np.isnan(w64), np.isnan(g64)):
                return float("inf")
            finite = ~np.isnan(w64)
            scale = max(float(np.abs(w64[finite]).max(initial=0.0)), 1e-30)
            worst = max(worst, float(np.abs(g64[finite] - w64[finite]).max(initial=0.0)) / scale)
        return worst

    def agrees(self, scheduled) -> bool:
        """Whether ``scheduled`` computes what the workload does (or it cannot be told)."""
        found = self.difference(scheduled)
        return found is None or found <= TOLERANCE
