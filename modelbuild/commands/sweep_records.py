"""The swept workloads' active records: taken before a sweep (``snapshot``), kept on disk
until they are back (``keep_journal``, and ``recover`` after a killed sweep), and the
user's edits to them while the sweep runs (``ActiveRecords``)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import msgpack

from ..core import atomic, regular_file
from ..core.errors import BuildError
from ..core.paths import ModelPaths
from ..schedules import variants
from .sweep_plan import Step


def snapshot(layout: ModelPaths, workloads) -> dict[str, bytes | None]:
    """The active record of each workload as bytes, None where there is none."""
    return {w: layout.record(w).read_bytes() if layout.record(w).is_file() else None
            for w in workloads}


def restore(layout: ModelPaths, saved: dict[str, bytes | None]) -> None:
    for w, data in saved.items():
        if data is None:
            layout.record(w).unlink(missing_ok=True)
        elif not layout.record(w).is_file() or layout.record(w).read_bytes() != data:
            atomic.write_bytes(layout.record(w), data)


def keep_journal(layout: ModelPaths, saved: dict[str, bytes | None]) -> None:
    """Keep the active records a sweep found (``layout.sweep_journal``) until it has put them
    back: a sweep killed outright (SIGKILL, the OOM killer, a power cut) leaves the file, and
    the next sweep or select of the model puts them back first (a build warns)."""
    atomic.write_bytes(layout.sweep_journal, msgpack.packb(saved))


def recover(layout: ModelPaths) -> list[str]:
    """Put back the active records a killed sweep of the model found (its journal), and
    remove the journal; returns what it did, a line per workload (none: no sweep was
    killed). Called with the model's sweep lock held: no sweep of it runs.

    Only what the sweep may have left is replaced: an active record that is a variant's
    copy, the one a compute's selection writes, or none. One the user wrote since the
    kill stays active, and the record the sweep found becomes a variant instead."""
    path = layout.sweep_journal
    try:
        saved = msgpack.unpackb(regular_file.read_limited(path, _JOURNAL_MOST))
    except regular_file.NotRegular:
        raise _bad_journal(path, "not a file") from None
    except FileNotFoundError:
        return []
    except (OSError, ValueError, msgpack.UnpackException) as err:
        raise _bad_journal(path, f"unreadable ({str(err) or type(err).__name__})") from None
    if not isinstance(saved, dict) or not all(
            isinstance(w, str) and _WORKLOAD.fullmatch(w) and (d is None or isinstance(d, bytes))
            for w, d in saved.items()):
        raise _bad_journal(path, "not one a sweep writes")
    said = []
    for w, data in sorted(saved.items()):
        if variants.sweep_may_have_left(layout, w):
            restore(layout, {w: data})
            said.append(f"{w}: put back")
        elif data is not None and variants.read_active(layout, w) != data:
            k = variants.keep_as_variant(layout, w, data)
            said.append(f"{w}: your record since stays active; the one the sweep found is "
                        f"variant {k}")
    path.unlink(missing_ok=True)
    return said


def _bad_journal(path: Path, what: str) -> BuildError:
    return BuildError(f"a killed sweep's record of the active records is {what}", file=path,
                      hint="check the active records in schedules/ by hand, then remove it")


_JOURNAL_MOST = 256 * 1024 * 1024  # records of a few workloads: far less
_WORKLOAD = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,199}")  # a file name in schedules/<model>/


@dataclass
class ActiveRecords:
    """The swept workloads' active records as the sweep found them (``saved``), and the
    edits the user saved to them while it runs (the record files stay the user's to edit).
    The sweep itself only ever puts there a variant's copy, a compute's selection, no
    record, or the record it found: anything else is the user's. Such an edit is kept as a
    variant before the sweep writes over it, and is the active record again when the sweep
    ends; the record the sweep found becomes a variant, as after a killed sweep. (An edit
    saved in the instant between the sweep's look and its write is not seen.)"""

    layout: ModelPaths
    saved: dict[str, bytes | None]
    # the user's edits, by workload: (their bytes, the variant they are kept as)
    edited: dict[str, tuple[bytes, int]] = field(default_factory=dict)
    # records the sweep found, the user's own, kept as variants before the fastest replaced
    # them (--select-fastest): workload -> variant
    kept: dict[str, int] = field(default_factory=dict)

    def _keep_an_edit(self, w: str) -> None:
        now = variants.read_active(self.layout, w)
        if now is not None and now != self.saved.get(w) \
                and not variants.made_by_select(self.layout, w, now):
            self.edited[w] = (now, variants.keep_as_variant(self.layout, w, now))

    def activate(self, step: Step) -> None:
        """The step's variants active; every other swept workload as it was before the
        sweep."""
        for w, data in self.saved.items():
            self._keep_an_edit(w)
            if w in step:
                variants.choose(self.layout, w, step[w])
            else:
                restore(self.layout, {w: data})

    def finish(self, chosen: Step | None) -> list[str]:
        """The chosen variants active (None: the records as the sweep found them), except
        where the user edited a record meanwhile: that edit is active. Returns what became
        of those edits, a line per workload. A record the sweep found that is the user's
        own (no variant's copy: edited by hand, tuned, imported) and that the chosen
        variant replaces is first kept as a variant (``kept``), as `select` keeps it."""
        for w in chosen or {}:
            found = self.saved.get(w)
            if found is not None and not variants.made_by_select(self.layout, w, found):
                self.kept[w] = variants.keep_as_variant(self.layout, w, found)
        self.activate(chosen or {})
        said = []
        for w, (data, k) in sorted(self.edited.items()):
            atomic.write_bytes(self.layout.record(w), data)
            found = self.saved.get(w)
            line = f"{w}: your record, edited during the sweep, is active (and variant {k})"
            if found is not None and found != data:
                line += (f"; the one the sweep found is variant "
                         f"{variants.keep_as_variant(self.layout, w, found)}")
            said.append(line)
        return said


def describe(layout: ModelPaths, w: str) -> str:
    if not layout.record(w).is_file():
        return "no record"
    k = variants.active_variant(layout, w)
    return f"variant {k}" if k is not None else "a record that is not a variant"
