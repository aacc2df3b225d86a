"""steps: the pipeline, one module per step: partition (+ provenance) -> lower -> codegen
-> link, each files in, files out; and reference, the same model through tvm.compile.

May import: core, targets, schedules.
"""
