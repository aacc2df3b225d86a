"""link: workload artifacts + the graph's files -> one shared library.

How is the target entry's ``link`` hook (targets.py): for CPU targets a plain
system-linker call over objects; no target imports TVM here. The library is
written to a temporary file and renamed, so the last good library survives a
failed link.
"""

from __future__ import annotations

from pathlib import Path

from ..core import atomic
from ..targets.registry import TargetSpec


def run(artifacts: list[Path], graph_files: list[Path], out: Path, target_spec: TargetSpec) -> None:
    tmp = atomic.temp_path_for(out, suffix=".so")
    try:
        target_spec.link(artifacts, graph_files, tmp, str(out))
        atomic.commit(tmp, out, executable=True)
    finally:
        tmp.unlink(missing_ok=True)
