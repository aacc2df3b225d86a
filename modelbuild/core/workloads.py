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

    Through TVM's JSON graph format directly: ``tvm.ir.load_json`` first passes the text
    through json_compact's upgrade from older TVM versions (a Python json load and dump
    of the whole text), which a copy made in this process never needs. That was 2.3 s
    of densenet121's 9.6 s partition (190 workloads hashed).
    """
    from tvm_ffi.serialization import from_json_graph_str, to_json_graph_str

    return from_json_graph_str(to_json_graph_str(func))


def load_json(text: str):
    """A TVM object from the JSON ``tvm.ir.save_json`` wrote. When this TVM wrote it (its
    version is in the text's metadata), straight through TVM's graph format; otherwise
    through ``tvm.ir.load_json``, whose upgrade from older versions is a Python json
    load and dump of the whole text (0.65 s of a clean resnet50 build's 64 loads)."""
    import tvm
    from tvm_ffi.serialization import from_json_graph_str

    if text.rstrip().endswith(f'"metadata":{{"tvm_version":"{tvm.__version__}"}}}}'):
        return from_json_graph_str(text)
    return tvm.ir.load_json(text)


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
