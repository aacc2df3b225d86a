"""decision: what a cached step (partition, lower, codegen) does and why: a ``Step`` per
step kind decides to keep, restore or run it, with its reasons; the keys and stamps it
decides by, the checks of what it restores, the context one doit run shares.

May import: core, targets, schedules, steps, cache, cluster.
"""
