"""The system C/C++ compiler that turns objects into the shared library.

Chosen as ``tvm.support.cc.get_cc`` chooses it (CXX, CC, then g++ ...), so the
library is linked the way ``export_library`` links it, without importing TVM.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path

from ..core.errors import BuildError

_CANDIDATES = ("g++", "gcc", "clang++", "clang", "c++", "cc")


def compiler() -> str:
    env = os.environ.get("CXX") or os.environ.get("CC")
    if env:
        return env
    for name in _CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    raise BuildError("no C/C++ compiler found to link the library",
                     hint="install g++ (e.g. apt-get install g++) or set CXX")


def identity(cmd: str | None = None) -> str:
    """The compiler as keys see it: its path and the first line of its ``--version``
    (``gcc (Debian 12.2.0-14) 12.2.0``): a gcc and a clang build, or two versions of one,
    never share an artifact. Asked once per compiler file (path, size, mtime) and process."""
    cmd = cmd or compiler()
    path = shutil.which(cmd) or cmd
    try:
        st = os.stat(path)
    except OSError:
        raise BuildError(f"the C/C++ compiler {cmd!r} does not exist",
                         hint="set CXX (or CC) to an installed compiler") from None
    return _identity(os.path.realpath(path), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=None)
def _identity(path: str, _size: int, _mtime_ns: int) -> str:
    try:
        proc = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise BuildError(f"cannot run the C/C++ compiler {path}: {err}",
                         hint="set CXX (or CC) to an installed compiler") from None
    first = next((ln.strip() for ln in proc.stdout.splitlines() if ln.strip()), "")
    return f"{path}: {first or 'unknown version'}"


def run(cmd: list[str], what: str) -> None:
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        raise BuildError(f"{what} failed ({proc.returncode}):\n{proc.stdout}\ncommand: {' '.join(cmd)}")


def compile_object(source: Path, out: Path, options: list[str], what: str) -> None:
    """``what`` names the thing compiled for the error message (not the temporary file)."""
    run([compiler(), "-c", "-fPIC", "-o", str(out), str(source), *options], f"compiling {what}")


def link_shared(out: Path, objects: list[Path], what: str) -> None:
    """``export_library``'s link line: cc -shared -fPIC -o out objects..."""
    run([compiler(), "-shared", "-fPIC", "-o", str(out), *map(str, objects)], f"linking {what}")
