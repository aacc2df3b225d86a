"""Workload identity: how MetaSchedule normalizes a PrimFunc and hashes it.

Records name their workload by this hash, so a record tuned against another
version of the model is recognised as stale.
"""

from __future__ import annotations


def copy(func):
    """A deep copy of a TVM object.

    TVM's copy-on-write mutates an object in place when it thinks it holds the
    only reference (``with_attr`` in normalize_mod, schedule primitives), which
    a Python handle does not always count as. Whatever we schedule gets its own copy.
    """
    import tvm

    return tvm.ir.load_json(tvm.ir.save_json(func))


def normalize(func):
    """The IRModule MetaSchedule tunes and stores for ``func`` (one function, "main").

    Works on a copy: ``func`` itself is never changed.
    """
    import tvm

    return tvm.get_global_func("tvm.s_tir.meta_schedule.normalize_mod")(copy(func))


def structural_hash(func) -> str:
    """Structural hash of the normalized workload, as a decimal string (as MetaSchedule stores it)."""
    import tvm_ffi

    return str(tvm_ffi.structural_hash(normalize(func)))
