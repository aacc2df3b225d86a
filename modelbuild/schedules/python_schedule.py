"""Schedule records written by hand in Python.

``schedules/<model>/<workload>.py`` defines

    def schedule(sch):
        # sch: tvm.s_tir.Schedule over the workload, a module with one function "main"
        block = sch.get_sblock("conv2d_nchw")
        ...

lower runs it on the workload and keeps the result exactly as it keeps a
MetaSchedule trace's (the original function attributes, marked scheduled).
An exception inside the file is reported with the file, line and workload.

A schedule may import helper modules of the project: ``<name>.py`` beside it in
``schedules/<model>/`` (named with a leading ``_``, so that it is not taken for a
workload's record) or in ``schedules/``. They are part of the record: editing one
reruns the lower of every workload whose schedule imports it, and a long-running
process (watch) reads the edited helper again.
"""

from __future__ import annotations

import ast
import contextlib
import sys
import traceback
from pathlib import Path

from ..core.errors import BuildError, summarize

HINT = "fix the schedule function, or delete the file to use TVM's default schedule"


def _where(err: BaseException, path: Path) -> str:
    frames = [f for f in traceback.extract_tb(err.__traceback__) if Path(f.filename) == path]
    if not frames:
        return ""
    frame = frames[-1]
    code = f" (`{frame.line.strip()}`)" if frame.line else ""
    return f" at line {frame.lineno}{code}"


def helper_dirs(path: Path) -> list[Path]:
    """Where a schedule's helper modules are found: its own folder, then schedules/."""
    return [path.parent, path.parent.parent]


def helpers(path: Path) -> dict[str, Path]:
    """module name -> file of every helper module ``path`` imports, directly or through
    another helper (read from the source: nothing is imported)."""
    found: dict[str, Path] = {}
    todo = [path]
    while todo:
        current = todo.pop()
        try:
            tree = ast.parse(current.read_text(), str(current))
        except (OSError, SyntaxError, UnicodeDecodeError):
            continue  # loading the schedule reports it
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module.split(".")[0]]
            else:
                continue
            for name in names:
                if name in found:
                    continue
                module = next((d / f"{name}.py" for d in helper_dirs(path)
                               if (d / f"{name}.py").is_file()), None)
                if module is not None:
                    found[name] = module
                    todo.append(module)
    return found


@contextlib.contextmanager
def _helpers_importable(path: Path):
    """The schedule's helper folders on the import path while its code runs; helpers it
    imports are read afresh (not an older copy left in ``sys.modules``)."""
    for name in helpers(path):
        sys.modules.pop(name, None)
    added = [str(d) for d in helper_dirs(path) if str(d) not in sys.path]
    sys.path[:0] = added
    try:
        yield
    finally:
        for entry in added:
            sys.path.remove(entry)


def load(path: Path, workload: str):
    """The ``schedule`` function defined in ``path``."""
    namespace = {"__file__": str(path), "__name__": f"modelbuild_schedule_{workload}"}
    try:
        code = compile(path.read_text(), str(path), "exec")
        with _helpers_importable(path):
            exec(code, namespace)  # noqa: S102 - the user's own schedule file, like a dodo.py
    except SyntaxError as err:
        raise BuildError(f"syntax error at line {err.lineno}: {err.msg}", file=path,
                         workload=workload, hint=HINT) from None
    except Exception as err:
        raise BuildError(f"loading the file raised{_where(err, path)}: {summarize(err)}",
                         file=path, workload=workload, hint=HINT) from None
    fn = namespace.get("schedule")
    if not callable(fn):
        raise BuildError("the file defines no function `schedule(sch)`", file=path,
                         workload=workload, hint="define def schedule(sch): ...")
    return fn


def apply(func, name: str, path: Path):
    """``func`` scheduled by the ``schedule`` function in ``path``."""
    import tvm
    from tvm.s_tir import Schedule

    from ..core.workloads import copy, normalize

    fn = load(path, name)
    sch = Schedule(normalize(func), error_render_level="detail")
    try:
        with _helpers_importable(path):
            fn(sch)
    except Exception as err:
        raise BuildError(f"the schedule function raised{_where(err, path)}: {summarize(err)}",
                         file=path, workload=name, hint=HINT) from None
    scheduled = sch.mod["main"]
    original = copy(func)
    return tvm.tirx.PrimFunc(scheduled.params, scheduled.body, scheduled.ret_type,
                             attrs=original.attrs).with_attr("tirx.is_scheduled", True)


def trace(func, name: str, path: Path) -> list:
    """The schedule function's work as a MetaSchedule trace (``Trace.as_json()``), which
    replays to the same schedule: how a Python schedule is exported to a database."""
    from tvm.s_tir import Schedule

    from ..core.workloads import normalize
    from .records import plain

    fn = load(path, name)
    sch = Schedule(normalize(func), error_render_level="detail")
    try:
        with _helpers_importable(path):
            fn(sch)
    except Exception as err:
        raise BuildError(f"the schedule function raised{_where(err, path)}: {summarize(err)}",
                         file=path, workload=name, hint=HINT) from None
    return plain(sch.trace.as_json())
