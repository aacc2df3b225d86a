"""Why would the next `doit build:<model>` run what it runs? A dry run that builds nothing.

For each task: the reason in words a user can act on, from what the last
build left behind (the stamps beside lower/codegen outputs, the config stamps
of partition and link, doit's own state for file dependencies) compared with
what is on disk now. Like ``ninja -d explain``, but readable.

Nothing is written: no cache restore, no doit state change. TVM is not imported.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from . import fingerprint
from . import manifest as manifest_mod
from .cache import Cache, digest
from .layout import Project

RUN, RESTORE = "run", "restore"


@dataclass
class Verdict:
    task: str
    action: str  # RUN or RESTORE (from the cache; doit reports it as up to date)
    reasons: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"task": self.task, "action": self.action, "reasons": self.reasons}


# -- how inputs differ, in words ----------------------------------------------------

_CONFIG_WORDS = {
    "target": "target changed",
    "tvm": "TVM version changed",
    "passes": "partition pass list changed",
    "artifact_version": "modelbuild artifact format changed",
    "cc": "C compiler changed",
}


def config_changes(old: dict | None, new: dict, step: str) -> list[str]:
    if old is None:
        return []
    out = []
    for k in sorted(set(old) | set(new)):
        if old.get(k) == new.get(k):
            continue
        if k == "code":
            out.append(f"modelbuild's code for {step} changed (an upgrade or a local edit)")
        elif k == "target":
            out.append(f"target changed ({_target_name(old.get(k))} -> {_target_name(new.get(k))})")
        elif k in _CONFIG_WORDS:
            out.append(f"{_CONFIG_WORDS[k]} ({old.get(k)} -> {new.get(k)})")
        else:
            out.append(f"setting '{k}' changed")
    return out


def _target_name(key) -> str:
    try:
        return json.loads(key)["kind"]
    except (TypeError, ValueError, KeyError):
        return str(key)


def _decisions(canonical: str) -> tuple[list, dict]:
    trace = json.loads(canonical)["trace"]
    return trace[0], {int(i): v for i, v in trace[1]}


def record_changes(old: dict, new: dict, record_path: Path) -> list[str]:
    """How the record a lower step uses changed, down to the trace decision."""
    ok, nk = old.get("kind"), new.get("kind")
    if old == new:
        return []
    if nk == "default":
        return [f"record {old.get('file', '')} removed: back to TVM's default schedule"]
    where = new.get("file", str(record_path))
    if ok == "default":
        return [f"record {where} added (was TVM's default schedule)"]
    if nk == "conflict":
        return [f"two records for one workload: {', '.join(new['files'])} (the build will fail)"]
    if nk == "invalid":
        return [f"record {where} changed and does not parse (the build will fail with the reason)"]
    if nk == "python":
        return [f"Python schedule {where} changed"]
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


def step_changes(stamp: dict | None, inputs: dict, output: Path, record_path: Path | None,
                 upstream: str) -> list[str]:
    """Why a cached step (lower or codegen) is not current, from its stamp."""
    if not output.is_file():
        return ["output missing" + ("" if stamp else " (never built)")]
    if stamp is None:
        return ["no stamp beside the output (built by an older modelbuild, or interrupted)"]
    old = stamp.get("inputs", {})
    out = config_changes(old.get("config"), inputs["config"], inputs["step"])
    if "record" in inputs:
        out += record_changes(old.get("record", {}), inputs["record"], record_path)
        if old.get("workload") != inputs["workload"]:
            out.append("workload changed (partition wrote a different TIR for it)")
    if "lowered" in inputs and old.get("lowered") != inputs["lowered"]:
        out.append(f"upstream output changed ({upstream})")
    if not out and stamp.get("key") == fingerprint.key(inputs):
        out.append("output modified since it was built")
    return out or ["inputs changed"]


# -- the model ------------------------------------------------------------------------

def _doit_status(project: Project, task):
    """doit's own verdict and reasons for a task with file dependencies (read only)."""
    from doit.dependency import Dependency, MD5Checker, SqliteDB

    db = project.build_dir / ".doit.db"
    if not db.is_file():
        return None
    dep = Dependency(SqliteDB, str(db), checker_cls=MD5Checker)
    try:
        return dep.get_status(task, {task.name: task}, get_log=True)
    finally:
        dep.close()


def _file_reasons(status) -> list[str]:
    if status is None:
        return ["never built"]
    out = []
    r = status.reasons
    for target in r.get("missing_target", []):
        out.append(f"output missing: {target}")
    for key, words in (("changed_file_dep", "changed"), ("added_file_dep", "is a new input"),
                       ("removed_file_dep", "is no longer an input"),
                       ("missing_file_dep", "is missing")):
        for path in r.get(key) or []:
            out.append(f"{path} {words}")
    return out


def explain(project: Project, model: str, target_name: str | None = None) -> list[Verdict]:
    """What `doit build:<model> [target=...]` would do, task by task (only tasks that act)."""
    # doit's state names files as the build's tasks do: relative to the project root.
    previous = os.getcwd()
    os.chdir(project.root)
    try:
        return _explain(Project(Path(".")), model, target_name)
    finally:
        os.chdir(previous)


def _explain(project: Project, model: str, target_name: str | None) -> list[Verdict]:
    from . import models, targets
    from .tasks import Context, link_config_of, partition_task, unit_tasks

    ctx = Context(project, models.discover(project.models_dir), targets.resolve(target_name))
    layout = project.model(model)
    verdicts: list[Verdict] = []

    # partition: doit decides (model files), plus our config stamp for readable reasons.
    part = partition_task(ctx, ctx.models[model])
    status = _doit_status(project, part)
    part_config = ctx.config_for("partition")
    old_config = (fingerprint.read_stamp(layout.manifest) or {}).get("inputs")
    reasons = _file_reasons(status) if status is None or status.status == "run" else []
    if status is not None and status.reasons.get("uptodate_false"):
        reasons += config_changes(old_config, part_config, "partition") or ["settings changed"]
    partition_runs = bool(reasons)
    if partition_runs:
        verdicts.append(Verdict(f"partition:{model}", RUN, reasons))
    man = manifest_mod.read(layout.manifest)
    if man is None:
        if not partition_runs:
            verdicts.append(Verdict(f"partition:{model}", RUN, ["no manifest"]))
        verdicts.append(Verdict(f"(every workload of {model})", RUN,
                                ["the workloads are known once partition has run"]))
        return verdicts

    store = Cache(Cache.of(project).root)  # read only: no event log
    suffix = ctx.target.artifact_suffix
    objects_change = 0
    for w in man.workloads:
        records = [layout.record(w.name), layout.python_record(w.name)]
        try:
            low_in = fingerprint.lower_inputs(ctx.config_for("lower"), layout.workload(w.name),
                                              records, w.name)
        except FileNotFoundError:
            verdicts.append(Verdict(f"lower:{model}/{w.name}", RUN, ["workload file missing"]))
            continue
        lowered = layout.lowered(w.name)
        lower_task = f"lower:{model}/{w.name}"
        if fingerprint.is_current(lowered, low_in):
            lowered_digest, upstream = fingerprint.file_digest(lowered), lower_task
        else:
            present = next((p for p in records if p.is_file()), layout.record(w.name))
            why_lower = step_changes(fingerprint.read_stamp(lowered), low_in, lowered, present, "")
            exists, payload = store.peek("lowered", fingerprint.key(low_in))
            if payload is None:
                if exists:
                    why_lower.append("its cache entry is corrupt: rebuilt")
                verdicts.append(Verdict(lower_task, RUN, why_lower))
                old_cg = (fingerprint.read_stamp(layout.object(w.name, suffix)) or {}).get("inputs", {})
                verdicts.append(Verdict(f"codegen:{model}/{w.name}", RUN,
                                        [f"upstream output changed ({lower_task} will run)",
                                         *config_changes(old_cg.get("config"),
                                                         ctx.config_for("codegen"), "codegen")]))
                objects_change += 1
                continue
            verdicts.append(Verdict(lower_task, RESTORE, why_lower))
            lowered_digest = digest(payload)
            upstream = f"{lower_task} restored from the cache"
        obj = layout.object(w.name, suffix)
        cg_in = fingerprint.codegen_inputs(ctx.config_for("codegen"), lowered, w.name,
                                           lowered_digest)
        if fingerprint.is_current(obj, cg_in):
            continue
        why_cg = step_changes(fingerprint.read_stamp(obj), cg_in, obj, None, upstream)
        exists, payload = store.peek("object", fingerprint.key(cg_in))
        objects_change += 1
        if payload is None and exists:
            why_cg.append("its cache entry is corrupt: rebuilt")
        verdicts.append(Verdict(f"codegen:{model}/{w.name}",
                                RUN if payload is None else RESTORE, why_cg))

    # link: doit decides from the objects' content; predict from what changes upstream.
    link = next(t for t in unit_tasks(ctx, model) if t.name == f"link:{model}")
    status = _doit_status(project, link)
    reasons = []
    if objects_change:
        reasons.append(f"upstream output changed ({objects_change} object(s) will change)")
    if partition_runs:
        reasons.append(f"upstream partition:{model} will run (the graph may change)")
    if status is None or status.status == "run":
        reasons += _file_reasons(status)
        if status is not None and status.reasons.get("uptodate_false"):
            old = (fingerprint.read_stamp(layout.library) or {}).get("inputs")
            reasons += config_changes(old, link_config_of(ctx), "link") or ["settings changed"]
    if reasons:
        verdicts.append(Verdict(f"link:{model}", RUN, reasons))
    return verdicts
