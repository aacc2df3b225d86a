"""Watch mode: one process with TVM loaded rebuilds a model on every edit.

The same doit task graph, state and outputs as `doit build:<model>`, run
in-process, so a later plain `doit build:<model>` finds everything up to date.
Files are polled (mtime and size): no extra dependency, works everywhere.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from ..core import manifest, models
from ..core.errors import BuildError
from ..core.paths import Project
from ..schedules import active
from ..targets import registry
from . import options
from .output import console
from .workspace import resolve_model


def watched_files(project: Project, model: str) -> dict[str, tuple[int, int]]:
    """mtime and size of every input of the model a user edits: its declaration and the
    files it names (an ONNX file outside models/ too), its records, and the helper modules
    its Python schedules import."""
    paths = list(project.models_dir.glob(f"{model}.*"))
    try:
        spec = models.discover_all(project.models_dir)[0].get(model)
    except BuildError:
        spec = None  # a broken declaration: the build says what is wrong
    if spec is not None:
        paths += spec.source_files()
    paths += active.files_in(project.model(model).records_dir)
    stamps = {}
    for p in paths:
        try:
            st = p.stat()
        except FileNotFoundError:
            continue
        stamps[str(p)] = (st.st_mtime_ns, st.st_size)
    return stamps


def _fresh_graph(root: Path, model: str, choice: registry.Choice):
    """doit's loader of the project's dodo.py (its settings, the targets it registers),
    with the task creators of a new BuildGraph on every rebuild: an edited model
    declaration or record is read again, exactly as a new `doit` process would. (doit and
    the graph are imported here, not when the command line is parsed.)"""
    from doit.cmd_base import DodoTaskLoader

    from ..graph.reporter import WatchReporter
    from ..graph.tasks import BuildGraph

    class FreshGraph(DodoTaskLoader):
        def setup(self, opt_values):
            super().setup(opt_values)
            config = dict(self.namespace.get("DOIT_CONFIG", {}))
            config["reporter"] = WatchReporter
            self.namespace["DOIT_CONFIG"] = config

        def load_tasks(self, cmd, pos_args):
            variables = {"target": choice.name, "mcpu": choice.mcpu}
            graph = BuildGraph(root, var=lambda name, default=None: variables.get(name, default),
                               requested=[f"build:{model}"])
            self.namespace.update(graph.creators())
            return super().load_tasks(cmd, pos_args)

    return FreshGraph()


def rebuild(project: Project, model: str, choice: registry.Choice) -> tuple[int, float]:
    """One in-process `doit build:<model>`; returns (doit's exit code, seconds)."""
    from doit.doit_cmd import DoitMain

    start = time.perf_counter()
    loader = _fresh_graph(project.root, model, choice)
    code = DoitMain(loader).run(["-f", str(project.root / "dodo.py"), f"build:{model}",
                                 *choice.doit_vars()])
    return code, time.perf_counter() - start


def watch(project: Project, model: str, choice: registry.Choice = registry.Choice(),
          bench: bool = False,
          interval: float = 0.05) -> int:
    from ..core import collector

    collector.import_tvm()  # loaded once, for every rebuild to come

    from ..measure.latency import library_latency, model_inputs

    previous = None
    console.print(f"[bold]watch[/bold] {model}: building once, then on every change to "
                  f"models/{model}.* and schedules/{model}/ (Ctrl-C to stop)")
    stamps = watched_files(project, model)
    try:
        while True:
            code, secs = rebuild(project, model, choice)
            if code == 0:
                line = f"[green]rebuilt[/green] {model} in {secs:.2f} s"
                if bench:
                    layout = project.model(model)
                    dev = choice.resolve().device
                    now, _ = library_latency(layout.library,
                                             model_inputs(manifest.read(layout.manifest),
                                                          device_name=dev),
                                             device_name=dev)
                    was = f" (was {previous * 1e3:.1f} ms)" if previous is not None else ""
                    line += f"; latency {now * 1e3:.1f} ms{was}"
                    previous = now
                console.print(line)
            else:
                console.print(f"[red]build failed[/red] after {secs:.2f} s; the last good "
                              f"library is unchanged. Still watching.")
            console.print("watching ...")
            while True:  # a poll is ~0.2 ms of stat calls: cheap at 20 per second
                time.sleep(interval)
                current = watched_files(project, model)
                if current == stamps:
                    continue
                time.sleep(interval)  # let an editor finish writing: rebuild once settled
                if watched_files(project, model) == current:
                    stamps = current
                    break
    except KeyboardInterrupt:
        console.print("watch: stopped")
        return 0


HELP = "rebuild a model in one warm process on every edit"


def arguments(p: argparse.ArgumentParser) -> None:
    """This command's arguments (``python -m modelbuild watch --help``)."""
    options.model(p)
    p.add_argument("--bench", action="store_true", help="print end-to-end latency after each rebuild")
    options.target(p)


def run(args) -> int:
    ws = resolve_model(args)
    ws.spec  # an unknown target is an error before the first build
    return watch(ws.project, args.model, ws.choice, bench=args.bench)
