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
import importlib.abc
import importlib.util
import linecache
import os
import signal
import sys
import threading
import traceback
from pathlib import Path

from ..core.atomic import current_umask
from ..core.errors import BuildError, summarize
from . import records

HINT = "fix the schedule function, or delete the file to use the target's default schedule"


def _where(err: BaseException, path: Path) -> str:
    frames = [f for f in traceback.extract_tb(err.__traceback__) if Path(f.filename) == path]
    if not frames:
        return ""
    frame = frames[-1]
    code = f" (`{frame.line.strip()}`)" if frame.line else ""
    return f" at line {frame.lineno}{code}"


def helper_dirs(path: Path) -> list[Path]:
    """Where a schedule's helper modules are found: its own folder, then schedules/, then
    the project's root (the folder of schedules/: doit puts dodo.py's folder on the import
    path, so a module there was importable, and untracked)."""
    dirs = [path.parent, path.parent.parent]
    return dirs + [path.parent.parent.parent] if path.parent.parent.name == "schedules" else dirs


def _module_files(folder: Path, name: str) -> dict[str, Path]:
    """dotted name -> file of the helper ``name`` in ``folder``: ``name.py``, or a package
    ``name/`` (its ``__init__.py`` and every module under it); {} when neither is there."""
    if (folder / f"{name}.py").is_file():
        return {name: folder / f"{name}.py"}
    package = folder / name
    if not (package / "__init__.py").is_file():
        return {}
    found = {}
    for file in sorted(package.rglob("*.py")):
        parts = file.relative_to(folder).with_suffix("").parts
        if all(part.isidentifier() for part in parts):
            dotted = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[dotted] = file
    return found


def _installed(name: str, own: set) -> bool:
    """Whether ``name`` is a module of Python or of an installed package (found on the
    import path outside the project's helper folders ``own``, resolved): never taken for a
    helper, whose bytes would replace the real module in the process (a json.py beside
    dodo.py)."""
    import importlib.machinery

    if name in sys.builtin_module_names or name in getattr(sys, "stdlib_module_names", ()):
        return True
    elsewhere = [entry for entry in sys.path if not _inside(entry, own)]
    return importlib.machinery.PathFinder.find_spec(name, elsewhere) is not None


def read_helpers(path: Path, source: bytes) -> dict[str, tuple[Path, bytes]]:
    """module name -> (file, its bytes) of every helper module the schedule ``source`` (the
    bytes of ``path``) imports, directly or through another helper: each file read once,
    found from the source (nothing is imported). A helper package counts whole: every
    module under it."""
    found: dict[str, tuple[Path, bytes]] = {}
    dirs = helper_dirs(path)
    own = {d.resolve() for d in dirs}
    todo = [(path, source)]
    while todo:
        current, data = todo.pop()
        try:
            tree = ast.parse(data.decode("utf-8"), str(current))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue  # loading the schedule reports it
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module.split(".")[0]]
            else:
                continue  # a relative import inside a helper package: the package is read
            for name in names:
                if name in found:
                    continue
                files = next((f for f in (_module_files(d, name) for d in dirs) if f), {})
                if files and _installed(name, own):
                    continue  # json.py or numpy.py of the project: Python's own comes first
                for dotted, file in files.items():
                    try:
                        found[dotted] = (file, records.read(file))
                    except OSError:
                        continue  # gone since: loading the schedule reports it
                    todo.append(found[dotted])
    return found


class _HelperFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports a schedule's helper modules from the bytes read with the schedule, never
    from the files again (an edit meanwhile is the next build's)."""

    def __init__(self, helpers: dict[str, tuple[Path, bytes]]):
        self.helpers = helpers

    def find_spec(self, name, path=None, target=None):
        if name not in self.helpers:
            return None
        file = self.helpers[name][0]
        spec = importlib.util.spec_from_loader(name, self, origin=str(file),
                                               is_package=file.name == "__init__.py")
        spec.has_location = True  # __file__ is the helper's
        return spec

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        file, data = self.helpers[module.__name__]
        module.__file__ = str(file)
        exec(compile(data.decode("utf-8"), str(file), "exec"), module.__dict__)  # noqa: S102


@contextlib.contextmanager
def _helpers_importable(path: Path, source: bytes, helpers: dict[str, tuple[Path, bytes]]):
    """The schedule's helper modules importable, from their bytes, while its code runs, and
    no other code of the project: the helper folders (the project's root among them, where
    doit puts dodo.py's folder on the import path) are off the import path meanwhile, so
    an import is a helper read with the schedule (in its key) or Python's and the installed
    packages' own, never a project file the key does not cover. Tracebacks show the lines
    read. Helpers are imported afresh each time (not an older copy left in
    ``sys.modules``)."""
    for name in helpers:
        sys.modules.pop(name, None)
    finder = _HelperFinder(helpers)
    sys.meta_path.insert(0, finder)
    saved_path = list(sys.path)
    own = {d.resolve() for d in helper_dirs(path)}
    sys.path[:] = [e for e in sys.path if not _inside(e, own)]
    lines = {str(f): data for f, data in [(path, source), *helpers.values()]}
    saved = {name: linecache.cache.get(name) for name in lines}
    for name, data in lines.items():
        text = data.decode("utf-8", errors="replace")
        linecache.cache[name] = (len(text), None, text.splitlines(True), name)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
        sys.path[:] = saved_path
        for name in helpers:
            sys.modules.pop(name, None)
        for name, entry in saved.items():
            if entry is None:
                linecache.cache.pop(name, None)
            else:
                linecache.cache[name] = entry


def _inside(entry: str, folders: set) -> bool:
    """Whether the import path entry ``entry`` ("" is the working directory) is one of
    ``folders``."""
    try:
        return Path(entry or ".").resolve() in folders
    except OSError:
        return False


def load(path: Path, workload: str, source: bytes, helpers: dict[str, tuple[Path, bytes]]):
    """The ``schedule`` function defined by ``source`` (the bytes read from ``path``), its
    helper modules imported from ``helpers`` (``read_helpers``)."""
    namespace = {"__file__": str(path), "__name__": f"modelbuild_schedule_{workload}"}

    def run():
        code = compile(source.decode("utf-8"), str(path), "exec")
        exec(code, namespace)  # noqa: S102 - the user's own schedule file, like a dodo.py

    try:
        _run_user_code(run, "loading the file", path, workload, source, helpers)
    except SyntaxError as err:
        raise BuildError(f"syntax error at line {err.lineno}: {err.msg}", file=path,
                         workload=workload, hint=HINT) from None
    fn = namespace.get("schedule")
    if not callable(fn):
        raise BuildError("the file defines no function `schedule(sch)`", file=path,
                         workload=workload, hint="define def schedule(sch): ...")
    return fn


class _Exit(Exception):
    """os._exit or os.exec* called by a schedule: refused, as a failure of its step;
    ``called``: the call, in words."""

    def __init__(self, called: str):
        super().__init__(called)
        self.called = called


_EXEC = ("execl", "execle", "execlp", "execlpe", "execv", "execve", "execvp", "execvpe")


@contextlib.contextmanager
def _contained():
    """What a schedule's code may not do to the build around it: end the process
    (``os._exit`` skips every handler: doit exited with the schedule's status, 0
    included, the library not linked), replace it (``os.exec*``), or leave another working
    directory or umask (the build's paths are relative to the project; its files are made
    with the user's umask): both are put back. Code that ends the process by other means
    (ctypes, a thread it leaves running) is not stopped: a schedule runs in the build's
    process, as dodo.py does."""
    import posix

    cwd = os.getcwd()
    umask = current_umask()
    real = {(module, name): getattr(module, name)
            for module in (os, posix) for name in ("_exit", *_EXEC) if hasattr(module, name)}

    def refused(name):
        def call(*args, **_kwargs):
            raise _Exit(f"os.{name}({', '.join(map(repr, args[:1]))})")
        return call

    for (module, name) in real:
        setattr(module, name, refused(name))
    try:
        yield
    finally:
        for (module, name), function in real.items():
            setattr(module, name, function)
        os.umask(umask)
        try:
            moved = os.getcwd() != cwd
        except OSError:  # it went to a folder it then removed
            moved = True
        if moved:
            os.chdir(cwd)


def _run_user_code(run, what: str, path: Path, workload: str, source: bytes,
                   helpers: dict) -> None:
    """``run()``, the schedule file's own code; what it raises (any BaseException but a
    Ctrl-C and a SyntaxError, which the caller words) fails its step in words."""
    try:
        with _sigints() as sigint, _contained(), _helpers_importable(path, source, helpers):
            try:
                run()
            except KeyboardInterrupt as err:
                if sigint():
                    raise  # a Ctrl-C: the build stops, as anywhere
                raise _Raised().with_traceback(err.__traceback__) from None
    except (KeyboardInterrupt, SyntaxError):
        raise
    except _Raised as err:
        raise BuildError(f"{what} raised KeyboardInterrupt{_where(err, path)}, with no Ctrl-C: "
                         "its own failure", file=path, workload=workload, hint=HINT) from None
    except (SystemExit, _Exit) as err:
        called = err.called if isinstance(err, _Exit) else f"sys.exit({err.code!r})"
        raise BuildError(f"{what} called {called}: a schedule cannot end the build",
                         file=path, workload=workload, hint=HINT) from None
    except BaseException as err:  # noqa: BLE001 - GeneratorExit, a BaseException of its own
        hint = HINT if not isinstance(err, ModuleNotFoundError) else (
            "a schedule imports its helpers by their own names (`from _opt import F` for "
            "schedules/<model>/_opt.py; `import h` for schedules/h.py or h.py beside dodo.py, "
            "or a package there), Python's and installed modules: no other project code")
        raise BuildError(f"{what} raised{_where(err, path)}: {summarize(err)}",
                         file=path, workload=workload, hint=hint) from None


class _Raised(Exception):
    """A KeyboardInterrupt the schedule's own code raised (no Ctrl-C came): its failure."""


@contextlib.contextmanager
def _sigints():
    """Yields ``sigint()``: whether a real SIGINT came while the block ran, as opposed to a
    KeyboardInterrupt the schedule raised itself (which fails its step, as any exception
    does; it had stopped the build as "interrupted"). The handler in place still runs."""
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or not callable(previous):
        yield lambda: False  # no SIGINT raises here: another thread, or ignored / default
        return
    received: list[int] = []

    def handler(signum, frame):
        received.append(signum)
        previous(signum, frame)

    signal.signal(signal.SIGINT, handler)
    try:
        yield lambda: bool(received)
    finally:
        signal.signal(signal.SIGINT, previous)


def _scheduled(func, name: str, path: Path, source: bytes, helpers: dict):
    """The ``Schedule`` the function in ``source`` made of ``func``."""
    from tvm.s_tir import Schedule

    from ..core.workloads import normalize

    fn = load(path, name, source, helpers)
    sch = Schedule(normalize(func), error_render_level="detail")
    _run_user_code(lambda: fn(sch), "the schedule function", path, name, source, helpers)
    for inst in sch.trace.insts:
        if inst.kind.name == "Split" and len(inst.attrs) > 1 and bool(inst.attrs[1]):
            raise BuildError("the schedule function splits a loop with disable_predication=True:"
                             " with factors that do not divide the loop the library writes "
                             "past its buffers, and nothing checks that they do (records may "
                             "not either)", file=path, workload=name, hint=HINT)
    return sch


def apply(func, name: str, path: Path, source: bytes, helpers: dict):
    """``func`` scheduled by the ``schedule`` function in ``source`` (read from ``path``)."""
    import tvm

    from ..core.workloads import copy

    scheduled = _scheduled(func, name, path, source, helpers).mod["main"]
    original = copy(func)
    return tvm.tirx.PrimFunc(scheduled.params, scheduled.body, scheduled.ret_type,
                             attrs=original.attrs).with_attr("tirx.is_scheduled", True)


def trace(func, name: str, path: Path, source: bytes, helpers: dict) -> list:
    """The schedule function's work as a MetaSchedule trace (``Trace.as_json()``), which
    replays to the same schedule: how a Python schedule is exported to a database."""
    plain = records.plain

    return plain(_scheduled(func, name, path, source, helpers).trace.as_json())
