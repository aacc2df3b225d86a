"""core: plain building blocks of every layer: errors, atomic writes, digests, sizes, the
project's paths and settings, model declarations, the manifest, workload identity.

May import: nothing else of modelbuild. TVM only lazily (inside functions that need it).
"""
