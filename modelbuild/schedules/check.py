"""Check a model's records before a build, with the build's own checks.

Every record file in schedules/<model>/ (and each sampled variant) is parsed,
matched to a workload of the current model, checked for staleness and
target, and its trace is applied - exactly what lower does.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..core.errors import BuildError
from ..core.paths import ModelPaths
from ..targets.registry import TargetSpec
from .active import Conflict, candidates, of_files, record_files, tir_compute, with_computes
from .compute_record import DIRECT


@dataclass
class Problem:
    file: Path
    workload: str | None
    message: str


def check_file(path: Path, funcs: dict, target_spec: TargetSpec, workload: str | None = None,
               variant_funcs: dict | None = None, references: dict | None = None
               ) -> Problem | None:
    """None if the record at ``path`` builds and its kernel computes what the workload does
    (run once here on random inputs); else what is wrong with it. ``variant_funcs``:
    (workload, compute) -> the TIR of each other compute of a workload."""
    name = workload or path.stem
    if name not in funcs:
        return Problem(path, name, f"the model has no workload '{name}' "
                                   "(renamed by a model change? delete or rename the file)")
    variant_funcs = variant_funcs or {}
    have = [DIRECT, *sorted(c for w, c in variant_funcs if w == name)]
    record = with_computes(of_files(name, (path,)), have)
    compute = tir_compute(record)
    func = funcs[name] if compute == DIRECT else variant_funcs[name, compute]
    try:
        record.check(func, target_spec)
    except BuildError as err:
        text = err.message + (f"\n  hint: {err.hint}" if err.hint else "")
        return Problem(path, name, text)
    return _wrong_numbers(path, name, record, func, target_spec,
                          {} if references is None else references)


def _wrong_numbers(path: Path, name: str, record, func, target_spec,
                   references: dict) -> Problem | None:
    """A record that applies, but whose kernel computes other numbers than the workload
    (numeric_check.py: TVM compiles some valid traces into wrong code). ``references``:
    the workloads run so far, by (name, compute): each once, however many records."""
    from ..core.workloads import copy
    from .numeric_check import TOLERANCE, Reference

    try:
        scheduled = record.apply(copy(func), target_spec)
    except BuildError:
        return None  # the build says why, as the check above would
    key = (name, tir_compute(record))
    if key not in references:
        references[key] = Reference(func, name, target_spec)
    off = references[key].difference(scheduled)
    if off is None or off <= TOLERANCE:
        return None
    return Problem(path, name, f"its kernel computes other numbers than the workload (off by "
                               f"{off:.3g} of the output's scale on random inputs): TVM "
                               "compiles this schedule into wrong code\n  hint: select "
                               "another variant (or none): the library would be wrong")


def _unreadable_folder(folder: Path) -> str | None:
    """Why the model's schedules folder cannot be listed, when something is there (a link
    loop, a link to nothing, a file): no records there would read as none at all."""
    import os
    import stat

    if not folder.is_symlink() and not folder.exists():
        return None  # no records: every workload gets the default schedule
    try:
        if stat.S_ISDIR(os.stat(folder).st_mode):
            return None
        return "not a folder: the model's records cannot be there"
    except OSError as err:
        return f"the model's schedules folder cannot be read: {err.strerror or err}"


def check_model(layout: ModelPaths, funcs: dict, target_spec: TargetSpec,
                variant_funcs: dict | None = None) -> tuple[int, list[Problem]]:
    """(number of files checked, problems) for the active records and all variants;
    ``variant_funcs`` as check_file takes it."""
    folder = _unreadable_folder(layout.records_dir)
    if folder is not None:
        return 0, [Problem(layout.records_dir, None, folder)]
    files = [(p, None) for p in record_files(layout)]
    variants = layout.records_dir / "variants"
    if variants.is_dir():
        files += [(p, p.parent.name) for p in sorted(variants.glob("*/*.json"))]
    references: dict = {}  # each workload run once for the numeric check
    problems = [pr for p, w in files
                if (pr := check_file(p, funcs, target_spec, w, variant_funcs, references))]
    return len(files), _conflicts(layout, [p for p, w in files if w is None]) + problems


def _conflicts(layout: ModelPaths, active: list[Path]) -> list[Problem]:
    """A workload with two active records (``<w>.json`` and ``<w>.py``): each file is fine
    alone, and the build fails until one is deleted."""
    out = []
    for name in sorted({p.stem for p in active}):
        record = of_files(name, candidates(layout, name))
        if isinstance(record, Conflict):
            out.append(Problem(record.path, name, f"two records for one workload: "
                               f"{', '.join(p.name for p in record.paths)}; the build fails "
                               "until one is deleted\n  hint: delete the one not meant"))
    return out
