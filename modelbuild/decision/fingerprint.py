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

from ..core import atomic, regular_file
from ..core.digest import bytes_digest
from ..core.paths import ModelPaths
from ..schedules.active import active, tir_compute, with_computes
from ..schedules.compute_record import computes


class Inputs(dict):
    """A step's inputs as read once. The dict describes them (its digest is the key; the
    stamp and ``why`` keep it); ``given`` holds what was read to describe them (bytes, the
    parsed record), which the step computes from. So the key and the output come from the
    same bytes: an edit during a build is either built or not, never filed under the other
    edit's key (issue 19). Equality, the key and the stamp see the dict only."""

    def __init__(self, description: dict, given: tuple = ()):
        super().__init__(description)
        self.given = given


def lower_inputs(config: dict, layout: ModelPaths, name: str,
                 recorded: dict | None = None) -> Inputs:
    """Given: (the TIR bytes of the compute the record names, the active record).
    ``recorded``: the digests of partition's outputs by path, when known without the files
    (a prediction; nothing is given). A record naming a compute the workload does not have
    is taken as an invalid record (its bytes keyed; lower fails with which computes it has)."""
    record = with_computes(active(layout, name), computes(layout, name, recorded))
    path = layout.workload(name, tir_compute(record))
    workload = None if recorded is not None else regular_file.read_bytes(path)
    return Inputs({"step": "lower", "config": config,
                   "workload": recorded.get(path) if recorded is not None
                   else bytes_digest(workload),
                   "record": record.identity()},
                  () if workload is None else (workload, record))


def codegen_inputs(config: dict, lowered_file: Path, name: str,
                   lowered_digest: str | None = None) -> Inputs:
    """Given: (the lowered TIR's bytes,). ``lowered_digest``: the digest of the lowered TIR
    when known without the file (a prediction; nothing is given)."""
    lowered = None if lowered_digest else regular_file.read_bytes(lowered_file)
    # The kernel's symbol is its workload name, so the name is part of the object.
    return Inputs({"step": "codegen", "config": config,
                   "lowered": lowered_digest or bytes_digest(lowered), "name": name},
                  () if lowered is None else (lowered,))


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


def write_stamp(output: Path, inputs: dict, output_digest: str | None,
                origin: dict | None = None) -> None:
    """``origin``: where the output came from (cache.store.provenance; None: made here)."""
    stamp = {"key": key(inputs), "output_sha256": output_digest, "inputs": inputs,
             "origin": origin}
    atomic.write_text(stamp_path(output), json.dumps(stamp, sort_keys=True, indent=1))


def read_stamp(output: Path) -> dict | None:
    try:
        stamp = json.loads(regular_file.read_text(stamp_path(output)))
    except (OSError, ValueError):
        return None
    # a stamp of another shape (hand-edited, another version's) is no stamp: the step reruns
    if not (isinstance(stamp, dict) and isinstance(stamp.get("key"), str)
            and isinstance(stamp.get("inputs", {}), dict)
            and isinstance(stamp.get("output_sha256", ""), (str, type(None)))):
        return None
    return stamp
