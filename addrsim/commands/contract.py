"""``addrsim contract``: do two kernels of the backward pass agree on the tensor they share?

``addrsim contract MAIN.co``: the pairs the host launches around the main kernel (the routing
csvs beside it: odo's D -> the main kernel's D, the main kernel's dq_acc -> dq_convert or
dq_shuffle).  ``addrsim contract PRODUCER CONSUMER --buffers P C``: one pair, the producer's
buffer P against the consumer's buffer C.  The claim and its limits:
:mod:`addrsim.prove.contract`.

Exit status: 0 every contract proved, 1 a disagreement, 2 unknown or unsupported and no
disagreement, 3 bad input or usage (a main kernel with no routing csv beside it), 4 internal
error.
"""
from __future__ import annotations

from pathlib import Path

from addrsim import __version__
from addrsim.commands.common import (EXIT_BAD_INPUT, add_budgets, bound_arg, bounds_of, budgets_of, check_outputs, emit,
                                     fail)
from addrsim.errors import EXIT_UNKNOWN, AddrsimError, InputError
from addrsim.prove.options import CHECK_MRU, MIN_MRU, QUERY_MRU


def register(sub) -> None:
    """Add the ``contract`` subcommand to ``sub`` (argparse subparsers)."""
    c = sub.add_parser("contract", help="do a producer and a consumer kernel agree on the (batch, head) slices of "
                                        "the tensor they share (D, dq_acc)?")
    c.add_argument("files", nargs="+", metavar="KERNEL.co",
                   help="a main kernel (its pass from the routing csvs beside it), or PRODUCER CONSUMER")
    c.add_argument("--buffers", nargs=2, metavar=("PRODUCER_BUFFER", "CONSUMER_BUFFER"),
                   help="with two files: the producer's buffer and the consumer's (e.g. dq dq_acc)")
    c.add_argument("--layout", action="append", help="layout (repeatable; default bhsd bshd sbhd)")
    c.add_argument("--model", action="append", default=[], metavar="FILE.yaml", help="extra model file (repeatable)")
    c.add_argument("--bound", action="append", type=bound_arg, default=[], metavar="NAME=MIN:MAX",
                   help="override a shape bound, e.g. nhead_q=1:8")
    c.add_argument("--json", metavar="FILE", help="write the JSON report to FILE ('-' for stdout)")
    c.add_argument("--like", metavar="KERNEL.co", help="code object whose metadata a listing among the files takes "
                                                      "(both files; --like-producer/--like-consumer for one)")
    c.add_argument("--like-producer", metavar="KERNEL.co", help="the same for the producer only")
    c.add_argument("--like-consumer", metavar="KERNEL.co", help="the same for the consumer only")
    add_budgets(c, QUERY_MRU, CHECK_MRU, MIN_MRU)


def _pairs(args):
    """(producer, buffer, consumer, buffer) of the command line."""
    from addrsim.api import pass_contracts
    from addrsim.loader.codeobj import load as load_code_object
    if len(args.files) == 2:
        if not args.buffers:
            raise InputError(args.files[1], "two kernels need --buffers PRODUCER_BUFFER CONSUMER_BUFFER "
                                            "(e.g. --buffers dq dq_acc)")
        return [(Path(args.files[0]), args.buffers[0], Path(args.files[1]), args.buffers[1])]
    if len(args.files) != 1 or args.buffers:
        raise InputError(" ".join(args.files), "give one main kernel, or a producer and a consumer with --buffers")
    main = Path(args.files[0])
    pairs = pass_contracts(main, load_code_object(main).arch)
    for path in {x for pr, _, co, _ in pairs for x in (pr, co)}:
        if not path.is_file():            # before any work: the csv names a code object that is not there
            raise InputError(str(path), f"not a file (named by the routing csvs beside {main.name})")
    if not pairs:
        raise InputError(str(main), "no routing table beside it names this kernel (fmha_bwd_dqdkdv.csv) or its "
                                    "pass shares nothing: give PRODUCER CONSUMER --buffers P C")
    return pairs


def run(args) -> int:
    from addrsim.api import DEFAULT_LAYOUTS, contract
    from addrsim.model.models import load_models
    try:
        if args.json == "":
            raise InputError("--json", "give a file name, or - for stdout")
        check_outputs(args, (("json", "--json"),))
        models = load_models(args.model)
        layouts = list(dict.fromkeys(args.layout or DEFAULT_LAYOUTS))
        out = []
        for pr, pb, co, cb in _pairs(args):
            out += contract(pr, co, pb, cb, layouts, models=models, bounds=bounds_of(args),
                            like_producer=args.like_producer or args.like, like_consumer=args.like_consumer or args.like,
                            **budgets_of(args))
    except AddrsimError as e:
        return fail(e)
    report = {"tool": "addrsim", "version": __version__, "contracts": out}
    bad = emit(report, args.json, lambda: format_contracts(out))
    if bad is not None:
        return bad
    verdicts = {c["verdict"] for c in out}
    return 1 if "counterexample" in verdicts else EXIT_UNKNOWN if verdicts - {"proved"} else 0


def format_contracts(out) -> str:
    """One line per (pair, layout), then each disagreement's shape and attribution."""
    lines = []
    for c in out:
        head = f"{c['producer'][0]}:{c['producer'][1]} -> {c['consumer'][0]}:{c['consumer'][1]}"
        word = c["verdict"] + (f" ({c['cause']}, {c['term']} term)" if c["verdict"] == "counterexample" else "")
        lines.append(f"  {c['layout']:5} {word:34} {head}")
        x = c.get("counterexample")
        if x:
            shape = " ".join(f"{k}={v}" for k, v in x["shape"].items())
            lines.append(f"        at {shape}: producer offset {x['producer_offset']}, consumer offset "
                         f"{x['consumer_offset']}, host {x['producer_expected']} (bytes from slice (0, 0))")
            lines.append(f"        off the host's layout: {', '.join(c['culprit']) or 'neither (the models disagree)'}")
        elif c["verdict"] != "proved":
            lines.append(f"        {c['reason']}")
        elif c.get("witness"):
            lines.append("        holds at e.g. " + " ".join(f"{k}={v}" for k, v in c["witness"].items()))
    n = sum(c["verdict"] == "counterexample" for c in out)
    lines.append(f"  summary: {len(out)} contract check(s), {n} disagreement(s), "
                 f"{sum(c['verdict'] == 'proved' for c in out)} proved")
    return "\n".join(lines)


__all__ = ["register", "run", "format_contracts", "EXIT_BAD_INPUT"]
