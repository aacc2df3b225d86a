"""Python packages a feature needs at run time: a clear error naming the missing package and
how to install it, instead of an ImportError deep inside TVM or Dask."""

from __future__ import annotations

import importlib

from .errors import BuildError


def require(modules: dict[str, str], feature: str, extra: str | None = None) -> None:
    """Import each of ``modules`` (module name -> the package that provides it); raise a
    BuildError naming every missing package when one cannot be imported. ``extra``: the
    modelbuild extra that installs them, if they are not core dependencies."""
    missing = []
    for module, package in modules.items():
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(package)
    if not missing:
        return
    names = " ".join(missing)
    hint = f"python -m pip install {names}"
    if extra:
        hint += f"  (or everything for it: python -m pip install 'modelbuild[{extra}]')"
    raise BuildError(f"{feature} needs the Python package(s) {', '.join(repr(m) for m in missing)}, "
                     "which this environment lacks", hint=hint)


# What MetaSchedule imports at run time and the apache-tvm wheel does not declare.
TUNING = {"cloudpickle": "cloudpickle", "psutil": "psutil", "xgboost": "xgboost-cpu"}
SAMPLING = {"psutil": "psutil"}
