"""partition's output as one cache entry: the manifest and every file it lists.

partition writes many files (a TIR file per workload, the graph's objects);
the manifest lists each with its size and sha256. The cache stores them
together, as one msgpack map ``{path relative to the partition folder: bytes}``,
so that restoring a model's partition is one read. The stamp beside the
manifest records the manifest's digest, which covers every file's digest; every file
is checked against the digest the manifest lists (core/filecheck.py: hashed only when
its size, mtime or ctime changed since it was last checked).

An entry read from a cache is used only when it is exactly what partition
writes (``entry_problem``): the manifest (each field of its type, names partition makes)
and one file per output it lists, each with the size and sha256 it lists, each TIR file
TVM's JSON of a PrimFunc and each graph object an ELF object.
No TVM here.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

import msgpack

from ..core import atomic, elf, filecheck, regular_file
from ..core import manifest as manifest_mod
from ..core.digest import bytes_digest, file_digest
from ..core.errors import BuildError, shown
from ..core.paths import ModelPaths

MANIFEST = "manifest.msgpack"


@dataclass(frozen=True)
class PartitionOutput:
    layout: ModelPaths

    def problems(self) -> list[str]:
        """What is wrong with the files partition wrote: missing, or not the content it
        wrote (their sha256 differs from the manifest's)."""
        man = manifest_mod.read(self.layout.manifest)
        if man is None:
            return [f"no readable manifest at {self.layout.manifest}"]
        memo = self.layout.partition_checked
        checked = filecheck.read_checked(memo)
        before = dict(checked)
        out = []
        paths = set()
        for rel, size, digest in man.outputs:
            path = self.layout.partition_dir / rel
            paths.add(str(path))
            ok = filecheck.matches(path, digest, checked)
            if ok is None:
                out.append(f"output missing: {path}")
            elif not ok:
                out.append(f"output damaged: {path} (its content changed since partition "
                           "wrote it)")
        checked = {p: v for p, v in checked.items() if p in paths}
        if checked != before:
            filecheck.write_checked(memo, checked)
        return out

    def digest(self) -> str | None:
        """The manifest's digest when every file it lists is in place, else None."""
        if self.problems():
            return None
        try:
            return file_digest(self.layout.manifest)
        except OSError:
            return None

    def pack(self) -> bytes:
        man = manifest_mod.read(self.layout.manifest)
        if man is None:
            raise BuildError(f"partition wrote no readable manifest at {self.layout.manifest}: "
                             f"{manifest_mod.problem(self.layout.manifest)}")
        files = {MANIFEST: regular_file.read_bytes(self.layout.manifest)}
        for rel, _, _ in man.outputs:
            files[rel] = regular_file.read_bytes(self.layout.partition_dir / rel)
        return msgpack.packb(files)

    def check(self, payload: bytes) -> str | None:
        """What is wrong with a cache entry of this partition (None: it is usable)."""
        return entry_problem(payload)

    def unpack(self, payload: bytes) -> None:
        problem = entry_problem(payload)
        if problem is not None:
            raise BuildError(f"cache entry for {self.layout.name}'s partition is corrupt: "
                             f"{problem}", hint="it is not used; build again")
        files = msgpack.unpackb(payload)
        written = set()
        for rel, data in files.items():
            if rel == MANIFEST:
                continue
            path = self.layout.partition_dir / rel
            # by the name itself: a link already in the file's place (a stale one, one to
            # elsewhere) is replaced by the file, not followed
            if Path(rel).is_absolute() or ".." in Path(rel).parts:
                raise BuildError(f"cache entry for {self.layout.name}'s partition names a file "
                                 f"outside its folder: {shown(rel)}")
            atomic.write_bytes(path, data)
            written.add(path)
        # files of an earlier partition that this one does not have
        for folder in (self.layout.workloads_dir, self.layout.computes_dir, self.layout.graph_dir):
            if folder.is_dir():
                atomic.sweep(folder.iterdir(), lambda p: p in written)
        atomic.write_bytes(self.layout.manifest, files[MANIFEST])  # last: it vouches for the rest


def _compute_file(rel: str, workloads: set[str]) -> bool:
    """Whether ``rel`` names another compute's TIR of one of ``workloads``:
    computes/<workload>@<compute>.json (steps/compute_variants.py)."""
    folder, _, name = rel.partition("/")
    workload, at, compute = name.removesuffix(".json").partition("@")
    return (folder == "computes" and name.endswith(".json") and at == "@"
            and workload in workloads and compute.isidentifier())


def entry_problem(payload: bytes) -> str | None:
    """What makes ``payload`` not a partition bundle as ``PartitionOutput.pack`` writes it
    (None: it is one). Names outside the partition folder, files the manifest does not list
    or listed files with other bytes are all refused, so restoring writes only there."""
    try:
        files = msgpack.unpackb(payload)
    except (ValueError, msgpack.UnpackException) as err:
        return f"not msgpack: {err}"
    if not isinstance(files, dict) or not all(isinstance(k, str) and isinstance(v, bytes)
                                              for k, v in files.items()):
        return "not a map of file names to bytes"
    if MANIFEST not in files:
        return "no manifest"
    try:
        man = manifest_mod.Manifest.from_bytes(files[MANIFEST])
    except (ValueError, KeyError, TypeError, AttributeError, msgpack.UnpackException) as err:
        return f"unreadable manifest: {err}"
    listed = {rel: (size, digest) for rel, size, digest in man.outputs}
    names = {w.name for w in man.workloads}
    expected = ({f"workloads/{n}.json" for n in names}
                | {f"graph/{o}" for o in man.graph_objects}
                | {rel for rel in listed if _compute_file(rel, names)})
    if set(listed) != expected:
        return "the manifest's outputs are not its workloads and graph objects"
    if set(files) != {MANIFEST, *listed}:
        return "the files are not the ones its manifest lists"
    for rel, (size, digest) in listed.items():
        if len(files[rel]) != size or bytes_digest(files[rel]) != digest:
            return f"{shown(rel)} is not the file its manifest lists"
    for rel, data in files.items():
        problem = _file_problem(rel, data)
        if problem is not None:
            return f"{shown(rel)} is {problem}"
    return None


def _file_problem(rel: str, data: bytes) -> str | None:
    """What makes ``data`` not the kind of file partition writes at ``rel`` (None: it is
    one): a workload's or compute's TIR is TVM's JSON graph of a PrimFunc (what lower and
    codegen load), a graph object on Linux an ELF object (what link links). One JSON
    parse per TIR file: ~60 ms for resnet50's 36 (1.5 MB), beside the sha256 of its
    44 MB of weights; only when an entry is restored, never on the warm path."""
    if rel.startswith(("workloads/", "computes/")):
        return _tir_problem(data)
    if rel.endswith(".o") and sys.platform.startswith("linux") \
            and elf.defined_symbols(data) is None:
        return "not a readable ELF object"
    return None


def _tir_problem(data: bytes) -> str | None:
    try:
        tree = json.loads(data)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return "not JSON"
    nodes = tree.get("nodes") if isinstance(tree, dict) else None
    root = tree.get("root_index") if isinstance(tree, dict) else None
    if not (isinstance(nodes, list) and type(root) is int and 0 <= root < len(nodes)
            and all(isinstance(n, dict) and isinstance(n.get("type"), str) for n in nodes)):
        return "not TVM's JSON graph"
    if not nodes[root]["type"].endswith(".PrimFunc"):
        return "not a PrimFunc's TIR"
    return None
