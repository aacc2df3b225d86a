"""What schedule each workload of a model builds with: a status row per workload.

TVM-free: hashes come from partition's manifest.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from . import records, variants
from .errors import BuildError
from .layout import ModelLayout
from .manifest import Manifest


@dataclass
class Row:
    workload: str
    status: str            # none / tuned / sampled / hand / python / stale / invalid
    run_secs: float | None
    record: str | None     # path of the active record file
    variant: int | None    # which sampled variant is active
    variants: int          # how many variants exist
    note: str = ""

    def to_json(self) -> dict:
        return asdict(self)


def rows(layout: ModelLayout, man: Manifest) -> list[Row]:
    out = []
    for w in man.workloads:
        path = layout.record(w.name)
        count = len(variants.existing(layout, w.name))
        if layout.python_record(w.name).is_file():
            out.append(Row(w.name, "python", None, str(layout.python_record(w.name)), None, count,
                           "hand-written schedule function"))
            continue
        if not path.is_file():
            out.append(Row(w.name, "none", None, None, None, count, "TVM's default schedule"))
            continue
        try:
            rec = records.load(path, expected_workload=w.name)
        except BuildError as err:
            out.append(Row(w.name, "invalid", None, str(path), None, count, err.message))
            continue
        secs = min(rec.run_secs) if rec.run_secs else None
        if rec.workload_hash != w.hash:
            status, note = "stale", "made for another version of this workload"
        else:
            status, note = (rec.source or "hand"), ""
        out.append(Row(w.name, status, secs, str(path), variants.active_variant(layout, w.name),
                       count, note))
    return out
