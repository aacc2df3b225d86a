"""Build speed of modelbuild against plain tvm.compile, measured side by side.

    python bench/build_speed.py [--model resnet50 --model densenet121] [--repeat 3]
                                [--workload conv2d] [--json bench/results/build_speed.json]

Baseline: what a user runs today - one fresh Python process that imports the
model, runs tvm.compile with the same records (through MetaScheduleApplyDatabase)
and export_library. Against it, in fresh copies of the project (each with its
own empty artifact cache; $MODELBUILD_CACHE is ignored):

- clean `doit build:M` serial and `doit -n 2`, with the peak RSS of the whole
  process tree (doit and its workers and linker, summed, polled every 50 ms);
- a one-record rebuild (a tile decision of workload W permuted: a real, valid
  change), a no-op rebuild and switching back to the previous record
  (A -> B -> A: lower and codegen come from the cache, the link runs), each a
  cold `doit build:M` process;
- the link alone: `modelbuild.link.run` on the model's real objects, replacing
  a library as link:M does, timed inside a fresh process (the link only: no
  interpreter start-up, no doit);
- a three-variant sweep of W from a built project: `python -m modelbuild
  select M W k` then `doit build:M`, k = three sampled variants, builds timed;
- watch mode: `python -m modelbuild watch M` on a built project, --repeat
  distinct edits of W's record (different tile permutations, so never a cache
  hit), after one untimed warm-up edit; both the rebuild time watch reports
  and the wall time from writing the file to that line (adds the polling delay);
- the physical limit of those same edits: codegen of W plus the link, run
  in-process with TVM imported and warm (one untimed run first); lower +
  codegen + link for reference.

Setup (untimed): W gets 4 sampled variants (`python -m modelbuild sample`);
a model without a record for W gets variant 1 as its active record, and the
baseline copies the same schedules/. Each figure is the median of --repeat
runs (watch and physical limit: of --repeat edits). A table per model and a
JSON file (--json) hold the figures, ratios and targets.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import psutil
from rich.console import Console
from rich.table import Table

REPO = Path(__file__).resolve().parent.parent
DEFAULT_JSON = REPO / "bench" / "results" / "build_speed.json"
console = Console(highlight=False, emoji=False, width=None if sys.stdout.isatty() else 120)

# Targets per model; a model not listed here is held to resnet50's.
TARGETS = {
    "resnet50": {"watch": 0.05, "one_record": 0.25, "noop": 0.1, "clean_n2": 0.7, "clean": 1.2,
                 "watch_over_limit": 1.5, "rss": 1.2, "rss_n2": 1.2, "switch_back": 1.2,
                 "sweep": 0.5},
    "densenet121": {"watch": 0.02, "one_record": 0.1, "noop": 0.05, "clean_n2": 0.7,
                    "clean": 1.2, "watch_over_limit": 1.5, "rss": 1.2, "rss_n2": 1.2,
                    "switch_back": 1.2, "sweep": 0.5},
}

BASELINE = """
import sys
from pathlib import Path
from modelbuild.core import models
from modelbuild.steps import reference
from modelbuild.targets import registry as targets
root = Path(sys.argv[1]); name = sys.argv[2]
spec = models.discover(root / "models")[name]
ex = reference.compile_model(spec, root / "schedules" / name, targets.resolve("llvm"))
ex.export_library(str(root / "baseline.so"))
"""

# The model's link, exactly as link:M runs it, into a scratch file. Timed the second
# time, when it replaces a library as link:M does (freeing the old one is part of it).
LINK_ALONE = """
import sys, tempfile, time
from pathlib import Path
from modelbuild.steps import link
from modelbuild.core import manifest
from modelbuild.targets import registry as targets
from modelbuild.core.paths import Project
layout = Project(Path(sys.argv[1])).model(sys.argv[2])
man = manifest.read(layout.manifest)
objects = [layout.object(w.name) for w in man.workloads]
graph = [layout.graph_dir / n for n in man.graph_objects]
spec = targets.resolve("llvm")
with tempfile.TemporaryDirectory(dir=layout.dir) as tmp:
    link.run(objects, graph, Path(tmp) / "alone.so", spec)
    start = time.perf_counter()
    link.run(objects, graph, Path(tmp) / "alone.so", spec)
    print(time.perf_counter() - start)
"""

# Which candidate edits the build accepts (a permuted tile can break a later instruction
# of the trace): the first ``count``, by their position.
VALIDATE = """
import sys, tempfile
from pathlib import Path
from modelbuild.steps import lower
from modelbuild.targets import registry as targets
from modelbuild.core.errors import BuildError
from modelbuild.core.paths import Project
from modelbuild.schedules.active import of_files
root, model, w, count = Path(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
layout = Project(root).model(model)
valid = []
with tempfile.TemporaryDirectory() as tmp:
    for i, record in enumerate(sys.argv[5:]):
        try:
            lower.run(layout.workload(w), of_files(w, (Path(record),)), Path(tmp) / "out.json",
                      targets.resolve("llvm"), w)
        except BuildError:
            continue
        valid.append(i)
        if len(valid) == count:
            break
print(" ".join(map(str, valid)))
"""

# For each edited record: lower, codegen, link of the real files, TVM warm.
PHYSICAL = """
import json, sys, tempfile, time
from pathlib import Path
import tvm
from modelbuild.steps import codegen, link, lower
from modelbuild.core import manifest
from modelbuild.targets import registry as targets
from modelbuild.core.paths import Project
from modelbuild.schedules.active import of_files
root, model, w = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
layout = Project(root).model(model)
man = manifest.read(layout.manifest)
spec = targets.resolve("llvm")
graph = [layout.graph_dir / n for n in man.graph_objects]
def once(record, tmp):
    lowered, obj = tmp / "lowered.json", tmp / f"{w}.o"
    objects = [obj if x.name == w else layout.object(x.name) for x in man.workloads]
    t0 = time.perf_counter()
    lower.run(layout.workload(w), of_files(w, (record,)), lowered, spec, w)
    t1 = time.perf_counter()
    codegen.run(lowered, obj, spec, w)
    t2 = time.perf_counter()
    link.run(objects, graph, tmp / "limit.so", spec)
    t3 = time.perf_counter()
    return {"lower": t1 - t0, "codegen": t2 - t1, "link": t3 - t2}
with tempfile.TemporaryDirectory(dir=layout.dir) as tmp:
    once(Path(sys.argv[4]), Path(tmp))  # warm-up, untimed
    print(json.dumps([once(Path(p), Path(tmp)) for p in sys.argv[5:]]))
"""


# -- running things ------------------------------------------------------------------

def bench_env() -> dict:
    """Subprocesses import this checkout's modelbuild, use each project's own cache, and
    write their lines as they come (watch is read line by line)."""
    env = dict(os.environ)
    env.pop("MODELBUILD_CACHE", None)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    env["PYTHONUNBUFFERED"] = "1"
    return env


@dataclass
class Run:
    seconds: float
    cpu: float  # user + system seconds of the process and all its descendants
    peak_rss: int  # bytes, summed over the process tree; 0 when not polled
    peak_pss: int  # the same in PSS: pages shared between processes counted once
    out: str


def _pss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def tree_memory(proc: psutil.Process) -> tuple[int, int]:
    """(RSS, PSS) summed over ``proc`` and all its descendants now."""
    rss = pss = 0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            rss += p.memory_info().rss
            pss += _pss(p.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return rss, pss


def run(cmd: list[str], cwd: Path, rss: bool = False) -> Run:
    """Run ``cmd`` to completion (exit on failure): wall time, the CPU time of its whole
    process tree, and with ``rss`` its peak memory, sampled every 50 ms."""
    peak_rss = peak_pss = 0
    ended = threading.Event()
    reaped: dict = {}

    def reap():  # wait4: the child's rusage covers every descendant it waited for
        _, status, usage = os.wait4(proc.pid, 0)
        reaped.update(end=time.perf_counter(), status=status, usage=usage)
        ended.set()

    with tempfile.TemporaryFile("w+") as out:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, text=True,
                                env=bench_env())
        ps = psutil.Process(proc.pid)
        threading.Thread(target=reap, daemon=True).start()
        while rss and not ended.is_set():
            try:
                now_rss, now_pss = tree_memory(ps)
            except psutil.NoSuchProcess:
                break
            peak_rss, peak_pss = max(peak_rss, now_rss), max(peak_pss, now_pss)
            ended.wait(0.05)
        ended.wait()
        proc.returncode = os.waitstatus_to_exitcode(reaped["status"])
        out.seek(0)
        text = out.read()
    if proc.returncode != 0:
        sys.exit(f"benchmark step failed: {' '.join(map(str, cmd))} (in {cwd})\n{text}")
    usage = reaped["usage"]
    return Run(reaped["end"] - start, usage.ru_utime + usage.ru_stime, peak_rss, peak_pss, text)


def ran_tasks(out: str) -> set[str]:
    return {ln[3:].split()[0] for ln in out.splitlines() if ln.startswith(".  ")}


def expect(out: str, ran: set[str], not_ran: set[str] = frozenset(), what: str = "") -> None:
    """The build did what the figure assumes (else the figure would measure something else)."""
    got = ran_tasks(out)
    if not ran <= got or got & not_ran:
        sys.exit(f"{what}: expected {sorted(ran)} to run and {sorted(not_ran)} not; "
                 f"ran {sorted(got)}\n{out}")


# -- projects and records --------------------------------------------------------------

def fresh_project(work: Path, tag: str, schedules: Path) -> Path:
    root = work / tag
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    shutil.copy(REPO / "dodo.py", root / "dodo.py")
    shutil.copytree(REPO / "models", root / "models")
    shutil.copytree(schedules, root / "schedules")
    return root


def first_conv(root: Path, model: str) -> str:
    sys.path.insert(0, str(REPO))
    from modelbuild.core import manifest

    man = manifest.read(root / "build" / model / "partition" / "manifest.msgpack")
    convs = [w.name for w in man.workloads if "conv2d" in w.name]
    if not convs:
        sys.exit(f"{model} has no conv2d workload; choose one with --workload")
    return "conv2d" if "conv2d" in convs else convs[0]


def prepare_schedules(work: Path, model: str, workload: str | None) -> tuple[Path, str, list[int]]:
    """schedules/ for every copy of ``model``: 4 sampled variants of the workload, and an
    active record for it (variant 1 when none is shipped). Returns (dir, workload, the
    variants to sweep). The setup project stays partitioned, for valid_edits."""
    py = sys.executable
    root = fresh_project(work, f"{model}-setup", REPO / "schedules")
    run([py, "-m", "doit", f"partition:{model}"], root)
    workload = workload or first_conv(root, model)
    console.print(f"{model}: setup (sampling variants of {workload}) ...")
    run([py, "-m", "modelbuild", "sample", model, workload, "-n", "4"], root)
    sweep = [2, 3, 4]
    if not (root / "schedules" / model / f"{workload}.json").is_file():
        run([py, "-m", "modelbuild", "select", model, workload, "1"], root)
    else:
        sweep = [1, 2, 3]
    return root / "schedules", workload, sweep


def valid_edits(work: Path, model: str, workload: str, record: dict, count: int) -> list[dict]:
    """``count`` distinct edits of ``record`` that the build accepts."""
    paths = []
    for n, edited in enumerate(tile_edits(record)):
        path = work / f"{model}-candidates" / str(n) / f"{workload}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(edited, indent=1))
        paths.append(path)
    setup = work / f"{model}-setup"
    r = run([sys.executable, "-c", VALIDATE, str(setup), model, workload, str(count),
             *map(str, paths)], setup)
    chosen = [int(i) for i in r.out.split()]
    if len(chosen) < count:
        sys.exit(f"only {len(chosen)} of {len(paths)} tile permutations of {workload}'s record "
                 f"apply; {count} needed: choose another --workload or a smaller --repeat")
    return [json.loads(paths[i].read_text()) for i in chosen]


def tile_edits(record: dict):
    """Distinct edits of a record: each permutes the factors of one tile decision (the
    product, the loop extent, is kept; whether the rest of the trace still applies is
    for valid_edits to find out)."""
    insts, decisions = record["trace"]
    for n, (index, value) in enumerate(decisions):
        if insts[index][0] != "SamplePerfectTile":
            continue
        for perm in dict.fromkeys(itertools.permutations(value)):
            if list(perm) != value:
                edited = copy.deepcopy(record)
                edited["trace"][1][n][1] = list(perm)
                yield edited


# -- watch mode --------------------------------------------------------------------------

class Watcher:
    """`python -m modelbuild watch M` in a subprocess; lines with their arrival time."""

    REBUILT = re.compile(r"rebuilt \S+ in ([0-9.]+) s")

    def __init__(self, root: Path, model: str):
        self.proc = subprocess.Popen([sys.executable, "-m", "modelbuild", "watch", model],
                                     cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, env=bench_env())
        self.lines: list[tuple[float, str]] = []
        self.idle_from = 0  # the next "watching" line at or after this index
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append((time.perf_counter(), line.rstrip("\n")))

    def wait_for(self, text: str, after: int, timeout: float = 600) -> int:
        deadline = time.time() + timeout
        while time.time() < deadline:
            for i in range(after, len(self.lines)):
                if text in self.lines[i][1]:
                    return i
            if self.proc.poll() is not None:
                break
            time.sleep(0.01)
        sys.exit(f"watch: no line with {text!r}:\n" + "\n".join(t for _, t in self.lines))

    def edit(self, path: Path, record: dict, model: str, workload: str,
             cached: bool = False) -> tuple[float, float]:
        """Write ``record`` to ``path``; (rebuild seconds watch reports, wall seconds from
        the write to that line). ``cached``: the record was built before in this project,
        so only the link may run."""
        ready = self.wait_for("watching", self.idle_from)  # polling again
        mark = len(self.lines)
        start = time.perf_counter()
        path.write_text(json.dumps(record, indent=1))
        done = self.wait_for(f"rebuilt {model}", mark)
        ran = {t[3:].split()[0] for _, t in self.lines[mark:done] if t.startswith(".  ")}
        if (f"codegen:{model}/{workload}" in ran) == cached or f"link:{model}" not in ran:
            sys.exit(f"watch: the edit did not run what it should ({cached=}):\n"
                     + "\n".join(t for _, t in self.lines[ready:done + 1]))
        self.idle_from = done + 1
        arrived, line = self.lines[done]
        return float(self.REBUILT.search(line).group(1)), arrived - start

    def stop(self):
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


# -- one model ----------------------------------------------------------------------------

def measure_model(work: Path, model: str, workload: str | None,
                  repeat: int) -> tuple[str, dict[str, list]]:
    """(the edited workload, every measurement by figure)."""
    py = sys.executable
    doit = [py, "-m", "doit"]
    build = [*doit, f"build:{model}"]
    schedules, workload, sweep = prepare_schedules(work, model, workload)
    cg, lk = f"codegen:{model}/{workload}", f"link:{model}"
    record_path = Path(model) / f"{workload}.json"
    original = json.loads((schedules / record_path).read_text())
    # B for the cold one-record rebuild, then one warm-up and --repeat edits for watch.
    edit_b, *watch_edits = valid_edits(work, model, workload, original, repeat + 2)
    f: dict[str, list] = defaultdict(list)

    def keep(key: str, r: Run) -> None:
        f[key].append(r.seconds)
        f[f"{key}_cpu"].append(r.cpu)
        if r.peak_rss:
            f[f"{key}_rss"].append(r.peak_rss)
            f[f"{key}_pss"].append(r.peak_pss)

    for i in range(repeat):
        console.print(f"{model}: round {i + 1}/{repeat} ...")
        root = fresh_project(work, f"{model}-baseline", schedules)
        keep("baseline", run([py, "-c", BASELINE, str(root), model], root, rss=True))

        root = fresh_project(work, f"{model}-serial", schedules)
        record = root / "schedules" / record_path
        keep("clean", run(build, root, rss=True))
        record.write_text(json.dumps(edit_b, indent=1))  # A -> B
        r = run(build, root)
        expect(r.out, {cg, lk}, what="one-record rebuild")
        keep("one_record", r)
        r = run(build, root)
        expect(r.out, set(), {lk}, what="no-op rebuild")
        keep("noop", r)
        record.write_text(json.dumps(original, indent=1))  # B -> A: from the cache
        r = run(build, root)
        expect(r.out, {lk}, {cg}, what="switch back")
        keep("switch_back", r)
        r = run([py, "-c", LINK_ALONE, str(root), model], root)
        f["link_alone"].append(float(r.out.split()[-1]))
        keep("link_alone_process", r)
        builds = []
        for k in sweep:
            run([py, "-m", "modelbuild", "select", model, workload, str(k)], root)
            r = run(build, root)
            expect(r.out, {cg, lk}, what=f"sweep variant {k}")
            builds.append(r.seconds)
        f["sweep"].append(sum(builds))
        f["sweep_builds"].append(builds)

        root = fresh_project(work, f"{model}-parallel", schedules)
        keep("clean_n2", run([*doit, "-n", "2", f"build:{model}"], root, rss=True))

    # Watch, on the last serial project (built; W's active record is the last variant).
    root = work / f"{model}-serial"
    console.print(f"{model}: watch mode, {repeat} edits after a warm-up edit ...")
    saved = []
    for n, rec in enumerate(watch_edits):
        path = work / f"{model}-edits" / str(n) / f"{workload}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(rec, indent=1))
        saved.append(str(path))
    watcher = Watcher(root, model)
    try:
        measured = [watcher.edit(root / "schedules" / record_path, rec, model, workload)
                    for rec in watch_edits]
        # Back and forth between the last two edits: each one a cache hit.
        back = [watcher.edit(root / "schedules" / record_path, watch_edits[-2 + j % 2], model,
                             workload, cached=True) for j in range(repeat)]
    finally:
        watcher.stop()
    f["watch_warmup"] = [measured[0][0]]
    f["watch"] = [m[0] for m in measured[1:]]
    f["watch_wall"] = [m[1] for m in measured[1:]]
    f["watch_switch_back"] = [m[0] for m in back]
    console.print(f"{model}: physical limit of the same edits ...")
    r = run([py, "-c", PHYSICAL, str(root), model, workload, *saved], root)
    steps = json.loads(r.out.strip().splitlines()[-1])  # edit 0, the warm-up, is not in it
    f["physical"] = [s["codegen"] + s["link"] for s in steps]
    f["physical_all"] = [s["lower"] + s["codegen"] + s["link"] for s in steps]
    f["physical_steps"] = steps
    return workload, dict(f)


# -- report ---------------------------------------------------------------------------------

def figures_of(model: str, workload: str, f: dict[str, list]) -> list[dict]:
    """The rows of the table: figure, seconds (or bytes), what the ratio is to, target."""
    med = {k: statistics.median(v) for k, v in f.items()
           if v and isinstance(v[0], (int, float))}
    t = TARGETS.get(model, TARGETS["resnet50"])
    base, link_alone = med["baseline"], med["link_alone"]
    mb = 1 << 20
    rows = [
        ("baseline", "baseline: fresh process, tvm.compile + export_library", med["baseline"],
         "s", None, None),
        ("clean", "clean doit build (serial)", med["clean"], "s", base, t["clean"]),
        ("clean_n2", "clean doit -n 2 build", med["clean_n2"], "s", base, t["clean_n2"]),
        ("noop", "no-op rebuild (cold doit)", med["noop"], "s", base, t["noop"]),
        ("one_record", f"one-record rebuild, cold doit ({workload})", med["one_record"], "s",
         base, t["one_record"]),
        ("watch", f"one-record rebuild, watch mode: the rebuild time it reports ({workload})",
         med["watch"], "s", base, t["watch"]),
        ("watch_wall", "  watch mode: wall, edit -> 'rebuilt' line (+ polling; no target)",
         med["watch_wall"], "s", base, None),
        ("watch_warmup", "  watch mode: first edit after start (warm-up, not in the median)",
         med["watch_warmup"], "s", base, None),
        ("physical", f"physical limit: codegen {workload} + link, in-process, warm",
         med["physical"], "s", base, None),
        ("physical_all", "  lower + codegen + link, in-process, warm (reference)",
         med["physical_all"], "s", base, None),
        ("watch_over_limit", "watch rebuild / physical limit", med["watch"], "s",
         med["physical"], t["watch_over_limit"]),
        ("link_alone", "link alone (link.run timed inside a fresh process)", link_alone, "s",
         base, None),
        ("switch_back", "switch back A -> B -> A, cold doit (cache hit) / link alone",
         med["switch_back"], "s", link_alone, t["switch_back"]),
        ("watch_switch_back", "  switch back in watch mode (reported rebuild) / link alone",
         med["watch_switch_back"], "s", link_alone, None),
        ("sweep", "3-variant sweep, built project: 3 x (select k; doit build) / 3 baselines",
         med["sweep"], "s", 3 * base, t["sweep"]),
        ("baseline_rss", "baseline peak RSS", med["baseline_rss"] / mb, "MB", None, None),
        ("rss", "clean build (serial) peak RSS, process tree / baseline's",
         med["clean_rss"] / mb, "MB", med["baseline_rss"] / mb, t["rss"]),
        ("rss_n2", "clean build -n 2 peak RSS, process tree summed / baseline's",
         med["clean_n2_rss"] / mb, "MB", med["baseline_rss"] / mb, t["rss_n2"]),
        ("pss_n2", "  the same in PSS (shared pages counted once) / baseline's PSS",
         med["clean_n2_pss"] / mb, "MB", med["baseline_pss"] / mb, None),
    ]
    out = []
    for key, label, value, unit, denom, target in rows:
        ratio = value / denom if denom else None
        verdict = None if target is None else ("ok" if ratio <= target else "MISSED")
        out.append({"key": key, "label": label, "value": value, "unit": unit, "ratio": ratio,
                    "target": target, "verdict": verdict, "cpu": med.get(f"{key}_cpu")})
    return out


def print_table(model: str, workload: str, repeat: int, rows: list[dict]) -> None:
    table = Table(title=f"{model}: median of {repeat} runs (ratio to the baseline unless the "
                        "figure says otherwise)",
                  caption="CPU: user + system seconds of the whole process tree (steadier than "
                          "wall time on a busy machine)")
    for col, justify in (("figure", "left"), ("value", "right"), ("CPU", "right"),
                         ("ratio", "right"), ("target", "right"), ("", "left")):
        table.add_column(col, justify=justify)
    for r in rows:
        value = f"{r['value']:.0f} MB" if r["unit"] == "MB" else f"{r['value']:.2f} s"
        cpu = "" if r["cpu"] is None else f"{r['cpu']:.2f} s"
        ratio = "" if r["ratio"] is None else f"{r['ratio']:.3f}"
        target = "" if r["target"] is None else f"<= {r['target']}"
        verdict = {"ok": "[green]ok[/green]", "MISSED": "[red]MISSED[/red]"}.get(r["verdict"], "")
        table.add_row(r["label"], value, cpu, ratio, target, verdict)
    console.print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", action="append",
                        help="model to measure (repeatable; default resnet50 and densenet121)")
    parser.add_argument("--workload",
                        help="the workload whose record is edited and swept (default: conv2d, "
                             "else the model's first conv2d workload)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON,
                        help=f"write the figures here (default {DEFAULT_JSON.relative_to(REPO)})")
    args = parser.parse_args()
    models = args.model or ["resnet50", "densenet121"]
    started = time.perf_counter()
    result = {"repeat": args.repeat, "cpus": os.cpu_count(),
              "load_average_at_start": os.getloadavg(), "models": {}}
    with tempfile.TemporaryDirectory(prefix="modelbuild-bench-") as tmp:
        for model in models:
            workload, raw = measure_model(Path(tmp), model, args.workload, args.repeat)
            rows = figures_of(model, workload, raw)
            print_table(model, workload, args.repeat, rows)
            result["models"][model] = {"workload": workload, "figures": rows, "runs": raw}
    result["load_average_at_end"] = os.getloadavg()
    result["bench_seconds"] = time.perf_counter() - started
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    console.print(f"figures written to {args.json}; the benchmark took "
                  f"{result['bench_seconds']:.0f} s")


if __name__ == "__main__":
    main()
