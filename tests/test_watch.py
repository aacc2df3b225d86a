"""Watch mode: a warm process rebuilds on each edit and survives broken ones."""

import signal
import subprocess
import sys
import threading
import time

from conftest import assert_close, model_inputs, reference_output, run_library, sha256

from modelbuild.schedules import records


class Watcher:
    def __init__(self, project):
        self.proc = subprocess.Popen([sys.executable, "-m", "modelbuild", "watch", "tiny"],
                                     cwd=project.root, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, text: str, after: int = 0, timeout: float = 120) -> int:
        deadline = time.time() + timeout
        while time.time() < deadline:
            for i, line in enumerate(self.lines[after:], after):
                if text in line:
                    return i
            assert self.proc.poll() is None, "\n".join(self.lines)
            time.sleep(0.1)
        raise AssertionError(f"no line with {text!r}:\n" + "\n".join(self.lines))


def test_watch_rebuilds_on_edit_and_keeps_watching_after_a_broken_one(tiny_copy, tiny_variants):
    workload, variants = tiny_variants
    w = Watcher(tiny_copy)
    try:
        first = w.wait_for("watching ...")
        records.save(tiny_copy.record("tiny", workload), variants[0])
        rebuilt = w.wait_for("rebuilt tiny", after=first + 1)
        ran = set(w.lines[first + 1:rebuilt])
        assert {f".  lower:tiny/{workload}", f".  codegen:tiny/{workload}", ".  link:tiny"} <= ran
        x = model_inputs(tiny_copy.root, "tiny")
        assert_close(run_library(tiny_copy.library("tiny"), x), reference_output(tiny_copy, "tiny", x))
        good = sha256(tiny_copy.library("tiny"))

        ready = w.wait_for("watching ...", after=rebuilt)
        tiny_copy.record("tiny", workload).write_text("{ not json")
        failed = w.wait_for("build failed", after=ready + 1)
        assert any("invalid JSON" in line for line in w.lines[ready:failed])
        w.wait_for("watching ...", after=failed)
        assert w.proc.poll() is None and sha256(tiny_copy.library("tiny")) == good
    finally:
        w.proc.send_signal(signal.SIGINT)
        code = w.proc.wait(timeout=30)
    assert code == 0 and "watch: stopped" in w.lines[-1]
    # The watch used doit's own state: a plain doit run agrees, apart from the broken record.
    records.save(tiny_copy.record("tiny", workload), variants[0])
    run = tiny_copy.doit("build:tiny")
    assert run.ran <= {f"lower:tiny/{workload}"}
