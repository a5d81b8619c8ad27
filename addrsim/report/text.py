"""The text report of ``addrsim verify``: a table per kernel, then each finding.

Owns :func:`print_table`.  It renders the JSON form of the checks
(:func:`addrsim.report.json.check_json`), nothing else.  May import addrsim.prove.verdict.
"""
from __future__ import annotations

from addrsim.prove.verdict import Cause, Verdict
import sys


def _signed(v: int) -> str:
    """A 64-bit byte offset, with its signed reading when it is negative."""
    return f"{v} (= {v - (1 << 64)})" if v >= 1 << 63 else str(v)


def _short(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} characters; full text in --json)"


def _print_routing(c: dict, out) -> None:
    r = c.get("routing") or {}
    for e in r.get("entry_points") or []:
        if e["reachable"] is True:
            shape = " ".join(f"{n}={v}" for n, v in (e.get("shape") or {}).items())
            out.write(f"    REACHABLE through {r['host']} {e['entry']}" + (f" (at {shape})" if shape else "") + "\n")
        elif e["reachable"] is False:
            out.write(f"    LATENT under {r['host']} {e['entry']}: masked by\n")
            for m in e["masked_by"]:
                out.write(f"      {m}\n")
        else:
            out.write(f"    routing through {r['host']} {e['entry']}: {e['verdict']} {e.get('reason') or ''}\n")


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


def print_table(report: dict, out=sys.stdout):
    for k in report["kernels"]:
        out.write(f"{k['file']}\n  kernel {k['kernel']} ({k['arch']}), host {k.get('host') or 'none'}\n")
        lw = max([8] + [len(c["layout"]) + 2 for c in k["checks"]])
        out.write(f"  {'check':<9}{'buffer':<7}{'layout':<{lw}}{'verdict':<16}{'routing':<13}{'time':>7}\n")
        for c in k["checks"]:
            out.write(f"  {c.get('property', 'address'):<9}{c['buffer']:<7}{c['layout']:<{lw}}{c['verdict']:<16}"
                      f"{_routing_word(c):<13}{c['time_s']:>6.2f}s\n")
        for c in k["checks"]:
            tag = f"{c['buffer']}/{c['layout']}" + (" bounds" if c.get("property") == "bounds" else "")
            if c["verdict"] == Verdict.COUNTEREXAMPLE:
                x = c["counterexample"]
                shape = " ".join(f"{n}={v}" for n, v in x["shape"].items())
                mark = "" if x.get("minimal", True) else " (not proven minimal: the minimisation budget ran out)"
                out.write(f"\n  {tag}: counterexample at {shape}{mark}\n")
                if c.get("cause") == Cause.LOOP:
                    out.write(f"    LOOP: {c['reason']}\n")
                out.write(f"    batch_id={x['coords']['batch_id']} head_id={x['coords']['head_id']} "
                          f"lane={x['lane']} (access at {x['access_pc']:#x})\n")
                if c.get("property") == "bounds":
                    out.write(f"    {c['reason']}\n")
                else:
                    out.write(f"    byte offset from (0,0): extracted {_signed(x['address']['extracted'])}, "
                              f"expected {_signed(x['address']['expected'])}\n")
                args = ", ".join(f"{n}={v}" for n, v in x["kernargs"].items())
                out.write(f"    kernel arguments: {args}\n")
                if c.get("property", "address") == "address":
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
            elif c["verdict"] == Verdict.UNREACHABLE:
                out.write(f"\n  {tag}: unreachable: no shape of the domain reaches the access; excluded by:\n")
                for a in c.get("excluded_by") or []:
                    out.write(f"      {a}\n")
            elif c["verdict"] != Verdict.PROVED:
                out.write(f"\n  {tag}: {c['verdict']}: {c['reason']}\n")
        for lim in k.get("host_limits") or []:
            shape = " ".join(f"{n}={v}" for n, v in lim["shape"].items())
            out.write(f"\n  HOST LIMIT ({lim['layout']}): {lim['argument']} = {lim['exact']} does not fit its "
                      f"argument when {lim['boundary']}\n    smallest shape {shape} "
                      f"({lim['memory_bytes'] / 2**30:.2f} GiB); {lim['source']}\n")
        for c in k["checks"]:
            if c["verdict"] == Verdict.PROVED and c.get("property", "address") == "address":
                out.write(f"\n  {c['buffer']}/{c['layout']} proved: extracted offset {_short(c['extracted'])}\n"
                          f"  {' ' * len(c['buffer'] + c['layout'])}         expected offset  {c['expected']}\n")
                w = c.get("witness")
                if w:
                    out.write(f"  {' ' * len(c['buffer'] + c['layout'])}         witness: "
                              + " ".join(f"{n}={v}" for n, v in w["shape"].items())
                              + f" batch_id={w['coords']['batch_id']} head_id={w['coords']['head_id']} "
                                f"(offset {w['offset']}, {w['replayed_on']})\n")
                break
        layers = next((c["domain"]["layers"] for c in k["checks"] if c.get("domain")), None)
        if layers:
            out.write(f"\n  domain: {', '.join(layers)} (--json lists every assumption and its source)\n")
        implied = implied_line(k["checks"])
        if implied:
            out.write(f"  ranges the domain implies: {implied}\n")
