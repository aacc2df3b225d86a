"""The manifest partition writes: the model's workloads, their hashes, the graph objects.

msgpack, read at task-loading time: reading it must stay cheap and TVM-free.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import msgpack

from . import atomic

FORMAT = 1


@dataclass(frozen=True)
class Workload:
    name: str
    hash: str  # structural hash of the workload as MetaSchedule normalizes it


@dataclass(frozen=True)
class Manifest:
    model: str
    workloads: tuple[Workload, ...]
    graph_objects: tuple[str, ...]  # file names inside the layout's graph_dir
    inputs: tuple[tuple[str, tuple[int, ...], str], ...]  # name, shape, dtype

    def workload(self, name: str) -> Workload | None:
        return next((w for w in self.workloads if w.name == name), None)

    def to_bytes(self) -> bytes:
        return msgpack.packb({
            "format": FORMAT,
            "model": self.model,
            "workloads": [[w.name, w.hash] for w in self.workloads],
            "graph_objects": list(self.graph_objects),
            "inputs": [[n, list(s), d] for n, s, d in self.inputs],
        })

    @classmethod
    def from_bytes(cls, data: bytes) -> "Manifest":
        raw = msgpack.unpackb(data)
        if raw.get("format") != FORMAT:
            raise ValueError(f"manifest format {raw.get('format')} != {FORMAT}")
        return cls(
            model=raw["model"],
            workloads=tuple(Workload(n, h) for n, h in raw["workloads"]),
            graph_objects=tuple(raw["graph_objects"]),
            inputs=tuple((n, tuple(s), d) for n, s, d in raw["inputs"]),
        )


def write(path: Path, manifest: Manifest) -> None:
    atomic.write_bytes(path, manifest.to_bytes())


def read(path: Path) -> Manifest | None:
    """The manifest at ``path``, or None when there is none (or an unreadable old one)."""
    try:
        return Manifest.from_bytes(path.read_bytes())
    except (OSError, ValueError, KeyError, TypeError, msgpack.UnpackException):
        return None
