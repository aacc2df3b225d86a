"""A Dask preload that closes its node's HTTP server: Dask always opens one (the
scheduler's on 8787 unless told otherwise: its info pages, JSON, metrics, the
dashboard when bokeh is installed; each worker's on a free port), unauthenticated
and never TLS. `serve` preloads this in its scheduler (unless `--dashboard`) and
in its workers, so nothing of theirs listens but their TLS- or TCP-comm ports.
A cluster of your own can use it too: ``dask worker ... --preload modelbuild.cluster.no_http``.
"""

from __future__ import annotations


def dask_setup(server) -> None:
    """Dask's preload hook; runs after the node opened its HTTP server."""
    server.http_server.stop()
    server.services.pop("dashboard", None)
