"""Ctrl-C and closed pipes: the two ways a run ends early, each with an honest exit status.

Owns :func:`install` (SIGINT), :class:`PipeSafe` (stdout whose reader went away) and
:data:`EXIT_INTERRUPTED`.  May import addrsim.errors and addrsim.files.

SIGINT: Z3 installs its own SIGINT handler around each check and answers "unknown (canceled)"
(an interrupt read as an answer), and Python's handler runs only between bytecodes, so a
long solver call would swallow it.  :func:`install` blocks SIGINT in every thread (threads and
forked workers inherit the mask) and waits for it in a thread of its own with ``sigwait``
(the solvers release the GIL: Z3 through ctypes, Bitwuzla at each termination callback).
When it comes: one line on stderr, every worker process killed, the partial outputs removed
(:data:`addrsim.files.PENDING`), exit 130 (128 + SIGINT, as a shell reports it).  Nothing of
the run is written: outputs are renamed into place only once complete.

Closed pipe (``addrsim verify ... | head``, ``| true``): the rest of the output is dropped and
the run goes on, so the exit status is still the verdict's.
"""
from __future__ import annotations

import os
import signal
import sys
import threading

EXIT_INTERRUPTED = 130


def _on_interrupt() -> None:
    signal.sigwait({signal.SIGINT})
    try:
        os.write(2, b"addrsim: interrupted\n")
    except OSError:
        pass
    import multiprocessing
    for p in multiprocessing.active_children():
        try:
            p.kill()
        except Exception:                      # noqa: BLE001 - exiting anyway
            pass
    from addrsim.files import PENDING
    for tmp in list(PENDING):
        try:
            os.unlink(tmp)
        except OSError:
            pass
    os._exit(EXIT_INTERRUPTED)


def install() -> bool:
    """Route SIGINT to a waiting thread (see the module docstring).  Only from the main
    thread, once; returns whether it was installed."""
    if threading.current_thread() is not threading.main_thread() or getattr(install, "done", False):
        return False
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:     # a background job or nohup: keep ignoring it
        return False
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    threading.Thread(target=_on_interrupt, name="addrsim-sigint", daemon=True).start()
    install.done = True
    return True


class PipeSafe:
    """A text stream whose writes to a closed pipe are dropped (the file descriptor is pointed
    at /dev/null) instead of raising BrokenPipeError; ``closed_pipe`` says it happened.  Any
    other write error (a full disk, a closed descriptor) is kept in ``failed`` and the rest
    of the output dropped: the command then ends with one line and exit 3."""

    def __init__(self, stream):
        self._s = stream
        self.closed_pipe = False
        self.failed = None

    def _gone(self) -> None:
        self.closed_pipe = True
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._s.fileno())
            os.close(devnull)
        except (OSError, ValueError):
            pass

    def write(self, text):
        if self.failed is not None:
            return len(text)
        try:
            return self._s.write(text)
        except BrokenPipeError:
            self._gone()
        except (OSError, ValueError) as e:
            self.failed = e
        return len(text)

    def flush(self):
        if self.failed is not None:
            return
        try:
            self._s.flush()
        except BrokenPipeError:
            self._gone()
        except (OSError, ValueError) as e:
            self.failed = e

    def __getattr__(self, name):
        return getattr(self._s, name)


def guard_stdout() -> None:
    """Make ``sys.stdout`` and ``sys.stderr`` :class:`PipeSafe` (once); a descriptor closed at
    start (``>&-``, ``2>&-``: Python sets the stream to None) writes to /dev/null."""
    for name in ("stdout", "stderr"):
        s = getattr(sys, name)
        if s is None:
            s = open(os.devnull, "w")
        if not isinstance(s, PipeSafe):
            setattr(sys, name, PipeSafe(s))


def stdout_failure():
    """The error that stopped stdout (a full disk, a closed descriptor), or None."""
    return getattr(sys.stdout, "failed", None)
