"""`python -m modelbuild explain`: which operators of the model each workload computes,
and what a build made of it (record, artifacts, measured time).

TVM-free: everything comes from partition's manifest (its provenance), the
record files, the build directory and the last benchmark (``bench.json``).
Each report is a plain dict (what ``--json`` prints); ``render_*`` prints it.
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
from collections import Counter
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..core.digest import file_digest
from ..core.errors import BuildError, no_workload
from ..core.paths import ModelPaths
from ..core.manifest import Manifest, Operator
from ..core.units import format_size
from ..schedules import status
from . import options
from .output import console
from .workspace import resolve_model

LAYOUT_CHANGE = "layout change"
LAYOUT_CHANGE_WHY = ("no operator of the model: the build's layout converts a tensor there "
                     "(at the graph's edges, or around an operator that cannot take the "
                     "blocked layout)")

# -- reports ---------------------------------------------------------------------


def model_report(layout: ModelPaths, man: Manifest) -> dict:
    """Every workload (in model order) with the operators it computes; the operators
    with no kernel."""
    bench, bench_note = benchmark(layout)
    records = {r.workload: r for r in status.rows(layout, man)}
    rows = []
    for name in workloads_in_model_order(man):
        sources = man.sources(name)
        rows.append({
            "workload": name,
            "operators": [o.name for o, _ in sources],
            "op_types": dict(Counter(o.op_type for o, _ in sources)),
            "partly": [o.name for o, part in sources if part],
            "layout_change": _layout_json(man, name),
            "record": _record_source(records[name].status) or records[name].status,
            "compute": records[name].compute,
            "computes": list(records[name].computes),
            "median_ms": _bench_row(bench, name).get("median_ms"),
            "calls": _bench_row(bench, name).get("calls"),
        })
    return {
        "model": layout.name,
        "operators": len(man.operators),
        "workloads": rows,
        "no_kernel": [_operator_json(o) for o in man.operators if o.workload is None],
        "provenance_error": _provenance_error(man),
        "benchmark": str(_bench_path(layout)) if bench is not None else None,
        "benchmark_note": bench_note,
    }


def workload_report(layout: ModelPaths, man: Manifest, workload: str) -> dict:
    """One workload: its operators, its record, its artifacts, its measured time."""
    if man.workload(workload) is None:
        names = [w.name for w in man.workloads]
        raise no_workload(layout.name, workload, hint=_did_you_mean(
            workload, names, f"python -m modelbuild explain {layout.name}"))
    row = next(r for r in status.rows(layout, man) if r.workload == workload)
    bench, bench_note = benchmark(layout)
    measured = _bench_row(bench, workload)
    if bench is not None and not measured:
        bench_note = f"not in the benchmark {_bench_path(layout)}"
    return {
        "model": layout.name,
        "workload": workload,
        "operators": [{**_operator_json(o), "partly": part} for o, part in man.sources(workload)],
        "layout_change": _layout_json(man, workload),
        "provenance_error": _provenance_error(man),
        "record": {**row.to_json(), "source": _record_source(row.status)},
        "artifacts": [_artifact(kind, path) for kind, path in (
            ("workload TIR", layout.workload(workload, row.compute if row.status != "invalid"
                                             else "direct")),
            ("lowered TIR", layout.lowered(workload)),
            ("object", layout.object(workload)),
            ("library", layout.library))],
        "benchmark": measured or None,
        "benchmark_note": bench_note,
    }


def node_report(layout: ModelPaths, man: Manifest, node: str) -> dict:
    """Which workload computes one operator of the model, or why none does."""
    if not man.operators:
        raise BuildError(f"no provenance recorded for model '{layout.name}': "
                         f"{_provenance_error(man)}")
    op = man.operator(node)
    if op is None:
        raise BuildError(f"model '{layout.name}' has no operator named '{node}'",
                         hint=_did_you_mean(node, [o.name for o in man.operators],
                                            f"python -m modelbuild explain {layout.name} --json"))
    together = [o.name for o, _ in man.sources(op.workload)] if op.workload else []
    return {"model": layout.name, **_operator_json(op), "workload_operators": together}


def workloads_in_model_order(man: Manifest) -> list[str]:
    """Workload names in the order of the first operator each computes (the workloads
    computing parts of one operator first, then the one computing its output; a layout
    change just before the operator whose input it converts)."""
    first: dict[str, tuple[int, int]] = {}
    position = {o.name: i for i, o in enumerate(man.operators)}
    for w, user in man.layout_changes:  # just before the operator whose input it converts
        if user in position:
            first[w] = (position[user], -1)
    for i, o in enumerate(man.operators):
        for j, w in enumerate((*o.also, o.workload)):
            if w is not None:
                first.setdefault(w, (i, j))
    end = (len(man.operators), 0)
    return sorted((w.name for w in man.workloads), key=lambda n: (first.get(n, end), n))


def benchmark(layout: ModelPaths) -> tuple[dict | None, str]:
    """The last benchmark of the model (bench.json), or None and why not."""
    path = _bench_path(layout)
    if not path.is_file():
        return None, f"no benchmark (run `python -m modelbuild bench {layout.name}`)"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        return None, f"unreadable benchmark {path}: {err}"
    if not isinstance(data, dict) or not isinstance(data.get("workloads"), dict):
        return None, f"unreadable benchmark {path}: no 'workloads' table"
    measured = data.get("library_sha256")
    current = file_digest(layout.library) if layout.library.is_file() else None
    if measured is not None and measured != current:
        return None, (f"the benchmark {path} is of another library than "
                      f"{layout.library} is now (rebuilt since); run "
                      f"`python -m modelbuild bench {layout.name}` again")
    return data, ""


def _bench_path(layout: ModelPaths) -> Path:
    return layout.dir / "bench.json"  # where `python -m modelbuild bench` saves its result


def _bench_row(bench: dict | None, workload: str) -> dict:
    row = (bench or {}).get("workloads", {}).get(workload)
    return row if isinstance(row, dict) else {}


def _operator_json(o: Operator) -> dict:
    return {"name": o.name, "op_type": o.op_type, "workload": o.workload, "note": o.note,
            "also": list(o.also)}


def _provenance_error(man: Manifest) -> str:
    if man.operators:
        return ""
    return man.provenance_error or "the manifest records no operators"


def _record_source(status: str) -> str | None:
    """Where the schedule comes from: tuned / sampled / hand / python / default (no record)."""
    if status == "none":
        return "default"
    return None if status in ("stale", "invalid") else status


def _artifact(kind: str, path: Path) -> dict:
    if not path.is_file():
        return {"kind": kind, "path": str(path), "built": False, "sha256": None, "size": None}
    return {"kind": kind, "path": str(path), "built": True, "sha256": file_digest(path),
            "size": path.stat().st_size}


def _did_you_mean(name: str, known: list[str], listing: str) -> str:
    close = difflib.get_close_matches(name, known, n=5, cutoff=0.6)
    if close:
        return f"did you mean: {', '.join(close)}?"
    return f"`{listing}` lists them"


# -- rendering -------------------------------------------------------------------


def _kernel_less_lines(no_kernel: list[dict]) -> list[str]:
    """One line per reason (details in parentheses dropped), with the operator types."""
    by_reason: dict[str, list[str]] = {}
    for o in no_kernel:
        reason = re.sub(r" \(.*\)$", "", o["note"]).removeprefix("no kernel: ")
        by_reason.setdefault(reason, []).append(o["op_type"])
    return [f"{reason}: {_types(types)}" for reason, types in by_reason.items()]


def _layout_json(man: Manifest, workload: str) -> dict | None:
    """None, or the operator whose input ``workload`` converts to another layout."""
    name = man.layout_change(workload)
    if name is None:
        return None
    op = man.operator(name) if name else None
    return {"operator": name, "op_type": op.op_type if op else ""}


def _layout_change(change: dict) -> str:
    """'layout change' and the operator whose input it converts, or the model's output."""
    if not change["operator"]:  # no operator reads it: the graph returns it
        return f"{LAYOUT_CHANGE} (of the model's output)"
    return f"{LAYOUT_CHANGE} (the input of {change['operator']}, {change['op_type']})"


def _types(counts) -> str:
    return ", ".join(f"{t} x{n}" if n > 1 else t for t, n in Counter(counts).most_common())


def _relative(path: str, root: Path) -> str:
    try:
        return str(Path(path).relative_to(root))
    except ValueError:
        return path


def render_model(console: Console, report: dict) -> None:
    if report["provenance_error"]:
        console.print(f"[red]provenance unavailable:[/red] {escape(report['provenance_error'])}")
    rows = report["workloads"]
    timed = report["benchmark"] is not None
    table = Table(title=f"{report['model']}: {report['operators']} operators, "
                        f"{len(rows)} workloads")
    table.add_column("workload", no_wrap=True)
    table.add_column("ops", justify="right", no_wrap=True)
    table.add_column("operator types", overflow="fold")
    table.add_column("record", no_wrap=True)
    if timed:
        table.add_column("time", justify="right", no_wrap=True)
    for r in rows:
        count = str(len(r["operators"])) + ("*" if r["partly"] else "")
        record = r["record"] + ("" if r.get("compute", "direct") == "direct"
                                else f" ({r['compute']})")
        types = _types(r["op_types"])
        if r["layout_change"] is not None:
            change = _layout_change(r["layout_change"])
            types = f"{types} + {change}" if types else change
        cells = [r["workload"], count, escape(types), record]
        if timed:
            cells.append("unused" if r.get("calls") == 0 else
                         f"{r['median_ms']:.3f} ms" if r["median_ms"] is not None else "")
        table.add_row(*cells)
    console.print(table)
    if timed and any(r.get("calls") == 0 for r in rows):
        console.print("unused: a kernel the graph never calls when the model runs")
    if any(r["partly"] for r in rows):
        console.print("* computes part of an operator whose output another workload computes")
    if any(r["layout_change"] is not None for r in rows):
        console.print(f"{LAYOUT_CHANGE}: {LAYOUT_CHANGE_WHY}")
    no_kernel = report["no_kernel"]
    if no_kernel:
        console.print(f"{len(no_kernel)} operator(s) without a kernel:")
        for line in _kernel_less_lines(no_kernel):
            console.print(escape(f"  {line}"))
    else:
        console.print("every operator is computed by a workload")
    console.print(escape(f"time: {report['benchmark_note']}") if report["benchmark_note"]
                  else f"time: median per run, from {escape(report['benchmark'])}")


def render_workload(console: Console, report: dict, root: Path) -> None:
    console.print(f"[bold]{report['model']} / {report['workload']}[/bold]")
    ops = report["operators"]
    if report["provenance_error"]:
        console.print(f"operators: [red]provenance unavailable:[/red] "
                      f"{escape(report['provenance_error'])}")
    else:
        console.print(f"operators ({len(ops)}, in model order):")
        width = max((len(o["name"]) for o in ops), default=0)
        for o in ops:
            part = f"  (in part; its output: {o['workload']})" if o["partly"] else ""
            console.print(escape(f"  {o['name']:<{width}}  {o['op_type']}{part}"))
        if report["layout_change"] is not None:
            console.print(escape(f"  {'and ' if ops else ''}a "
                                 f"{_layout_change(report['layout_change'])}"
                                 f": {LAYOUT_CHANGE_WHY}"))
    rec = report["record"]
    if rec["record"]:
        line = f"record: {_relative(rec['record'], root)} ({rec['status']}"
        line += f", variant {rec['variant']} of {rec['variants']}" if rec["variant"] else ""
        line += f", {rec['run_secs'] * 1e3:.3f} ms when measured" if rec["run_secs"] else ""
        line += f"; {rec['note']})" if rec["note"] else ")"
    else:
        line = f"record: none ({rec['note']})"
    console.print(escape(line))
    others = [c for c in rec.get("computes", ["direct"]) if c != rec.get("compute", "direct")]
    console.print(escape(f"compute: {rec.get('compute', 'direct')}"
                         + (f" (it could use: {', '.join(others)}; `python -m modelbuild select "
                            f"{report['model']} {report['workload']} <compute>`)" if others
                            else "")))
    console.print("artifacts:")
    for a in report["artifacts"]:
        where = _relative(a["path"], root)
        if a["built"]:
            console.print(escape(f"  {a['kind']:<12}  {where}  {format_size(a['size'])}  "
                                 f"sha256 {a['sha256']}"))
        else:
            console.print(escape(f"  {a['kind']:<12}  {where}  not built"))
    b = report["benchmark"]
    if b and b.get("calls") == 0:
        console.print("time: not called when the model runs (the graph never calls this kernel)")
    elif b:
        extra = f", {b['calls']} call(s) per run" if "calls" in b else ""
        console.print(escape(f"time: {b['median_ms']:.3f} ms median per run{extra}"))
    else:
        console.print(escape(f"time: {report['benchmark_note']}"))


def render_node(console: Console, report: dict) -> None:
    head = f"{report['name']} ({report['op_type']}) in {report['model']}"
    if report["workload"] is None:
        console.print(escape(f"{head}: no workload: {report['note']}"))
        return
    console.print(escape(f"{head}: computed by workload {report['workload']}"))
    if report["also"]:
        console.print(escape(f"  parts of it also in: {', '.join(report['also'])}"))
    others = [n for n in report["workload_operators"] if n != report["name"]]
    if others:
        console.print(escape(f"  with {len(others)} other operator(s): {', '.join(others)}"))
    console.print(f"  more: python -m modelbuild explain {report['model']} {report['workload']}")


HELP = ("which model operators each workload computes; one workload's record, "
        "artifacts and time")


def arguments(p: argparse.ArgumentParser) -> None:
    """This command's arguments (``python -m modelbuild explain --help``)."""
    options.model(p)
    p.add_argument("workload", nargs="?", type=options.text,
                   help="one workload (default: all of them)")
    p.add_argument("--node", type=options.text,
                   help="which workload computes this operator (ONNX node name)")
    options.json_output(p)
    options.target(p)


def run(args) -> int:
    if args.workload and args.node:
        raise BuildError("give a workload or --node, not both")
    ws = resolve_model(args)
    man, layout = ws.partitioned().manifest, ws.layout
    if args.node:
        report = node_report(layout, man, args.node)
    elif args.workload:
        report = workload_report(layout, man, args.workload)
    else:
        report = model_report(layout, man)
    if args.json:
        print(json.dumps(report, indent=2))
    elif args.node:
        render_node(console, report)
    elif args.workload:
        render_workload(console, report, ws.project.root)
    else:
        render_model(console, report)
    return 0
