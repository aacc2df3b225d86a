"""measure: run a built library and time it: inputs, a private VM, latency, bench.json.

May import: core, targets.
"""
