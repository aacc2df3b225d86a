"""The symbols an ELF object file defines, read from its symbol table (plain Python).

A cache entry said to be a workload's object is used only if it defines that
workload's function: an entry of another workload would otherwise fail the link
("multiple definition") on every build without naming the cache.
"""

from __future__ import annotations

import struct

_SHT_SYMTAB = 2
_SHN_UNDEF = 0
_BINDINGS = (1, 2)  # STB_GLOBAL, STB_WEAK


def is_elf(data: bytes) -> bool:
    return data[:4] == b"\x7fELF"


def defined_symbols(data: bytes) -> set[str] | None:
    """The global (and weak) symbols ``data`` defines; None when it is not a readable ELF file."""
    if not is_elf(data) or len(data) < 64 or data[4] not in (1, 2) or data[5] not in (1, 2):
        return None
    wide, end = data[4] == 2, "<" if data[5] == 1 else ">"
    try:
        if wide:
            shoff, = struct.unpack_from(end + "Q", data, 0x28)
            shentsize, shnum = struct.unpack_from(end + "HH", data, 0x3A)
        else:
            shoff, = struct.unpack_from(end + "I", data, 0x20)
            shentsize, shnum = struct.unpack_from(end + "HH", data, 0x2E)
        sections = [_section(data, end, wide, shoff + i * shentsize) for i in range(shnum)]
        names = set()
        for kind, offset, size, link, entsize in sections:
            if kind != _SHT_SYMTAB or not entsize:
                continue
            _, str_off, str_size, _, _ = sections[link]
            strings = data[str_off:str_off + str_size]
            for at in range(offset, offset + size - entsize + 1, entsize):
                name, binding, shndx = _symbol(data, end, wide, at)
                if shndx != _SHN_UNDEF and binding in _BINDINGS and name:
                    names.add(strings[name:strings.index(b"\0", name)].decode(errors="replace"))
        return names
    except (struct.error, IndexError, ValueError):
        return None


def _section(data: bytes, end: str, wide: bool, at: int) -> tuple[int, int, int, int, int]:
    """(type, offset, size, link, entry size) of the section header at ``at``."""
    if wide:
        _, kind, _, _, offset, size, link, _, _, entsize = struct.unpack_from(
            end + "IIQQQQIIQQ", data, at)
    else:
        _, kind, _, _, offset, size, link, _, _, entsize = struct.unpack_from(
            end + "IIIIIIIIII", data, at)
    return kind, offset, size, link, entsize


def _symbol(data: bytes, end: str, wide: bool, at: int) -> tuple[int, int, int]:
    """(name offset, binding, section index) of the symbol at ``at``."""
    if wide:
        name, info, _, shndx = struct.unpack_from(end + "IBBH", data, at)
    else:
        name, _, _, info, _, shndx = struct.unpack_from(end + "IIIBBH", data, at)
    return name, info >> 4, shndx
