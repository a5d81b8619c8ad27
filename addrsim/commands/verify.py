"""``addrsim verify FILE.co ...``: prove or refute the buffer addresses of code objects.

Exit status: 0 all proved, 1 a reachable counterexample, 5 only latent ones, 2
unknown/unsupported/unreachable and no counterexample, 3 bad input or usage, 4 internal error.
"""
from __future__ import annotations

import sys

from addrsim.commands.common import (report_keys, store_report, stored_report, EXIT_BAD_INPUT, MAX_JOBS, Parser, add_budgets, add_common, bound_arg, bounds_of, budgets_of,
                                     check_outputs, emit, fail, progress_bar, query_store, smt_dir)
from addrsim import __version__
from addrsim.api import DEFAULT_LAYOUTS, exit_status, verify
from addrsim.errors import EXIT_UNKNOWN, AddrsimError, InputError, UnmodelledError
from addrsim.files import atomic_open
from addrsim.model.models import load_models
from addrsim.prove.options import CHECK_MRU, MIN_MRU, QUERY_MRU
from addrsim.report.text import print_table


def register(sub) -> None:
    """Add the ``verify`` subcommand to ``sub`` (argparse subparsers)."""
    v = sub.add_parser("verify", help="prove or refute the buffer base addresses of a code object")
    v.add_argument("files", nargs="+", metavar="FILE.co|LISTING.s")
    v.add_argument("--like", metavar="KERNEL.co", help="code object whose metadata and kernel descriptors an "
                   "assembly listing takes (the one it was disassembled from)")
    v.add_argument("--buffer", action="append", help="buffer to check (repeatable; default: every buffer the kernel has a pointer for)")
    v.add_argument("--layout", action="append", help=f"layout (repeatable; default {' '.join(DEFAULT_LAYOUTS)})")
    v.add_argument("--json", metavar="FILE", help="write the JSON report to FILE ('-' for stdout)")
    v.add_argument("--html", metavar="FILE", help="write one self-contained HTML page of the run (no network)")
    v.add_argument("--model", action="append", default=[], metavar="FILE.yaml", help="extra model file (repeatable)")
    v.add_argument("--bound", action="append", type=bound_arg, default=[], metavar="NAME=MIN:MAX",
                   help="override a shape bound, e.g. batch=1:64")
    add_budgets(v, QUERY_MRU, CHECK_MRU, MIN_MRU)
    v._parser_class = Parser
    add_common(v, "address,bounds")
    v.add_argument("--layouts", action="append", default=[], metavar="FILE.yaml",
                   help="user layouts file (a model file with a layouts section; repeatable)")
    v.add_argument("--jobs", "-j", type=int, default=1, metavar="N",
                   help="worker processes sharing each kernel's checks (same verdicts as one)")
    v.add_argument("--details", action="store_true",
                   help="also print every counterexample check in full (kernel arguments, formulas, wrap sites), "
                        "after the findings by root cause")
    v.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    v.add_argument("--progress", action="store_true", help="progress bar even when stderr is not a terminal")


def run(args) -> int:
    if not 1 <= args.jobs <= MAX_JOBS:
        sys.stderr.write(f"addrsim: --jobs must be between 1 and {MAX_JOBS}, got {args.jobs}\n")
        return EXIT_BAD_INPUT
    bar = progress_bar(args, "addrsim verify", "check")
    try:
        check_outputs(args, (("json", "--json"), ("html", "--html")))
        if args.html in ("", "-"):
            raise InputError("--html", "the page is written to a file: give its name")
        models = load_models(list(args.model) + list(args.layouts))
        cache = query_store(args)
        reports, unmodelled = [], []
        for f in args.files:
            try:
                reports.append(_verified(f, args, models, cache, bar))
            except UnmodelledError as e:     # listed and skipped, as scan does; the others still count
                unmodelled.append(e)
        if unmodelled and not reports:
            return _fail_all(unmodelled)
    except AddrsimError as e:
        return fail(e)
    finally:
        if bar is not None:
            bar.close()
    merged = {"tool": "addrsim", "version": __version__, "kernels": [k for r in reports for k in r["kernels"]]}
    if getattr(cache, "note", ""):
        sys.stderr.write(f"addrsim: query cache: {cache.note}\n")
    if getattr(cache, "rejected", 0):
        from addrsim.commands.scan import REJECTED_WHY
        merged["cache_rejected"] = cache.rejected
        sys.stderr.write(f"addrsim: {cache.rejected} query cache line(s) ignored ({REJECTED_WHY})\n")
    import io
    buf = io.StringIO()
    print_table(merged, buf, details=args.details)
    bad = emit(merged, args.json, lambda: buf.getvalue().rstrip("\n"))
    if bad is None and args.html:
        from addrsim.report.html import to_html
        try:
            with atomic_open(args.html, "w", encoding="utf-8") as fh:
                fh.write(to_html(merged, "addrsim verify"))
        except OSError as e:
            sys.stderr.write(f"addrsim: {args.html}: cannot write ({e.strerror})\n")
            return EXIT_BAD_INPUT
    for e in unmodelled:
        sys.stderr.write(f"addrsim: {e}\n")
    status = bad if bad is not None else exit_status(reports)
    return max(status, EXIT_UNKNOWN) if unmodelled and status == 0 else status


def _verified(f, args, models, cache, bar) -> dict:
    """The report of one file: read back from the query cache when an earlier run saw the same
    bytes, models and settings (:func:`addrsim.commands.common.report_key`; its times are that
    run's, and every SMT-LIB2 file it names must still exist), else :func:`addrsim.api.verify`,
    stored for the next run."""
    buffers, layouts = args.buffer or None, args.layout or DEFAULT_LAYOUTS
    settings = {"command": "verify", "arith": args.arith, "memory_gib": args.memory_gib, "smt_dir": smt_dir(args),
                "properties": list(args.check), "host": args.host, "routed": args.routed}
    key = report_keys(f, args.like, buffers, layouts, models, bounds_of(args), budgets_of(args), settings)
    hit = stored_report(cache, key, f)
    if hit is not None:
        if not args.quiet:
            sys.stderr.write(f"addrsim: {f}: report read from the query cache (same code object, models and "
                             "settings; --no-cache decides again)\n")
        return hit
    rep = verify(f, buffers, layouts, models=models, bounds=bounds_of(args), arith=args.arith, **budgets_of(args),
                 memory_gib=args.memory_gib, smt_dir=smt_dir(args), properties=args.check, like=args.like,
                 host=args.host, routed=args.routed, progress=bar, cache=cache, jobs=args.jobs)
    store_report(cache, key, rep)
    return rep


def _fail_all(errors) -> int:
    for e in errors:
        sys.stderr.write(f"addrsim: {e}\n")
    return EXIT_UNKNOWN
