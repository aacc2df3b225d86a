"""`tune` on the project's executor: find it, check its workers, describe the progress.

The executor is the one builds use (``executor`` in pyproject.toml,
$MODELBUILD_EXECUTOR, else a running `serve` of the project). Its workers are
asked for their CPU all at once; a mixed cluster is refused by name. The
search stays here; graph/cluster_tune.py sends candidates out.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..core.errors import BuildError
from ..graph import cluster_tune, executor


@dataclass
class Cluster:
    """A connected executor ready to tune: its builder, runner, CPU and workers."""

    address: str
    client: object
    builder: object
    runner: object
    cpu: str
    hosts: int
    workers: int
    stats: cluster_tune.Stats = field(default_factory=cluster_tune.Stats)

    def describe(self) -> str:
        return (f"on the executor {self.address}: {self.workers} worker(s) on {self.hosts} "
                f"machine(s), CPU {self.cpu}; each machine's workers measure in turns")

    def live_workers(self) -> int:
        try:
            return len(self.client.scheduler_info().get("workers", {}))
        except Exception:  # noqa: BLE001 - a lost scheduler: the tune stops on its own
            return 0


def connect(project, spec, per_cpu: bool = False) -> Cluster | None:
    """The project's executor, checked for tuning; None when the project has none."""
    if per_cpu:
        raise BuildError("--per-cpu is not supported yet: tune on workers of one CPU kind",
                         hint="start one `serve` (or one set of workers) per CPU kind and "
                              "tune on each with --mcpu")
    found = executor.configured(project)
    if found is None:
        return None
    if spec.kind != "llvm":
        raise BuildError(f"tuning on the executor measures on its CPUs; target {spec.name} "
                         "is not a CPU target", hint="tune with --local (or --rpc for a device)")
    client = found.client()
    answers = cluster_tune.probe_workers(client)
    expected = cluster_tune.code_check(answers)
    cpu = cluster_tune.check_cpus(answers, spec.tvm_target.get("mcpu"))
    stats = cluster_tune.Stats()
    builder, runner = cluster_tune.builder_and_runner(client, expected, stats)
    return Cluster(found.address, client, builder, runner, cpu,
                   hosts=len({a["host"] for a in answers.values()}), workers=len(answers),
                   stats=stats)


def summary(cluster: Cluster, seconds: float) -> dict:
    """What the workers did (for --json and bench/tune_speed.py): which ran candidates, the
    failed ones, median build and measure (lock held) seconds per candidate, and the
    tune process's own time (search, cost model, database) besides waiting for them."""
    import statistics

    st = cluster.stats
    return {"workers": cluster.workers, "workers_used": sorted(w for w in st.workers_used if w),
            "failed": st.errors,
            "build_s": round(statistics.median(st.build_s), 4) if st.build_s else None,
            "measure_s": round(statistics.median(st.measure_s), 4) if st.measure_s else None,
            "rounds": st.rounds, "cluster_s": round(st.cluster_seconds(), 2),
            "search_s": round(max(0.0, seconds - st.cluster_seconds()), 2)}


def estimate(best: dict[str, float], calls: dict[str, int], workloads: int) -> str:
    """The model's latency so far, from each tuned workload's best candidate times its calls."""
    if not best:
        return "no candidate measured yet"
    total = sum(calls.get(n, 1) * s for n, s in best.items())
    return (f"tuned part {1000 * total:.3f} ms" + ("" if len(best) == workloads
                                                 else f" ({len(best)} of {workloads} workloads)"))


def line(done: int, total: int, best: str, per_minute: float, workers: int | None) -> str:
    """The one progress line of the whole tune."""
    return (f"{done}/{total} trials, {best}, {per_minute:.0f}/min"
            + (f", {workers} worker(s)" if workers is not None else ""))
