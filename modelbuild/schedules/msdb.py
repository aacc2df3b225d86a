"""MetaSchedule databases <-> modelbuild record files.

Import matches the database's workloads to the model's by structural
equality and takes each one's fastest valid record (what
``JSONDatabase.query_tuning_record`` returns); export writes a JSONDatabase
that ``tvm.compile`` with ``MetaScheduleApplyDatabase`` accepts.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..core.digits import is_decimal
from ..core.errors import BuildError
from ..core.paths import ModelPaths
from ..targets.registry import TargetSpec
from ..core import atomic
from . import active, compute_record, records, variants

WORKLOAD_FILE = "database_workload.json"
RECORD_FILE = "database_tuning_record.json"


@dataclass
class ImportReport:
    written: list[str] = field(default_factory=list)     # record file changed or new
    unchanged: list[str] = field(default_factory=list)   # same record already there
    skipped: list[str] = field(default_factory=list)     # model workload with no valid record
    unmatched: list[str] = field(default_factory=list)   # database workloads the model lacks
    # not faster by timing.KEEP_MARGIN than what the build runs now (the workload's active
    # record, else the default schedule)
    not_faster: list[str] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)       # TVM's code for it computes other numbers
    python: list[str] = field(default_factory=list)      # scheduled by a Python file: left alone
    # the active record a written one replaced, the user's own: workload -> its variant number
    kept: dict[str, int] = field(default_factory=dict)
    # the user's own active record could not be kept as a variant: left active, not replaced
    not_kept: list[str] = field(default_factory=list)
    # keep-if-faster: workload -> {"default_ms", "record_ms"}, timed side by side here, and
    # with an active record the new one would replace, "active_ms" (what it was held to)
    timings: dict[str, dict] = field(default_factory=dict)

    @property
    def matched(self) -> int:
        return len(self.written) + len(self.unchanged)

    def to_json(self) -> dict:
        return {"written": self.written, "unchanged": self.unchanged, "skipped": self.skipped,
                "not_faster": self.not_faster, "wrong": self.wrong, "unmatched": self.unmatched,
                "python": self.python, "kept": self.kept, "not_kept": self.not_kept,
                "matched": self.matched, "timings": self.timings}


def validate_files(work_dir: Path) -> None:
    """Clear errors for a missing file or a line that is not JSON, before TVM reads them."""
    if not work_dir.is_dir():
        raise BuildError("not a directory", file=work_dir,
                         hint="give the work_dir that MetaSchedule tuning wrote")
    workloads = 0  # the workload file's lines, which the records index
    for name in (WORKLOAD_FILE, RECORD_FILE):
        path = work_dir / name
        if not path.exists():
            raise BuildError(f"missing {name}: a MetaSchedule database has {WORKLOAD_FILE} "
                             f"and {RECORD_FILE}", file=path)
        if not path.is_file():  # a pipe's read would wait forever, /dev/zero's never end
            raise BuildError(f"{name} is not a regular file (a folder, a pipe or a device): "
                             f"a MetaSchedule database has {WORKLOAD_FILE} and {RECORD_FILE}",
                             file=path, hint="give the work_dir that MetaSchedule tuning wrote")
        try:
            text = path.read_bytes().decode("utf-8")
        except UnicodeDecodeError as err:
            raise BuildError(f"{name} is not text (byte {err.start} is no UTF-8): MetaSchedule "
                             "writes one JSON value per line", file=path,
                             hint="give the work_dir that MetaSchedule tuning wrote") from None
        for lineno, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
            except json.JSONDecodeError as err:
                raise BuildError(f"line {lineno} is not valid JSON ({err.msg}); "
                                 "the file may be truncated", file=path,
                                 hint="re-run tuning, or delete the broken line") from None
            shape = _line_shape(name, entry, workloads)
            if shape:
                raise BuildError(f"line {lineno} is not a MetaSchedule {shape}", file=path,
                                 hint="give the work_dir that MetaSchedule tuning wrote, or "
                                      "delete the line")
            if name == WORKLOAD_FILE:
                workloads += 1
                continue
            problem = _record_problem(entry, workloads)
            if problem:
                raise BuildError(f"line {lineno}: {problem}", file=path,
                                 hint="give the work_dir that MetaSchedule tuning wrote, or "
                                      "delete the line")


def _line_shape(name: str, entry, workloads: int) -> str | None:
    """What a database line should be, when ``entry`` is not that: a workload line is
    [structural hash, the workload's module (base64)]; a record line [index of a workload
    line, the record]. ``workloads``: the workload lines read so far (records come after,
    and index them)."""
    if name == WORKLOAD_FILE:
        ok = (isinstance(entry, list) and len(entry) == 2  # the hash: below 2**64, 20 digits
              and all(isinstance(x, str) for x in entry) and is_decimal(entry[0], most=20))
        return None if ok else "workload: [\"<structural hash>\", \"<module, base64>\"]"
    ok = (isinstance(entry, list) and len(entry) == 2 and type(entry[0]) is int
          and isinstance(entry[1], list) and entry[0] >= 0)
    return None if ok else "tuning record: [<workload line index>, [<trace>, ...]]"


def _record_problem(entry: list, workloads: int) -> str | None:
    """What is wrong with a tuning record line that TVM would replay without checking (a
    null decision or one past the trace's instructions ended the process with SIGSEGV), or
    None. ``workloads``: the lines of the workload file."""
    import math

    index, record = entry
    if index >= workloads:
        return f"the record names workload line {index}; the workload file has {workloads}"
    if len(record) < 3:
        return "a tuning record is [trace, run_secs, target, args_info]"
    problem = records.trace_problem(record[0])
    if problem:
        return problem
    run_secs = record[1]
    if run_secs is not None and not (isinstance(run_secs, list) and all(
            isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
            and x >= 0 for x in run_secs)):
        return "run_secs must be a list of times (finite, at least 0) or null"
    target = record[2]
    if not (isinstance(target, dict) and "kind" in target
            and records.MAX_DEPTH >= records.depth(target)):
        return "the record's target must be a TVM target object with a 'kind'"
    return None


def _open(work_dir: Path, validated: bool = False):
    import tvm
    from tvm.s_tir import meta_schedule as ms

    if not validated:
        validate_files(work_dir)
    try:
        return ms.database.JSONDatabase(str(work_dir / WORKLOAD_FILE),
                                        str(work_dir / RECORD_FILE), allow_missing=False)
    except (tvm.error.InternalError, RuntimeError, TypeError, ValueError) as err:
        from ..core.errors import summarize

        raise BuildError(f"TVM cannot read this MetaSchedule database: {summarize(err, limit=2)}",
                         file=work_dir, hint="give the work_dir that MetaSchedule tuning wrote "
                                             "(a hand-edited line may be the cause)") from None


def _workload(db, func):
    """The database's workload of ``func``, None when it has none."""
    from ..core.workloads import normalize

    mod = normalize(func)
    return db.commit_workload(mod) if db.has_workload(mod) else None


def _know(db, func, matched: set) -> None:
    """Add the database's workload of ``func`` (if it has one) to ``matched``."""
    import tvm_ffi

    workload = _workload(db, func)
    if workload is not None:
        matched.add(tvm_ffi.structural_hash(workload.mod))


def known(work_dir: Path, funcs: dict) -> list[str]:
    """The names of ``funcs`` (name -> TIR) whose workload the database has."""
    db = _open(work_dir, validated=True)
    return [name for name, func in funcs.items() if _workload(db, func) is not None]


def _pick(db, candidates: list, matched: set):
    """(compute, func, tuning record) of the fastest record the database has for one of a
    workload's computes (``candidates``: (compute, func), direct first: it wins ties);
    (None, None, None) when it has none; None when it knows none of them."""
    import tvm_ffi

    found, known = [], False
    for compute, func in candidates:
        workload = _workload(db, func)
        if workload is None:
            continue
        known = True
        matched.add(tvm_ffi.structural_hash(workload.mod))
        best = db.get_top_k(workload, 1)
        if best:
            secs = [float(x) for x in best[0].run_secs] if best[0].run_secs else [1e30]
            found.append((sum(secs) / len(secs), len(found), compute, func, best[0]))
    if not known:
        return None
    return min(found)[2:] if found else (None, None, None)


def trials_for(work_dir: Path, funcs: dict) -> int:
    """How many trials the database in ``work_dir`` holds for the workloads ``funcs`` (name
    -> TIR): a resumed tune of some workloads goes on from theirs, not from every trial."""
    db = _open(work_dir)
    known = [w for w in (_workload(db, f) for f in funcs.values()) if w is not None]
    return sum(1 for rec in db.get_all_tuning_records()
               if any(rec.workload.same_as(w) for w in known))


def import_database(work_dir: Path, model: str, funcs: dict, layout: ModelPaths,
                    source: str = "tuned", only: set[str] | None = None,
                    keep_if_faster: TargetSpec | None = None,
                    variant_funcs: dict | None = None, validated: bool = False) -> ImportReport:
    """Write one record file per model workload the database has a valid record for.

    With ``keep_if_faster`` (a target), each record is first timed on this machine
    against what the build runs now, the workload's active record (a trace, or a compute
    with its schedule) or else the default schedule, and left out unless it is faster by
    ``timing.KEEP_MARGIN``: a tune never makes a workload slower. ``variant_funcs``:
    (workload, compute) -> the TIR of another compute; a database record of that TIR is
    imported as a record naming the compute when it is the workload's fastest.
    ``validated``: the caller already ran ``validate_files`` on ``work_dir``.
    """
    import tvm_ffi

    from ..core.workloads import structural_hash
    from .records import plain

    db = _open(work_dir, validated)
    report = ImportReport()
    matched = set()  # structural hashes of the database workloads the model has
    for name, direct in funcs.items():
        if only is not None and name not in only:
            _know(db, direct, matched)  # not imported now, but the model's: not "unmatched"
            continue
        picked = _pick(db, [(None, direct), *((c, f) for (w, c), f in
                                              (variant_funcs or {}).items() if w == name)],
                       matched)
        if picked is None:
            continue
        compute, func, rec = picked
        if rec is None:
            report.skipped.append(name)
            continue
        if active.python_file(layout, name) is not None:  # a JSON beside it would conflict
            report.python.append(name)
            continue
        record = records.Record(
            None, name, structural_hash(func), target_dict(rec.target),
            plain(rec.trace.as_json()), [float(x) for x in plain(rec.run_secs)] if rec.run_secs else None,
            source, model)
        if not _computes_the_workload(func, name, record, keep_if_faster):
            report.wrong.append(name)
            continue
        path = layout.record(name)
        text = (records.format_record(record) if compute is None
                else compute_record.to_json(name, compute, record))
        if path.is_file() and path.read_text() == text:
            report.unchanged.append(name)
            continue
        if keep_if_faster is not None and not _faster_than_now(
                report, layout, name, direct, func, record, keep_if_faster, variant_funcs):
            report.not_faster.append(name)
            continue
        try:
            kept = variants.keep_active(layout, name)  # the user's own record: not lost
        except OSError:  # the variants folder cannot be written: the record stays active
            report.not_kept.append(name)
            continue
        if kept is not None:
            report.kept[name] = kept
        atomic.write_text(path, text)
        report.written.append(name)
    seen = []  # the database's workload objects, each hashed once
    for tuning_record in db.get_all_tuning_records():
        workload = tuning_record.workload
        if any(workload.same_as(w) for w in seen):
            continue
        seen.append(workload)
        if tvm_ffi.structural_hash(workload.mod) not in matched:
            report.unmatched.append(_workload_label(workload.mod))
    return report


def _faster_than_now(report: ImportReport, layout: ModelPaths, name: str, direct, func,
                     record, target: TargetSpec, variant_funcs: dict | None) -> bool:
    """Whether ``record`` (for the TIR ``func``) runs faster by the margin than what the
    build runs for workload ``name`` now: its active record when it has one that applies,
    else the default schedule on its direct TIR (``direct``). Timings go to the report."""
    from .timing import faster_enough, record_speedup

    current = active.active(layout, name)
    now = None
    if isinstance(current, (active.Trace, active.Variant)):
        compute = active.tir_compute(current)
        tir = direct if compute == compute_record.DIRECT else \
            (variant_funcs or {}).get((name, compute))
        now = None if tir is None else (tir, current)
    seconds = record_speedup(func, name, record, target, now)
    report.timings[name] = {f"{k}_ms": round(v * 1e3, 6) for k, v in seconds.items()}
    return faster_enough(seconds.get("active", seconds["default"]), seconds["record"])


def _computes_the_workload(func, name: str, record, target: TargetSpec | None) -> bool:
    """Whether ``record`` applied to ``func`` computes what ``func`` does, run once on
    random inputs here (numeric_check.py: TVM compiles some valid traces into wrong code;
    MetaSchedule's search keeps the fastest, never checking its numbers)."""
    import tvm

    from ..core.workloads import copy
    from ..targets.registry import resolve
    from .apply import apply_record
    from .numeric_check import Reference

    if (record.target or {}).get("kind", "llvm") != "llvm":
        return True  # a GPU's kernel: not run here
    spec = target if target is not None and target.kind == "llvm" else resolve("llvm")
    try:
        scheduled = apply_record(copy(func), name, record, tvm.target.Target(spec.tvm_target))
    except BuildError:
        return True  # not applicable here: the build says why, as for any record
    return Reference(func, name, spec).agrees(scheduled)


def target_dict(target) -> dict:
    """A record's target as a small dict: what was set, without TVM's derived defaults."""
    from .records import plain

    if target is None:
        return {}
    data = plain(target.export())
    return {k: v for k, v in data.items() if k not in ("tag", "keys") and v not in ("", [], None)}


def _workload_label(mod) -> str:
    import tvm_ffi

    func = mod["main"]
    name = func.attrs.get("global_symbol", "main") if func.attrs else "main"
    return f"{name} (hash {tvm_ffi.structural_hash(mod)})"


def make_out_dir(out_dir: Path) -> None:
    """Create the folder a database is exported to, or say in one line why it cannot be."""
    if out_dir.exists() and not out_dir.is_dir():
        raise BuildError("not a folder: a MetaSchedule database is a folder", file=out_dir,
                         hint="give a folder's path (it is created if missing)")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise BuildError(f"cannot create the database folder: {err.strerror or err}",
                         file=out_dir, hint="give a folder you can write (it is created "
                                            "if missing)") from None
    try:  # a folder that takes no files (/proc/self): TVM's writer would fail inside C++
        fd, probe = tempfile.mkstemp(prefix=".modelbuild-probe-", dir=out_dir)
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise BuildError(f"cannot write into the database folder: {err.strerror or err}",
                         file=out_dir, hint="give a folder you can write") from None


def export_database(model_records: list[records.Record], funcs: dict, out_dir: Path) -> int:
    """Write the records as a MetaSchedule JSONDatabase in ``out_dir``; returns how many."""
    from tvm.s_tir import meta_schedule as ms

    from ..core.workloads import normalize

    make_out_dir(out_dir)
    for name in (WORKLOAD_FILE, RECORD_FILE):
        (out_dir / name).unlink(missing_ok=True)
    db = ms.database.JSONDatabase(str(out_dir / WORKLOAD_FILE), str(out_dir / RECORD_FILE),
                                  allow_missing=True)
    for rec in model_records:
        workload = db.commit_workload(normalize(funcs[rec.workload]))
        db.commit_tuning_record(ms.database.TuningRecord.from_json(
            [rec.trace, rec.run_secs or [1.0], rec.target, None], workload))
    del db
    return len(model_records)
