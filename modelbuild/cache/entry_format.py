"""How the artifact cache stores an entry: a header line, then the payload.

    <root>/<kind>/<key[:2]>/<key>     header line + payload

The header carries the payload's sha256 and size, the kind and key it is filed
under (and, on a signed remote, a signature: signing.py): an entry that was
truncated, altered or moved to another entry's place is detected when read. A local
entry that came from a remote says so in its header: the signature it came with, or
``-`` for none. Here too, the words for why an entry is not used (REASONS). No TVM here.
"""

from __future__ import annotations

from ..core.digest import bytes_digest

HEADER_BYTES = 1024  # an entry's header line: format, sha256, size, kind/key, signature
UNSIGNED, FORGED = "unsigned", "forged"  # why an intact remote entry is not trusted
_MAGIC = b"modelbuild-cache/3"
# Entries of an earlier format: a miss, not damage (/1 bound no key; in /2 a download kept
# here did not say it came from a remote, and a signed project took it for its own build).
_OLD_MAGICS = (b"modelbuild-cache/1", b"modelbuild-cache/2")


def frame(payload: bytes, kind: str, key: str, signature: str | None = None) -> bytes:
    """An entry as stored: a header line (format, sha256, size, the step kind and key it is
    filed under[, signature: on a remote, its writer's; in the local cache, the origin of a
    download, UNSIGNED_DOWNLOAD or the signature it came with]), then the payload. The kind
    and key bind the entry to its place: two intact entries swapped (a copy gone wrong, a crafted cache) are not used for
    each other, and a step would otherwise restore another model's weights."""
    sig = b" " + signature.encode() if signature else b""
    return (b"%s %s %d %s%s\n" % (_MAGIC, bytes_digest(payload).encode(), len(payload),
                                  _filed(kind, key), sig) + payload)


def _filed(kind: str, key: str) -> bytes:
    return f"{kind}/{key}".encode()


def _fields(line: bytes) -> list[bytes] | None:
    """The fields of a header line of this format (magic, sha256, size, kind/key[,
    signature]); None for any other line."""
    parts = line.split(b" ")
    return parts if len(parts) in (4, 5) and parts[0] == _MAGIC else None


def _header(line: bytes, kind: str, key: str) -> tuple[str, bytes, str | None] | None:
    """(payload sha256, payload size as written, signature or None) of a header line of
    this format filed as ``kind``/``key``; None for any other line."""
    parts = _fields(line)
    if parts is None or parts[3] != _filed(kind, key):
        return None
    return (parts[1].decode(errors="replace"), parts[2],
            parts[4].decode(errors="replace") if len(parts) == 5 else None)


def declared_size(head: bytes) -> tuple[int, int] | None:
    """(length of the header line with its newline, payload size it declares) of an entry
    whose first bytes are ``head``; None when they hold no header line of this format. An
    entry whose size is not their sum is damaged: found without reading its payload."""
    line, newline, _ = head[:HEADER_BYTES].partition(b"\n")
    parts = _fields(line)
    if not newline or parts is None or not parts[2].isdigit():
        return None
    return len(line) + 1, int(parts[2])


def unframe_signed(raw: bytes, kind: str, key: str) -> tuple[bytes, str | None] | None:
    """(payload, signature or None) of an entry stored as ``kind``/``key``, None when the
    entry is damaged or filed under another kind or key."""
    line, _, payload = raw.partition(b"\n")
    header = _header(line, kind, key)
    if header is None or header[1] != str(len(payload)).encode() \
            or header[0] != bytes_digest(payload):
        return None
    return payload, header[2]


def header_vouches(head: bytes, kind: str, key: str, digest: str,
                    public_key: bytes | None) -> bool:
    """Whether an entry's first bytes (its header line) are those of an entry of this
    format holding the payload of sha256 ``digest`` for ``kind``/``key``, signed where
    ``public_key`` is set by its owner."""
    header = _header(head.partition(b"\n")[0], kind, key)
    if header is None or header[0] != digest:
        return False
    if public_key is None:
        return True
    from . import signing

    return header[2] is not None and signing.verify(public_key, kind, key, digest, header[2])


def unframe(raw: bytes, kind: str, key: str) -> bytes | None:
    """The payload of an entry stored as ``kind``/``key``, None when the entry is damaged
    or filed under another kind or key."""
    found = unframe_signed(raw, kind, key)
    return found[0] if found is not None else None


def damage(raw: bytes, kind: str, key: str) -> str:
    """Why an entry ``unframe_signed`` did not take is not used: MISFILED when its header is
    this format's, filed under another kind or key (intact, maybe: another step's entry),
    else DAMAGED."""
    parts = _fields(raw[:HEADER_BYTES].partition(b"\n")[0])
    return MISFILED if parts is not None and parts[3] != _filed(kind, key) else DAMAGED


def earlier_format(raw: bytes | None) -> bool:
    """An entry an earlier modelbuild wrote: not read (its header binds no key), not
    reported either; the step's output replaces it."""
    return raw is not None and raw.split(b" ", 1)[0] in _OLD_MAGICS


# Why an entry was not used (the event log's word; REASONS says it to the user):
DAMAGED, MISFILED, INVALID = "damaged", "misfiled", "invalid"
REASONS = {DAMAGED: "corrupt (digest mismatch)",
           MISFILED: "corrupt (filed under another key: an entry moved or copied here)",
           INVALID: "corrupt (not what the step makes)",
           UNSIGNED: "not signed, and remote-cache-public-key is set",
           FORGED: "not signed by the owner of remote-cache-public-key"}


def known_reason(reason: bool | str) -> str:
    return reason if isinstance(reason, str) and reason in REASONS else DAMAGED
