"""graph: the doit wiring of the steps: the task graph, step keys and stamps, the decisions
of what runs (shared by builds and `why`), the console reporter.

May import: core, targets, measure, schedules, steps, cache, cluster.
"""
