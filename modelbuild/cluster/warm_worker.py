"""The preload module of `serve`'s workers: Dask imports it in each worker (and in a
worker its nanny restarts) before the worker takes a step, so no step pays the
TVM import."""

from __future__ import annotations


def dask_setup(worker) -> None:  # noqa: ARG001 - Dask's preload hook
    from .worker import warm

    warm()
