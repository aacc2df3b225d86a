"""Sample valid schedule records for a workload from MetaSchedule's design space.

Each variant is a sketch of the design space with freshly sampled decisions
and the target's post-processors applied, so every variant builds, and it is run once
against the workload with the default schedule (numeric_check.py): one TVM compiles into
wrong code is no variant. No timing: this is how a user makes B2, B3 ... for one workload.
"""

from __future__ import annotations

from ..core.errors import BuildError
from ..targets.registry import TargetSpec
from . import intrinsics, numeric_check
from .records import Record, plain


MEASURABLE = ("llvm", "cuda")  # the target kinds MetaSchedule's spaces and runners know


def tvm_seed(n: int) -> int:
    """``n`` (a seed plus offsets) inside TVM's random seeds, 1 to 2^31 - 1: itself when it
    is in range, wrapped when offsets took it past the end."""
    return (n - 1) % (2**31 - 1) + 1


def tuning_target(target_spec: TargetSpec) -> dict:
    """The target dict MetaSchedule needs: CPU targets must say how many cores to use."""
    target = dict(target_spec.tvm_target)
    if target["kind"] not in MEASURABLE:
        raise BuildError(f"MetaSchedule cannot sample or tune for target {target_spec.name} "
                         f"(kind {target['kind']})",
                         hint="sample and tune for llvm: the c target builds with llvm's "
                              "records (--target llvm)")
    if target["kind"] == "llvm" and "num-cores" not in target:
        import psutil

        target["num-cores"] = psutil.cpu_count(logical=False) or 1
    return target


def _valid(sch, postprocs) -> bool:
    """The target's post-processors accept the sampled schedule (it builds)."""
    return all(p.apply(sch) for p in postprocs)


def sample_records(func, name: str, target_spec: TargetSpec, count: int, *, seed: int = 1,
                   model: str | None = None) -> list[Record]:
    import tvm
    from tvm.s_tir import Schedule

    from ..core.workloads import normalize, structural_hash

    mod = normalize(func)
    target = tvm.target.Target(tuning_target(target_spec))
    # The design space itself is drawn with the context's random state (which blocks a
    # sketch moves, and where, differ from one draw to another): a state drawn at random
    # made one --seed give other records, or fail, in another process. Seeded here, one
    # seed gives the same records everywhere.
    ctx = intrinsics.tune_context(mod, target, space_generator="post-order-apply",
                                  task_name=name, num_threads=1, rand_state=tvm_seed(seed))
    sketches = ctx.space_generator.generate_design_space(mod)
    postprocs = ctx.space_generator.postprocs
    reference = numeric_check.Reference(mod["main"], "main", target_spec)
    out: list[Record] = []
    attempt = 0
    wrong = 0
    while len(out) < count and attempt < count * 20:
        sketch = sketches[attempt % len(sketches)]
        sch = Schedule(mod, seed=tvm_seed(seed + attempt))
        attempt += 1
        try:
            sketch.trace.apply_to_schedule(sch, remove_postproc=True,
                                           decision_provider=lambda *_: None)
            valid = _valid(sch, postprocs)
        except (tvm.error.InternalError, ValueError, RuntimeError):
            # a sampled decision that a later instruction of the sketch cannot follow ("The
            # block no longer exists in the IRModule"): no variant, as a refused one
            continue
        if valid and not reference.agrees(sch.mod["main"]):
            wrong += 1  # TVM emits wrong code for it: no variant, as a refused one
            continue
        if valid:
            out.append(Record(None, name, structural_hash(func), tuning_target(target_spec),
                              plain(sch.trace.as_json()), None, "sampled", model))
    if len(out) < count:
        wrongly = (f" ({wrong} computed other numbers than the workload, which TVM's code "
                   "for them gets wrong)") if wrong else ""
        raise BuildError(f"sampling found {len(out)} valid variant(s) of {name} in "
                         f"{attempt} tries{wrongly}, fewer than the {count} asked for",
                         workload=name,
                         hint=f"ask for fewer (-n {len(out)}), or try another --seed"
                              if out else "this workload's design space for the target has no "
                                          "valid schedule (the default one still applies)")
    return out
