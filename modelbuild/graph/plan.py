"""Why would the next `doit build:<model>` run what it runs? A dry run that builds nothing.

For each task that acts, the build's own decision and its reasons: each cached step's
``Step.decide(explain=True)`` (partition, lower, codegen: the words come with the verdict,
decision/reasons.py) and doit's ``get_status(get_log=True)`` for link. What is left here is the
walk down the pipeline, and the predictions for a step whose upstream runs first (its
input is not known before the build). Like ``ninja -d explain``, but readable.

Nothing is written: no cache restore, no doit state change. TVM is not imported.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import msgpack

from ..core import manifest as manifest_mod
from ..core.digest import bytes_digest, file_digest
from ..core.layout import Project
from ..decision import fingerprint
from ..decision.cached_step import CURRENT, RESTORE, RUN, Decision
from ..decision.context import Context, load_context
from ..decision.reasons import config_changes, file_reasons
from ..decision.step_builders import codegen_step, lower_step, partition_step
from ..steps.partition_output import MANIFEST
from . import doit_state, link_check
from .tasks import unit_tasks


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

    @classmethod
    def of(cls, task: str, decision: Decision) -> Verdict:
        """A step's decision as ``why`` prints it: its action, its own reasons."""
        return cls(task, decision.action, list(decision.reasons),
                   decision.source if decision.action == RESTORE else None)


def _doit_status(project: Project, task):
    """doit's own verdict and reasons for a task with file dependencies (read only)."""
    from doit.dependency import Dependency, MD5Checker, SqliteDB

    db = project.build_dir / ".doit.db"
    if not db.is_file() or doit_state.problem(db) is not None:  # the build sets it aside
        return None
    dep = Dependency(SqliteDB, str(db), checker_cls=MD5Checker)
    try:
        return dep.get_status(task, {task.name: task}, get_log=True)
    finally:
        dep.close()


@dataclass
class _Partition:
    """partition's decision, and what the rest of the walk needs to know of it."""

    decision: Decision
    manifest: manifest_mod.Manifest | None  # as it will be once partition is done (None: unknown)
    repairs_only: bool  # partition acts, but its outputs are known: the ones it records
    recorded: dict = field(default_factory=dict)  # output path -> digest the manifest records


def _partition(ctx: Context, model: str) -> _Partition:
    layout = ctx.project.model(model)
    part = partition_step(ctx, ctx.models[model]).decide(explain=True)
    stamp = fingerprint.read_stamp(layout.manifest)
    man = manifest_mod.read(layout.manifest)
    if part.action == RESTORE:
        man = manifest_mod.Manifest.from_bytes(msgpack.unpackb(part.payload)[MANIFEST])
    # whether partition's outputs are known before the build: current, restored (the cache
    # entry holds them) or rewritten the same (same inputs: partition is deterministic)
    outputs_known = part.action != RUN or (stamp is not None and part.inputs is not None
                                           and stamp.get("inputs") == part.inputs)
    recorded = ({layout.partition_dir / rel: digest for rel, _, digest in man.outputs}
                if man is not None else {})
    if not outputs_known:  # the workloads it makes are known only once it has run
        part = replace(part, reasons=(
            *part.reasons, "its workloads are known once it has run: lower and codegen then "
                           "run for each new or changed one (not listed here)"))
    return _Partition(part, man, part.action != CURRENT and outputs_known, recorded)


def _workload(ctx: Context, model: str, workload: str, part: _Partition,
              linked: dict) -> tuple[list[Verdict], bool]:
    """The verdicts of one workload's lower and codegen (none when both are current), and
    whether its object may then differ from the one the library was linked from
    (``linked``: {object path: sha256} from the library's stamp)."""
    lower_task, codegen_task = f"lower:{model}/{workload}", f"codegen:{model}/{workload}"
    lowered = lower_step(ctx, model, workload, part.recorded if part.repairs_only else None)
    low = lowered.decide(explain=True)
    if low.inputs is None:
        return [Verdict.of(lower_task, low)], True
    if low.action == RUN:  # codegen's input is not known before lower ran: a prediction
        old = (fingerprint.read_stamp(codegen_step(ctx, model, workload).output)
               or {}).get("inputs", {})
        return [Verdict.of(lower_task, low),
                Verdict(codegen_task, RUN, [f"upstream output may change ({lower_task} will "
                                            "run; if it makes the same TIR again, the rebuild "
                                            "stops there)",
                                            *config_changes(old.get("config"),
                                                            ctx.config_for("codegen"),
                                                            "codegen")])], True
    verdicts = []
    if low.action == CURRENT:
        compiled = codegen_step(ctx, model, workload, file_digest(lowered.output))
    else:
        verdicts.append(Verdict.of(lower_task, low))
        compiled = codegen_step(ctx, model, workload, bytes_digest(low.payload),
                                f"{lower_task} restored from the cache")
    cg = compiled.decide(explain=True)
    if cg.action == CURRENT:
        return verdicts, False
    same = (cg.action == RESTORE and cg.payload is not None
            and linked.get(str(compiled.output)) == bytes_digest(cg.payload))
    return [*verdicts, Verdict.of(codegen_task, cg)], not same


def _link(ctx: Context, model: str, part: _Partition, objects_change: int) -> Verdict | None:
    """link: doit decides from the objects' content; predict from what changes upstream."""
    layout = ctx.project.model(model)
    reasons = []
    if objects_change:
        reasons.append(f"upstream output may change ({objects_change} object(s) will be made "
                       "or restored; the same bytes again stop the rebuild there)")
    if part.decision.action == RUN and not part.repairs_only:
        reasons.append(f"upstream partition:{model} will run (the graph may change)")
    if part.decision.action == RESTORE and link_check.relinks_after_restore(
            ctx.project.build_dir / ".doit.db", layout, part.decision.payload,
            part.manifest.graph_objects):
        reasons.append(f"upstream partition:{model} is restored with other graph objects")
    if manifest_mod.read(layout.manifest) is None:  # restored into an empty build/
        return Verdict(f"link:{model}", RUN, reasons or ["not built (or cleaned)"])
    # the link the build makes once partition is done: of the manifest partition leaves
    # (restored from the cache after a failed build in another layout: not the one on disk)
    link = next(t for t in unit_tasks(ctx, model, kinds=("link",),
                                      man=part.manifest if part.repairs_only else None))
    status = _doit_status(ctx.project, link)
    if status is None or status.status == "run":
        # partition puts back exactly the files its manifest records (restored or rewritten)
        rewritten = ({f"{p} {words}" for p in part.recorded for words in ("is missing", "changed")}
                     if part.repairs_only else set())
        reasons += [r for r in file_reasons(status) if r not in rewritten]
        false = [utd for utd, *_ in (status.reasons.get("uptodate_false") or [])
                 ] if status is not None else []
        if false:
            old = (fingerprint.read_stamp(layout.library) or {}).get("inputs")
            repaired = ({str(p): d for p, d in part.recorded.items()}
                        if part.repairs_only else {})
            damaged = link_check.problems(layout.library, [Path(p) for p in link.file_dep],
                                          will_be=repaired)
            changed = config_changes(old, ctx.link_config(), "link")
            settings = not all(isinstance(u, link_check.LibraryIntact) for u in false)
            reasons += damaged + (changed or (["settings changed"] if settings else []))
    return Verdict(f"link:{model}", RUN, reasons) if reasons else None


def explain(root: Path, model: str, target_name: str | None = None,
            mcpu: str | None = None) -> list[Verdict]:
    """What `doit build:<model> [target=...]` would do, task by task (only tasks that act).

    Runs where doit runs the build, in the project root (``root`` is that directory:
    doit's state names files relative to it): the caller is there. The decisions are
    the build's own: each cached step's ``Step.decide`` (partition, lower, codegen) and
    doit's status of link (read only).
    """
    # a query: its tasks take no build lock (nor wait for a build) and restore nothing
    ctx = replace(load_context(root, target_name, mcpu), query=True)
    part = _partition(ctx, model)
    verdicts = [] if part.decision.action == CURRENT else [
        Verdict.of(f"partition:{model}", part.decision)]
    if part.manifest is None:
        return [*verdicts, Verdict(f"(every workload of {model})", RUN,
                                   ["the workloads are known once partition has run"])]
    objects_change = 0
    linked = link_check.linked_digests(ctx.project.model(model).library)
    for w in part.manifest.workloads:
        found, changes = _workload(ctx, model, w.name, part, linked)
        objects_change += changes and any(v.task.startswith("codegen:") for v in found)
        verdicts += found
    link = _link(ctx, model, part, objects_change)
    return verdicts + ([link] if link is not None else [])
