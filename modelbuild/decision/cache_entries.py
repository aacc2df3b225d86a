"""What a cache entry of a one-file step must be before it is used.

The cache's sha256 and (remote) signature say an entry is intact and who wrote
it; these checks say it is the step's kind of output at all, so that a
well-framed entry of the wrong shape is "corrupt: not used" (and rebuilt),
never a traceback and never a link that fails on every build:

- a lowered workload is a JSON object (what ``tvm.ir.save_json`` writes);
- a workload's object defines the workload's function (``__tvm_ffi_<name>``, the
  symbol codegen gives it): an ELF object's symbol table, or the ``host.o`` of a
  cuda artifact (a tar). An artifact of another format (a target added by the
  project) is used unchecked.

(partition's bundle is checked by partition_output.entry_problem.) No TVM here.
"""

from __future__ import annotations

import io
import json
import sys
import tarfile
from dataclasses import dataclass

from ..core import elf
from .cached_step import FileOutput

SYMBOL_PREFIX = "__tvm_ffi_"  # TVM's exported name of a function: the prefix, then its name


def lowered_problem(payload: bytes) -> str | None:
    try:
        value = json.loads(payload)
    except (UnicodeDecodeError, ValueError) as err:
        return f"not JSON: {err}"
    return None if isinstance(value, dict) else "not a JSON object"


def _host_object(payload: bytes) -> bytes | None:
    """The host object of a cuda artifact (a tar holding host.o), None when there is none."""
    try:
        with tarfile.open(fileobj=io.BytesIO(payload)) as tar:
            member = tar.getmember("host.o")
            return tar.extractfile(member).read() if member.isfile() else None
    except (OSError, KeyError, tarfile.TarError, EOFError):
        return None


def object_problem(payload: bytes, workload: str, suffix: str) -> str | None:
    """What makes ``payload`` not the object of ``workload`` (None: it is one)."""
    if suffix.endswith(".tar"):
        payload = _host_object(payload)
        if payload is None:
            return "not an artifact with a host.o"
    elif not elf.is_elf(payload):
        linux_object = suffix == ".o" and sys.platform.startswith("linux")
        return "not an ELF object" if linux_object else None
    symbols = elf.defined_symbols(payload)
    if symbols is None:
        return "an unreadable ELF object"
    if SYMBOL_PREFIX + workload not in symbols:
        return f"it does not define {SYMBOL_PREFIX}{workload} (another workload's object?)"
    return None


@dataclass(frozen=True)
class LoweredOutput(FileOutput):
    def check(self, payload: bytes) -> str | None:
        return lowered_problem(payload)


@dataclass(frozen=True)
class ObjectOutput(FileOutput):
    workload: str = ""
    suffix: str = ".o"

    def check(self, payload: bytes) -> str | None:
        return object_problem(payload, self.workload, self.suffix)
