"""link: workload objects + the graph's VM executable objects -> one shared library.

A plain system-linker call: no TVM import. The library is written to a
temporary file and renamed, so the last good library survives a failed link.
"""

from __future__ import annotations

from pathlib import Path

from . import atomic, toolchain


def run(objects: list[Path], graph_objects: list[Path], out: Path) -> None:
    tmp = atomic.temp_path_for(out, suffix=".so")
    try:
        # The order export_library uses: kernels first, then the packed executable.
        toolchain.link_shared(tmp, [*objects, *graph_objects], str(out))
        atomic.commit(tmp, out, executable=True)
    finally:
        tmp.unlink(missing_ok=True)
