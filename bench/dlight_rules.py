"""Our CPU default schedule against the CPU rules TVM ships (``tvm.s_tir.dlight.cpu``:
``Reduction`` for row reductions such as softmax and layer norm, ``GEMV`` for
matrix-vector products), workload by workload.

Each workload of a model is taken as a build with no records partitions it (the layout
given, NCHWc by default), scheduled twice (our ``cpu_schedule.default_schedule``; DLight's
two CPU rules, the first that applies), each built on its own, and both timed in turn in
the same rounds (median of ``--rounds``, both on every core). A workload neither DLight
rule takes is not listed; where DLight applies but its schedule does not build, it says so.
The table prints each workload's ms with each schedule and ours / DLight (below 1: ours is
faster).

    python bench/dlight_rules.py [--model bert_s128_h768] [--layout NCHWc] [--rounds 9]

``--model`` is any name of bench/nets.py's suite (the BERT-style encoders, fc_batch1,
mobilenet_v2, the light zoo models). An encoder is built with one layer: its workloads
are those of every layer.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))


def _timer(func, name: str, target):
    """A timer (seconds per call) for ``func`` built alone, on random arguments."""
    import numpy as np
    import tvm

    lib = tvm.tirx.build(tvm.IRModule({name: func.with_attr("global_symbol", name)}), target=target)
    rng = np.random.default_rng(0)
    args = [tvm.runtime.tensor(rng.standard_normal([int(d) for d in b.shape]).astype(str(b.dtype))
                               if "float" in str(b.dtype) else
                               np.zeros([int(d) for d in b.shape], str(b.dtype)))
            for b in func.params]  # TVM 0.27: a PrimFunc's params are its buffers
    evaluate = lib.time_evaluator(name, tvm.cpu(), number=10, repeat=1)
    evaluate(*args)  # warm
    return lambda: evaluate(*args).mean


def _dlight(func, target):
    """DLight's CPU schedule of ``func`` (the first rule that applies), or None."""
    from tvm.s_tir import dlight

    for rule in (dlight.cpu.GEMV(), dlight.cpu.Reduction()):
        try:
            scheduled = rule.apply(func, target, False)
        except Exception:  # noqa: BLE001 - a rule that fails on a block it does not know
            continue
        if scheduled is not None:
            scheduled = scheduled[0] if isinstance(scheduled, list) else scheduled
            return type(rule).__name__, scheduled.mod["main"]
    return None


def compare(model, layout: str, target, lanes: int) -> tuple[dict, list[str]]:
    """{workload: {"rule": DLight's rule, "ours": timer, "dlight": timer}} and notes."""
    from tvm.relax.frontend.onnx import from_onnx

    from modelbuild.core.workloads import normalize
    from modelbuild.steps.partition import fuse_stages, workloads_of
    from modelbuild.targets import cpu_schedule

    block = lanes if layout == "NCHWc" else None
    fused = fuse_stages(from_onnx(model, keep_params_in_input=False), target, block)["FuseTIR"]
    found, notes = {}, []
    for name, func in workloads_of(fused).items():
        theirs = _dlight(normalize(func)["main"], target)  # normalize gives a module
        if theirs is None:
            continue
        rule, dlight_func = theirs
        try:
            dlight_timer = _timer(dlight_func, name, target)
        except Exception as err:  # noqa: BLE001 - reported, not raised: the table goes on
            notes.append(f"{name}: DLight's {rule} schedule does not build "
                         f"({str(err).strip().splitlines()[-1][:100]})")
            continue
        ours = cpu_schedule.default_schedule(func, name, target)
        found[name] = {"rule": rule, "ours": _timer(ours, name, target), "dlight": dlight_timer}
    return found, notes


def _model(nets, name: str):
    """bench/nets.py's model ``name``; an encoder with one layer (each layer is the same)."""
    _, function, kwargs = nets.WRITTEN.get(name, (None, None, {}))
    if function == "encoder":
        import nets_transformer

        return nets_transformer.encoder(**{**kwargs, "layers": 1})
    return nets.make(name)


def main() -> None:
    import nets
    from latency import SETTLE, physical_cores, positive

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="bert_s128_h768", choices=sorted(nets.BREADTH))
    parser.add_argument("--layout", default="NCHWc", choices=("NCHWc", "NCHW"))
    parser.add_argument("--rounds", type=positive(), default=9)
    args = parser.parse_args()

    os.environ.setdefault("TVM_NUM_THREADS", str(physical_cores()))  # before TVM's pool starts
    import tvm

    from modelbuild.targets import cpu, registry

    spec = registry.resolve("llvm")
    target = tvm.target.Target(spec.tvm_target)
    model = _model(nets, args.model)
    found, notes = compare(model, args.layout, target, cpu.vector_floats(spec.tvm_target))
    print(f"{args.model}, {args.layout}, {spec.tvm_target['mcpu']}, "
          f"{os.environ['TVM_NUM_THREADS']} threads; load average {os.getloadavg()[0]:.2f}")
    samples = {(name, side): [] for name in found for side in ("ours", "dlight")}
    for _ in range(args.rounds):
        for (name, side), times in samples.items():
            time.sleep(SETTLE / 10)
            times.append(found[name][side]())
    print(f"{'workload':62} {'DLight rule':11} {'ours ms':>9} {'DLight ms':>10} {'ours/DLight':>12}")
    for name, entry in found.items():
        ours = statistics.median(samples[(name, "ours")]) * 1e3
        theirs = statistics.median(samples[(name, "dlight")]) * 1e3
        print(f"{name[:62]:62} {entry['rule']:11} {ours:9.3f} {theirs:10.3f} {ours / theirs:12.2f}")
    if not found:
        print("neither DLight CPU rule applies to any workload of this model")
    for note in notes:
        print(note)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
