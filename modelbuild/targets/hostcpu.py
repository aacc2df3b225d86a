"""The CPU this machine has, as LLVM names it (``znver1``, ``skylake-avx512``), found without
importing TVM in the process that asks.

The ``llvm`` target builds for the host CPU, so that the vector units are used
(TVM's ``{"kind": "llvm"}`` alone is generic x86-64: SSE2). The name comes from
TVM's own LLVM (``tvm.target.codegen.llvm_get_system_cpu``), asked once in a
short subprocess and remembered in the user's cache directory, keyed by what
identifies the machine's CPU (its /proc/cpuinfo model and flags) and the TVM
whose LLVM answered: a build (doit loading its tasks) stays TVM-free, and a
machine with another CPU asks again. The same subprocess lists the CPU names
that LLVM accepts, so a misspelt ``mcpu=`` is refused before anything runs.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

from ..core import atomic
from ..core.errors import BuildError

_ASK = """
import json, tvm
from tvm.target import codegen
cpu = codegen.llvm_get_system_cpu()
triple = codegen.llvm_get_system_triple()
names = sorted(set(codegen.llvm_get_cpu_archlist(tvm.target.Target({"kind": "llvm"}))))
print(json.dumps({"cpu": cpu, "triple": triple, "cpus": names}))
"""


def cache_file() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "modelbuild" / "host-cpu.json"


def machine_signature() -> str:
    """What identifies this machine's CPU: its architecture and, on Linux, the first CPU's
    model name and feature flags (a VM that hides AVX-512 has other flags)."""
    parts = [platform.machine()]
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        text = platform.processor()
    for line in text.splitlines():
        key = line.split(":", 1)[0].strip()
        if key in ("vendor_id", "model name", "flags", "Features", "CPU part") and line not in parts:
            parts.append(line.strip())
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def _tvm_signature() -> str:
    """The TVM (and so the LLVM) that answers: its version, read without importing it."""
    import importlib.metadata

    try:
        return importlib.metadata.version("apache-tvm")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def host() -> dict:
    """{"cpu": LLVM's name for this CPU, "triple": ..., "cpus": every name LLVM accepts}."""
    key = f"{machine_signature()}-{_tvm_signature()}"
    path = cache_file()
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError):
        known = {}
    if isinstance(known, dict) and isinstance(known.get(key), dict):
        return known[key]
    try:
        proc = subprocess.run([sys.executable, "-c", _ASK], capture_output=True, text=True,
                              timeout=300)
        answer = json.loads(proc.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        raise BuildError("could not ask TVM's LLVM which CPU this machine has"
                         + (f": {proc.stderr.strip().splitlines()[-1]}"
                            if "proc" in locals() and proc.stderr.strip() else ""),
                         hint="name one: `doit build:<model> mcpu=x86-64-v3` "
                              "(python -m modelbuild ... --mcpu x86-64-v3)") from None
    known = {k: v for k, v in (known.items() if isinstance(known, dict) else [])
             if k.startswith(machine_signature())}  # other TVMs' answers on this machine go
    known[key] = answer
    try:
        atomic.write_text(path, json.dumps(known, indent=1, sort_keys=True))
    except OSError:
        pass  # a read-only home: ask again next time
    return answer


def check_cpu(mcpu: str, known: dict) -> None:
    """Refuse a CPU name LLVM does not know (LLVM itself would fall back to generic code)."""
    names = known.get("cpus") or []
    if names and mcpu not in names:
        close = [n for n in names if n.startswith(mcpu[:3])][:8]
        raise BuildError(f"mcpu={mcpu}: not a CPU that TVM's LLVM knows",
                         hint=("close: " + ", ".join(close) + "; " if close else "")
                              + "portable choices: x86-64 (any x86-64), x86-64-v2, x86-64-v3 "
                                "(AVX2, 2013 on), x86-64-v4 (AVX-512)")
