"""A sweep's plot (end-to-end latency per variant; error bars the quartiles, a line min to
max), and how variants are labelled in it and in the sweep's table.

Quartiles rather than a standard deviation: one slow run on a shared machine
makes the deviation larger than the median, and the bar would reach below zero.
"""

from __future__ import annotations

from pathlib import Path

from ..core import atomic


def label(step: dict, workloads, short: bool = False) -> str:
    """A step (workload -> variant number, None for no record) in words: "2" for a sweep of
    one workload; "W1=2, W2=default" (or with the names) for several."""
    text = {w: "default" if k is None else str(k) for w, k in step.items()}
    if len(workloads) == 1:
        return text[workloads[0]]
    names = {w: f"W{i}" if short else w for i, w in enumerate(workloads, 1)}
    return (" " if short else ", ").join(f"{names[w]}={text[w]}" for w in workloads if w in step)


def legend(workloads) -> str:
    return ", ".join(f"W{i} = {w}" for i, w in enumerate(workloads, 1))


def plot(sweep, path: Path) -> None:
    """The plot of a finished sweep (commands/sweep.py's ``Sweep``), as a PNG at ``path``."""
    import matplotlib

    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt

    rows = sweep.rows
    names = [label(r.variants, sweep.workloads, short=True) for r in rows]
    fig, ax = plt.subplots(figsize=(max(4.0, 0.8 * len(rows) + 2), 4.0), layout="constrained")
    ok = [i for i, r in enumerate(rows) if r.ok]
    lat = [rows[i].latency_ms for i in ok]
    ax.vlines(ok, [x["min"] for x in lat], [x["max"] for x in lat], color="tab:gray",
              linewidth=1, label="min to max")
    ax.errorbar(ok, [x["median"] for x in lat],
                yerr=[[x["median"] - x["q1"] for x in lat], [x["q3"] - x["median"] for x in lat]],
                fmt="o", capsize=4, label="median, quartiles")
    fastest = sweep.fastest()
    if fastest is not None:
        ax.plot([fastest], [rows[fastest].latency_ms["median"]], "*", markersize=14,
                color="tab:green", label="fastest")
    failed = [i for i, r in enumerate(rows) if not r.ok]
    for i in failed:
        ax.axvline(i, color="tab:red", alpha=0.3, linestyle="--")
    if failed:
        ax.plot([], [], color="tab:red", alpha=0.3, linestyle="--", label="build failed")
    ax.set_xticks(range(len(rows)), names, rotation=30 if len(sweep.workloads) > 1 else 0,
                  ha="right" if len(sweep.workloads) > 1 else "center")
    ax.set_xlim(-0.5, len(rows) - 0.5)
    ax.set_xlabel("variant" if len(sweep.workloads) == 1 else "variants")
    ax.set_ylabel("end-to-end latency (ms)")
    ax.set_ylim(bottom=0)
    swept = sweep.workloads[0] if len(sweep.workloads) == 1 else legend(sweep.workloads)
    ax.set_title(f"{sweep.model}: {swept}\n({sweep.mode}, {sweep.runs} runs each)", fontsize=9)
    fig.legend(loc="outside lower center", ncols=4, fontsize=8, frameon=False)
    ax.grid(axis="y", alpha=0.3)
    tmp = atomic.temp_path_for(path, ".png")
    try:
        fig.savefig(tmp, format="png", dpi=100)
        atomic.commit(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    finally:
        plt.close(fig)
