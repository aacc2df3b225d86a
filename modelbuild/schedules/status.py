"""What schedule each workload of a model builds with: a status row per workload.

TVM-free: hashes come from partition's manifest.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..core.paths import ModelPaths
from ..core.manifest import Manifest
from . import variants
from .active import Conflict, Default, Invalid, Python, Variant, active, tir_compute
from .compute_record import computes


@dataclass
class Row:
    workload: str
    status: str            # none / tuned / sampled / hand / python / stale / invalid / conflict
    run_secs: float | None
    record: str | None     # path of the active record file
    variant: int | None    # which sampled variant is active
    variants: int          # how many variants exist
    note: str = ""
    compute: str = "direct"                    # the compute it builds (compute_record.py)
    computes: tuple[str, ...] = ("direct",)    # the computes partition made for it

    def to_json(self) -> dict:
        return asdict(self)


def cpu_of(target: dict) -> str:
    """The CPU a target dict builds for (a record's, or a build's): its mcpu, else generic."""
    return str(target.get("mcpu") or "generic x86-64") if target.get("kind") in ("llvm", "c") \
        else str(target.get("arch") or target.get("kind"))


def other_cpu(record_target: dict, build_target: dict | None) -> str:
    """A note when a record was tuned for another CPU than the build's ("" otherwise): it
    still applies (the schedule is the same), but was timed elsewhere."""
    if build_target is None or record_target.get("kind") != build_target.get("kind"):
        return ""
    tuned, building = cpu_of(record_target), cpu_of(build_target)
    return "" if tuned == building else f"tuned for {tuned}, building for {building}: applies"


def rows(layout: ModelPaths, man: Manifest, build_target: dict | None = None) -> list[Row]:
    """A row per workload; ``build_target`` (the target dict a build uses) notes records
    tuned for another CPU. Each row says which compute the workload builds and which it
    could (``compute``, ``computes``)."""
    out = []
    for w in man.workloads:
        record = active(layout, w.name)  # read once
        row = _row(layout, w, record, build_target)
        row.computes = tuple(computes(layout, w.name))
        row.compute = tir_compute(record)
        out.append(row)
    return out


def _variant_row(layout: ModelPaths, w, record: Variant, count: int) -> Row:
    have = computes(layout, w.name)
    if record.compute not in have:
        return Row(w.name, "invalid", None, str(record.path), None, count,
                   f"names compute '{record.compute}'; this workload has: {', '.join(have)}")
    if record.record is None:
        return Row(w.name, "none", None, str(record.path), None, count,
                   f"default schedule on the {record.compute} compute")
    rec = record.record
    secs = min(rec.run_secs) if rec.run_secs else None
    return Row(w.name, rec.source or "hand", secs, str(record.path),
               variants.active_variant(layout, w.name), count,
               f"a trace of the {record.compute} compute")


def _row(layout: ModelPaths, w, record, build_target: dict | None) -> Row:
    path = record.path
    count = len(variants.existing(layout, w.name))
    if isinstance(record, Conflict):
        return Row(w.name, "conflict", None, str(path), None, count,
                   "two records for one workload: "
                   + ", ".join(p.name for p in record.paths) + "; the build fails")
    if isinstance(record, Python):
        return Row(w.name, "python", None, str(path), None, count,
                   "hand-written schedule function")
    if isinstance(record, Default):
        return Row(w.name, "none", None, None, None, count, "the target's default schedule")
    if isinstance(record, Invalid):
        return Row(w.name, "invalid", None, str(path), None, count, record.reason)
    if isinstance(record, Variant):
        return _variant_row(layout, w, record, count)
    rec = record.record
    secs = min(rec.run_secs) if rec.run_secs else None
    if rec.workload_hash != w.hash:
        status, note = "stale", "made for another version of this workload"
    else:
        status, note = (rec.source or "hand"), other_cpu(rec.target, build_target)
    return Row(w.name, status, secs, str(path), variants.active_variant(layout, w.name),
               count, note)
