"""How a workload's record changed between two builds, in words for ``why``: from the
identities (``active.py``) the two builds keyed the lower step with.

Plain dict work, no file read, no TVM.
"""

from __future__ import annotations

import json


def _decisions(canonical: str) -> tuple[list, dict]:
    trace = json.loads(canonical)["trace"]
    return trace[0], {int(i): v for i, v in trace[1]}


def _compute(identity: dict) -> str:
    return identity.get("compute", "direct")


def _schedule(identity: dict) -> str:
    kind = identity.get("kind")
    if kind == "compute":
        return "a trace" if identity.get("canonical") else "the default schedule"
    return {"json": "a trace", "default": "the default schedule"}.get(kind, kind)


def _compute_changes(old: dict, new: dict, where: str) -> list[str]:
    """Words for a change to or from a record naming a compute."""
    was, now = _compute(old), _compute(new)
    if was != now:
        return [f"record {where} changed the compute: {was} -> {now} (with {_schedule(new)}; "
                f"was {_schedule(old)})"]
    if old.get("kind") == new.get("kind") == "compute":
        if old.get("canonical") and new.get("canonical"):
            return [line.replace("changed (", f"changed ({now} compute, ")
                    for line in record_changes({**old, "kind": "json"}, {**new, "kind": "json"})]
        return [f"record {where} changed ({now} compute: {_schedule(old)} -> {_schedule(new)})"]
    return [f"record {where} changed ({_schedule(old)} -> {_schedule(new)}, {now} compute)"]


def record_changes(old: dict, new: dict) -> list[str]:
    """How the record a lower step uses changed, down to the trace decision."""
    ok, nk = old.get("kind"), new.get("kind")
    if old == new:
        return []
    if nk == "default":
        back = " (and the direct compute)" if _compute(old) != "direct" else ""
        return [f"record {old.get('file', '')} removed: back to the target's default schedule{back}"]
    where = new.get("file", "")
    if ok == "default":
        how = f": compute {_compute(new)}" if nk == "compute" else ""
        return [f"record {where} added{how} (was the target's default schedule)"]
    if nk == "conflict":
        return [f"two records for one workload: {', '.join(new['files'])} (the build will fail)"]
    if nk == "invalid":
        return [f"record {where} changed and does not parse (the build will fail with the reason)"]
    if nk == "python":
        if ok == "python" and old.get("sha256") == new.get("sha256"):
            was, now = old.get("helpers", {}), new.get("helpers", {})
            names = sorted(n for n in set(was) | set(now) if was.get(n) != now.get(n))
            return [f"helper module {n} of Python schedule {where} "
                    + ("changed" if n in was and n in now else "added" if n in now else "removed")
                    for n in names] or [f"Python schedule {where} changed"]
        return [f"Python schedule {where} changed"]
    if "compute" in (ok, nk):
        return _compute_changes(old, new, where)
    if ok != "json" or nk != "json":
        return [f"record {where} changed ({ok} -> {nk})"]
    old_insts, old_dec = _decisions(old["canonical"])
    new_insts, new_dec = _decisions(new["canonical"])
    out = []
    if old_insts != new_insts:
        out.append(f"record {where} changed (trace instructions differ)")
    for index in sorted(set(old_dec) | set(new_dec)):
        if old_dec.get(index) != new_dec.get(index):
            out.append(f"record {where} changed (trace decision {index}: "
                       f"{json.dumps(old_dec.get(index))} -> {json.dumps(new_dec.get(index))})")
    if not out:
        out.append(f"record {where} changed (its workload hash or target)")
    return out
