"""A sweep's plan: the steps it builds (the variants active in each), refused before
anything is built when it is too big or cannot work, and the name its results are saved
under."""

from __future__ import annotations

import itertools
import re

from ..core import manifest as manifest_mod
from ..core.errors import BuildError, no_workload
from ..core.paths import ModelPaths, Project
from ..schedules import active, variants
from ..targets import registry
from .workspace import model_layout, partitioned

MODES = ("one-at-a-time", "cross")

Step = dict  # workload -> variant number, None for "no record" (the target's default schedule), or
# a compute's name (the default schedule on that compute: variants.choose)


def plan(layout: ModelPaths, workloads: list[str], chosen: list | None, mode: str) -> list[Step]:
    """The steps of the sweep: one-at-a-time varies one workload per step, cross all at once."""
    per = {}
    for w in workloads:
        have = variants.existing(layout, w)
        if chosen is None:
            if not have:
                raise BuildError(f"no sampled variants of workload '{w}' in "
                                 f"{layout.variants_dir(w)}", workload=w,
                                 hint=f"python -m modelbuild sample {layout.name} {w} -n 3")
            per[w] = list(have)
        else:
            missing = [k for k in chosen if isinstance(k, int) and k not in have]
            variants.check_computes(layout, w, [k for k in chosen if isinstance(k, str)])
            if missing:
                raise BuildError(f"no variant {', '.join(map(str, missing))} of workload '{w}' "
                                 f"(have: {', '.join(map(str, have)) or 'none'})", workload=w,
                                 hint=f"python -m modelbuild sample {layout.name} {w} -n N")
            per[w] = list(chosen)
    if mode == "cross":
        return [dict(zip(workloads, combo)) for combo in itertools.product(*per.values())]
    return [{w: k} for w in workloads for k in per[w]]


def plan_size_text(steps: list[Step], workloads, mode: str) -> str:
    counts = {w: len({s[w] for s in steps if w in s}) for w in workloads}
    sep = " x " if mode == "cross" else " + "
    how = "cross product" if mode == "cross" else "one workload at a time"
    return f"{sep.join(str(counts[w]) for w in workloads)} variants, {how}"


def check_workloads(layout: ModelPaths, man, workloads) -> None:
    if man is not None:
        unknown = [w for w in workloads if man.workload(w) is None]
        if unknown:
            raise no_workload(layout.name, unknown)
    for w in workloads:
        python = active.python_file(layout, w)
        if python is not None:
            raise BuildError("the workload is scheduled by a Python file; a sweep makes JSON "
                             "variants active", file=python, workload=w,
                             hint="move the .py record aside while sweeping")


def prepare(project: Project, model: str, workloads: list[str], chosen: list | None, mode: str,
            max_builds: int, target: registry.Choice) -> list[Step]:
    """The plan, refused before anything is built when it is too big or cannot work."""
    layout = model_layout(project, model)
    if mode not in MODES:
        raise BuildError(f"unknown mode '{mode}' (one of: {', '.join(MODES)})")
    workloads = list(dict.fromkeys(workloads))
    check_workloads(layout, manifest_mod.read(layout.manifest), workloads)
    steps = plan(layout, workloads, chosen, mode)
    if len(steps) > max_builds:
        raise BuildError(
            f"the sweep would take {len(steps)} builds ({plan_size_text(steps, workloads, mode)}), "
            f"more than --max-builds {max_builds}; nothing was built",
            hint=f"pass --max-builds {len(steps)}, "
                 + ("choose fewer with --variants, or use --mode one-at-a-time" if mode == "cross"
                    else "or choose fewer with --variants"))
    check_workloads(layout, partitioned(project, model, target).manifest, workloads)
    return steps


def parse_variants(text: str | None) -> list | None:
    """"1,2,default" -> [1, 2, None]; None: every sampled variant."""
    if text is None:
        return None
    out = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        if part == "default":
            out.append(None)
        elif part.isdigit() or part.isidentifier():  # a number, or a compute's name
            out.append(int(part) if part.isdigit() else part)
        else:
            raise BuildError(f"--variants {text}: '{part}' is not a variant number, 'default' "
                             "or a compute")
    if not out:
        raise BuildError(f"--variants {text!r} names no variant",
                         hint="e.g. --variants default,1,2 (or leave it out: every variant)")
    return list(dict.fromkeys(out))


_SWEEP_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+=-]*$")
_NAME_MAX = 200  # file systems take 255 bytes a name; ".json", ".png" and a temporary's prefix


def default_name(workloads: list[str], mode: str) -> str:
    """The workload names, joined; when that is too long for a file name, its start and a
    digest of the whole (each set of workloads keeps its own file)."""
    import hashlib

    name = "+".join(workloads) + ("-cross" if mode == "cross" else "")
    if len(name) <= _NAME_MAX:
        return name
    return name[:_NAME_MAX - 17] + "-" + hashlib.sha256(name.encode()).hexdigest()[:16]


def check_sweep_name(name: str) -> None:
    """A sweep's name is a file name in build/<model>/sweeps/: nothing that leaves it."""
    if len(name) > _NAME_MAX:
        raise BuildError(f"--name is {len(name)} characters: a file name takes {_NAME_MAX} "
                         "at most here", hint="give a shorter name")
    if not _SWEEP_NAME.match(name) or ".." in name:
        raise BuildError(f"--name {name!r} is not a plain file name: the sweep's results go to "
                         "build/<model>/sweeps/<name>.json",
                         hint="use letters, digits and '_', '.', '+', '=', '-' (no '/' or '..')")
