"""partition's output as one cache entry: the manifest and every file it lists.

partition writes many files (a TIR file per workload, the graph's objects);
the manifest lists each with its size and sha256. The cache stores them
together, as one msgpack map ``{path relative to the partition folder: bytes}``,
so that restoring a model's partition is one read. The stamp beside the
manifest records the manifest's digest, which covers every file's digest; every file
is checked against the digest the manifest lists (core/filecheck.py: hashed only when
its size, mtime or ctime changed since it was last checked). No TVM here.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgpack

from ..core import atomic, filecheck
from ..core import manifest as manifest_mod
from ..core.digest import file_digest
from ..core.errors import BuildError
from ..core.layout import ModelLayout

MANIFEST = "manifest.msgpack"
CHECKED = "outputs.checked"  # beside the manifest: the files last verified (a memo)


@dataclass(frozen=True)
class PartitionOutput:
    layout: ModelLayout

    def problems(self) -> list[str]:
        """What is wrong with the files partition wrote: missing, or not the content it
        wrote (their sha256 differs from the manifest's)."""
        man = manifest_mod.read(self.layout.manifest)
        if man is None:
            return [f"no readable manifest at {self.layout.manifest}"]
        memo = self.layout.partition_dir / CHECKED
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
            raise BuildError(f"partition wrote no readable manifest at {self.layout.manifest}")
        files = {MANIFEST: self.layout.manifest.read_bytes()}
        for rel, _, _ in man.outputs:
            files[rel] = (self.layout.partition_dir / rel).read_bytes()
        return msgpack.packb(files)

    def unpack(self, payload: bytes) -> None:
        files = msgpack.unpackb(payload)
        written = set()
        for rel, data in files.items():
            if rel == MANIFEST:
                continue
            path = self.layout.partition_dir / rel
            if not path.resolve().is_relative_to(self.layout.partition_dir.resolve()):
                raise BuildError(f"cache entry for {self.layout.name}'s partition names a file "
                                 f"outside its folder: {rel}")
            atomic.write_bytes(path, data)
            written.add(path)
        # files of an earlier partition that this one does not have
        for folder in (self.layout.workloads_dir, self.layout.computes_dir, self.layout.graph_dir):
            if folder.is_dir():
                for old in folder.iterdir():
                    if old.is_file() and old not in written:
                        old.unlink()
        atomic.write_bytes(self.layout.manifest, files[MANIFEST])  # last: it vouches for the rest
