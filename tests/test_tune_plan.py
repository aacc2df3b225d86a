"""The cluster tune's coordinator places chunks like MetaSchedule's gradient scheduler by
calls: a first chunk for every workload, then where weight x expected gain is largest.
Pure Python (cluster/tune_plan.py), with made-up latencies: no TVM, no cluster."""

from modelbuild.cluster.tune_plan import Plan, chunk_size


def _run(plan: Plan, latency: dict[str, float], workers: int) -> dict[str, int]:
    """Chunks to ``workers`` free workers at a time, each back with its trials measured and
    a best latency that improves 10% per chunk of its workload; trials per workload."""
    while True:
        out = [c for c in (plan.next_chunk() for _ in range(workers)) if c]
        if not out:
            return plan.trials()
        for name, trials in out:
            latency[name] *= 0.9
            plan.finished(name, trials, trials, latency[name])


def test_a_repeated_workload_gets_more_trials():
    # same latency per call; the one called 3 times per run weighs 3x
    for workers in (1, 2):
        trials = _run(Plan(64, chunk_size(64, 2), {"once": 1, "repeated": 3}),
                      {"once": 1e-3, "repeated": 1e-3}, workers)
        assert sum(trials.values()) == 64 and trials["once"] > 0, trials
        assert trials["repeated"] >= 2 * trials["once"], (workers, trials)


def test_every_workload_gets_a_first_chunk_heaviest_first_and_caps_hold():
    plan = Plan(40, 4, {"a": 1, "b": 5, "c": 2}, cap=8)
    assert [plan.next_chunk() for _ in range(3)] == [("b", 4), ("c", 4), ("a", 4)]
    for name in "bca":
        plan.finished(name, 4, 4, 1e-3)
    trials = _run(plan, {"a": 1e-3, "b": 1e-3, "c": 1e-3}, 1)
    assert trials == {"a": 8, "b": 8, "c": 8}  # --trials 8 each: 24 of the 40


def test_a_lost_chunk_gives_its_trials_back_and_an_exhausted_workload_stops():
    plan = Plan(16, 4, {"a": 1, "b": 1})
    assert plan.next_chunk() == ("a", 4) and plan.next_chunk() == ("b", 4)
    plan.lost("a", 4)
    plan.finished("b", 4, 2, 1e-3)  # 2 of 4: its search space is exhausted
    assert plan.left() == 14
    assert plan.next_chunk() == ("a", 4)
    plan.finished("a", 4, 4, 2e-3)
    trials = _run(plan, {"a": 2e-3, "b": 1e-3}, 2)
    assert trials == {"a": 14, "b": 2}


def test_chunks_are_metaschedules_64_for_large_budgets_and_smaller_for_small_ones():
    assert chunk_size(8, 2) == 2 and chunk_size(48, 4) == 6 and chunk_size(1500, 10) == 64
