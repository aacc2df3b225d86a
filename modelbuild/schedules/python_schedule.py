"""Schedule records written by hand in Python.

``schedules/<model>/<workload>.py`` defines

    def schedule(sch):
        # sch: tvm.s_tir.Schedule over the workload, a module with one function "main"
        block = sch.get_sblock("conv2d_nchw")
        ...

lower runs it on the workload and keeps the result exactly as it keeps a
MetaSchedule trace's (the original function attributes, marked scheduled).
An exception inside the file is reported with the file, line and workload.
"""

from __future__ import annotations

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


def load(path: Path, workload: str):
    """The ``schedule`` function defined in ``path``."""
    namespace = {"__file__": str(path), "__name__": f"modelbuild_schedule_{workload}"}
    try:
        code = compile(path.read_text(), str(path), "exec")
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
        fn(sch)
    except Exception as err:
        raise BuildError(f"the schedule function raised{_where(err, path)}: {summarize(err)}",
                         file=path, workload=name, hint=HINT) from None
    scheduled = sch.mod["main"]
    original = copy(func)
    return tvm.tirx.PrimFunc(scheduled.params, scheduled.body, scheduled.ret_type,
                             attrs=original.attrs).with_attr("tirx.is_scheduled", True)
