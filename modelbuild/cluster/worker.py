"""What a build worker runs: one step, from input bytes to output bytes.

``run_step`` is the one function the doit process submits to the executor (the
scheduler unpickles only a reference to it, so it never needs new code). It
checks that the worker is the code and TVM the build expects, runs the very step
function a local build runs on the input bytes the doit process read (the record as
its parsed object), in a private folder for what it writes, and returns the output's
bytes. Errors come back as ``RemoteStepError`` (plain text, no TVM
exception types, so the doit process never imports TVM to read one).

TVM-free at import; ``warm`` (the workers' preload module) imports it once.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from ..core.errors import BuildError
from ..steps import kinds


class RemoteStepError(Exception):
    """A step failed on a worker: its message as the user should read it."""

    def __init__(self, message: str, mismatch: bool = False):
        super().__init__(message)
        self.message = message
        self.mismatch = mismatch

    def __reduce__(self):
        return (RemoteStepError, (self.message, self.mismatch))


def identity(step: str, target_sources: tuple[str, ...]) -> dict:
    """What must be the same on the worker and in the doit process for ``step``: TVM with
    tvm-ffi (versions, libraries) and the digest of modelbuild's code for the step."""
    from ..steps import code, environment

    checked_as = "codegen" if step == "noop" else step  # the no-op pays codegen's check
    return {"tvm": environment.tvm_identity(),
            "code": code.digest(code.step_sources(checked_as, target_sources))}


def describe(ident: dict) -> str:
    from ..steps import environment

    return f"{environment.describe(ident.get('tvm'))}, modelbuild code {str(ident.get('code'))[:12]}"


def run_lower(folder: Path, args: dict) -> bytes:
    """The record arrives as the object the doit process read (its files' bytes inside,
    a Python schedule's helper modules too): applied from those bytes, never re-read."""
    from ..steps import lower

    return lower.lowered(args["workload"], args["record"], args["target"], args["name"])


def run_codegen(folder: Path, args: dict) -> bytes:
    from ..steps import codegen

    out = folder / f"object{args['target'].artifact_suffix}"
    codegen.compile_to(args["lowered"], out, args["target"], args["name"])
    return out.read_bytes()


def run_partition(folder: Path, args: dict) -> bytes:
    """Partition in a private project folder, from the ONNX bytes the doit process read;
    its output as the cache holds it (steps/partition_output.py), with what it said on stderr
    (the doit process prints it: the user sees a layout's fallback note as locally)."""
    import contextlib
    import io

    import msgpack

    from ..core.paths import Project
    from ..steps import partition
    from ..steps.partition_output import PartitionOutput

    layout = Project(folder).model(args["spec"].name)
    said = io.StringIO()
    with contextlib.redirect_stderr(said):
        partition.run(args["source"], args["spec"], layout, args["target"])
    return msgpack.packb({"output": PartitionOutput(layout).pack(), "stderr": said.getvalue()})


def run_noop(folder: Path, args: dict) -> bytes:
    """Returns its payload: the round trip of a step that does nothing (bench/)."""
    return args["payload"]


STEPS = {kinds.PARTITION.name: run_partition, kinds.LOWER.name: run_lower,
         kinds.CODEGEN.name: run_codegen, "noop": run_noop}


def _package_files() -> tuple:
    """(path, size, mtime) of each of modelbuild's source files, as they are on disk now."""
    from ..steps.code import PACKAGE

    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        try:
            st = path.stat()
        except OSError:
            continue
        out.append((str(path.relative_to(PACKAGE)), st.st_size, st.st_mtime_ns))
    return tuple(out)


class _Loaded:
    """modelbuild's files as they were when this worker process loaded its code (``warm``,
    else its first step). The code digest a step is checked with is read from disk, so a
    worker that loaded one modelbuild and was upgraded in place under it (or whose files
    were edited) passed the check and ran the code it had loaded, filing that step's output
    under the new code's key; a worker whose files changed since it loaded them refuses
    every step instead, as a worker running other code does."""

    files: tuple | None = None


def _loaded_other_code() -> str | None:
    now = _package_files()
    if _Loaded.files is None:
        _Loaded.files = now
        return None
    if now == _Loaded.files:
        return None
    before = {name: (size, mtime) for name, size, mtime in _Loaded.files}
    after = {name: (size, mtime) for name, size, mtime in now}
    changed = sorted(n for n in before.keys() | after.keys() if before.get(n) != after.get(n))
    return (f"the executor's worker loaded modelbuild's code before its files changed on disk "
            f"({', '.join(changed[:3])}{', ...' if len(changed) > 3 else ''}): it would run "
            "the code it loaded, not this build's")


def run_step(step: str, expected: dict, args: dict) -> bytes:
    """Run ``step`` ("partition", "lower" or "codegen") on ``args`` here; its output's
    bytes."""
    error = None
    try:
        stale = _loaded_other_code()
        if stale is not None:
            raise RemoteStepError(stale, mismatch=True)
        here = identity(step, args["target"].sources)
        if here != expected:
            raise RemoteStepError(
                f"the executor's worker runs other code than this build: worker: "
                f"{describe(here)}; this build: {describe(expected)}",
                mismatch=True)
        with tempfile.TemporaryDirectory(prefix=f"modelbuild-{step}-") as tmp:
            try:
                return STEPS[step](Path(tmp), args)
            except BuildError as err:  # the doit process says "error: <task>: " itself
                error = str(err).replace(tmp + "/", "").removeprefix("error: ")
    except RemoteStepError as err:
        error = err
    except Exception as err:  # noqa: BLE001 - sent back as text, never as a TVM exception
        from ..core.errors import summarize

        error = f"{step} failed on the worker: {summarize(err)}"
    # raised outside every except block: no TVM exception travels as its __context__
    raise error if isinstance(error, RemoteStepError) else RemoteStepError(str(error))


def warm() -> None:
    """Import what the steps need, once, before a worker takes its first step."""
    from ..core import collector

    collector.import_tvm()
    from ..steps import codegen, lower, partition  # noqa: F401

    _loaded_other_code()  # the files as this process loaded them
