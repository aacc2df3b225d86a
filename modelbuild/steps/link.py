"""link: workload artifacts + the graph's files -> one shared library.

How is the target entry's ``link`` hook (targets.py): for CPU targets a plain
system-linker call over objects; no target imports TVM here. The library is
written to a temporary file and renamed, so the last good library survives a
failed link; those a killed link left are removed by the next. A disk without room
for the library is said as partition and lower say it (the system's reason, the hint),
not in the linker's words.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from ..core import atomic, free_space
from ..core.errors import BuildError
from ..targets.registry import TargetSpec

NO_SPACE = os.strerror(errno.ENOSPC)  # "No space left on device", as ld says it too


def run(artifacts: list[Path], graph_files: list[Path], out: Path, target_spec: TargetSpec) -> None:
    # a killed link's (SIGKILL, power loss): this run holds the model's build lock
    # (graph/build_lock.py), so no other link of it is writing one
    for left in atomic.temp_files_of(out, suffix=".so"):
        left.unlink(missing_ok=True)
    tmp = atomic.temp_path_for(out, suffix=".so")
    try:
        try:
            target_spec.link(artifacts, graph_files, tmp, str(out))
        except BuildError as err:
            if _disk_full(err, out.parent, [*artifacts, *graph_files]):
                raise OSError(errno.ENOSPC, NO_SPACE, str(out)) from None
            raise
        atomic.commit(tmp, out, executable=True)
    finally:
        tmp.unlink(missing_ok=True)


def _disk_full(err: BuildError, folder: Path, inputs: list[Path]) -> bool:
    """Whether the link failed for want of room: the linker said so, or the disk has less
    room than its inputs take (about the library's size; a failed linker removes what it
    wrote, so the room it ran out of is free again)."""
    if NO_SPACE in err.message:
        return True
    free = free_space.available(folder)
    try:
        need = sum(path.stat().st_size for path in inputs)
    except OSError:
        return False
    return free is not None and free < need
