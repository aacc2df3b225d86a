"""A team's cache, measured side by side with a full compile in one run.

    python bench/remote_cache_speed.py [--model resnet50 --model densenet121] [--repeat 1]
                                       [--json bench/results/remote_cache_speed.json]

Baseline: as bench/build_speed.py, a fresh Python process that imports the model,
runs tvm.compile with the same records and export_library. Against it, each a
cold `doit build:M` in a fresh copy of the project (sources only, empty build/):

- warm remote, file://: another copy filled a shared folder (read-write); this one
  starts with an empty local cache and reads it;
- warm remote, S3: the same through an S3 endpoint on 127.0.0.1 (moto's server
  mode, started here; s3fs talks to it as to any S3);
- local cache kept: build/<model> deleted, build/.cache kept, no remote;
- remote unreachable: an S3 URL on a port nobody listens on, read-write: the build
  warns once and compiles everything locally;
- for reference, the clean build that filled the remote (read-write, uploads).

Each restore figure checks that the build recomputed nothing (only link ran). The
figures are medians of --repeat runs; the table prints each ratio to the baseline
beside its target.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import build_speed as bs  # noqa: E402  (the baseline and the process runner are shared)
from rich.table import Table  # noqa: E402

TARGETS = {"remote_file": 0.1, "remote_s3": 0.1, "local_kept": 0.08, "unreachable": 1.2}
LABELS = {
    "baseline": "baseline: tvm.compile + export (fresh process)",
    "fill": "clean build, read-write, empty remote (uploads)",
    "remote_file": "fresh checkout, empty local cache, warm remote (file://)",
    "remote_s3": "fresh checkout, empty local cache, warm remote (S3 endpoint)",
    "local_kept": "build/ deleted, local cache kept",
    "unreachable": "fresh checkout, remote unreachable (falls back)",
}
REMOTE_VARS = ("MODELBUILD_REMOTE_CACHE", "MODELBUILD_REMOTE_CACHE_MODE",
               "MODELBUILD_REMOTE_CACHE_TIMEOUT")


def with_remote(url: str | None, mode: str = "read", **extra: str) -> None:
    """The remote the next builds use (bench_env copies os.environ)."""
    for name in REMOTE_VARS:
        os.environ.pop(name, None)
    if url:
        os.environ.update(MODELBUILD_REMOTE_CACHE=url, MODELBUILD_REMOTE_CACHE_MODE=mode,
                          MODELBUILD_REMOTE_CACHE_TIMEOUT="5")
    os.environ.update(extra)


def start_s3():
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench",
                      AWS_DEFAULT_REGION="us-east-1", AWS_ENDPOINT_URL=endpoint)
    import boto3

    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket="bench")
    return server


def dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure(work: Path, model: str, repeat: int) -> dict[str, list[float]]:
    py = sys.executable
    build = [py, "-m", "doit", f"build:{model}"]
    schedules = bs.REPO / "schedules"
    link_only = {f"link:{model}"}
    f: dict[str, list[float]] = {k: [] for k in LABELS}
    server = start_s3()
    try:
        for i in range(repeat):
            bs.console.print(f"{model}: round {i + 1}/{repeat} ...")
            root = bs.fresh_project(work, f"{model}-baseline", schedules)
            f["baseline"].append(bs.run([py, "-c", bs.BASELINE, str(root), model], root).seconds)

            shared = work / f"shared-{i}"
            shutil.rmtree(shared, ignore_errors=True)
            with_remote(shared.as_uri(), "read-write")
            root = bs.fresh_project(work, f"{model}-fill", schedules)
            f["fill"].append(bs.run(build, root).seconds)

            with_remote(shared.as_uri(), "read")
            root = bs.fresh_project(work, f"{model}-file", schedules)
            r = bs.run(build, root)
            if bs.ran_tasks(r.out) != link_only:
                sys.exit(f"warm file:// remote recomputed {sorted(bs.ran_tasks(r.out))}\n{r.out}")
            f["remote_file"].append(r.seconds)

            with_remote(None)
            shutil.rmtree(root / "build" / model)
            r = bs.run(build, root)
            if bs.ran_tasks(r.out) != link_only:
                sys.exit(f"local cache kept recomputed {sorted(bs.ran_tasks(r.out))}\n{r.out}")
            f["local_kept"].append(r.seconds)

            with_remote(f"s3://bench/round-{i}", "read-write")
            bs.run(build, bs.fresh_project(work, f"{model}-s3fill", schedules))  # untimed
            with_remote(f"s3://bench/round-{i}", "read")
            root = bs.fresh_project(work, f"{model}-s3", schedules)
            r = bs.run(build, root)
            if bs.ran_tasks(r.out) != link_only:
                sys.exit(f"warm S3 remote recomputed {sorted(bs.ran_tasks(r.out))}\n{r.out}")
            f["remote_s3"].append(r.seconds)

            endpoint = os.environ["AWS_ENDPOINT_URL"]
            with_remote("s3://bench/unreachable", "read-write",
                        AWS_ENDPOINT_URL=f"http://127.0.0.1:{dead_port()}")
            root = bs.fresh_project(work, f"{model}-down", schedules)
            r = bs.run(build, root)
            if "warning: remote cache" not in r.out:
                sys.exit(f"the unreachable remote gave no warning\n{r.out}")
            f["unreachable"].append(r.seconds)
            os.environ["AWS_ENDPOINT_URL"] = endpoint
    finally:
        server.stop()
        with_remote(None)
    return f


def rows_of(f: dict[str, list[float]]) -> list[dict]:
    base = statistics.median(f["baseline"])
    rows = []
    for key, label in LABELS.items():
        seconds = statistics.median(f[key])
        rows.append({"figure": key, "label": label, "seconds": seconds,
                     "ratio": seconds / base, "target": TARGETS.get(key)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", action="append")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--json", type=Path, default=bs.REPO / "bench" / "results" /
                        "remote_cache_speed.json")
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory(prefix="modelbuild-remote-bench-") as tmp:
        for model in args.model or ["resnet50", "densenet121"]:
            rows = rows_of(measure(Path(tmp), model, args.repeat))
            results[model] = rows
            table = Table(title=f"{model}: a team's cache against tvm.compile "
                                f"(median of {args.repeat})")
            for col in ("figure", "seconds", "÷ baseline", "target"):
                table.add_column(col)
            for row in rows:
                ok = row["target"] is None or row["ratio"] <= row["target"]
                target = f"≤ {row['target']}" if row["target"] is not None else ""
                table.add_row(row["label"], f"{row['seconds']:.2f}",
                              f"[{'green' if ok else 'red'}]{row['ratio']:.3f}[/]", target)
            bs.console.print(table)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2))
    bs.console.print(f"figures written to {args.json}")


if __name__ == "__main__":
    main()
