"""graph: the doit wiring of the steps: the task graph, the step actions, doit's state and
worker processes, build locks, the console reporter, the link's check, `why`'s prediction.

May import: core, targets, measure, schedules, steps, cache, cluster, decision.
"""
