"""``doit -n N``: a worker process that dies ends the build, with a message, instead of a
build that waits forever.

doit runs the tasks of ``-n N`` in N worker processes and waits for each result on a
queue, with no timeout: a worker that dies with its task (the kernel's OOM killer, a
SIGKILL, a crash inside TVM) never answers, and doit waited for it forever.
``watch_workers()`` makes doit's queues ones whose blocking ``get`` looks at the workers
every half second while it waits; when one has died, the build stops: doit ends the
other workers, saves what finished (as after any error) and reports the message, and
exits with doit's status for an error (2). Steps finished are kept as always; the dead
worker's step left no output in place (outputs are renamed in whole), so the next run
builds it again.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.process
import multiprocessing.queues
import os
import queue
import signal

POLL_S = 0.5


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def death(exitcode: int) -> str:
    """How a worker ended, in words."""
    if exitcode < 0:
        name = _signal_name(-exitcode)
        cause = {"SIGKILL": ": killed, perhaps by the system for lack of memory",
                 "SIGSEGV": ": a crash", "SIGABRT": ": a crash"}.get(name, "")
        return f"was ended by {name}{cause}"
    if exitcode == 0:
        return "ended (status 0) before its step did"
    return f"exited with status {exitcode}"


def message(pid: int, exitcode: int) -> str:
    return (f"modelbuild: a doit worker process (pid {pid}) {death(exitcode)}; the step it "
            "ran did not finish. The steps that finished are kept: run the same command to "
            "go on (without -n if it happens again, to see the step's own error)")


class WatchedQueue(multiprocessing.queues.Queue):
    """A multiprocessing queue whose blocking ``get``, in the process that made it, raises
    doit's InvalidTask (doit ends the run with it as an error) when a worker process it
    started since has died. In the workers, a ``get`` is the queue's own.

    doit makes two per run, results then jobs; ``jobs`` is the second, set when it is made.
    A worker ends normally (status 0) only after taking a ``None`` from the job queue, so
    more workers ended with status 0 than ``None`` jobs put is a death too (a step that
    ended its process with status 0)."""

    def __init__(self, maxsize: int = 0):
        super().__init__(maxsize, ctx=multiprocessing.get_context())
        self._owner = os.getpid()
        self._earlier = _children()  # not this run's workers
        self._workers: set = set()
        self.jobs: WatchedQueue | None = None
        self.stops = 0  # None jobs put: workers told to end

    def put(self, obj, block=True, timeout=None):
        if obj is None:
            self.stops += 1
        super().put(obj, block, timeout)

    def get(self, block=True, timeout=None):
        if os.getpid() != self._owner:
            _die_with_parent(self._owner)
        if not block or timeout is not None or os.getpid() != self._owner:
            return super().get(block, timeout)
        while True:
            try:
                return super().get(timeout=POLL_S)
            except queue.Empty:
                dead = self._dead()
            if dead is None:
                continue
            try:  # what a worker sent just before it ended still counts
                return super().get(timeout=POLL_S)
            except queue.Empty:
                from doit.exceptions import InvalidTask

                raise InvalidTask(message(*dead)) from None

    def _dead(self) -> tuple[int, int] | None:
        self._workers |= _children() - self._earlier
        ended = sorted((w for w in self._workers if w.exitcode is not None),
                       key=lambda w: w.pid or 0)
        for worker in ended:
            if worker.exitcode != 0:
                return worker.pid, worker.exitcode
        told = self.jobs.stops if self.jobs is not None else len(ended)
        if len(ended) > told:
            return ended[-1].pid, 0
        return None


_BOUND: set = set()  # the worker processes already bound to their parent's life


def _die_with_parent(parent: int) -> None:
    """In a worker, once: end with SIGTERM when doit's main process ends. A killed main
    process left its workers waiting for jobs forever (doit's queues have no timeout)."""
    if os.getpid() in _BOUND:
        return
    _BOUND.add(os.getpid())
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG (Linux)
    except (OSError, AttributeError):
        return  # not Linux: the worker lingers, as doit's own do
    if os.getppid() != parent:  # it ended before this was set
        os.kill(os.getpid(), signal.SIGTERM)


def _queues(runner) -> WatchedQueue:
    """doit's ``self.Queue()``: a WatchedQueue that knows the run's job queue (the one
    made after it)."""
    made = WatchedQueue()
    previous = getattr(runner, "_modelbuild_results", None)
    if previous is not None and previous.jobs is None:
        previous.jobs = made
    else:
        runner._modelbuild_results = made
    return made


def _children() -> set:
    """This process's multiprocessing children, those that ended and were not reaped
    too (``active_children()`` reaps them: one dead before it is seen would be lost)."""
    return set(getattr(multiprocessing.process, "_children", ())) | set(
        multiprocessing.active_children())


def watch_workers() -> None:
    """Give doit's process runner (``doit -n N``) WatchedQueues. Called where the dodo
    file's tasks are made, in doit's own process, before it starts any worker."""
    from doit.runner import MRunner

    MRunner.Queue = _queues  # a method: doit calls self.Queue()
