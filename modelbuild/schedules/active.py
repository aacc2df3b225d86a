"""Which record a workload builds with, and what that record means: the one place that
decides it. Every step and command receives one of these objects.

    schedules/<model>/<workload>.json   Trace: a MetaSchedule trace (records.py);
                                        Invalid if it does not parse
    schedules/<model>/<workload>.py     Python: a schedule function (python_schedule.py)
    neither                             Default: the target's default schedule
    both                                Conflict: an error, a build needs exactly one

``active()`` reads the record's files once and parses them once; the object holds
those bytes, so what a build keys (``identity``), ships (``files``) and applies
(``apply``) is the same edit, even when the file changes meanwhile (issue 19).

Reading and parsing are plain file and JSON work, no TVM; ``apply`` and ``check``
import it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..core.digest import bytes_digest
from ..core.errors import BuildError
from ..core.paths import ModelPaths
from . import compute_record, python_schedule, records
from .changes import record_changes


class _Kind:
    """What every kind of record can say (each kind overrides what differs)."""

    workload: str

    def identity(self) -> dict:
        """What of the record decides the schedule (part of the lower step's key): its
        meaning, not its formatting."""
        raise NotImplementedError

    def files(self) -> dict[Path, bytes]:
        """The files the record was read from, with the bytes read (a Python schedule's
        helper modules too)."""
        return {}

    def apply(self, func, target_spec):
        """``func`` scheduled as this record says; BuildError when it cannot be."""
        raise NotImplementedError

    def check(self, func, target_spec) -> None:
        """Raise BuildError when the record would not build (what ``check`` runs)."""
        self.apply(func, target_spec)

    def changes_since(self, old: dict) -> list[str]:
        """How this record differs from one an earlier build used (its ``identity``), in
        words for ``why``."""
        return record_changes(old, self.identity())


@dataclass(frozen=True)
class Default(_Kind):
    """No record: the target's default schedule (its entry's ``default_schedule`` hook if it
    has one, else TVM's, applied at codegen)."""

    workload: str

    @property
    def path(self) -> None:
        return None

    def identity(self) -> dict:
        return {"kind": "default"}

    def apply(self, func, target_spec):
        if target_spec.default_schedule is None:
            return func
        import tvm

        return target_spec.default_schedule(func, self.workload,
                                            tvm.target.Target(target_spec.tvm_target))


@dataclass(frozen=True)
class Trace(_Kind):
    """A MetaSchedule trace (.json), parsed."""

    workload: str
    path: Path
    data: bytes
    record: records.Record

    def identity(self) -> dict:
        return {"kind": "json", "file": str(self.path), "canonical": self.record.canonical()}

    def files(self) -> dict[Path, bytes]:
        return {self.path: self.data}

    def checked(self, func, target_spec) -> records.Record:
        """The record, validated against the workload as the build needs it: target,
        workload hash (stale?). Raises BuildError."""
        from .apply import check_record

        return check_record(self.record, func, self.workload, target_spec)

    def apply(self, func, target_spec):
        import tvm

        from .apply import apply_record

        return apply_record(func, self.workload, self.checked(func, target_spec),
                            tvm.target.Target(target_spec.tvm_target))

    def check(self, func, target_spec) -> None:
        from .apply import check_decisions

        check_decisions(func, self.workload, self.checked(func, target_spec))  # the whole trace


@dataclass(frozen=True)
class Variant(_Kind):
    """A record naming the workload's compute (compute_record.py): the default schedule on
    that compute's TIR, or a trace made for it. Lower applies it to that TIR
    (``tir_compute``), which the lower step keys (fingerprint.lower_inputs)."""

    workload: str
    path: Path
    data: bytes
    compute: str
    record: records.Record | None  # a trace for the compute's TIR, or None: the default

    @property
    def tir_compute(self) -> str:
        return self.compute

    def identity(self) -> dict:
        return {"kind": "compute", "file": str(self.path), "compute": self.compute,
                "canonical": self.record.canonical() if self.record else None}

    def files(self) -> dict[Path, bytes]:
        return {self.path: self.data}

    def _trace(self) -> Trace | None:
        return None if self.record is None else Trace(self.workload, self.path, self.data,
                                                      self.record)

    def apply(self, func, target_spec):
        trace = self._trace()
        return (trace or Default(self.workload)).apply(func, target_spec)

    def check(self, func, target_spec) -> None:
        trace = self._trace()
        (trace or Default(self.workload)).check(func, target_spec)

    def for_computes(self, computes: list[str]) -> "Variant | Invalid":
        """This record, or Invalid when the workload has no such compute (refused like any
        bad record: which workload, which computes it has)."""
        if self.compute in computes:
            return self
        return Invalid(self.workload, self.path, self.data,
                       f"the record names compute '{self.compute}', which workload "
                       f"{self.workload} does not have; its computes: {', '.join(computes)}",
                       "name one of its computes, or delete the \"compute\" field")


@dataclass(frozen=True)
class Invalid(_Kind):
    """A .json record that does not parse. The one rule for it: it is identified by its
    bytes (the build fails on it, and must not find it in the cache), and building with it
    fails with the reason it does not parse."""

    workload: str
    path: Path
    data: bytes
    reason: str         # why it does not parse
    hint: str | None

    @property
    def error(self) -> BuildError:
        return BuildError(self.reason, file=self.path, workload=self.workload, hint=self.hint)

    def identity(self) -> dict:
        return {"kind": "invalid", "file": str(self.path), "sha256": bytes_digest(self.data)}

    def files(self) -> dict[Path, bytes]:
        return {self.path: self.data}

    def apply(self, func, target_spec):
        raise self.error


@dataclass(frozen=True)
class Python(_Kind):
    """A Python schedule function (.py) with the helper modules it imports, as read."""

    workload: str
    path: Path
    data: bytes
    helpers: tuple[tuple[str, Path, bytes], ...]  # (module name, file, bytes), by name

    def _helpers(self) -> dict[str, tuple[Path, bytes]]:
        return {name: (file, data) for name, file, data in self.helpers}

    def identity(self) -> dict:
        return {"kind": "python", "file": str(self.path), "sha256": bytes_digest(self.data),
                "helpers": {name: bytes_digest(data) for name, _, data in self.helpers}}

    def files(self) -> dict[Path, bytes]:
        return {self.path: self.data, **{file: data for _, file, data in self.helpers}}

    def apply(self, func, target_spec):
        return python_schedule.apply(func, self.workload, self.path, self.data, self._helpers())

    def trace(self, func) -> list:
        """What the function does, as a MetaSchedule trace (how it is exported)."""
        return python_schedule.trace(func, self.workload, self.path, self.data, self._helpers())


@dataclass(frozen=True)
class Conflict(_Kind):
    """Two records for one workload: building it fails until one is deleted."""

    workload: str
    paths: tuple[Path, ...]

    @property
    def path(self) -> Path:
        return self.paths[0]

    def identity(self) -> dict:
        return {"kind": "conflict", "files": [str(p) for p in self.paths]}

    def apply(self, func, target_spec):
        raise BuildError(f"two records for one workload: {', '.join(map(str, self.paths))}",
                         file=self.paths[0], workload=self.workload,
                         hint="delete the one not meant")


Active = Default | Trace | Variant | Invalid | Python | Conflict  # what active() returns


def tir_compute(record: Active) -> str:
    """Which of the workload's computes the record builds: its TIR file
    (layout.workload(name, compute))."""
    return getattr(record, "tir_compute", compute_record.DIRECT)


def with_computes(record: Active, computes: list[str]) -> Active:
    """``record`` as the build takes it, given the computes its workload has."""
    return record.for_computes(computes) if isinstance(record, Variant) else record


def candidates(layout: ModelPaths, workload: str) -> tuple[Path, Path]:
    """Where a workload's record can be: its JSON trace, its Python schedule."""
    return layout.record(workload), layout.python_record(workload)


def located(layout: ModelPaths, workload: str) -> tuple[Path, ...]:
    """The record files of a workload that exist now (none read: cheap, for listings)."""
    return tuple(p for p in candidates(layout, workload) if p.is_file())


def _read(path: Path) -> bytes | str | None:
    """The file's bytes; None when there is no record there; or why what is there cannot be
    read as one (a folder or a dangling link was taken for no record, silently)."""
    try:
        return records.read(path)
    except NotADirectoryError:
        return None  # the model's schedules folder is a file: no record can be there
    except OSError as err:
        if type(err) is FileNotFoundError and not path.is_symlink():
            return None
        return records.unreadable(path, err)


def of_files(workload: str, paths: tuple[Path, ...]) -> Active:
    """The record of ``workload`` made of the files at ``paths`` (those that exist), each
    read once and parsed once."""
    found = [(p, data) for p in paths if (data := _read(p)) is not None]
    if not found:
        return Default(workload)
    records_found = [p for p, data in found if not isinstance(data, str)]
    if len(records_found) > 1:
        return Conflict(workload, tuple(records_found))
    # what cannot be read first: two unreadable places (a schedules folder that is a link
    # loop makes both X.json and X.py so) are no two records
    path, data = next(((p, d) for p, d in found if isinstance(d, str)), found[0])
    if isinstance(data, str):
        return Invalid(workload, path, b"", data, "put a record file there, or remove what is")
    if _is_python(path):
        helpers = python_schedule.read_helpers(path, data)
        return Python(workload, path, data,
                      tuple((name, f, b) for name, (f, b) in sorted(helpers.items())))
    return of_json(workload, path, data)


def _is_python(path: Path) -> bool:
    """Whether the record file at ``path`` is a Python schedule (else a JSON record)."""
    return path.suffix == ".py"


def of_json(workload: str, path: Path, data: bytes) -> Trace | Variant | Invalid:
    """A JSON record from its bytes: a Trace, a Variant (it names a compute), or Invalid
    with the reason."""
    try:
        if compute_record.named_compute(data):
            return Variant(workload, path, data, *compute_record.parse(data, path, workload))
        return Trace(workload, path, data, records.parse_bytes(data, path, workload))
    except BuildError as err:
        return Invalid(workload, path, data, err.message, err.hint)


def active(layout: ModelPaths, workload: str) -> Active:
    """The record ``workload`` builds with now, read once."""
    return of_files(workload, candidates(layout, workload))


def record_files(layout: ModelPaths) -> list[Path]:
    """Every active record file of the model (JSON and Python), by name; variants are apart."""
    return record_files_in(layout.records_dir)


def record_files_in(folder: Path, helpers: bool = False) -> list[Path]:
    """The active record files in one model's schedules folder (a name starting with ``_``
    is a Python schedule's helper module, not a record; ``helpers``: those too)."""
    if not folder.is_dir():
        return []
    return sorted(p for p in [*folder.glob("*.json"), *folder.glob("*.py")]
                  if helpers or not p.name.startswith("_"))


def records_in(folder: Path) -> list[Active]:
    """Each active record file in ``folder`` as its own record (for a workload named by the
    file), read once."""
    return [of_files(p.stem, (p,)) for p in record_files_in(folder)]


def files_in(folder: Path) -> list[Path]:
    """Every file whose edit changes a record of one model's schedules folder: the record
    files, the helper modules beside them (imported or not: a schedule may import one
    later), and those its Python schedules import from elsewhere (schedules/). Only the
    Python schedules are read, for their imports; no JSON is parsed: cheap enough to poll
    (watch)."""
    found = record_files_in(folder, helpers=True)
    return found + [f for p in found if _is_python(p) for f in of_files(p.stem, (p,)).files()]


def python_file(layout: ModelPaths, workload: str) -> Path | None:
    """The workload's Python schedule file, None when it has none (nothing read): a JSON
    record written beside it would not be the active one."""
    path = layout.python_record(workload)
    return path if path.is_file() else None
