"""The installed TVM as every key sees it: its version, apache-tvm-ffi's version, and the
identity of their compiled libraries, found without importing TVM.

Two TVMs with one version string (a source build between two commits, a wheel
rebuilt in place) differ in their libraries: a wheel's RECORD lists each
library's sha256, used when the file on disk still has the recorded size;
otherwise (a source build) the library's size and modification time stand for it.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
from pathlib import Path

from ..core.digits import is_decimal

PACKAGES = (("apache-tvm", "tvm"), ("apache-tvm-ffi", "tvm_ffi"))


def _recorded(dist) -> dict[str, tuple[str, int]]:
    """path -> (sha256, size) of the shared libraries the distribution's RECORD lists
    (read as text: the RECORD of apache-tvm has thousands of lines, few of them libraries)."""
    out = {}
    for line in (dist.read_text("RECORD") or "").splitlines():
        path, _, rest = line.partition(",")
        digest, _, size = rest.partition(",")
        if path.endswith(".so") and digest.startswith("sha256=") and is_decimal(size):
            out[str(Path(dist.locate_file(path)).resolve())] = (digest[len("sha256="):], int(size))
    return out


def _libraries(module: str) -> list[Path]:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        return []
    found = []
    for location in spec.submodule_search_locations:
        root = Path(location)
        found += sorted(root.glob("*.so")) + sorted(root.glob("lib/*.so"))
        found += sorted(root.parent.glob("build/lib*.so"))  # a TVM source tree's build
    return found


def _package(dist_name: str, module: str) -> dict:
    try:
        dist = importlib.metadata.distribution(dist_name)
        version, recorded = dist.version, _recorded(dist)
    except importlib.metadata.PackageNotFoundError:
        version, recorded = "not installed as a package", {}
    libs = {}
    for lib in _libraries(module):
        try:
            st = lib.stat()
        except OSError:
            continue
        known = recorded.get(str(lib.resolve()))
        if known and known[1] == st.st_size:
            libs[lib.name] = known[0]
        else:
            libs[lib.name] = f"size {st.st_size}, modified {st.st_mtime_ns}"
    return {"version": version, "libraries": libs}


@functools.lru_cache(maxsize=1)
def _cached(_key) -> dict:
    return {name: _package(name, module) for name, module in PACKAGES}


def tvm_identity() -> dict:
    """{"apache-tvm": {"version", "libraries": {name: digest}}, "apache-tvm-ffi": {...}}.

    Looked up once per process while the libraries' files stay the same."""
    stats = []
    for _, module in PACKAGES:
        for lib in _libraries(module):
            try:
                st = lib.stat()
                stats.append((str(lib), st.st_size, st.st_mtime_ns))
            except OSError:
                pass
    return _cached(tuple(stats))


def describe(identity) -> str:
    """A short line for messages: ``apache-tvm 0.27.0.post1, apache-tvm-ffi 0.1.14.post0``."""
    if not isinstance(identity, dict):
        return str(identity)
    return ", ".join(f"{name} {info.get('version', '?')}" for name, info in identity.items()
                     if isinstance(info, dict))



