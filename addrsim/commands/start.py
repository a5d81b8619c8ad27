"""The console script's entry point: SIGINT routed first, then the command line.

Owns :func:`entry`.  Imports nothing heavy before :func:`addrsim.commands.interrupt.install`
has blocked SIGINT: a library that starts threads at import (the BLAS of numpy, Z3) would
otherwise leave a thread that takes the signal, and a Ctrl-C would reach Python's handler
instead of the waiting thread (a traceback, or nothing while the main thread is blocked).
May import addrsim.commands.interrupt and addrsim.commands.cli.
"""
from __future__ import annotations


def entry() -> None:
    from addrsim.commands import interrupt
    interrupt.install()
    from addrsim.commands.cli import entry as run
    run()
