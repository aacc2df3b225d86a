"""Benchmark a built library: end-to-end latency and the time of each workload in it.

End to end: ``vm["main"]`` on the model's inputs (random, fixed seed), timed
``runs`` times after ``warmup`` untimed runs. Per workload: TVM 0.27's Relax
VM has no profiler (no ``vm.profile``, no ``tvm.runtime.profiling``), so
another ``runs`` runs go through a VM instrument, which the VM calls before and
after every call instruction with the callee's name; a workload is called by
its own name, so rows are named exactly like the manifest's workloads. The
instrument costs about a microsecond a call, so those runs are not used for
the end-to-end figures. VM built-ins (allocations, shape checks) are reported
apart. Results follow the JSON schema of ``bench.json`` (see docs/commands.md).
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from rich.table import Table

from ..core import atomic
from ..targets import registry

# on_progress(phase, done, total): phase is "warm-up", "timing" or "profiling".
Progress = Callable[[str, int, int], None]


def spread(samples_s: list[float]) -> dict:
    """median, stdev (sample), quartiles and interquartile range, min and max, in milliseconds."""
    ms = [s * 1e3 for s in samples_s]
    q1, _, q3 = statistics.quantiles(ms, n=4, method="inclusive") if len(ms) > 1 else (ms[0],) * 3
    figures = {"median": statistics.median(ms), "stdev": statistics.stdev(ms) if len(ms) > 1 else 0.0,
               "q1": q1, "q3": q3, "iqr": q3 - q1, "min": min(ms), "max": max(ms)}
    return {k: round(v, 6) for k, v in figures.items()}


def _calls_per_run(vm, inputs, runs: int, on_progress: Progress) -> list[dict[str, list[float]]]:
    """For each run: callee name -> seconds of each call."""
    current: dict[str, list[float]] = {}
    started: list[tuple[str, int]] = []

    def instrument(func, name, before_run, ret_value, *args):
        now = time.perf_counter_ns()
        if before_run:
            started.append((name, time.perf_counter_ns()))
        elif started and started[-1][0] == name:
            current.setdefault(name, []).append((now - started.pop()[1]) * 1e-9)
        return 0

    vm.set_instrument(instrument)
    per_run = []
    for i in range(runs):
        current, started[:] = {}, []
        vm["main"](*inputs)
        per_run.append(current)
        on_progress("profiling", i + 1, runs)
    return per_run


def _rows(per_run: list[dict[str, list[float]]], names, latency_ms: float) -> tuple[dict, dict]:
    """(workload rows, VM rows): median per-run total in ms, calls per run, share of latency."""
    def row(name):
        totals = [sum(run.get(name, ())) * 1e3 for run in per_run]
        calls = max(len(run.get(name, ())) for run in per_run)
        median = statistics.median(totals) if calls else 0.0
        return {"median_ms": round(median, 6), "calls": calls,
                "share": round(median / latency_ms, 8) if latency_ms > 0 else 0.0}

    called = sorted({n for run in per_run for n in run})
    workloads = {n: row(n) for n in names}
    vm_rows = {n: row(n) for n in called if n not in workloads}
    return workloads, vm_rows


def measure(library: Path, man, *, model: str, target: str, runs: int = 10, warmup: int = 2,
            on_progress: Progress | None = None) -> dict:
    """Benchmark ``library`` (built from manifest ``man``); the result as bench.json has it.

    """
    from ..core import interrupts
    from ..core.digest import file_digest
    from .latency import model_inputs, private_vm, threads

    if runs < 1 or warmup < 0:
        raise ValueError("runs must be at least 1 and warmup at least 0")
    on_progress = on_progress or (lambda phase, done, total: None)
    library = Path(library)
    digest = file_digest(library)
    device_name = registry.resolve(target).device
    inputs = model_inputs(man, device_name=device_name)
    # a Ctrl-C in the instrument (Python, called back by the VM) reached us as RuntimeError
    with interrupts.stays_an_interrupt(), private_vm(library, device_name) as vm:
        for i in range(warmup):
            vm["main"](*inputs)
            on_progress("warm-up", i + 1, warmup)
        times = []
        for i in range(runs):
            start = time.perf_counter()
            vm["main"](*inputs)
            times.append(time.perf_counter() - start)
            on_progress("timing", i + 1, runs)
        per_run = _calls_per_run(vm, inputs, runs, on_progress)
    latency = spread(times)
    workloads, vm_rows = _rows(per_run, [w.name for w in man.workloads], latency["median"])
    return {
        "model": model,
        "target": target,
        "library_sha256": digest,
        "runs": runs,
        "warmup": warmup,
        "threads": threads(),
        "latency_ms": latency,
        "workloads": workloads,
        "vm_calls": vm_rows,
        "method": "end to end: wall clock of vm['main'] per run; per call: VM instrument "
                  "(before/after each call), separate runs; median over runs of the "
                  "per-run total; share = median_ms / latency median",
    }


def save(path: Path, result: dict) -> None:
    atomic.write_text(path, json.dumps(result, indent=2, sort_keys=True) + "\n")


def measure_built(layout, *, model: str, target: str, runs: int = 10, warmup: int = 2,
                  on_progress: Progress | None = None) -> dict:
    """Time the built library of ``model`` (its ModelPaths ``layout``) and save the result
    to its bench.json: what `python -m modelbuild bench` and `doit bench:<model>` share."""
    from ..core import manifest
    from ..core.errors import BuildError

    man = manifest.read(layout.manifest)
    if not layout.library.is_file():
        raise BuildError(f"no library of '{model}' to benchmark at {layout.library}",
                         hint=f"doit build:{model}")
    if man is None:  # the benchmark names each kernel's time by the manifest's workloads
        raise BuildError(f"the library of '{model}' is there, but not the manifest of its "
                         f"partition ({layout.manifest}), which names its kernels",
                         hint=f"doit build:{model} puts it back (from the cache: nothing is "
                              "compiled again)")
    result = measure(layout.library, man, model=model, target=target, runs=runs,
                     warmup=warmup, on_progress=on_progress)
    save(layout.benchmark, result)
    return result


def load(path: Path) -> dict | None:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def table(result: dict) -> Table:
    """Workloads slowest first, then the VM's own calls, then the end-to-end figures."""
    lat = result["latency_ms"]
    table = Table(title=f"{result['model']} ({result['target']}): median of {result['runs']} runs "
                        f"after {result['warmup']} warm-up",
                  caption=f"end to end {lat['median']:.3f} ms median, stdev {lat['stdev']:.3f}, "
                          f"IQR {lat['iqr']:.3f}, min {lat['min']:.3f}, max {lat['max']:.3f} ms")
    table.add_column("workload", overflow="fold")  # a name is never cut short
    table.add_column("calls", justify="right")
    table.add_column("median ms", justify="right")
    table.add_column("share", justify="right")
    rows = sorted(result["workloads"].items(), key=lambda kv: (-kv[1]["median_ms"], kv[0]))
    for name, row in rows:
        if row["calls"]:
            table.add_row(name, str(row["calls"]), f"{row['median_ms']:.4f}", f"{row['share']:.1%}")
        else:
            table.add_row(name, "0", "-", "not called")
    vm_rows = sorted(result["vm_calls"].items(), key=lambda kv: (-kv[1]["median_ms"], kv[0]))
    if vm_rows:
        table.add_section()
        for name, row in vm_rows:
            table.add_row(f"[dim]VM: {name}[/dim]", str(row["calls"]), f"{row['median_ms']:.4f}",
                          f"{row['share']:.1%}")
    table.add_section()
    table.add_row("[bold]end to end[/bold]", "", f"[bold]{lat['median']:.4f}[/bold]", "100.0%")
    return table
