"""The results folder's pictures drawn by a helper process forked when `search` starts (issue 30).

Importing matplotlib costs about a quarter of a second of CPU, more than everything else the
results folder needs, and a search spends most of a second reading, presolving and solving before
it has anything to draw. `PictureWorker.start` forks a process at the start of the verb that
imports matplotlib and emit/plots.py while the search runs, then draws the pictures it is sent
(emit/plots.py, matplotlib's own SVG backend, as in the process) into the results folder's staging
folder, and answers when they are written. The writer waits for that answer before the staging
folder is renamed into place (emit/results.py), so the folder is as complete and atomic as before
and nothing runs after the verb returns: the worker is joined (or, when the search fails before
anything is drawn, stopped) on leaving `picture_worker`. Where `fork` is not the platform's way
(macOS, Windows) there is no worker and the pictures are drawn in the process, as before.

With more than one picture to draw, the worker forks a helper that draws all but the first while
the worker draws the first (`draw_split`): the parent only writes text meanwhile and then waits, so
the second core would otherwise idle; both have matplotlib imported already (the fork copies it).

The worker draws; it does not search: `--cpus` still counts the solver's workers alone.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

PictureJob = tuple[str, tuple[Any, ...], dict[str, Any]]
"""(name of an emit/plots.py function, its arguments, its keyword arguments)."""


def draw_here(jobs: list[PictureJob]) -> None:
    """Draw `jobs` in this process (no worker, or a worker that is gone)."""
    from tinker_opt.emit import plots

    for name, args, kwargs in jobs:
        getattr(plots, name)(*args, **kwargs)


def draw_split(jobs: list[PictureJob]) -> None:
    """Draw `jobs`, all but the first in a forked helper while this process draws the first
    (module docstring); the helper's traceback, if it failed, raised as RuntimeError here."""
    if len(jobs) < 2:
        draw_here(jobs)
        return
    try:
        read_end, write_end = os.pipe()
    except OSError:  # no descriptor to spare: all of them here
        draw_here(jobs)
        return
    try:
        helper = os.fork()
    except OSError:  # no process to spare: all of them here
        os.close(read_end)
        os.close(write_end)
        draw_here(jobs)
        return
    if helper == 0:  # the helper: draw, report a failure on the pipe, and leave at once
        status = 1
        try:
            os.close(read_end)
            draw_here(jobs[1:])
            status = 0
        except BaseException:
            os.write(write_end, traceback.format_exc().encode())
        finally:
            os._exit(status)
    os.close(write_end)
    _HELPERS.add(helper)
    try:
        draw_here(jobs[:1])
    finally:
        with os.fdopen(read_end, "rb") as pipe:
            failure = pipe.read().decode()
        os.waitpid(helper, 0)
        _HELPERS.discard(helper)
    if failure:
        raise RuntimeError(failure)


_HELPERS: set[int] = set()
"""The worker's helper drawing now (draw_split), stopped with the worker (`_stop_helpers`)."""


def _stop_helpers(signum, frame) -> None:
    """SIGTERM in the worker (PictureWorker.stop): the helper stops too, then the worker."""
    for helper in _HELPERS:
        os.kill(helper, signal.SIGKILL)
    os._exit(128 + signum)


def _serve(connection, parent_end) -> None:
    """The worker: import matplotlib now, then draw each batch of jobs sent, answering None or
    the error (as text: the parent raises it); returns on None or when the parent's end closes
    (the copy of that end the fork gave this process is closed first). Ctrl-C is the parent's
    to handle (it stops the worker), so the worker prints no traceback of its own."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _stop_helpers)
    parent_end.close()
    try:
        from tinker_opt.emit import plots

        plots.warm_up()  # matplotlib imported, its font loaded
    except Exception:  # drawing reports it, to the parent
        pass
    while True:
        try:
            jobs = connection.recv()
        except (EOFError, OSError):
            return
        if jobs is None:
            return
        try:
            draw_split(jobs)
            answer = None
        except BaseException:
            answer = traceback.format_exc()
        try:
            connection.send(answer)
        except OSError:
            return


@dataclass
class PictureWorker:
    """A forked process that draws pictures (module docstring)."""

    process: Any
    connection: Any
    pending: bool = False

    @classmethod
    def start(cls) -> PictureWorker | None:
        """The worker, started; None (draw in the process) where `fork` is not the platform's way,
        or where this process has imported matplotlib already (a long-lived caller, the tests:
        there is no import left to hide)."""
        if sys.platform != "linux" or "fork" not in multiprocessing.get_all_start_methods():
            return None
        if "matplotlib.figure" in sys.modules:
            return None
        context = multiprocessing.get_context("fork")
        parent, child = context.Pipe()
        process = context.Process(target=_serve, args=(child, parent), daemon=True, name="pictures")
        process.start()
        child.close()
        return cls(process, parent)

    def submit(self, jobs: list[PictureJob]) -> None:
        """Send `jobs` to be drawn; `wait` returns when they are written."""
        self.connection.send(jobs)
        self.pending = True

    def wait(self) -> None:
        """Until the jobs sent are drawn; raises RuntimeError with the worker's traceback when
        drawing failed or the worker is gone."""
        self.pending = False
        try:
            answer = self.connection.recv()
        except (EOFError, OSError):
            answer = f"the picture worker stopped (exit code {self.process.exitcode})"
        if answer is not None:
            raise RuntimeError(f"drawing the pictures failed:\n{answer}")

    def stop(self) -> None:
        """Stop the worker now (the search failed, or the folder being written is removed: it may
        still be importing or drawing into it) and join it."""
        self.pending = False
        self.process.terminate()
        self.process.join()

    def close(self, *, failed: bool) -> None:
        """Tell the worker to return and join it; stop it instead when the search failed or a
        drawing is still pending. (The end of the pipe alone would not do: a process forked
        meanwhile, a presolve worker, may still hold a copy of this end.)"""
        if failed or self.pending:
            self.stop()
        else:
            try:
                self.connection.send(None)
            except OSError:
                self.stop()
        self.connection.close()
        self.process.join()


@contextmanager
def picture_worker() -> Iterator[PictureWorker | None]:
    """A PictureWorker for the length of a verb (None where there is none); joined on leaving."""
    worker = PictureWorker.start()
    failed = True
    try:
        yield worker
        failed = False
    finally:
        if worker is not None:
            worker.close(failed=failed)
