"""cluster: work on Dask workers: the build executor (its connection and TLS, whether a
`serve` is alive and who it is, what a worker runs, the actions that ship a step to it, the
preloads of `serve`'s nodes) and tuning distributed over the workers (the coordinator, its
plan, what a tuning worker runs).

May import: core, targets, schedules, steps.
"""
