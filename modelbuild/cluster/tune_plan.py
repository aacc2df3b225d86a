"""Which workload gets the next chunk of a cluster tune: the budget goes where the gain is.

MetaSchedule's gradient task scheduler (GradientBasedScheduler: alpha 0.2, window
3), with a chunk for its round: first one chunk per workload (heaviest first),
then each free worker's chunk goes to the workload whose weight (its calls per
run) times expected gain is largest:

    g = weight x (alpha x (best[n-1-window] - best[n-1]) / window  +  (1 - alpha) x best[n-1] / n)

``best`` is the workload's best latency after each of its n chunks (its recent
improvement, and its latency shared over the chunks it had). Unlike
MetaSchedule, several workers ask at once: a workload with a chunk in flight
counts ``g / (1 + in flight)``, so a second worker searches it too only while it
still gains more than the others. A workload with no valid candidate yet ranks
last; one whose search returned fewer trials than asked (its space is exhausted),
or that lost ``LOST_LIMIT`` chunks, gets no more. Pure Python: no TVM, no Dask.
"""

from __future__ import annotations

from dataclasses import dataclass, field

ALPHA, WINDOW = 0.2, 3  # MetaSchedule's GradientBasedScheduler defaults
LOST_LIMIT = 2  # chunks a workload may lose (dead workers, failed searches) before it stops


def chunk_size(total: int, workloads: int) -> int:
    """Trials per chunk: MetaSchedule's 64 (its num_trials_per_iter) for large budgets;
    for small ones at most half a workload's share, so every workload gets two chunks or
    more and the gradient has something to place."""
    return max(2, min(64, total // max(1, 2 * workloads)))


@dataclass
class Task:
    """One workload's part of the plan."""

    name: str
    weight: float
    cap: int  # its trials at most (--trials), or the whole budget
    done: int = 0
    in_flight: int = 0  # trials
    chunks_in_flight: int = 0
    lost: int = 0
    exhausted: bool = False
    history: list = field(default_factory=list)  # best latency (s) after each chunk

    def best(self) -> float | None:
        valid = [b for b in self.history if b is not None]
        return min(valid) if valid else None

    def gain(self) -> float:
        """MetaSchedule's gradient times the weight, shared by the chunks in flight."""
        n, best = len(self.history), self.best()
        if best is None:
            return -1.0
        past = [b for b in self.history[:n - WINDOW] if b is not None]
        g1 = (min(past) - best) / WINDOW if n >= 1 + WINDOW and past else 0.0
        g = ALPHA * g1 + (1 - ALPHA) * best / n
        return self.weight * g / (1 + self.chunks_in_flight)


class Plan:
    """The chunks of a budget: ``next_chunk`` when a worker is free, ``finished`` or
    ``lost`` when its chunk is back."""

    def __init__(self, total: int, chunk: int, weights: dict[str, float],
                 cap: int | None = None, best: dict[str, float] | None = None):
        self.total, self.chunk = total, chunk
        self.tasks = {n: Task(n, float(max(1.0, w)), cap or total)
                      for n, w in sorted(weights.items(), key=lambda kv: -kv[1])}
        for name, latency in (best or {}).items():  # --resume: what the database knows
            self.tasks[name].history.append(latency)

    def left(self) -> int:
        return self.total - sum(t.done + t.in_flight for t in self.tasks.values())

    def _open(self) -> list[Task]:
        return [t for t in self.tasks.values() if not t.exhausted and t.lost < LOST_LIMIT
                and t.cap - t.done - t.in_flight > 0]

    def next_chunk(self) -> tuple[str, int] | None:
        """(workload, trials) for a free worker, or None when the budget is placed."""
        left, open_ = self.left(), self._open()
        if left <= 0 or not open_:
            return None
        fresh = [t for t in open_ if not t.history and not t.chunks_in_flight]
        task = fresh[0] if fresh else max(open_, key=lambda t: (t.gain(), t.weight))
        if not fresh and not task.history:
            return None  # only workloads whose first chunk is still out: wait for it
        trials = min(self.chunk, left, task.cap - task.done - task.in_flight)
        task.in_flight += trials
        task.chunks_in_flight += 1
        return task.name, trials

    def finished(self, name: str, asked: int, measured: int, best: float | None) -> None:
        """A chunk is back with ``measured`` trials; ``best``: its fastest (s), None if none."""
        task = self.tasks[name]
        task.in_flight -= asked
        task.chunks_in_flight -= 1
        task.done += measured
        prior = task.best()
        task.history.append(prior if best is None else best if prior is None else min(prior, best))
        task.exhausted = task.exhausted or measured < asked

    def lost(self, name: str, asked: int) -> None:
        """A chunk is lost (its worker died, its search failed): its trials go back."""
        task = self.tasks[name]
        task.in_flight -= asked
        task.chunks_in_flight -= 1
        task.lost += 1

    def trials(self) -> dict[str, int]:
        return {t.name: t.done for t in self.tasks.values() if t.done}
