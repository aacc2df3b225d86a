"""A record that names a workload's compute (issue 20: per-workload compute variants).

    {"format": "modelbuild.record/1", "workload": "fused_conv2d_add_relu",
     "compute": "winograd"}                       # the default schedule on Winograd's TIR

    {..., "compute": "winograd", "workload_hash": ..., "target": ..., "trace": ...}
                                                  # a trace made for Winograd's TIR

``compute`` is one of the computes partition made for the workload (``direct`` always;
``winograd`` for a 3x3, stride-1 float32 NCHW convolution): build/<m>/partition/workloads/
<workload>@<compute>.json. A record without ``compute`` is a plain trace of the direct TIR,
as before (its meaning, and so every existing cache key, is unchanged).

Plain JSON work: no TVM import.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..core.errors import BuildError
from ..core.paths import ModelPaths
from . import records

DIRECT = "direct"
TRACE_FIELDS = ("workload_hash", "target", "trace")


def named_compute(data: bytes) -> bool:
    """Whether the JSON bytes are an object with a ``compute`` field (cheap pre-check; a file
    that does not parse is left to records.parse to explain)."""
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return False
    return isinstance(value, dict) and "compute" in value


def parse(data: bytes, path: Path, workload: str) -> tuple[str, records.Record | None]:
    """(the compute named, the trace for its TIR or None); BuildError naming the file."""
    value = json.loads(data.decode("utf-8"))
    compute = value.pop("compute")
    if not isinstance(compute, str) or not compute:
        raise BuildError("compute must be a name such as \"winograd\"", file=path,
                         workload=workload)
    if any(k in value for k in TRACE_FIELDS):
        return compute, records.parse(json.dumps(value), path, workload)
    unknown = sorted(set(value) - {"format", "workload", *records.OPTIONAL})
    if unknown:
        raise BuildError(f"unknown field(s): {', '.join(unknown)}", file=path, workload=workload)
    if value.get("format") != records.FORMAT:
        raise BuildError(f"format is {value.get('format')!r}, expected {records.FORMAT!r}",
                         file=path, workload=workload)
    if value.get("workload") != workload:
        raise BuildError(f"the record is for workload '{value.get('workload')}', but its file "
                         f"name says '{workload}'", file=path, workload=workload,
                         hint="rename the file after the workload it schedules")
    return compute, None


def to_json(workload: str, compute: str, record: records.Record | None = None,
            model: str | None = None) -> str:
    """The text of a record choosing ``compute`` (with ``record``'s trace, if given)."""
    if record is None:
        data = {"format": records.FORMAT, "model": model, "workload": workload,
                "compute": compute}
        return json.dumps({k: v for k, v in data.items() if v is not None}, indent=1) + "\n"
    text = records.format_record(record)
    return text.replace('{\n', '{\n  "compute": ' + json.dumps(compute) + ",\n", 1)


def computes(layout: ModelPaths, workload: str, recorded: dict | None = None) -> list[str]:
    """The computes partition made for ``workload`` (``direct`` first): its TIR files, or
    among ``recorded`` (path -> digest, what the manifest records) when given."""
    prefix = f"{workload}@"
    if recorded is not None:
        names = [p.stem for p in recorded if p.parent == layout.computes_dir]
    else:
        names = [p.stem for p in layout.computes_dir.glob(f"{prefix}*.json")]
    return [DIRECT, *sorted(n[len(prefix):] for n in names if n.startswith(prefix))]
