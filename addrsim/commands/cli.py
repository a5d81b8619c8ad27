"""Command line: ``addrsim verify | scan | diff | explain | repro | crosscheck | run``.

Owns :func:`main` (the parser, built from :data:`COMMANDS`: each command module registers its
subcommand and runs it) and :func:`entry` (exit codes; a bug is one line, exit 4).  One
module per command: :mod:`addrsim.commands.verify`, :mod:`~addrsim.commands.diff`,
:mod:`~addrsim.commands.crosscheck`, :mod:`~addrsim.commands.repro`,
:mod:`~addrsim.commands.scan`, :mod:`~addrsim.commands.explain`, :mod:`~addrsim.commands.run` (the
virtual MI300: exit 0 right, 1 wrong, 2 not runnable yet).

Exit status: 0 all proved, 1 any reachable counterexample (diff: NEW breaks what OLD proved),
5 only latent counterexamples, 2 unknown/unsupported and no counterexample, or a kernel no
family models (diff: a proof lost, undecided), 3 bad input or usage, 4 internal error, 130
interrupted (SIGINT: :mod:`addrsim.commands.interrupt`).  A closed output pipe never changes
the status.
"""
from __future__ import annotations

import sys
from typing import List, Optional

from addrsim import __version__
from addrsim.commands import contract, crosscheck, diff, explain, interrupt, repro, run, scan, verify
from addrsim.commands.common import Parser
from addrsim.errors import EXIT_BAD_INPUT, EXIT_INTERNAL

COMMANDS = {"verify": verify, "diff": diff, "crosscheck": crosscheck, "repro": repro, "scan": scan, "explain": explain, "run": run,
            "contract": contract}


def main(argv: Optional[List[str]] = None) -> int:
    p = Parser(prog="addrsim", description="Prove GPU kernels compute their buffer addresses correctly.")
    p.add_argument("--version", action="version", version=f"addrsim {__version__}")
    sub = p.add_subparsers(dest="cmd", required=True)
    for mod in COMMANDS.values():
        mod.register(sub)
    args = p.parse_args(argv)
    for name in ("buffer", "layout", "check"):          # a name given twice is checked (and shown) once
        if isinstance(getattr(args, name, None), list):
            setattr(args, name, list(dict.fromkeys(getattr(args, name))))
    return COMMANDS[args.cmd].run(args)


def entry():
    interrupt.install()
    interrupt.guard_stdout()    # the reader went away (addrsim ... | head): the verdict's status stays
    try:
        code = main()
        sys.stdout.flush()
        bad = interrupt.stdout_failure()
        if bad is not None:            # the report was not written: the run's answer is lost
            sys.stderr.write(f"addrsim: stdout: cannot write ({getattr(bad, 'strerror', None) or bad})\n")
            code = EXIT_BAD_INPUT
    except KeyboardInterrupt:   # SIGINT sent while install could not route it (not the main thread)
        sys.stderr.write("addrsim: interrupted\n")
        code = interrupt.EXIT_INTERRUPTED
    except Exception as e:  # a bug in addrsim: one line, a distinct exit status, never a traceback
        sys.stderr.write(f"addrsim: internal error: {type(e).__name__}: {e}\n")
        code = EXIT_INTERNAL
    sys.exit(code)


if __name__ == "__main__":
    entry()
