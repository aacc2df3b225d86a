"""The manifest partition writes: the model's workloads, their hashes, the graph objects,
and the provenance of every operator of the model.

msgpack, read at task-loading time: reading it must stay cheap and TVM-free.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import msgpack

from . import atomic, regular_file
from .errors import shown

FORMAT = 4  # 2: operators (provenance); 3: external data files, outputs, calls per workload;
# 4: the workloads changing the layout
OUTPUT_DIRS = ("workloads", "computes", "graph")  # where partition's outputs are, in its folder


WORKLOAD_NAME_MAX = 160  # a file name is at most 255 bytes; workload files add suffixes


def short_name(name: str) -> str:
    """``name``, or when it is longer than WORKLOAD_NAME_MAX, its start and a digest of all
    of it: the same long name always gives the same short one (records keep matching),
    two long names sharing a start give two."""
    if len(name) <= WORKLOAD_NAME_MAX:
        return name
    import hashlib

    digest = hashlib.sha256(name.encode("utf-8")).hexdigest()[:12]
    return f"{name[:WORKLOAD_NAME_MAX - len(digest) - 1]}_{digest}"


def plain_name(name) -> bool:
    """Whether ``name`` can name a file inside one folder and nothing else: a non-empty
    string of printable characters without a path separator, ``..``, a drive colon or a
    leading dot (workload and graph object names; a manifest from a cache or a hand edit
    could hold anything, and names are printed: no control character, no NUL)."""
    return (isinstance(name, str) and 0 < len(name) <= 200 and name[0] not in ".-~"
            and name.isprintable() and not any(c in name for c in "/\\:")
            and ".." not in name)


def workload_name(name) -> bool:
    """Whether ``name`` can be a workload's: an identifier (as TVM names a fused function,
    and as the build's paths take it: core/paths.plain) no longer than partition makes one
    (``short_name``)."""
    return isinstance(name, str) and name.isidentifier() and len(name) <= WORKLOAD_NAME_MAX


def _refuse(names, ok, what: str) -> None:
    bad = [n for n in names if not ok(n)]
    if bad:
        raise ValueError(f"manifest names a {what} partition does not make: {shown(bad[0])}")


def _check(man: "Manifest") -> "Manifest":
    """``man`` when every name in it is one partition makes and stays inside the model's
    build folder, else ValueError."""
    _refuse([man.model], lambda n: n.isprintable() and 0 < len(n) <= 255, "model")
    _refuse([w.name for w in man.workloads], workload_name, "workload")
    _refuse(man.graph_objects, plain_name, "graph object")
    for path, _, _ in man.outputs:
        folder, _, name = path.partition("/")
        if folder not in OUTPUT_DIRS or not plain_name(name):
            raise ValueError(f"manifest lists an output outside partition's folders: "
                             f"{shown(path)}")
    return man


# The type of each field as partition writes it: a type, [shape] a list of any length of
# that shape, (shapes) a list of exactly those; int: a count or size (no bool, none < 0);
# OPTIONAL_STR: a string or None. Anything else is refused, never converted.
OPTIONAL_STR = "str or none"
_FIELDS = {
    "model": str,
    "workloads": [(str, str, int)],  # name, hash, calls
    "graph_objects": [str],
    "inputs": [(str, [int], str)],  # name, shape, dtype
    "operators": [(str, str, OPTIONAL_STR, str, [str])],  # name, type, workload, note, also
    "provenance_error": str,
    "external_data": [str],
    "outputs": [(str, int, str)],  # path, size, sha256
    "layout_changes": [(str, str)],
}


def _typed(value, shape) -> bool:
    if isinstance(shape, list):
        return isinstance(value, list) and all(_typed(v, shape[0]) for v in value)
    if isinstance(shape, tuple):
        return (isinstance(value, list) and len(value) == len(shape)
                and all(map(_typed, value, shape)))
    if shape is int:
        return isinstance(value, int) and not isinstance(value, bool) and value >= 0
    if shape == OPTIONAL_STR:
        return value is None or isinstance(value, str)
    return isinstance(value, shape)


def _fields(raw: dict) -> dict:
    """The fields of a manifest map, each of the type partition writes, else ValueError."""
    for name, shape in _FIELDS.items():
        if name not in raw:
            raise ValueError(f"manifest without its {name}")
        if not _typed(raw[name], shape):
            raise ValueError(f"manifest's {name} is not of the types partition writes")
    return raw


@dataclass(frozen=True)
class Workload:
    name: str
    hash: str  # structural hash of the workload as MetaSchedule normalizes it
    calls: int = 1  # how many times one run of the graph calls it (tuning's weight)


@dataclass(frozen=True)
class Operator:
    """One operator of the model and where it went: the workload computing its output, or why none."""

    name: str
    op_type: str
    workload: str | None
    note: str = ""               # why there is no workload ("folded into constants", ...)
    also: tuple[str, ...] = ()   # other workloads computing part of it


@dataclass(frozen=True)
class Manifest:
    model: str
    workloads: tuple[Workload, ...]
    graph_objects: tuple[str, ...]  # file names inside the layout's graph_dir
    inputs: tuple[tuple[str, tuple[int, ...], str], ...]  # name, shape, dtype
    operators: tuple[Operator, ...] = ()  # the model's operators, in model order
    provenance_error: str = ""            # why operators is empty, if tracing failed
    external_data: tuple[str, ...] = ()   # files holding the model's tensors, beside its ONNX file
    # every file partition wrote besides the manifest (relative to the partition folder):
    # (path, size, sha256)
    outputs: tuple[tuple[str, int, str], ...] = ()
    # the workloads computing a change of layout the build's layout added (no operator's),
    # each with the operator whose input it converts ("" when none does: a model output)
    layout_changes: tuple[tuple[str, str], ...] = ()

    def workload(self, name: str) -> Workload | None:
        return next((w for w in self.workloads if w.name == name), None)

    def operator(self, name: str) -> Operator | None:
        return next((o for o in self.operators if o.name == name), None)

    def layout_change(self, workload: str) -> str | None:
        """The operator whose input ``workload`` converts to another layout ("" for none),
        or None when it is no layout change."""
        return dict(self.layout_changes).get(workload)

    def sources(self, workload: str) -> list[tuple[Operator, bool]]:
        """The operators a workload computes, in model order; True marks one the workload
        computes only part of (its output comes from another workload)."""
        return [(o, o.workload != workload) for o in self.operators
                if o.workload == workload or workload in o.also]

    def to_bytes(self) -> bytes:
        return msgpack.packb({
            "format": FORMAT,
            "model": self.model,
            "workloads": [[w.name, w.hash, w.calls] for w in self.workloads],
            "graph_objects": list(self.graph_objects),
            "inputs": [[n, list(s), d] for n, s, d in self.inputs],
            "operators": [[o.name, o.op_type, o.workload, o.note, list(o.also)]
                          for o in self.operators],
            "provenance_error": self.provenance_error,
            "external_data": list(self.external_data),
            "outputs": [list(o) for o in self.outputs],
            "layout_changes": [list(c) for c in self.layout_changes],
        })

    @classmethod
    def from_bytes(cls, data: bytes) -> "Manifest":
        raw = msgpack.unpackb(data)
        if not isinstance(raw, dict):
            raise ValueError(f"a manifest is a map, not {type(raw).__name__}")
        if raw.get("format") != FORMAT:
            raise ValueError(f"manifest format {shown(raw.get('format'))} != {FORMAT}")
        raw = _fields(raw)
        return _check(cls(
            model=raw["model"],
            workloads=tuple(Workload(n, h, c) for n, h, c in raw["workloads"]),
            graph_objects=tuple(raw["graph_objects"]),
            inputs=tuple((n, tuple(s), d) for n, s, d in raw["inputs"]),
            operators=tuple(Operator(n, t, w, note, tuple(also))
                            for n, t, w, note, also in raw["operators"]),
            provenance_error=raw["provenance_error"],
            external_data=tuple(raw["external_data"]),
            outputs=tuple((p, n, d) for p, n, d in raw["outputs"]),
            layout_changes=tuple((w, o) for w, o in raw["layout_changes"]),
        ))


def write(path: Path, manifest: Manifest) -> None:
    atomic.write_bytes(path, manifest.to_bytes())


_UNREADABLE = (OSError, ValueError, KeyError, TypeError, AttributeError, msgpack.UnpackException)


def read(path: Path) -> Manifest | None:
    """The manifest at ``path``, or None when there is none (or an unreadable old one)."""
    try:
        return Manifest.from_bytes(regular_file.read_bytes(path))
    except _UNREADABLE:
        return None


def problem(path: Path) -> str:
    """Why ``read(path)`` gives None ("" when it does not)."""
    try:
        Manifest.from_bytes(regular_file.read_bytes(path))
    except _UNREADABLE as err:
        return f"{type(err).__name__}: {err}"
    return ""
