"""measure: run a built library and time it: inputs, a private VM, latency, bench.json.

May import: core, targets.
"""

# The most timed (or warm-up) runs one benchmark makes: each profiled run's kernel times are
# kept, and a number past this was a typo that ran for days. Here, not in benchmark.py, so
# that doit's task loading (which checks runs=) stays as cheap as it was.
RUNS_MAX = 100_000
