"""doit's own state file (build/.doit.db), checked before doit opens it.

doit keeps what it knows of file dependencies and ``config_changed`` values in an
sqlite file; a damaged one makes doit fail with a traceback on every run. It holds
nothing that cannot be rebuilt (modelbuild's steps, the link included, are decided by
their own stamps, not by it), so a damaged one is set aside, with one warning, and doit
starts a new one.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path


def make_build_dir(folder: Path) -> None:
    """build/, where doit keeps its state, made before doit opens it; something else in its
    place (a link to a disk that is not mounted, a file) is one line from doit, not a
    traceback."""
    from doit.exceptions import InvalidDodoFile

    try:
        folder.mkdir(exist_ok=True)
        return
    except FileExistsError:
        what = ("a link to nothing (a disk not mounted?)" if folder.is_symlink()
                else "a file")
    except OSError as err:
        what = f"a folder that cannot be made ({err.strerror or err})"
    raise InvalidDodoFile(f"{folder} is {what}: modelbuild keeps every build's files, and "
                          "doit its state, in that folder (make it a folder, or the link's "
                          "target one)")


def problem(db: Path) -> str | None:
    """Why ``db`` is not a state file doit can use (None: it is fine, or absent)."""
    if not db.exists() and not db.is_symlink():
        return None
    if not db.is_file():
        return "not a regular file (a folder or a pipe)"
    if db.stat().st_size == 0:
        return None
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    except sqlite3.Error as err:
        return str(err)
    try:
        check = conn.execute("PRAGMA quick_check").fetchone()
        if not check or check[0] != "ok":
            return f"sqlite integrity check: {check[0] if check else 'no answer'}"
        tables = {row[0] for row in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "doit" in tables:
            for (data,) in conn.execute("SELECT task_data FROM doit"):
                json.loads(data)
    except (sqlite3.Error, ValueError, TypeError) as err:
        return str(err)
    finally:
        conn.close()
    return None


def set_aside_if_damaged(db: Path, stderr=sys.stderr) -> Path | None:
    """Rename a damaged ``db`` to ``<db>.corrupt-<n>`` (one warning); returns the new
    path, None when ``db`` is fine."""
    why = problem(db)
    if why is None:
        return None
    n = 1
    while db.with_name(f"{db.name}.corrupt-{n}").exists():
        n += 1
    aside = db.with_name(f"{db.name}.corrupt-{n}")
    db.rename(aside)
    stderr.write(f"warning: {db.parent.name}/{db.name} is damaged ({why}); set aside as {aside.name}, and doit "
                 "starts a new one (a few steps may run again)\n")
    return aside


def save_quietly() -> None:
    """doit writes its state file as a run goes (a failed task's entry is deleted) and when
    it ends; on a full disk or a read-only build/ that raises, and doit prints a traceback
    (exit 3, no summary). A state file that missed a write may call a failed step up to
    date, so it is removed instead, with one warning: the next run checks every step
    against its own stamps (what was built is kept), and the run ends as its steps decided."""
    from doit.dependency import SqliteDB

    if getattr(SqliteDB.dump, "modelbuild_quiet", False):
        return
    original_dump, original_remove = SqliteDB.dump, SqliteDB.remove

    def remove(self, task_id):
        try:
            original_remove(self, task_id)
        except sqlite3.Error as err:
            self._modelbuild_unsaved = err

    def dump(self):
        err = getattr(self, "_modelbuild_unsaved", None)
        if err is None:
            try:
                original_dump(self)
                return
            except sqlite3.Error as failed:
                err = failed
        _discard(self, err)

    dump.modelbuild_quiet = True
    SqliteDB.dump, SqliteDB.remove = dump, remove


def _discard(db, err: Exception) -> None:
    """Close doit's connection without saving and remove its file (deleting needs no room)."""
    try:
        db._conn.close()  # uncommitted work is rolled back
    except sqlite3.Error:
        pass
    db._dirty = set()
    path = Path(db.name)
    removed = True
    for stale in (path, path.with_name(path.name + "-journal")):
        try:
            stale.unlink(missing_ok=True)
        except OSError:
            removed = False
    then = ("the file is removed, and the next run checks every step against its own stamps"
            if removed else "nor remove it (a read-only folder?): the next run may redo a link")
    sys.stderr.write(f"warning: doit could not save what it knows of this run in "
                     f"{path.parent.name}/{path.name} ({err}); {then} (what was built is "
                     "kept)\n")
