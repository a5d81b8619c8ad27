"""``addrsim explain FILE.co --buffer B``: the instructions that feed a buffer's address.
"""
from __future__ import annotations

import sys

from addrsim.commands.common import Once
from addrsim.errors import AddrsimError


def register(sub) -> None:
    """Add the ``explain`` subcommand to ``sub`` (argparse subparsers)."""
    ex = sub.add_parser("explain", help="the instructions that feed a buffer's address (backward slice)")
    ex.add_argument("file", metavar="FILE.co|LISTING.s")
    ex.add_argument("--like", metavar="KERNEL.co", help="code object whose metadata a listing takes")
    ex.add_argument("--buffer", required=True, action=Once, help="buffer whose address to explain (e.g. lse)")
    ex.add_argument("--model", action="append", default=[], metavar="FILE.yaml", help="extra model file (repeatable)")


def run(args) -> int:
    from addrsim.report.explain import explain, format_explanations
    try:
        exps = explain(args.file, args.buffer, model_files=args.model, like=args.like)
    except AddrsimError as e:
        sys.stderr.write(f"addrsim: {e}\n")
        return e.exit_code
    sys.stdout.write(format_explanations(exps) + "\n")
    return 0
