"""The system C/C++ compiler that turns objects into the shared library.

Chosen as ``tvm.support.cc.get_cc`` chooses it (CXX, CC, then g++ ...), so the
library is linked the way ``export_library`` links it, without importing TVM.
"""

from __future__ import annotations

import functools
import os
import shlex
import shutil
import subprocess
from pathlib import Path

from ..core.errors import BuildError

_CANDIDATES = ("g++", "gcc", "clang++", "clang", "c++", "cc")


def command() -> list[str]:
    """The compiler as a command: $CXX (else $CC) split as a shell splits it, as make users
    write it (``ccache g++``, ``g++ -O2``), else the first of g++, gcc, ... found. A
    BuildError when its program does not exist."""
    for name in ("CXX", "CC"):
        value = os.environ.get(name)
        if not value:
            continue
        try:
            words = shlex.split(value)
        except ValueError as err:  # an unbalanced quote
            raise BuildError(f"the C/C++ compiler {value!r} (${name}) cannot be split into "
                             f"words as a shell would: {err}",
                             hint=f"set {name} to an installed compiler, or unset it") from None
        if not words or shutil.which(words[0]) is None:
            raise BuildError(f"the C/C++ compiler {value!r} (${name}) {_why_not(words)}",
                             hint=f"set {name} to an installed compiler, or unset it")
        return words
    for name in _CANDIDATES:
        found = shutil.which(name)
        if found:
            return [found]
    raise BuildError("no C/C++ compiler found to link the library",
                     hint="install g++ (e.g. apt-get install g++) or set CXX")



def _why_not(words: list[str]) -> str:
    """Why the first of ``words`` is no program to run, in words."""
    if not words:
        return "is empty"
    first = words[0]
    if "=" in first and "/" not in first.split("=", 1)[0]:
        return ("starts with a variable assignment, which only a shell understands: set "
                f"{first.split('=', 1)[0]} in the environment instead")
    path = Path(first) if os.sep in first else None
    if path is not None and path.is_dir():
        return "is a directory"
    if path is not None and path.exists():
        return "is not an executable file"
    return "does not exist"

def compiler() -> str:
    """The compiler's program (``command()``'s first word)."""
    return command()[0]


def identity(cmd: str | None = None) -> str:
    """The compiler as keys see it: its path and the first line of its ``--version``
    (``gcc (Debian 12.2.0-14) 12.2.0``), and the flags $CXX gives it: a gcc and a clang
    build, or two versions of one, never share an artifact. Asked once per compiler file
    (path, size, mtime) and process."""
    words = [cmd] if cmd else command()
    path = shutil.which(words[0]) or words[0]
    try:
        st = os.stat(path)
    except OSError:
        raise BuildError(f"the C/C++ compiler {words[0]!r} does not exist",
                         hint="set CXX (or CC) to an installed compiler") from None
    found = _identity(os.path.realpath(path), st.st_size, st.st_mtime_ns)
    return " ".join([found, *words[1:]])


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
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    except OSError as err:  # it cannot be run: gone, not executable, not a program
        raise BuildError(f"{what} failed: cannot run {cmd[0]}: {err.strerror or err}",
                         hint="set CXX (or CC) to an installed compiler") from None
    if proc.returncode != 0:
        raise BuildError(f"{what} failed ({proc.returncode}):\n{proc.stdout}\ncommand: {' '.join(cmd)}")



def target_triple() -> str | None:
    """What the compiler says it builds for (``-dumpmachine``), as export_library asks it
    (TVM asks $CXX as it was when TVM was imported, whole: "g++ -O2" was no program)."""
    cmd = command()
    proc = subprocess.run([*cmd, "-dumpmachine"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    triple = proc.stdout.decode("utf-8", errors="replace").strip()
    if proc.returncode != 0 or not triple:
        raise BuildError(f"the C/C++ compiler {' '.join(cmd)} says no target for -dumpmachine "
                         f"(status {proc.returncode}{', no output' if not triple else ''})",
                         hint="set CXX (or CC) to a gcc or clang")
    return triple

def compile_object(source: Path, out: Path, options: list[str], what: str) -> None:
    """``what`` names the thing compiled for the error message (not the temporary file)."""
    run([*command(), "-c", "-fPIC", "-o", str(out), str(source), *options], f"compiling {what}")
    if not out.is_file():
        raise BuildError(f"compiling {what} wrote no object file ({out.name})",
                         hint="set CXX (or CC) to a compiler that writes -o's file")


def link_shared(out: Path, objects: list[Path], what: str) -> None:
    """``export_library``'s link line: cc -shared -fPIC -o out objects..."""
    run([*command(), "-shared", "-fPIC", "-o", str(out), *map(str, objects)], f"linking {what}")
