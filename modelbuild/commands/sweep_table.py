"""A finished sweep's table: a row per step, with its variants, times and cache hits."""

from __future__ import annotations

from rich import box
from rich.table import Table

from .sweep_plot import label, legend


def _ms(value: float) -> str:
    """About four significant digits, never an exponent: 0.0182, 9.447, 36.19, 632.4."""
    digits = 4 if value < 1 else 3 if value < 10 else 2 if value < 100 else 1
    return f"{value:.{digits}f}"


def table(sweep) -> Table:
    """One row per step of ``sweep`` (sweep.py's ``Sweep``, run): its variant(s), workload
    time(s), latency, build time, cache hits.

    Several workloads are numbered W1, W2, ... (the title names them), so the
    table stays narrow; a failed build's reason is printed below the table.
    """
    workloads, fastest = sweep.workloads, sweep.fastest()
    many = len(workloads) > 1
    table = Table(title=f"{sweep.model}: sweep of {legend(workloads) if many else workloads[0]} "
                        f"({sweep.mode})", box=box.SIMPLE_HEAD,
                  caption=f"medians of {sweep.runs} runs; latency: end to end; fastest by "
                          + ("latency" if sweep.by == "latency" else
                             "the swept workloads' time"))
    table.add_column("variant", justify="left" if many else "right")
    for i, _ in enumerate(workloads, 1):
        table.add_column(f"W{i} ms" if many else "workload ms", justify="right")
    for col in ("latency ms", "stdev", "build s", "cache hits" if not many else "hits"):
        table.add_column(col, justify="right")
    table.add_column("status", no_wrap=True)
    for i, row in enumerate(sweep.rows):
        cells = [label(row.variants, workloads, short=True)]
        if row.ok:
            lat = row.latency_ms
            cells += [_ms(row.workload_ms[w]) for w in workloads]
            cells += [_ms(lat["median"]), _ms(lat["stdev"])]
            status = "[green]fastest[/green]" if i == fastest else "ok"
        else:
            cells += ["-"] * (len(workloads) + 2)
            status = "[red]failed[/red]"
        hits = "-" if row.cache_hits is None else str(row.cache_hits)
        table.add_row(*cells, f"{row.build_seconds:.2f}", hits, status)
    return table
