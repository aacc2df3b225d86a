"""Signatures of shared-cache entries: who wrote an entry, not only that it is intact.

A cache entry's sha256 proves the payload is the one its writer stored; anyone
who can write the store can store anything with a correct sha256. Entries of a
remote cache are therefore signed (Ed25519, from the ``cryptography`` package)
with a private key only the writers (CI) hold, and verified by every reader
with the public key committed to the project:

    python -m modelbuild cache keygen keys/     # keys/remote-cache.key (0600), .pub

A signature covers the cache kind, the entry's key and the payload's sha256,
so a signed entry cannot be moved to another key or kind. No TVM here.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..core import regular_file
from ..core.errors import BuildError

PRIVATE_NAME, PUBLIC_NAME = "remote-cache.key", "remote-cache.pub"
_DOMAIN = b"modelbuild-cache-signature/1"


def message(kind: str, key: str, payload_digest: str) -> bytes:
    """What a signature covers: the kind, the key and the payload's sha256."""
    return b"\n".join((_DOMAIN, kind.encode(), key.encode(), payload_digest.encode()))


def _serialization():
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError:
        raise BuildError("signed remote cache entries need the cryptography package",
                         hint="python -m pip install 'cryptography>=42'") from None
    return serialization, ed25519


_PEM_MAX = 64 * 1024  # an Ed25519 key in PEM is about 120 bytes


def _load_pem(path: Path, setting: str, private: bool):
    """The Ed25519 key in the PEM file ``path`` (public or private), refused in one line."""
    serialization, ed25519 = _serialization()
    what, name = ("signing key", PRIVATE_NAME) if private else ("public key", PUBLIC_NAME)
    hint = f"{setting} names the {name} that `python -m modelbuild cache keygen` wrote"
    # the signing key's setting may hold a CI secret itself (base64, say) where a file's
    # path belongs: never printed
    shown = None if private else path
    try:  # a regular file, not read whole: /dev/zero never ends, a pipe never answers
        data = regular_file.read_limited(path, _PEM_MAX)
        key = (serialization.load_pem_private_key(data, password=None) if private
               else serialization.load_pem_public_key(data))
    except regular_file.TooLarge:
        raise BuildError(f"not a {what}: over {_PEM_MAX} bytes", file=shown, hint=hint) from None
    except OSError as err:
        raise BuildError(f"cannot read the {what}" + (f" (in the file {setting} names; not "
                                                      "shown)" if private else "")
                         + f": {err.strerror or err}", file=shown, hint=hint) from None
    except (ValueError, TypeError):
        key = None
    kind = ed25519.Ed25519PrivateKey if private else ed25519.Ed25519PublicKey
    if not isinstance(key, kind):
        raise BuildError("not an unencrypted Ed25519 private key (PEM)" if private
                         else "not an Ed25519 public key (PEM)", file=shown, hint=hint)
    return key


def load_public(path: Path, setting: str) -> bytes:
    """The raw 32-byte Ed25519 public key in the PEM file ``path``."""
    serialization, _ = _serialization()
    return _load_pem(path, setting, private=False).public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def load_private(path: Path, setting: str) -> bytes:
    """The raw 32-byte Ed25519 private key in the PEM file ``path``."""
    serialization, _ = _serialization()
    return _load_pem(path, setting, private=True).private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
        serialization.NoEncryption())


def public_of(private: bytes) -> bytes:
    serialization, ed25519 = _serialization()
    return ed25519.Ed25519PrivateKey.from_private_bytes(private).public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def sign(private: bytes, kind: str, key: str, payload_digest: str) -> str:
    """The hex signature of an entry."""
    _, ed25519 = _serialization()
    return ed25519.Ed25519PrivateKey.from_private_bytes(private).sign(
        message(kind, key, payload_digest)).hex()


def verify(public: bytes, kind: str, key: str, payload_digest: str, signature: str) -> bool:
    """Whether ``signature`` (hex) is the public key's owner's signature of this entry."""
    _, ed25519 = _serialization()
    from cryptography.exceptions import InvalidSignature

    try:
        ed25519.Ed25519PublicKey.from_public_bytes(public).verify(
            bytes.fromhex(signature), message(kind, key, payload_digest))
        return True
    except (InvalidSignature, ValueError):
        return False


def keygen(folder: Path) -> tuple[Path, Path]:
    """A new key pair in ``folder``: (private key file, mode 0600; public key file).
    Refuses to replace either file."""
    serialization, ed25519 = _serialization()
    private, public = folder / PRIVATE_NAME, folder / PUBLIC_NAME
    for path in (private, public):
        if path.exists():
            raise BuildError("already exists; not replaced", file=path,
                             hint="remove it first, or choose another folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise BuildError(f"cannot create the folder: {err.strerror or err}", file=folder) from None
    key = ed25519.Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    try:
        fd = os.open(private, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(pem)
        os.chmod(private, 0o600)
        fd = os.open(public, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                  serialization.PublicFormat.SubjectPublicKeyInfo))
    except OSError as err:
        raise BuildError(f"cannot write the key pair: {err.strerror or err}", file=folder) from None
    return private, public
