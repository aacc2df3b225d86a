"""TVM's library blob: the serialized imports a shared library carries, without TVM.

``export_library`` embeds a module's imports (the graph's VM executable, a
device's kernels, ...) in the library as one byte array, the symbol
``__tvm_ffi__library_bin``; loading the library rebuilds the import tree from
it. The layout (tvm_ffi ``ProcessLibraryBin``), little-endian::

    <nbytes: u64> <indptr: vec<u64>> <children: vec<u64>> { <kind: str> [<payload: bytes>] }*

a ``vec`` or ``str``/``bytes`` being a u64 count then the items. Module 0 is
the root; ``indptr``/``children`` are the import tree in CSR form. A module of
kind ``_lib`` (no payload) stands for the library itself, whose imports are
where its compiled host code looks up device kernels.

A target whose kernels live in device modules (CUDA) links them into the
graph's blob with this: the link step stays free of TVM.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

SYMBOL = "__tvm_ffi__library_bin"
LIB = "_lib"


class BlobError(ValueError):
    pass


@dataclass
class Blob:
    """An import tree: ``modules[i]`` = (kind, payload or None for ``_lib``), ``children[i]``."""

    modules: list[tuple[str, bytes | None]] = field(default_factory=list)
    children: list[list[int]] = field(default_factory=list)

    def lib_index(self) -> int:
        for i, (kind, _) in enumerate(self.modules):
            if kind == LIB:
                return i
        raise BlobError("the blob has no library module (_lib) to import device modules into")

    def import_into_lib(self, modules: list[tuple[str, bytes]]) -> None:
        """Add ``modules`` (kind, payload) as imports of the library module."""
        lib = self.lib_index()
        for kind, payload in modules:
            self.modules.append((kind, payload))
            self.children.append([])
            self.children[lib].append(len(self.modules) - 1)

    def device_modules(self) -> list[tuple[str, bytes]]:
        """The modules imported by the library module (what a compiled workload brings)."""
        lib = self.lib_index()
        return [self.modules[i] for i in self.children[lib]]  # type: ignore[misc]


class _Reader:
    def __init__(self, data: bytes):
        self.data, self.pos = memoryview(data), 0

    def u64(self) -> int:
        if self.pos + 8 > len(self.data):
            raise BlobError("truncated library blob")
        (value,) = struct.unpack_from("<Q", self.data, self.pos)
        self.pos += 8
        return value

    def raw(self) -> bytes:
        n = self.u64()
        if self.pos + n > len(self.data):
            raise BlobError("truncated library blob")
        out = bytes(self.data[self.pos:self.pos + n])
        self.pos += n
        return out

    def u64s(self) -> list[int]:
        return [self.u64() for _ in range(self.u64())]


def parse(data: bytes) -> Blob:
    """The import tree in ``data`` (the bytes of a ``__tvm_ffi__library_bin``)."""
    head = _Reader(data)
    nbytes = head.u64()
    if nbytes + 8 != len(data):
        raise BlobError(f"library blob says {nbytes} bytes, holds {len(data) - 8}")
    r = _Reader(data[8:])
    indptr, flat = r.u64s(), r.u64s()
    if not indptr or indptr[0] != 0 or indptr[-1] != len(flat):
        raise BlobError("malformed import tree in library blob")
    blob = Blob()
    for i in range(len(indptr) - 1):
        kind = r.raw().decode()
        blob.modules.append((kind, None if kind == LIB else r.raw()))
        blob.children.append(flat[indptr[i]:indptr[i + 1]])
    if r.pos != len(r.data):
        raise BlobError("trailing bytes in library blob")
    return blob


def _vec(values: list[int]) -> bytes:
    return struct.pack(f"<Q{len(values)}Q", len(values), *values)


def _str(data: bytes) -> bytes:
    return struct.pack("<Q", len(data)) + data


def dump(blob: Blob) -> bytes:
    indptr, flat = [0], []
    for kids in blob.children:
        flat += kids
        indptr.append(len(flat))
    parts = [_vec(indptr), _vec(flat)]
    for kind, payload in blob.modules:
        parts.append(_str(kind.encode()))
        if kind != LIB:
            parts.append(_str(payload or b""))
    body = b"".join(parts)
    return struct.pack("<Q", len(body)) + body


def split_string(data: bytes) -> tuple[str, bytes]:
    """(leading length-prefixed string, the rest): a device module payload starts with its format."""
    r = _Reader(data)
    text = r.raw().decode()
    return text, bytes(r.data[r.pos:])


def string(text: str | bytes) -> bytes:
    """``text`` as the stream writes a str or bytes: u64 length, then the bytes."""
    return _str(text.encode() if isinstance(text, str) else text)
