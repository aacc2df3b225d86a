"""Schedule variants of one workload: sampled record files, one of which can be made active.

    schedules/<model>/variants/<workload>/<k>.json   the variants
    schedules/<model>/<workload>.json                the active record (a copy of one)
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ..core import atomic
from ..core.digits import is_decimal
from ..core.errors import BuildError, no_workload
from ..core.paths import ModelPaths
from ..targets.registry import TargetSpec
from . import compute_record, records


def existing(layout: ModelPaths, workload: str) -> dict[int, Path]:
    folder = layout.variants_dir(workload)
    found = {}
    if folder.is_dir():
        for path in folder.glob("*.json"):
            if is_decimal(path.stem) and path.stem == str(int(path.stem)):  # not 01.json
                found[int(path.stem)] = path
    return dict(sorted(found.items()))


def sample(layout: ModelPaths, workload: str, func, target_spec: TargetSpec, count: int,
           seed: int = 1, compute: str | None = None) -> list[Path]:
    """Write ``count`` new sampled variants, numbered after the existing ones. ``compute``:
    ``func`` is that compute's TIR, and each variant names it (compute_record.py)."""
    from .sample import sample_records

    start = max(existing(layout, workload), default=0) + 1
    written = []
    for k, rec in enumerate(sample_records(func, workload, target_spec, count,
                                           seed=seed + 1000 * start, model=layout.name), start):
        path = layout.variants_dir(workload) / f"{k}.json"
        if compute is None:
            records.save(path, replace(rec, path=path))
        else:
            atomic.write_text(path, compute_record.to_json(workload, compute, rec))
        written.append(path)
    return written


def require(layout: ModelPaths, workload: str, k: int | str) -> dict[int, Path]:
    """The workload's variants (``existing``), or BuildError when none is numbered ``k``
    (a number, or the digits a user gave: too many for any variant's name)."""
    found = existing(layout, workload)
    if k not in found:
        have = ", ".join(map(str, found)) or "none"
        shown = k if isinstance(k, int) or len(k) <= 20 else f"{k[:20]}..."
        raise BuildError(f"no variant {shown} of workload '{workload}' (have: {have})",
                         file=layout.variants_dir(workload), workload=workload,
                         hint=f"python -m modelbuild sample {layout.name} {workload} -n N")
    return found


def select(layout: ModelPaths, workload: str, k: int | None) -> Path:
    """Make variant ``k`` the active record (None: no record, the target's default schedule)."""
    active = layout.record(workload)
    if k is None:
        active.unlink(missing_ok=True)
        return active
    found = require(layout, workload, k)
    try:
        data = records.read(found[k])
    except OSError as err:
        raise BuildError(f"variant {k}: {records.unreadable(found[k], err)}", file=found[k],
                         workload=workload, hint="remove it, or sample again") from None
    atomic.write_bytes(active, data)
    return active


def read_active(layout: ModelPaths, workload: str) -> bytes | None:
    """The active record's bytes (None: none, or none readable)."""
    return _bytes_or_none(layout.record(workload))


def _remade_by_select(layout: ModelPaths, workload: str, data: bytes) -> bool:
    """Whether ``data`` is what `select <workload> <compute>` writes for one of its computes."""
    return any(data == compute_record.to_json(workload, c, model=layout.name).encode()
               for c in compute_record.computes(layout, workload))


def sweep_may_have_left(layout: ModelPaths, workload: str) -> bool:
    """Whether the active record is one a sweep puts in place (a variant's copy, a
    compute's selection, or no record), not one the user wrote."""
    return _users_own(layout, workload) is None


def made_by_select(layout: ModelPaths, workload: str, data: bytes) -> bool:
    """Whether record bytes ``data`` are what `select` (or a sweep) puts in place: a
    variant's copy, or what `select <compute>` writes (select makes either again)."""
    return _variant_of(layout, workload, data) is not None \
        or _remade_by_select(layout, workload, data)


def _users_own(layout: ModelPaths, workload: str) -> bytes | None:
    """The active record's bytes when the user wrote it: there, and not one select makes."""
    data = read_active(layout, workload)
    return None if data is None or made_by_select(layout, workload, data) else data


def keep_as_variant(layout: ModelPaths, workload: str, data: bytes) -> int:
    """``data`` as a variant of ``workload`` (the one it is a copy of, else the next); its
    number."""
    same = _variant_of(layout, workload, data)
    if same is not None:
        return same
    k = max(existing(layout, workload), default=0) + 1
    atomic.write_bytes(layout.variants_dir(workload) / f"{k}.json", data)
    return k


def keep_active(layout: ModelPaths, workload: str) -> int | None:
    """When the active record is the user's own (no copy of a variant: written or edited by
    hand, imported, tuned), copy it in as the next variant, so that selecting another one
    loses nothing; returns its number (None: nothing to keep)."""
    data = _users_own(layout, workload)
    return None if data is None else keep_as_variant(layout, workload, data)


def select_compute(layout: ModelPaths, workload: str, compute: str) -> Path:
    """Make the active record the default schedule on ``compute`` of the workload (``direct``:
    no record)."""
    active = layout.record(workload)
    check_computes(layout, workload, [compute])
    if compute == compute_record.DIRECT:
        active.unlink(missing_ok=True)
    else:
        atomic.write_text(active, compute_record.to_json(workload, compute, model=layout.name))
    return active


def check_computes(layout: ModelPaths, workload: str, wanted: list[str]) -> None:
    """BuildError (one line) for a workload the model does not have (once partitioned), or a
    compute in ``wanted`` that the workload does not have."""
    if layout.workloads_dir.is_dir() and not layout.workload(workload).is_file():
        raise no_workload(layout.name, workload)
    have = compute_record.computes(layout, workload)
    missing = [c for c in wanted if c not in have]
    if missing:
        raise BuildError(f"no compute {', '.join(map(repr, missing))}; its computes: "
                         f"{', '.join(have)}", workload=workload)


def choose(layout: ModelPaths, workload: str, choice: int | str | None) -> Path:
    """Make a sweep's choice active: variant ``choice`` (a number), no record (None), or the
    default schedule on a compute (its name)."""
    if isinstance(choice, str):
        return select_compute(layout, workload, choice)
    return select(layout, workload, choice)


def chosen_file(layout: ModelPaths, workload: str, choice: int | str) -> Path:
    """The record file a sweep's choice makes active."""
    return layout.record(workload) if isinstance(choice, str) else existing(layout, workload)[choice]


def active_variant(layout: ModelPaths, workload: str) -> int | None:
    """Which variant the active record is a copy of, if any."""
    data = _bytes_or_none(layout.record(workload))
    return None if data is None else _variant_of(layout, workload, data)


def _variant_of(layout: ModelPaths, workload: str, data: bytes) -> int | None:
    """Which variant of ``workload`` holds exactly ``data``, if any."""
    return next((k for k, p in existing(layout, workload).items()
                 if _bytes_or_none(p) == data), None)


def _bytes_or_none(path: Path) -> bytes | None:
    try:
        return records.read(path)
    except OSError:
        return None
