"""The text report of ``addrsim verify``: a table per kernel, then each finding.

Owns :func:`print_table`.  It renders the JSON form of the checks
(:func:`addrsim.report.json.check_json`) and the root causes drawn from it
(:mod:`addrsim.report.causes`), nothing else.  May import addrsim.prove.verdict and
addrsim.report.causes.
"""
from __future__ import annotations

from addrsim.prove.verdict import Cause, Verdict
from addrsim.report.causes import (check_name as _name, entry_reach, root_causes, smallest_check, summary_line,
                                   undecided_groups)
import sys
from typing import Optional


def _signed(v: int) -> str:
    """A 64-bit byte offset, with its signed reading when it is negative."""
    return f"{v} (= {v - (1 << 64)})" if v >= 1 << 63 else str(v)


def _not_minimal(loop: bool) -> str:
    """Why a counterexample's shape is not proven minimal."""
    return ("the first failing shape found: loop counterexamples are not minimised" if loop
            else "not proven minimal: the minimisation budget ran out")


def _size(n: int) -> str:
    """Bytes as GiB, or MiB below 1 GiB."""
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.2f} MiB"


def _terms(text: str) -> list:
    """``text`` (a sympy sum) cut into its top-level terms; every term after the first keeps
    its operator ("+ x", "- y")."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += 1 if ch in "([" else -1 if ch in ")]" else 0
        if depth == 0 and i > start and text[i:i + 3] in (" + ", " - "):
            out.append(text[start:i])
            start = i + 1
    out.append(text[start:])
    return out


def _short(text: str, limit: int = 300) -> str:
    """``text`` whole when it fits ``limit`` characters, else folded at the last whole term
    of a sum that fits, with what was left out and the length."""
    if len(text) <= limit:
        return text
    terms, n = _terms(text), 0
    while n < len(terms) and len(" ".join(terms[:n + 1])) <= limit:
        n += 1
    if n == 0:
        return text[:limit] + f"... ({len(text)} characters; full text in --json)"
    return f"{' '.join(terms[:n])} ... ({len(terms) - n} more term(s), {len(text)} characters; full text in --json)"


def _print_routing(c: dict, out, pc: Optional[int] = None) -> None:
    """The routing lines of check ``c`` per host entry point; ``pc``: the wrap of the root
    cause shown (a routed counterexample through another wrap does not make it reachable)."""
    r = c.get("routing") or {}
    for e in r.get("entry_points") or []:
        shape = " ".join(f"{n}={v}" for n, v in (e.get("shape") or {}).items())
        if e["reachable"] is True and entry_reach(e, pc) is None:
            other = ", ".join(f"{x:#x}" for x in e["wrap_pcs"]) or "none"
            out.write(f"    routing through {r['host']} {e['entry']}: not decided for this wrap (the host reaches "
                      f"{_name(c)} through another wrap: {other}, at {shape})\n")
        elif e["reachable"] is True:
            out.write(f"    REACHABLE through {r['host']} {e['entry']}" + (f" (at {shape})" if shape else "") + "\n")
        elif e["reachable"] is False:
            out.write(f"    LATENT under {r['host']} {e['entry']}: masked by\n")
            for m in e["masked_by"]:
                out.write(f"      {m}\n")
        else:
            why = (e.get("reason") or "").split("; ", 1)[0]
            out.write(f"    routing through {r['host']} {e['entry']}: not decided (the routed check is "
                      f"{e['verdict']}" + (f": {_short(why, 160)}" if why else "") + ")\n")


def _print_other_routing(r: dict, k: dict, shown: dict, out) -> None:
    """One line with the routing of the cause's other checks when any differs from the check
    shown (dq/sbhd latent while dq/sbhd bounds is not decided: both are the cause's)."""
    word = _routing_word(shown)
    others = [c for c in k.get("checks") or [] if c.get("verdict") == Verdict.COUNTEREXAMPLE and c is not shown
              and _name(c) in r["checks"] and _name(c) not in (r.get("consequences") or ())]
    if any(_routing_word(c) != word for c in others):
        out.write("    routing of its other checks: " + ", ".join(f"{_name(c)} {_routing_word(c)}" for c in others) + "\n")


def _routing_word(c: dict) -> str:
    r = c.get("routing") or {}
    if c["verdict"] == Verdict.COUNTEREXAMPLE:
        return {True: "reachable", False: "latent", None: "routing ?"}[r.get("reachable")]
    return r.get("verdict", "") if r.get("verdict") not in (None, c["verdict"]) else ""


def implied_line(checks) -> str:
    """The shape ranges the checks' domains narrow (``domain.implied_ranges``), each with the
    layouts it holds in: ``batch = 1 (sbhd); 65 <= hdim_v <= 128 (bhsd, bshd, sbhd)``."""
    where: dict = {}
    for c in checks:
        for v, (lo, hi) in ((c.get("domain") or {}).get("implied_ranges") or {}).items():
            text = f"{v} = {lo}" if lo == hi else f"{lo} <= {v} <= {hi}"
            lays = where.setdefault(text, [])
            if c["layout"] not in lays:
                lays.append(c["layout"])
    return "; ".join(f"{t} ({', '.join(ls)})" for t, ls in where.items())


def print_table(report: dict, out=sys.stdout, details: bool = False):
    """The text report: per kernel its table of checks, its findings by root cause
    (:mod:`addrsim.report.causes`; with ``details``, also every counterexample check in
    full), the reason of every check not decided, one proved check, the domain and a
    summary line; then one line for the run when it has several kernels."""
    run = {"kernels": 0, "cex": 0, "causes": 0}
    for k in report["kernels"]:
        causes = k.get("root_causes") or root_causes(k)
        _print_checks(k, out)
        for r in causes:
            _print_cause(r, k, out)
        if details:
            for c in k["checks"]:
                if c["verdict"] == Verdict.COUNTEREXAMPLE:
                    _print_counterexample(c, out)
        _print_undecided(k, out)
        _print_proved(k, out)
        layers = next((c["domain"]["layers"] for c in k["checks"] if c.get("domain")), None)
        if layers:
            out.write(f"\n  domain: {', '.join(layers)} (--json lists every assumption and its source)\n")
        implied = implied_line(k["checks"])
        if implied:
            out.write(f"  ranges the domain implies: {implied}\n")
        out.write(f"\n  summary: {k.get('summary') or summary_line(k, causes)}\n")
        run["kernels"] += 1
        run["cex"] += sum(1 for c in k["checks"] if c["verdict"] == Verdict.COUNTEREXAMPLE)
        run["causes"] += sum(1 for r in causes if r["checks"])
    if run["kernels"] > 1:
        out.write(f"\nrun: {run['kernels']} kernels, {run['cex']} counterexample(s) from {run['causes']} "
                  f"root cause(s)\n")


def _print_checks(k: dict, out) -> None:
    of = f" (a listing of {k['like']}: findings are named as that code object's)" if k.get("like") else ""
    out.write(f"{k['file']}{of}\n  kernel {k['kernel']} ({k['arch']}), host {k.get('host') or 'none'}\n")
    lw = max([8] + [len(c["layout"]) + 2 for c in k["checks"]])
    out.write(f"  {'check':<9}{'buffer':<7}{'layout':<{lw}}{'verdict':<16}{'routing':<13}{'time':>7}\n")
    for c in k["checks"]:
        out.write(f"  {c.get('property', 'address'):<9}{c['buffer']:<7}{c['layout']:<{lw}}{c['verdict']:<16}"
                  f"{_routing_word(c):<13}{c['time_s']:>6.2f}s\n")


def _print_cause(r: dict, k: dict, out) -> None:
    """One root-cause block: what, where, which checks, the boundary per layout, the smallest
    shape with the details of its check, routing, and the fix."""
    where = r.get("where") or {}
    line = f" (listing line {where['line']})" if where.get("line") else ""
    if where.get("edited_lines"):
        line = f" (edited listing line{'s' if len(where['edited_lines']) > 1 else ''} " \
               f"{', '.join(map(str, where['edited_lines']))} in its address slice)"
    out.write(f"\n  ROOT CAUSE {r['id']}: {r['title']}{line}\n")
    if r["checks"]:
        own = [c for c in r["checks"] if c not in (r.get("consequences") or ())]
        out.write(f"    breaks: {', '.join(own)}\n")
    if r.get("consequences"):
        out.write(f"    follows from it: {', '.join(r['consequences'])} (the wrong offset leaves the "
                  f"workgroup's own slice at the same access and shape)\n")
    for lay, b in r["boundary"].items():
        out.write(f"    boundary ({lay}): {_short(b)}\n")
    sm = r.get("smallest")
    if sm:
        shape = " ".join(f"{a}={b}" for a, b in sm["shape"].items())
        mem = f"; {_size(sm['memory_bytes'])}" if sm.get("memory_bytes") else ""
        mark = "" if sm.get("minimal", True) else f", {_not_minimal(r['kind'] == 'loop')}"
        out.write(f"    smallest shape: {shape} ({sm['check']}{mark}{mem})\n")
        c = smallest_check(k, r)
        if c is not None:
            _print_cex_point(c, out, "      ")
            if r["kind"] == "formula" and c.get("extracted_shape"):
                out.write(f"      offset ({c['layout']}): {_short(c['extracted_shape'])}; expected {c['expected']}\n")
            pc = (r.get("where") or {}).get("pc") if r["kind"] == "wrap" else None
            _print_routing(c, out, pc)
            _print_other_routing(r, k, c, out)
    if r.get("fix"):
        out.write(f"    fix: {r['fix']}\n")


def lane_text(n) -> str:
    """A counterexample's work-item: ``lane=N`` within wave 0, else its wave and lane too
    (``tid_x=64 (wave 1, lane 0)``: CDNA waves are 64 lanes wide)."""
    if not isinstance(n, int) or n < 64:
        return f"lane={n}"
    return f"tid_x={n} (wave {n // 64}, lane {n % 64})"


def _print_cex_point(c: dict, out, pad: str) -> None:
    """The coordinates, access and offsets (or the bounds reason) of a counterexample."""
    x = c["counterexample"]
    out.write(f"{pad}batch_id={x['coords']['batch_id']} head_id={x['coords']['head_id']} {lane_text(x['lane'])}, "
              f"access at {x['access_pc']:#x}" + (f" (listing line {x['access_line']})" if x.get("access_line") else ""))
    if c.get("property") == "bounds" or c.get("cause") in (Cause.BASE, Cause.LAYOUT):
        why = c.get("reason") or ""
        out.write(f": {why.split(': ', 1)[1] if why.startswith('access at ') and ': ' in why else why}\n")
    else:
        out.write(f": byte offset from (0,0) extracted {_signed(x['address']['extracted'])}, "
                  f"expected {_signed(x['address']['expected'])}\n")


def _print_counterexample(c: dict, out) -> None:
    """A counterexample check in full (``--details``)."""
    x = c["counterexample"]
    tag = _name(c)
    shape = " ".join(f"{n}={v}" for n, v in x["shape"].items())
    mark = "" if x.get("minimal", True) else f" ({_not_minimal(c.get('cause') == Cause.LOOP)})"
    out.write(f"\n  {tag}: counterexample at {shape}{mark}\n")
    if c.get("cause") == Cause.LOOP:
        out.write(f"    LOOP: {c['reason']}\n")
    _print_cex_point(c, out, "    ")
    out.write(f"    kernel arguments: {', '.join(f'{n}={v}' for n, v in x['kernargs'].items())}\n")
    if c.get("property", "address") == "address":
        if c.get("extracted_shape"):
            out.write(f"    extracted (shape variables, {c['layout']}, no 32-bit wrap): {_short(c['extracted_shape'])}\n")
        out.write(f"    extracted: {_short(c['extracted'])}\n    expected:  {c['expected']}\n")
        out.write(f"    extracted - expected (integer reading, this layout): {_short(c['difference'])}\n")
    if x.get("memory_bytes"):
        out.write(f"    device memory for every tensor at this shape: {x['memory_bytes'] / 2**30:.2f} GiB\n")
    if c.get("cause") == Cause.OVERFLOW:
        out.write("    OVERFLOW: proved over the integers (--arith int), refuted in hardware arithmetic\n")
        for w in c.get(Cause.OVERFLOW, [])[:3]:
            out.write(f"      wraps: {w['text']}\n")
    elif c.get("cause") == Cause.FORMULA:
        out.write("    the formula is wrong over the integers too (not an overflow)\n")
    _print_routing(c, out)


def _print_undecided(k: dict, out) -> None:
    """The reason of every unknown, unsupported and unreachable check; checks with the same
    reason share one line that lists them (:func:`addrsim.report.causes.undecided_groups`)."""
    for (verdict, why), cs in undecided_groups(k).items():
        if verdict == Verdict.UNREACHABLE:
            out.write(f"\n  unreachable ({', '.join(_name(c) for c in cs)}): no shape of the domain reaches the "
                      f"access; excluded by:\n")
            for a in cs[0].get("excluded_by") or []:
                out.write(f"      {a}\n")
            continue
        out.write(f"\n  {verdict} ({', '.join(_name(c) for c in cs)}): {why}\n")
        for c in cs:
            if c.get("smt2"):
                out.write(f"      {_name(c)}: obligation in {c['smt2']}\n")
    routed = [(c, e) for c in k.get("checks") or [] for e in (c.get("routing") or {}).get("entry_points") or []
              if e.get("smt2")]
    if routed:
        out.write("\n  routing left undecided (the routed check's obligation):\n")
        for c, e in routed:
            out.write(f"      {_name(c)} through {e['entry']} ({e['verdict']}): {e['smt2']}\n")


def _print_proved(k: dict, out) -> None:
    """The first proved address check, with its witness."""
    for c in k["checks"]:
        if c["verdict"] == Verdict.PROVED and c.get("property", "address") == "address":
            pad = " " * len(c["buffer"] + c["layout"])
            shape = c.get("extracted_shape")
            args = c["extracted"] if len(c["extracted"]) <= 200 or not shape else \
                f"{len(c['extracted'])} characters (the JSON's extracted)"
            out.write(f"\n  {c['buffer']}/{c['layout']} proved: extracted offset "
                      + (f"{shape} (shape variables, no 32-bit wrap)\n  {pad}         in kernel arguments "
                         if shape else "") + f"{_short(args)}\n"
                      f"  {pad}         expected offset  {c['expected']}\n")
            w = c.get("witness")
            if w:
                out.write(f"  {pad}         witness: " + " ".join(f"{n}={v}" for n, v in w["shape"].items())
                          + f" batch_id={w['coords']['batch_id']} head_id={w['coords']['head_id']} "
                            f"(offset {w['offset']}, {w['replayed_on']})\n")
            break
