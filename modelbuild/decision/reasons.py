"""Why a step is not current, in words a user can act on: what its stamp recorded compared
with its inputs now. ``Step.decide(explain=True)`` (cached_step.py; the link's
``link_check.Link.decide``) calls its kind's function here on the way to its verdict, so
`why` prints the build's own decision and its reasons (as ninja records its explanations
inside the dirty check, and doit's ``get_status(get_log=True)`` decides and explains in
one). Nothing here writes.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..cache.store import REMOTE
from ..core.paths import ModelPaths
from ..schedules.changes import record_changes
from ..steps import environment
from . import fingerprint
from .cached_step import MODIFIED, RESTORE, RUN, Decision, Step


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
            if old.get("target") == new.get("target"):  # else: the other target's own code
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


def step_changes(stamp: dict | None, inputs: dict, output: Path, upstream: str) -> list[str]:
    """Why a cached step (lower or codegen) is not current, from its stamp."""
    if not output.is_file():
        return ["output missing" + ("" if stamp else " (not built, or cleaned)")]
    if stamp is None:
        return ["no stamp beside the output (built by an older modelbuild, or interrupted)"]
    old = stamp.get("inputs", {})
    out = config_changes(old.get("config"), inputs["config"], inputs["step"])
    if "record" in inputs:
        out += record_changes(old.get("record", {}), inputs["record"])
        was, now = (r.get("compute", "direct") for r in (old.get("record", {}), inputs["record"]))
        if was != now:
            out.append(f"its TIR is the {now} compute's now (was the {was} compute's)")
        elif old.get("workload") != inputs["workload"]:
            out.append("workload changed (partition wrote a different TIR for it)")
    if "lowered" in inputs and old.get("lowered") != inputs["lowered"]:
        out.append(f"upstream output changed ({upstream})")
    if not out and stamp.get("key") == fingerprint.key(inputs):
        out.append(MODIFIED)
    return out or ["inputs changed"]


def partition_changes(stamp: dict | None, inputs: dict | None, problems: list[str]) -> list[str]:
    """Why partition is not current, from its stamp, its inputs now and its outputs."""
    if inputs is None:
        return ["a file the model is made of is missing (the build will name it)"]
    if stamp is None:
        if not problems or problems[0].startswith("no readable manifest"):
            return ["not built (or cleaned)"]
        return ["no stamp beside the manifest (built by an older modelbuild, or interrupted)"]
    old = stamp.get("inputs") or {}
    out = config_changes(old.get("config"), inputs["config"], "partition")
    was, now = old.get("sources") or {}, inputs["sources"]
    for role in ("declaration", "onnx"):
        if (was.get(role) or {}).get("sha256") != now[role]["sha256"] \
                and f"{now[role]['file']} changed" not in out:  # a model that is its .onnx
            out.append(f"{now[role]['file']} changed")
    if ("declared_inputs" in old and old["declared_inputs"] != inputs.get("declared_inputs")
            and (was.get("declaration") or {}).get("sha256") == now["declaration"]["sha256"]):
        # edited while the last build ran: it used the shapes read before the edit
        out.append(f"the last build used other [inputs] than {now['declaration']['file']} "
                   "declares (edited while it ran)")
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
    if old.get("layout") != inputs.get("layout"):
        out.append(f"layout changed ({old.get('layout') or 'NCHW'} -> {inputs.get('layout')})")
    return out + problems or (["inputs changed"] if stamp.get("key") != fingerprint.key(inputs)
                              else [MODIFIED])


def restore_words(source: str | None) -> str:
    return "restore (remote cache)" if source == REMOTE else "restore (local cache)"


# -- each kind's reasons, as Step.why (picklable: partials of these) --------------------

def partition(step: Step, stamp: dict | None, decision: Decision) -> list[str]:
    out = partition_changes(stamp, decision.inputs, step.artifact.problems())
    if decision.corrupt:
        out.append("its local cache entry is corrupt: not used")
    if decision.corrupt_remote:
        out.append("its remote cache entry is corrupt: not used")
    if decision.action == RESTORE:
        out.append(restore_words(decision.source))
    return out


def lower(layout: ModelPaths, workload: str, step: Step, stamp: dict | None,
          decision: Decision) -> list[str]:
    if decision.inputs is None:
        return ["workload file missing"]
    out = step_changes(stamp, decision.inputs, step.output, "")
    if decision.action == RUN and decision.corrupt:
        out.append("its cache entry is corrupt: rebuilt")
    if decision.action == RESTORE:
        out.append(restore_words(decision.source))
    return out


def codegen(upstream: str, step: Step, stamp: dict | None, decision: Decision) -> list[str]:
    """``upstream``: how the lowered TIR it reads comes about (lower's task, current or
    restored from the cache)."""
    if decision.inputs is None:
        return ["lowered TIR missing"]
    out = step_changes(stamp, decision.inputs, step.output, upstream)
    if decision.corrupt:
        out.append("its cache entry is corrupt: rebuilt")
    if decision.action == RESTORE:
        out.append(restore_words(decision.source))
    return out


def link(step, stamp: dict | None, decision: Decision) -> list[str]:
    """``step``: link_check.Link. What its check finds of the library and its inputs (its
    own words, as partition's outputs say theirs), then what changed in its settings."""
    out = step.problems(stamp, decision.inputs)
    if stamp is not None and stamp["key"] != fingerprint.key(step.config):
        out += config_changes(stamp.get("inputs"), step.config, "link") or ["settings changed"]
    return out
