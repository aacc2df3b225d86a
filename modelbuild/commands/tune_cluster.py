"""`tune` on the project's executor: find it, check its workers, describe the progress.

The executor is the one builds use (``executor`` in pyproject.toml,
$MODELBUILD_EXECUTOR, else a running `serve` of the project). Its workers are
asked for their CPU all at once; a mixed cluster is refused by name. The
search runs on the workers, a chunk of one workload each; this process
coordinates (cluster/tune_coordinator.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..core.errors import BuildError
from ..cluster import cluster_tune, executor, tune_coordinator


@dataclass
class Cluster:
    """A connected executor ready to tune: its client, the code its workers run, its CPU."""

    address: str
    client: object
    expected: dict
    cpu: str
    hosts: int
    workers: int
    stats: cluster_tune.Stats = field(default_factory=cluster_tune.Stats)

    def describe(self) -> str:
        return (f"on the executor {self.address}: {self.workers} worker(s) on {self.hosts} "
                f"machine(s), CPU {self.cpu}; each worker searches a chunk of one workload, "
                "each machine's workers measure in turns")

    def tune(self, funcs: dict, spec, work_dir, total: int, **how) -> int:
        """The search on the workers (cluster/tune_coordinator.py); what the cost model saw."""
        return tune_coordinator.tune(self.client, self.expected, self.stats, funcs, spec,
                                     work_dir, total, **how)

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
    if found is None or found.here():  # here(): a serve's address, not that serve's scheduler
        return None
    if spec.kind != "llvm":
        raise BuildError(f"tuning on the executor measures on its CPUs; target {spec.name} "
                         "is not a CPU target", hint="tune with --local (or --rpc for a device)")
    client = found.client()
    answers = cluster_tune.probe_workers(client)
    expected = cluster_tune.code_check(answers)
    cpu = cluster_tune.check_cpus(answers, spec.tvm_target.get("mcpu"))
    return Cluster(found.address, client, expected, cpu,
                   hosts=len({a["host"] for a in answers.values()}), workers=len(answers))


def summary(cluster: Cluster, seconds: float) -> dict:
    """What the workers did (for --json and bench/tune_speed.py): which ran chunks, the
    chunks and their median seconds on a worker, the lost ones, the failed trials, median
    build and measure (lock held) seconds per candidate, the seconds spent waiting for a
    machine's measuring lock, the workers' search seconds (a chunk's time besides its
    builds and measurements) and how busy the workers were over the tune."""
    import statistics

    st = cluster.stats

    def median(values):
        return round(statistics.median(values), 4) if values else None

    worker_s = sum(st.chunk_s)
    return {"workers": cluster.workers, "workers_used": sorted(w for w in st.workers_used if w),
            "failed": st.errors, "chunks": st.chunks, "lost_chunks": st.lost_chunks,
            "chunk_s": median(st.chunk_s), "build_s": median(st.build_s),
            "measure_s": median(st.measure_s), "lock_wait_s": round(st.lock_wait_s, 2),
            "search_s": round(max(0.0, worker_s - sum(st.build_s) - sum(st.measure_s)
                                  - st.lock_wait_s), 2),
            "worker_s": round(worker_s, 2),
            "busy": round(worker_s / (cluster.workers * seconds), 3) if seconds > 0 else None,
            **({"last_lost": st.last_error} if st.last_error else {})}


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
