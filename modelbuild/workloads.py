"""Workload identity: how MetaSchedule normalizes a PrimFunc and hashes it.

Records name their workload by this hash, so a record tuned against another
version of the model is recognised as stale.
"""

from __future__ import annotations


def normalize(func):
    """The IRModule MetaSchedule tunes and stores for ``func`` (one function, "main")."""
    import tvm

    return tvm.get_global_func("tvm.s_tir.meta_schedule.normalize_mod")(func)


def structural_hash(func) -> str:
    """Structural hash of the normalized workload, as a decimal string (as MetaSchedule stores it)."""
    import tvm_ffi

    return str(tvm_ffi.structural_hash(normalize(func)))
