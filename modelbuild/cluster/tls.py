"""The executor's certificates: who may talk to a Dask scheduler and its workers.

    [tool.modelbuild]
    executor = "tls://scheduler.example:8786"
    executor-tls-ca = "certs/ca.pem"        # or $MODELBUILD_EXECUTOR_TLS_CA (paths relative
    executor-tls-cert = "certs/me.pem"      #   to the project root); MODELBUILD_EXECUTOR_TLS_CERT
    executor-tls-key = "certs/me-key.pem"   #   and MODELBUILD_EXECUTOR_TLS_KEY likewise

With them every connection is TLS with Dask's own ``Security``: the scheduler,
its workers and every client must each show a certificate signed by the CA
(mutual TLS), and plain ``tcp://`` is refused. `serve --tls` without them makes
a self-signed certificate for this serve alone in build/.executor-tls/ (the key
readable by its owner only). No TVM, and no import of distributed until a
``Security`` is made.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from ..core import settings
from ..core.errors import BuildError

ENV = "MODELBUILD_EXECUTOR_TLS_"
PARTS = ("ca", "cert", "key")


@dataclass(frozen=True)
class TlsFiles:
    """A CA certificate, and the certificate and private key this side shows (PEM files)."""

    ca: str
    cert: str
    key: str

    def as_dict(self) -> dict:
        return {"ca": self.ca, "cert": self.cert, "key": self.key}

    def security(self):
        """Dask's ``Security`` for every role (scheduler, worker, client) with these files:
        encryption required, a certificate signed by the CA asked of every peer."""
        try:
            from distributed.security import Security
        except ImportError:
            raise BuildError("TLS to an executor needs dask's distributed",
                             hint="python -m pip install 'modelbuild[cluster]'") from None
        return Security(require_encryption=True, tls_ca_file=self.ca,
                        tls_client_cert=self.cert, tls_client_key=self.key,
                        tls_scheduler_cert=self.cert, tls_scheduler_key=self.key,
                        tls_worker_cert=self.cert, tls_worker_key=self.key)


def configured(root: Path, environ=os.environ) -> TlsFiles | None:
    """The project's executor certificates: each of ``executor-tls-{ca,cert,key}`` from
    $MODELBUILD_EXECUTOR_TLS_{CA,CERT,KEY}, else [tool.modelbuild]; None when none is set.
    Some but not all set, or a file that is not there, is an error naming it."""
    table = None
    found = {}
    for part in PARTS:
        value = environ.get(ENV + part.upper())
        if not value:
            table = settings.read(root) if table is None else table
            value = table.get(f"executor-tls-{part}")
        if value:
            found[part] = value
    if not found:
        return None
    missing = [f"executor-tls-{p}" for p in PARTS if p not in found]
    if missing:
        raise BuildError(f"TLS to the executor needs {', '.join(missing)} too",
                         hint=f"set all three of executor-tls-ca, -cert and -key in "
                              f"[tool.modelbuild] (or {ENV}CA, _CERT and _KEY)")
    paths = {}
    for part, value in found.items():
        path = (root / Path(str(value)).expanduser()).absolute()
        if not path.is_file():
            raise BuildError(f"executor-tls-{part}: no such file {path}",
                             hint=f"set it in [tool.modelbuild] or {ENV}{part.upper()}")
        paths[part] = str(path)
    return TlsFiles(**paths)


def generate(folder: Path) -> TlsFiles:
    """A fresh self-signed certificate (its own CA) and its key, made by Dask's
    ``Security.temporary`` and written to ``folder`` (mode 0700, files 0600); what was
    there before is replaced, so an earlier serve's certificate no longer connects."""
    try:
        from distributed.security import Security

        made = Security.temporary()
    except ImportError:
        raise BuildError("serve --tls needs the `cryptography` package to make a certificate",
                         hint="python -m pip install cryptography, or set executor-tls-ca, "
                              "-cert and -key in [tool.modelbuild]") from None
    folder = folder.absolute()
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True, mode=0o700)
    os.chmod(folder, 0o700)
    files = TlsFiles(ca=str(folder / "ca.pem"), cert=str(folder / "cert.pem"),
                     key=str(folder / "key.pem"))
    for path, text in ((files.ca, made.tls_ca_file), (files.cert, made.tls_client_cert),
                       (files.key, made.tls_client_key)):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(text)
    return files
