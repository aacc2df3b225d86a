"""steps: the pipeline, one module per step: partition (+ provenance) -> lower -> codegen
-> link, each files in, files out; and reference, the same model through tvm.compile.
Beside them, what every step shares: the table of step kinds (kinds), partition's output
as one cache entry (partition_output), the code (code) and the TVM (environment) a step's
key covers.

May import: core, targets, schedules.
"""
