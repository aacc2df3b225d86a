"""cache: the artifact cache: the local store, the remote tier, the entries' format and
signatures, the event log of what it did in a run.

May import: core, steps.
"""
