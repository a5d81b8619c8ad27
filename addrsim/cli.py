"""Command line: ``addrsim verify FILE.co [--buffer B] [--layout L] [--json FILE|-]``.

Exit status: 0 all proved, 1 any counterexample, 2 unknown/unsupported and no
counterexample, 3 bad input or usage.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import List, Optional

from . import __version__
from .api import DEFAULT_BUFFERS, DEFAULT_LAYOUTS, exit_status, verify
from .errors import EXIT_BAD_INPUT, AddrsimError


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # usage errors: one line, exit 3
        sys.stderr.write(f"addrsim: {message}\n")
        sys.exit(EXIT_BAD_INPUT)


def _bound(text: str):
    try:
        name, rng = text.split("=", 1)
        lo, hi = rng.split(":", 1)
        return name.strip(), (int(lo), int(hi))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected NAME=MIN:MAX, got {text!r}") from None


def main(argv: Optional[List[str]] = None) -> int:
    p = _Parser(prog="addrsim", description="Prove GPU kernels compute their buffer addresses correctly.")
    p.add_argument("--version", action="version", version=f"addrsim {__version__}")
    sub = p.add_subparsers(dest="cmd", required=True)
    v = sub.add_parser("verify", help="prove or refute the buffer base addresses of a code object")
    v.add_argument("files", nargs="+", metavar="FILE.co")
    v.add_argument("--buffer", action="append", help=f"buffer to check (repeatable; default {' '.join(DEFAULT_BUFFERS)})")
    v.add_argument("--layout", action="append", help=f"layout (repeatable; default {' '.join(DEFAULT_LAYOUTS)})")
    v.add_argument("--json", metavar="FILE", help="write the JSON report to FILE ('-' for stdout)")
    v.add_argument("--model", action="append", default=[], metavar="FILE.yaml", help="extra model file (repeatable)")
    v.add_argument("--bound", action="append", type=_bound, default=[], metavar="NAME=MIN:MAX",
                   help="override a shape bound, e.g. batch=1:64")
    v.add_argument("--timeout", type=int, default=10000, metavar="MS", help="solver timeout per query (ms)")
    v._parser_class = _Parser
    args = p.parse_args(argv)
    try:
        reports = [verify(f, args.buffer or DEFAULT_BUFFERS, args.layout or DEFAULT_LAYOUTS, args.model,
                          dict(args.bound), args.timeout) for f in args.files]
    except AddrsimError as e:
        sys.stderr.write(f"addrsim: {e}\n")
        return EXIT_BAD_INPUT
    merged = {"tool": "addrsim", "version": __version__, "kernels": [k for r in reports for k in r["kernels"]]}
    if args.json == "-":
        json.dump(merged, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print_table(merged)
        if args.json:
            try:
                with open(args.json, "w") as fh:
                    json.dump(merged, fh, indent=2)
            except OSError as e:
                sys.stderr.write(f"addrsim: {args.json}: cannot write ({e.strerror})\n")
                return EXIT_BAD_INPUT
    return exit_status(reports)


def print_table(report: dict, out=sys.stdout):
    for k in report["kernels"]:
        out.write(f"{k['file']}\n  kernel {k['kernel']} ({k['arch']})\n")
        out.write(f"  {'buffer':<7}{'layout':<8}{'verdict':<16}{'time':>7}\n")
        for c in k["checks"]:
            out.write(f"  {c['buffer']:<7}{c['layout']:<8}{c['verdict']:<16}{c['time_s']:>6.2f}s\n")
        for c in k["checks"]:
            tag = f"{c['buffer']}/{c['layout']}"
            if c["verdict"] == "counterexample":
                x = c["counterexample"]
                shape = " ".join(f"{n}={v}" for n, v in x["shape"].items())
                out.write(f"\n  {tag}: counterexample at {shape}\n")
                out.write(f"    batch_id={x['coords']['batch_id']} head_id={x['coords']['head_id']} "
                          f"lane={x['lane']} (access at {x['access_pc']:#x})\n")
                out.write(f"    byte offset from (0,0): extracted {x['address']['extracted']}, "
                          f"expected {x['address']['expected']}\n")
                args = ", ".join(f"{n}={v}" for n, v in x["kernargs"].items())
                out.write(f"    kernel arguments: {args}\n")
                out.write(f"    extracted: {c['extracted']}\n    expected:  {c['expected']}\n")
                out.write(f"    extracted - expected (this layout, before preconditions): {c['difference']}\n")
            elif c["verdict"] != "proved":
                out.write(f"\n  {tag}: {c['verdict']}: {c['reason']}\n")
        proved = [c for c in k["checks"] if c["verdict"] == "proved"]
        if proved:
            c = proved[0]
            out.write(f"\n  extracted offset: {c['extracted']}\n  expected offset:  {c['expected']}\n")


def entry():
    sys.exit(main())


if __name__ == "__main__":
    entry()
