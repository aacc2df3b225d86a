"""What determines a lowered or compiled workload: its inputs, their digest (the cache
key) and the stamp written beside each output.

The inputs of a step are described as a small JSON-able dict, so that the key
is its digest and ``why`` can name what differs from the stamp of the last
build. Reading them must stay cheap and TVM-free: the build checks them for
every workload on every run.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..core import atomic
from ..core.digest import bytes_digest, file_digest
from ..core.errors import BuildError
from ..core.layout import ModelLayout
from ..schedules import python_schedule, records
from ..schedules.active import CONFLICT, DEFAULT, PYTHON, Active, active


def record_identity(record: Active) -> dict:
    """What of a workload's record decides the schedule: its meaning, not its formatting.

    A record that does not parse is identified by its bytes: the build will
    fail on it, and must not find it in the cache.
    """
    if record.kind == DEFAULT:
        return {"kind": "default"}
    if record.kind == CONFLICT:
        return {"kind": "conflict", "files": [str(p) for p in record.files]}
    path = record.path
    if record.kind == PYTHON:
        helpers = {name: file_digest(f) for name, f in sorted(python_schedule.helpers(path).items())}
        return {"kind": "python", "file": str(path), "sha256": file_digest(path), "helpers": helpers}
    try:
        canonical = records.load(path, expected_workload=record.workload).canonical()
    except BuildError:
        return {"kind": "invalid", "file": str(path), "sha256": file_digest(path)}
    return {"kind": "json", "file": str(path), "canonical": canonical}


def lower_inputs(config: dict, layout: ModelLayout, name: str,
                 workload_digest: str | None = None) -> dict:
    """``workload_digest``: the workload TIR's digest when known without the file (a prediction)."""
    return {"step": "lower", "config": config,
            "workload": workload_digest or file_digest(layout.workload(name)),
            "record": record_identity(active(layout, name))}


def codegen_inputs(config: dict, lowered_file: Path, name: str,
                   lowered_digest: str | None = None) -> dict:
    """``lowered_digest``: the digest of the lowered TIR when known without the file."""
    # The kernel's symbol is its workload name, so the name is part of the object.
    return {"step": "codegen", "config": config,
            "lowered": lowered_digest or file_digest(lowered_file), "name": name}


def key(inputs: dict) -> str:
    """The cache key of a step: the digest of its inputs, file paths left out (a
    record's path does not change what it means; two models can share an entry)."""
    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k != "file"}
        return value

    text = json.dumps(strip(inputs), sort_keys=True, separators=(",", ":"))
    return bytes_digest(text.encode())


# -- stamps: what the output beside them was built from ----------------------------

def stamp_path(output: Path) -> Path:
    return output.with_name(output.name + ".stamp")


def write_stamp(output: Path, inputs: dict, output_digest: str | None) -> None:
    stamp = {"key": key(inputs), "output_sha256": output_digest, "inputs": inputs}
    atomic.write_text(stamp_path(output), json.dumps(stamp, sort_keys=True, indent=1))


def read_stamp(output: Path) -> dict | None:
    try:
        stamp = json.loads(stamp_path(output).read_text())
    except (OSError, ValueError):
        return None
    return stamp if isinstance(stamp, dict) and "key" in stamp else None
