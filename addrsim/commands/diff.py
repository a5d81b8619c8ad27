"""`addrsim diff OLD NEW`: what a patch (or a port to another architecture) changes in the
buffer addresses.

Both sides are verified with the same options (:func:`addrsim.api.verify`; code objects or
assembly listings, :mod:`addrsim.loader.listing`) and sharing one cache of decided solver queries, so
checks whose address expression the patch did not touch cost nothing the second time.
Kernels are paired by symbol (a single kernel on each side is paired whatever its name, e.g.
after a rename).  For each (buffer, layout, property) checked on both sides the result gives
both verdicts, both extracted byte offsets, and their difference ``new - old`` simplified
(sympy, integer reading): in kernel-argument terms, and in shape terms with the layout's host
contract substituted (0 there means the two kernels address the buffer alike in that layout,
whatever their instructions).  The differences use the reading in which no 32-bit value
wraps (:func:`addrsim.backends.sympy_text.to_sympy_nowrap`): a patch that only fixes a wrap shows
a difference of 0 and the change ``fixed``.  A change is one of:

- ``fixed``: counterexample in OLD, proved in NEW;
- ``broke``: proved in OLD, counterexample in NEW;
- ``lost``: proved in OLD, unknown or unsupported in NEW (not a refutation: undecided);
- ``proved``: unknown or unsupported in OLD, proved in NEW;
- ``changed``: another verdict change (e.g. counterexample to unknown);
- ``worse``: a counterexample on both sides, NEW's below OLD's proven-minimal one in the
  minimisation order (batch, nhead_q, seqlen_q, ..., then batch_id, head_id, tile, lane), so
  NEW fails where OLD holds (a regression hidden under a bug that carries over: a branch
  inverted in a patch turns a 38 GiB wrap into a wrong offset at batch 2);
- ``another``: a counterexample on both sides, both wrong over the integers too (cause
  formula) with another ``extracted - expected``: another bug where the old one was (the gate
  counts it new);
- ``same``: the same verdict.

The summary names the bugs (counterexamples) NEW fixed, the new ones, and those that carry
over (a counterexample on both sides: a port "carries over, bugs included").

Exit status (:func:`diff_status`): 1 when NEW breaks anything OLD proved, has a
counterexample OLD did not, or fails where OLD holds (``worse``), 2 when it only loses a
proof (undecided), 0 otherwise; 3 bad input, as everywhere.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

from addrsim import __version__
from addrsim.api import DEFAULT_LAYOUTS, verify
from addrsim.errors import InputError
import sys

from addrsim.commands.common import (add_budgets, add_common, bound_arg, bounds_of, budgets_of,
                                     check_outputs, emit, query_store, smt_dir)
from addrsim.errors import AddrsimError
from addrsim.model.models import load_models
from addrsim.prove.options import CHECK_MRU, MIN_MRU, QUERY_MRU
from addrsim.prove.verdict import Verdict
from addrsim.report.gate import another_offset, below, signature

DIFF_CHARS = 400


def classify(old: str, new: str) -> str:
    """The change between two verdicts (see the module docstring)."""
    if old == new:
        return "same"
    if old == Verdict.COUNTEREXAMPLE and new == Verdict.PROVED:
        return "fixed"
    if old == Verdict.PROVED:
        return "broke" if new == Verdict.COUNTEREXAMPLE else "lost"
    if new == Verdict.PROVED:
        return "proved"             # the change "newly proved"
    return "changed"


def _sub(a, b) -> Tuple[str, Optional[bool]]:
    """(text of a - b, factored when that is shorter, whether it is 0) for two sympy
    expressions; ("", None) when either is missing or sympy fails (display only)."""
    if a is None or b is None:
        return "", None
    try:
        import sympy
        d = sympy.expand(a - b)
        t = str(d)
        if d != 0 and len(t) <= DIFF_CHARS:
            f = str(sympy.factor(d))
            t = f if len(f) < len(t) else t
        return (t if len(t) <= DIFF_CHARS else t[:DIFF_CHARS] + "..."), d == 0
    except Exception:
        return "", None


def _same_offset(xo, xn) -> Optional[bool]:
    """Do the first accesses of the two checks (Check objects of the same layout) compute
    the same byte offset from their (0, 0) slice in every shape of the domain, in hardware
    arithmetic (:func:`addrsim.prove.simplify.same_offset`)?  None when undecided or either
    check has no access."""
    from addrsim.ir import expr as X
    from addrsim.prove.query import ranges_of
    from addrsim.prove.simplify import same_offset
    if xo is None or xn is None or not xo.cases or not xn.cases or xo.problem is None:
        return None
    (_, _, _, ao, ao0), (_, _, _, an, an0) = xo.cases[0], xn.cases[0]
    try:
        return same_offset(X.sub(an, an0), X.sub(ao, ao0), list(xo.problem.domain), ranges_of(xo.problem))
    except Exception:          # display only: an offset the solver cannot take is "?"
        return None


def _pair(old_k: List[str], new_k: List[str]) -> List[Tuple[str, str]]:
    pairs = [(k, k) for k in old_k if k in new_k]
    rest_o = [k for k in old_k if k not in new_k]
    rest_n = [k for k in new_k if k not in old_k]
    if len(rest_o) == 1 and len(rest_n) == 1:
        pairs.append((rest_o[0], rest_n[0]))
    return pairs


def diff(old, new, buffers: Optional[Sequence[str]] = None, layouts: Sequence[str] = DEFAULT_LAYOUTS,
         like=None, like_old=None, like_new=None, properties: Sequence[str] = ("address",), **options) -> dict:
    """Compare the buffer-address verdicts of ``old`` and ``new`` (code objects or listings).

    ``like`` is the code object that a listing among the two takes its metadata from
    (``like_old``/``like_new`` set it per side).  ``options`` go to :func:`addrsim.api.verify`
    (models, bounds, timeout_ms, arith, memory_gib, smt_dir, ...).  By default the buffers
    checked are those both sides have a pointer argument for.  Returns a JSON-ready dict
    ``{"tool", "version", "old", "new", "kernels": [{"old_kernel", "new_kernel", "old_arch",
    "new_arch", "checks": [{"buffer", "layout", "property", "old": {...}, "new": {...},
    "difference_args", "difference_shape", "same_offset", "change"}]}], "unpaired",
    "counts", "summary"}``; each side's ``{...}`` has verdict, cause, extracted, reason and the
    counterexample shape.  Byte offsets throughout.  Raises what verify raises (InputError,
    ToolError)."""
    from addrsim.model.models import load_models
    if "models" not in options or options["models"] is None:
        options["models"] = load_models(options.pop("model_files", ()))
    cache = options.pop("cache", None) or {}
    if like is not None and not _is_listing(old) and not _is_listing(new):
        raise InputError("--like", "--like applies to assembly listings; OLD and NEW are both code objects")
    lo = like_old if like_old is not None else (like if _is_listing(old) else None)
    ln = like_new if like_new is not None else (like if _is_listing(new) else None)
    if buffers is None:
        buffers = _common_buffers(old, new, lo, ln, options["models"])
    co_old: list = []
    co_new: list = []
    r_old = verify(old, buffers, layouts, like=lo, cache=cache, checks_out=co_old, properties=properties, **options)
    r_new = verify(new, buffers, layouts, like=ln, cache=cache, checks_out=co_new, properties=properties, **options)
    ko = {k["kernel"]: k for k in r_old["kernels"]}
    kn = {k["kernel"]: k for k in r_new["kernels"]}
    sym_o = {(s, c.buffer, c.layout, c.prop): c for s, c in co_old}
    sym_n = {(s, c.buffer, c.layout, c.prop): c for s, c in co_new}
    pairs = _pair(list(ko), list(kn))
    out = {"tool": "addrsim", "version": __version__, "old": str(old), "new": str(new), "kernels": [],
           "unpaired": {"old": [k for k in ko if k not in {p[0] for p in pairs}],
                        "new": [k for k in kn if k not in {p[1] for p in pairs}]}}
    counts: Dict[str, List[str]] = {}
    for a, b in pairs:
        entry = {"old_kernel": a, "new_kernel": b, "old_arch": ko[a]["arch"], "new_arch": kn[b]["arch"], "checks": []}
        cn = {(c["buffer"], c["layout"], c.get("property", "address")): c for c in kn[b]["checks"]}
        for c in ko[a]["checks"]:
            key = (c["buffer"], c["layout"], c.get("property", "address"))
            if key not in cn:
                continue
            d = cn[key]
            xo, xn = sym_o.get((a,) + key), sym_n.get((b,) + key)
            d_args, _ = _sub(getattr(xn, "offset_sym", None), getattr(xo, "offset_sym", None))
            d_shape, same = _sub(getattr(xn, "shape_offset_sym", None), getattr(xo, "shape_offset_sym", None))
            if same is not True and key[2] == "address":
                decided = _same_offset(xo, xn)      # equal in the domain though displayed apart, or not
                same = decided if decided is not None else same
                d_shape = "" if same else d_shape
            ch = classify(c["verdict"], d["verdict"])
            if ch == "same" and below(d, c):
                ch = "worse"
            elif ch == "same" and another_offset(signature(c), signature(d)):
                ch = "another"
            tag = f"{key[0]}/{key[1]}" + (" bounds" if key[2] == "bounds" else "")
            counts.setdefault(ch, []).append(tag if len(pairs) == 1 else f"{b}:{tag}")
            entry["checks"].append({"buffer": key[0], "layout": key[1], "property": key[2],
                                    "old": _side(c), "new": _side(d), "difference_args": d_args,
                                    "difference_shape": d_shape, "same_offset": same, "change": ch})
        out["kernels"].append(entry)
    out["counts"] = {k: len(v) for k, v in counts.items()}
    out["summary"] = summary_line(counts, out)
    return out


def _is_listing(path) -> bool:
    from addrsim.loader.listing import is_code_object
    return not is_code_object(path)


def _common_buffers(old, new, lo, ln, ms) -> List[str]:
    """Buffers both sides' kernels have a pointer argument for (in the models' order)."""
    from addrsim.loader.listing import load_source
    from addrsim.model.models import buffer_pointer
    have = []
    for path, like in ((old, lo), (new, ln)):
        co = load_source(path, like).co
        have.append({b for k in co.kernels for b in ms.buffers if buffer_pointer(ms, k, b) is not None})
    return [b for b in ms.buffers if b in have[0] and b in have[1]]


def _side(c: dict) -> dict:
    x = c.get("counterexample")
    return {"verdict": c["verdict"], "cause": c.get("cause"), "extracted": c["extracted"], "reason": c.get("reason"),
            "shape": x["shape"] if x else None, "coords": x["coords"] if x else None,
            "lane": x.get("lane") if x else None, "minimal": bool(x.get("minimal")) if x else None}


def bug_changes(out: dict) -> Dict[str, List[str]]:
    """The counterexamples across the patch: ``carried`` (a counterexample on both sides: the
    bug carries over), ``fixed`` (a counterexample in OLD, proved in NEW), ``new`` (a
    counterexample in NEW where OLD had none: broke, or was undecided), ``undecided`` (a
    counterexample in OLD, unknown or unsupported in NEW: not shown fixed).  Each a list of
    ``buffer/layout[ bounds]``."""
    got: Dict[str, List[str]] = {"carried": [], "fixed": [], "broke": [], "worse": [], "another": [], "new": [],
                                 "undecided": []}
    for k in out["kernels"]:
        for c in k["checks"]:
            tag = f"{c['buffer']}/{c['layout']}" + (" bounds" if c["property"] == "bounds" else "")
            o, n = c["old"]["verdict"], c["new"]["verdict"]
            cex = Verdict.COUNTEREXAMPLE
            key = ("worse" if c["change"] == "worse" else "another" if c["change"] == "another" else
                   "carried" if o == n == cex else "fixed" if o == cex and n == Verdict.PROVED else
                   "broke" if n == cex and o == Verdict.PROVED else "new" if n == cex and o != cex else
                   "undecided" if o == cex else None)
            if key:
                got[key].append(tag)
    return got


def summary_line(counts: Dict[str, List[str]], out: dict) -> str:
    """One line: which bugs NEW fixed, which are new, which carry over; what it lost or
    newly proved; how many checks kept their verdict and their byte offset in shape terms;
    for a port, whether the address logic carries over, and with how many bugs."""
    checks = [c for k in out["kernels"] for c in k["checks"]]
    if not checks:
        return ("nothing compared: no kernel, buffer, layout and property was checked on both sides "
                "(no common buffer, or no kernels paired)")
    bugs = bug_changes(out)
    parts = []
    for key, word in (("fixed", "fixed"), ("broke", "BROKE"), ("worse", "WORSE (fails below OLD's least "
                                                                       "counterexample, where OLD holds)"),
                      ("another", "ANOTHER wrong offset where the old one was"),
                      ("new", "NEW bugs (undecided before)"),
                      ("carried", "bugs that carry over"),
                      ("undecided", "bugs no longer shown but not proved fixed")):
        if bugs[key]:
            parts.append(f"{word} {', '.join(bugs[key])}")
    for ch, word in (("lost", "no longer proved (undecided)"), ("proved", "newly proved")):
        if counts.get(ch):
            parts.append(f"{word} {', '.join(counts[ch])}")
    same = sum(1 for c in checks if c["old"]["verdict"] == c["new"]["verdict"])     # worse and another included
    same_off = sum(1 for c in checks if c["same_offset"])
    if not any(counts.get(ch) for ch in ("fixed", "broke", "lost", "proved", "changed")):
        parts.append("no verdict changed")
    parts.append(f"{same} of {len(checks)} checks keep their verdict; the byte offset is the same in shape "
                 f"terms (no-wrap reading) in {same_off} of {len(checks)}")
    ports = {(k["old_arch"], k["new_arch"]) for k in out["kernels"] if k["old_arch"] != k["new_arch"]}
    if ports:
        parts.append(_port_line(ports, checks, bugs))
    return "; ".join(parts)


def _port_line(ports, checks: List[dict], bugs: Dict[str, List[str]]) -> str:
    alike = sum(1 for c in checks if c["change"] == "same" and c["same_offset"])
    unread = sum(1 for c in checks if c["change"] == "same" and c["same_offset"] is None)
    arch = ", ".join(f"{a} -> {b}" for a, b in sorted(ports))
    if alike == len(checks):
        verdict = "carries over"
    elif alike + unread == len(checks):
        verdict = "keeps every verdict; offsets not compared where the formula is too large to simplify"
    else:
        verdict = "does not fully carry over"
    if bugs["carried"] and verdict != "does not fully carry over":
        verdict += f", bugs included ({len(bugs['carried'])} of {len(checks)} checks are counterexamples on both sides)"
    return (f"port {arch}: the address logic {verdict} (same verdict and offset in {alike} of "
            f"{len(checks)} checks{f', {unread} not compared' if unread else ''})")


def diff_status(report: dict) -> int:
    """1 when NEW breaks a check OLD proved or has a counterexample OLD did not (a new bug),
    2 when it only loses a proof or nothing was compared, else 0."""
    changes = {c["change"] for k in report["kernels"] for c in k["checks"]}
    if not changes:
        return 2
    if changes & {"broke", "worse", "another"} or bug_changes(report)["new"]:   # broken, worse, another or new bug
        return 1
    if "lost" in changes:
        return 2
    return 0


def format_diff(report: dict) -> str:
    """The text report of :func:`diff`."""
    out = [f"old: {report['old']}", f"new: {report['new']}"]
    for k in report["kernels"]:
        name = k["old_kernel"] if k["old_kernel"] == k["new_kernel"] else f"{k['old_kernel']} -> {k['new_kernel']}"
        arch = k["old_arch"] if k["old_arch"] == k["new_arch"] else f"{k['old_arch']} -> {k['new_arch']}"
        out.append(f"  kernel {name} ({arch})")
        out.append(f"  {'check':<9}{'buffer':<7}{'layout':<8}{'old':<16}{'new':<16}{'change':<8} offset")
        for c in k["checks"]:
            off = {True: "same", False: "differs", None: "?"}[c["same_offset"]]
            out.append(f"  {c['property']:<9}{c['buffer']:<7}{c['layout']:<8}{c['old']['verdict']:<16}"
                       f"{c['new']['verdict']:<16}{c['change']:<8} {off}")
        for c in k["checks"]:
            if c["change"] == "same" and c["same_offset"] is not False:
                continue
            tag = f"{c['buffer']}/{c['layout']}" + (" bounds" if c["property"] == "bounds" else "")
            out.append(f"\n  {tag}: {c['change']} ({c['old']['verdict']} -> {c['new']['verdict']})")
            shape_terms = c["same_offset"] is True or bool(c["difference_shape"])
            for side in ("old", "new"):
                s = c[side]
                extra = ""
                if s["verdict"] == Verdict.COUNTEREXAMPLE and s["shape"]:
                    extra = "  [counterexample at " + " ".join(f"{n}={v}" for n, v in s["shape"].items()) + \
                            (f", cause {s['cause']}" if s.get("cause") else "") + "]"
                elif s["verdict"] in (Verdict.UNKNOWN, Verdict.UNSUPPORTED) and s.get("reason"):
                    extra = f"  [{s['reason'][:160]}]"
                # the kernel-argument form (carries, pointer halves) only where no shape-term
                # comparison says more; the JSON keeps it
                shown = s["verdict"] if shape_terms else s["extracted"][:300]
                out.append(f"    {side}: {shown}{extra}")
            if c["same_offset"] is True:
                out.append(f"    {c['layout'].upper()}: same offset")
            elif c["difference_shape"]:
                out.append(f"    {c['layout'].upper()}: new - old = {c['difference_shape']}  (bytes, shape terms)")
            elif c["difference_args"]:
                out.append(f"    new - old (kernel arguments): {c['difference_args']}")
    un = report.get("unpaired", {})
    if un.get("old") or un.get("new"):
        out.append(f"\n  unpaired kernels: old {', '.join(un.get('old', [])) or '-'}; "
                   f"new {', '.join(un.get('new', [])) or '-'}")
    out.append(f"\nsummary: {report['summary']}")
    return "\n".join(out)


# ----------------------------------------------------------------------------- the command

def register(sub) -> None:
    """Add the ``diff`` subcommand to ``sub`` (argparse subparsers)."""
    df = sub.add_parser("diff", help="compare the verdicts and offsets of two kernels (a patch, or a port)")
    df.add_argument("old", metavar="OLD.co|OLD.s")
    df.add_argument("new", metavar="NEW.co|NEW.s")
    df.add_argument("--like", metavar="KERNEL.co", help="code object whose metadata a listing among OLD/NEW takes")
    df.add_argument("--like-old", metavar="KERNEL.co", help="the same for OLD only")
    df.add_argument("--like-new", metavar="KERNEL.co", help="the same for NEW only")
    df.add_argument("--buffer", action="append", help="buffer (repeatable; default: every buffer both kernels have)")
    df.add_argument("--layout", action="append", help=f"layout (repeatable; default {' '.join(DEFAULT_LAYOUTS)})")
    df.add_argument("--layouts", action="append", default=[], metavar="FILE.yaml", help="user layouts file (repeatable)")
    df.add_argument("--json", metavar="FILE", help="write the JSON diff to FILE ('-' for stdout)")
    df.add_argument("--model", action="append", default=[], metavar="FILE.yaml", help="extra model file (repeatable)")
    df.add_argument("--bound", action="append", type=bound_arg, default=[], metavar="NAME=MIN:MAX")
    add_budgets(df, QUERY_MRU, CHECK_MRU, MIN_MRU)
    add_common(df, "address")


def run(args) -> int:
    try:
        check_outputs(args, (("json", "--json"),))
        models = load_models(list(args.model) + list(args.layouts))
        rep = diff(args.old, args.new, args.buffer or None, args.layout or DEFAULT_LAYOUTS, like=args.like,
                   like_old=args.like_old, like_new=args.like_new, properties=args.check, models=models,
                   bounds=bounds_of(args), arith=args.arith, **budgets_of(args),
                   memory_gib=args.memory_gib, smt_dir=smt_dir(args), cache=query_store(args),
                   host=args.host, routed=args.routed)
    except AddrsimError as e:
        sys.stderr.write(f"addrsim: {e}\n")
        return e.exit_code
    bad = emit(rep, args.json, lambda: format_diff(rep))
    return bad if bad is not None else diff_status(rep)
