"""Does a scheduled workload compute what the workload computes? Run both and compare.

A MetaSchedule trace that applies without error can still make TVM emit wrong code: a
differential run found sampled Winograd records (a ComputeAt of the padded input, an
rfactor of the weights' transform) whose libraries were off by 40-200% of the output,
as plain ``tvm.compile`` with the same record is. Nothing in TVM checks a schedule's
numbers (MetaSchedule times its candidates, it never compares them), so the commands that
make records (``sample``, ``tune``, ``import``) and ``check`` run each one once against
the workload with the target's default schedule (the build's own, whose numbers the test
suite holds to onnxruntime's; TVM's plain lowering where a target has none), on random
inputs, and keep only those that agree.

Both are compiled for this machine's CPU with LLVM's generic target (a record for another
CPU's vector width still runs here); a target whose kernels cannot run here (cuda) is not
checked.
"""

from __future__ import annotations

# Far above float32's rounding of a reordered reduction (1e-6 of the output's scale), far
# below what a wrong schedule gives (whole elements wrong: 1e-1 and up). A 16-bit float's
# own rounding over a long reduction reaches 1e-2 (a K=4096 float16 matmul, by any
# schedule, the default's included), so it gets more room.
TOLERANCE = 1e-3
_TOLERANCE_16 = 5e-2


def tolerance(dtype: str) -> float:
    return _TOLERANCE_16 if dtype in ("float16", "bfloat16") else TOLERANCE


def _buffers(func, seed: int) -> list[list]:
    """Input sets, each a fresh array per parameter of ``func``: floats random (outputs too,
    so that an element a schedule leaves unwritten differs), integers and booleans zero (an
    index input stays in range). A float parameter of one element is most often a bound (a
    Clip's min and max, fused in): random bounds that cross clamp every output to one value,
    which hides any wrong arithmetic before them, so two more sets give such parameters
    -100, +100, ... and +100, -100, ...: in one of them each pair of bounds is wide open."""
    import numpy as np

    rng = np.random.default_rng(seed)
    first, scalars = [], []
    for i, param in enumerate(func.params):  # buffers (TVM 0.27), as kernel timing reads them
        shape, dtype = [int(d) for d in param.shape], str(param.dtype)
        if dtype.startswith(("float", "bfloat")):
            first.append(rng.standard_normal(shape).astype(dtype))
            if first[-1].size == 1:
                scalars.append(i)
        else:
            first.append(np.zeros(shape, dtype))
    sets = [first]
    for sign in ((1.0, -1.0) if scalars else ()):
        spread = [a.copy() for a in first]
        for n, i in enumerate(scalars):
            spread[i][...] = -100.0 * sign if n % 2 == 0 else 100.0 * sign
        sets.append(spread)
    return sets


def _run(func, name: str, sets: list[list]) -> list[list]:
    """The arrays of each input set after one call of ``func`` on it (compiled once)."""
    import numpy as np
    import tvm

    target = tvm.target.Target({"kind": "llvm"})
    lib = tvm.tirx.build(tvm.IRModule({name: func.with_attr("global_symbol", name)}),
                         target=target)
    dev = tvm.cpu()
    out = []
    for arrays in sets:
        args = [tvm.runtime.tensor(np.array(a), dev) for a in arrays]
        lib[name](*args)
        out.append([a.numpy() for a in args])
    return out


class Reference:
    """The workload ``func`` run once as the build schedules it without a record (``_fast``),
    on random inputs (``_buffers``): what each scheduled version of it is compared with
    (``difference``, ``agrees``)."""

    def __init__(self, func, name: str, target_spec, seed: int = 0):
        self.name = name
        self.arrays = None
        self.want = None
        if target_spec.kind not in ("llvm", "c"):
            return
        try:
            self.arrays = _buffers(func, seed)
            self.want = _run(_fast(func, name, target_spec), name, self.arrays)
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
        pairs = ((n, w, g) for n, (ws, gs) in enumerate(zip(self.want, got))
                 for w, g in zip(ws, gs))
        for n, w, g in pairs:
            if w.size == 0:
                continue
            w64, g64 = w.astype(np.float64), g.astype(np.float64)
            # the random set: nan where the reference has it; the +-100 sets may overflow (a
            # power, an exp) where rounding decides: their finite elements are compared
            if n == 0 and not np.array_equal(np.isnan(w64), np.isnan(g64)):
                return float("inf")
            finite = np.isfinite(w64) & np.isfinite(g64) if n else ~np.isnan(w64)
            scale = max(float(np.abs(w64[finite]).max(initial=0.0)), 1e-30)
            with np.errstate(invalid="ignore"):  # inf - inf where both overflowed alike
                off = float(np.nan_to_num(np.abs(g64[finite] - w64[finite]), nan=0.0)
                            .max(initial=0.0)) / scale
            # in units of the dtype's tolerance: 1 is the limit whatever the dtype
            worst = max(worst, off / tolerance(str(w.dtype)) * TOLERANCE)
        return worst

    def agrees(self, scheduled) -> bool:
        """Whether ``scheduled`` computes what the workload does (or it cannot be told)."""
        found = self.difference(scheduled)
        return found is None or found <= TOLERANCE


def _fast(func, name: str, target_spec):
    """``func`` as the reference runs it: the target's default schedule, whose numbers the
    test suite holds to onnxruntime's, when it has one (a 1024^3 matmul unscheduled took 4 s
    on one thread), else unscheduled."""
    import tvm

    from ..core.workloads import copy

    if target_spec.default_schedule is None:
        return func
    try:
        return target_spec.default_schedule(copy(func), name,
                                            tvm.target.Target(target_spec.tvm_target))
    except Exception:  # noqa: BLE001 - the plain lowering is a reference too, slower
        return func
