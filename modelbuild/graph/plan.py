"""Why would the next `doit build:<model>` run what it runs? A dry run that builds nothing.

For each task: the reason in words a user can act on, from what the last
build left behind (the stamps beside lower/codegen outputs, the config stamps
of partition and link, doit's own state for file dependencies) compared with
what is on disk now. Like ``ninja -d explain``, but readable.

Nothing is written: no cache restore, no doit state change. TVM is not imported.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import msgpack

from ..core import manifest as manifest_mod
from ..core.digest import bytes_digest, file_digest
from ..core.layout import Project
from ..schedules.active import active
from ..schedules.changes import record_changes
from . import environment, fingerprint
from .cached_step import CURRENT, RESTORE, RUN
from .cache import REMOTE
from .partition_output import MANIFEST, PartitionOutput
from .tasks import codegen_step, load_context, lower_step, partition_step, unit_tasks


@dataclass
class Verdict:
    task: str
    action: str  # RUN or RESTORE (from the cache; doit reports it as up to date)
    reasons: list[str] = field(default_factory=list)
    source: str | None = None  # RESTORE: "local" or "remote", the cache tier that has it

    def to_json(self) -> dict:
        out = {"task": self.task, "action": self.action, "reasons": self.reasons}
        if self.source is not None:
            out["source"] = self.source
        return out


# -- how inputs differ, in words ----------------------------------------------------

_CONFIG_WORDS = {
    "target": "target changed",
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
            out.append(_target_change(old.get(k), new.get(k)))
        elif k == "tvm":
            was, now = environment.describe(old.get(k)), environment.describe(new.get(k))
            out.append(f"TVM changed ({was} -> {now})" if was != now else
                       f"TVM's libraries changed ({now}: same versions, other builds)")
        elif k in _CONFIG_WORDS:
            out.append(f"{_CONFIG_WORDS[k]} ({old.get(k)} -> {new.get(k)})")
        else:
            out.append(f"setting '{k}' changed")
    return out


def _target_fields(key) -> dict:
    """A target key (TargetSpec.key()) as flat fields: kind, mcpu, ..., toolchain."""
    try:
        data = json.loads(key)
    except (TypeError, ValueError):
        return {"target": str(key)}
    if not isinstance(data, dict):
        return {"target": str(key)}
    fields = dict(data.get("tvm_target", data))
    if "toolchain" in data:
        fields["toolchain"] = data["toolchain"]
    return fields


def _target_change(old_key, new_key) -> str:
    """``target changed (llvm -> c)``, or the fields that changed within one kind:
    ``target changed (mcpu: skylake -> rocketlake)``."""
    old, new = _target_fields(old_key), _target_fields(new_key)
    if old.get("kind") != new.get("kind"):
        return f"target changed ({old.get('kind', old.get('target'))} -> " \
               f"{new.get('kind', new.get('target'))})"
    changed = [f"{k}: {old.get(k, '(none)')} -> {new.get(k, '(none)')}"
               for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
    return f"target changed ({'; '.join(changed)})"


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
        out += record_changes(old.get("record", {}), inputs["record"])
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


def partition_changes(stamp: dict | None, inputs: dict | None, problems: list[str]) -> list[str]:
    """Why partition is not current, from its stamp, its inputs now and its outputs."""
    if inputs is None:
        return ["a file the model is made of is missing (the build will name it)"]
    if stamp is None:
        return ["never built" if not problems or problems[0].startswith("no readable manifest")
                else "no stamp beside the manifest (built by an older modelbuild, or interrupted)"]
    old = stamp.get("inputs") or {}
    out = config_changes(old.get("config"), inputs["config"], "partition")
    was, now = old.get("sources") or {}, inputs["sources"]
    for role in ("declaration", "onnx"):
        if (was.get(role) or {}).get("sha256") != now[role]["sha256"]:
            out.append(f"{now[role]['file']} changed")
    old_ext, new_ext = was.get("external") or {}, now["external"]
    for name in sorted(set(old_ext) | set(new_ext)):
        if name not in new_ext:
            out.append(f"external data file {old_ext[name].get('file', name)} is no longer read")
        elif name not in old_ext:
            out.append(f"external data file {new_ext[name]['file']} is a new input")
        elif old_ext[name].get("sha256") != new_ext[name]["sha256"]:
            out.append(f"{new_ext[name]['file']} changed")
    if old.get("model") != inputs.get("model"):
        out.append("the model's name changed")
    return out + problems or (["inputs changed"] if stamp.get("key") != fingerprint.key(inputs)
                              else ["output modified since it was built"])


def _restore_words(source: str | None) -> str:
    return "restore (remote cache)" if source == REMOTE else "restore (local cache)"


def explain(root: Path, model: str, target_name: str | None = None,
            mcpu: str | None = None) -> list[Verdict]:
    """What `doit build:<model> [target=...]` would do, task by task (only tasks that act).

    Runs where doit runs the build, in the project root (``root`` is that directory:
    doit's state names files relative to it): the caller is there. The decisions are
    the build's own: each cached step's ``Step.decide`` (partition, lower, codegen) and
    doit's status of link (read only).
    """
    ctx = load_context(root, target_name, mcpu)
    project = ctx.project
    layout = project.model(model)
    verdicts: list[Verdict] = []

    # partition: its cached step's own decision, as the build takes it.
    spec = ctx.models[model]
    part = partition_step(ctx, spec).decide()
    stamp = fingerprint.read_stamp(layout.manifest)
    man = manifest_mod.read(layout.manifest)
    partition_runs = part.action == RUN
    # whether partition's outputs are known before the build: current, restored (the cache
    # entry holds them) or rewritten the same (same inputs: partition is deterministic)
    outputs_known = part.action != RUN or (stamp is not None and part.inputs is not None
                                           and stamp.get("inputs") == part.inputs)
    if part.action != CURRENT:
        reasons = partition_changes(stamp, part.inputs, PartitionOutput(layout).problems())
        if part.corrupt:
            reasons.append("its local cache entry is corrupt: not used")
        if part.corrupt_remote:
            reasons.append("its remote cache entry is corrupt: not used")
        if part.action == RESTORE:
            reasons.append(_restore_words(part.source))
            man = manifest_mod.Manifest.from_bytes(msgpack.unpackb(part.payload)[MANIFEST])
        verdicts.append(Verdict(f"partition:{model}", part.action, reasons,
                                part.source if part.action == RESTORE else None))
    if man is None:
        verdicts.append(Verdict(f"(every workload of {model})", RUN,
                                ["the workloads are known once partition has run"]))
        return verdicts
    repairs_only = part.action != CURRENT and outputs_known
    recorded = {layout.partition_dir / rel: digest for rel, _, digest in man.outputs}

    objects_change = 0
    for w in man.workloads:
        lower_task = f"lower:{model}/{w.name}"
        lowered = lower_step(ctx, model, w.name,
                             recorded.get(layout.workload(w.name)) if repairs_only else None)
        low = lowered.decide()
        if low.inputs is None:
            verdicts.append(Verdict(lower_task, RUN, ["workload file missing"]))
            continue
        record_path = active(layout, w.name).path or layout.record(w.name)
        if low.action == CURRENT:
            lowered_digest, upstream = file_digest(lowered.output), lower_task
        else:
            why_lower = step_changes(fingerprint.read_stamp(lowered.output), low.inputs,
                                     lowered.output, record_path, "")
            if low.action == RUN:
                if low.corrupt:
                    why_lower.append("its cache entry is corrupt: rebuilt")
                verdicts.append(Verdict(lower_task, RUN, why_lower))
                old_cg = (fingerprint.read_stamp(codegen_step(ctx, model, w.name).output)
                          or {}).get("inputs", {})
                verdicts.append(Verdict(f"codegen:{model}/{w.name}", RUN,
                                        [f"upstream output changed ({lower_task} will run)",
                                         *config_changes(old_cg.get("config"),
                                                         ctx.config_for("codegen"), "codegen")]))
                objects_change += 1
                continue
            verdicts.append(Verdict(lower_task, RESTORE, [*why_lower, _restore_words(low.source)],
                                    low.source))
            lowered_digest = bytes_digest(low.payload)
            upstream = f"{lower_task} restored from the cache"
        # codegen, as it will see the lowered TIR once lower is current or restored
        compiled = codegen_step(ctx, model, w.name, lowered_digest)
        cg = compiled.decide()
        if cg.action == CURRENT:
            continue
        why_cg = step_changes(fingerprint.read_stamp(compiled.output), cg.inputs,
                              compiled.output, None, upstream)
        objects_change += 1
        if cg.corrupt:
            why_cg.append("its cache entry is corrupt: rebuilt")
        if cg.action == RESTORE:
            why_cg.append(_restore_words(cg.source))
        verdicts.append(Verdict(f"codegen:{model}/{w.name}", cg.action, why_cg,
                                cg.source if cg.action == RESTORE else None))

    # link: doit decides from the objects' content; predict from what changes upstream.
    reasons = []
    if objects_change:
        reasons.append(f"upstream output changed ({objects_change} object(s) will change)")
    if partition_runs and not repairs_only:
        reasons.append(f"upstream partition:{model} will run (the graph may change)")
    if part.action == RESTORE and any(
            not p.is_file() or file_digest(p) != recorded.get(p)
            for p in (layout.graph_dir / name for name in man.graph_objects)):
        reasons.append(f"upstream partition:{model} is restored with other graph objects")
    if manifest_mod.read(layout.manifest) is None:  # restored into an empty build/
        verdicts.append(Verdict(f"link:{model}", RUN, reasons or ["never built"]))
        return verdicts
    link = next(t for t in unit_tasks(ctx, model, kinds=("link",)))
    status = _doit_status(project, link)
    if status is None or status.status == "run":
        # partition puts back exactly the files its manifest records (restored or rewritten)
        rewritten = ({f"{p} {words}" for p in recorded for words in ("is missing", "changed")}
                     if repairs_only else set())
        reasons += [r for r in _file_reasons(status) if r not in rewritten]
        if status is not None and status.reasons.get("uptodate_false"):
            old = (fingerprint.read_stamp(layout.library) or {}).get("inputs")
            reasons += config_changes(old, ctx.link_config(), "link") or ["settings changed"]
    if reasons:
        verdicts.append(Verdict(f"link:{model}", RUN, reasons))
    return verdicts
