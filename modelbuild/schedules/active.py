"""Which record a workload builds with: the one answer every step and command uses.

    schedules/<model>/<workload>.json   a MetaSchedule trace (records.py)
    schedules/<model>/<workload>.py     a Python schedule function (python_schedule.py)
    neither                             the target's default schedule
    both                                an error: a build needs exactly one

Plain file checks, no TVM.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..core.layout import ModelLayout

DEFAULT, JSON, PYTHON, CONFLICT = "default", "json", "python", "conflict"


@dataclass(frozen=True)
class Active:
    """The record files of one workload that exist now."""

    workload: str
    files: tuple[Path, ...]

    @property
    def kind(self) -> str:
        if not self.files:
            return DEFAULT
        if len(self.files) > 1:
            return CONFLICT
        return PYTHON if self.files[0].suffix == ".py" else JSON

    @property
    def path(self) -> Path | None:
        """The record file (the first one, for a conflict), None for the default schedule."""
        return self.files[0] if self.files else None


def candidates(layout: ModelLayout, workload: str) -> tuple[Path, Path]:
    """Where a workload's record can be: its JSON trace, its Python schedule."""
    return layout.record(workload), layout.python_record(workload)


def active(layout: ModelLayout, workload: str) -> Active:
    return Active(workload, tuple(p for p in candidates(layout, workload) if p.is_file()))


def record_files(layout: ModelLayout) -> list[Path]:
    """Every active record file of the model (JSON and Python), by name; variants are apart."""
    return record_files_in(layout.records_dir)


def record_files_in(folder: Path) -> list[Path]:
    """The active record files in one model's schedules folder (a name starting with ``_``
    is a Python schedule's helper module, not a record)."""
    if not folder.is_dir():
        return []
    return sorted(p for p in [*folder.glob("*.json"), *folder.glob("*.py")]
                  if not p.name.startswith("_"))
