"""The JSON form of a check: the one rendering of a :class:`addrsim.prove.verdict.Check`.

Owns :func:`check_json`.  Text (:mod:`addrsim.commands.cli`), SARIF and JUnit
(:mod:`addrsim.report.formats`) render from this form.  May import addrsim.prove.
"""
from __future__ import annotations

from typing import Dict, Optional

from addrsim.prove.domain import domain_json
from addrsim.prove.verdict import Check, Counterexample, Verdict


def _cex_json(x: Counterexample, lines: Optional[Dict[int, int]]) -> dict:
    cex = {"shape": x.shape, "coords": {"batch_id": x.coords["batch_id"], "head_id": x.coords["head_id"]},
           "kernargs": x.kernargs, "address": {"extracted": x.extracted, "expected": x.expected},
           "lane": x.lane, "grid": x.coords, "access_pc": x.access, "minimal": x.minimal,
           "replayed_on": x.replayed_on or "this kernel",
           "arrays": {a: {str(i): v for i, v in d.items()} for a, d in x.arrays.items()},
           "memory_bytes": x.memory_bytes, "iteration": x.iteration}
    if lines and x.access in lines:
        cex["access_line"] = lines[x.access]     # line of the listing (listing input)
    return cex


def _overflow_json(c: Check, lines: Optional[Dict[int, int]]) -> list:
    out = []
    for w in c.overflow:
        d = {"kind": w.kind, "pc": w.pc, "instruction": w.text, "argument": w.name, "width": w.width,
             "machine": w.machine, "exact": w.exact, "matters": w.matters, "formula": w.formula,
             "boundary": w.boundary, "shape_boundary": w.shape_boundary, "signed": w.signed, "text": w.describe()}
        if lines and w.pc in lines:
            d["line"] = lines[w.pc]                 # line of the listing (listing input)
        out.append(d)
    return out


def _shape_offset(c: Check, minus_expected: bool = False) -> str:
    """The extracted byte offset in shape variables (the layout's contract substituted, the
    reading where no 32-bit value wraps; grid ids and the lane stay), factored; with
    ``minus_expected`` the same minus the model's expected offset (the difference a formula
    root cause is named by: no carry terms, no pointer).  "" when the formulas were not
    expanded."""
    if c.shape_offset_sym is None or (minus_expected and c.problem is None):
        return ""
    try:
        from addrsim.backends.sympy_text import readable, to_sympy_nowrap
        e = c.shape_offset_sym
        if minus_expected:
            e = e - to_sympy_nowrap(c.problem.expected[c.buffer])
        return str(readable(e))
    except Exception:    # display only
        return ""


def check_json(c: Check, lines: Optional[Dict[int, int]] = None) -> dict:
    """The report's dict of one check (README.md gives the schema); ``lines`` maps access pcs
    to listing lines (listing input)."""
    out = {"buffer": c.buffer, "layout": c.layout, "property": c.prop, "verdict": str(c.verdict), "arith": c.arith,
           "extracted": c.extracted, "expected": c.expected, "difference": c.difference, "reason": c.reason,
           "counterexample": _cex_json(c.counterexample, lines) if c.counterexample is not None else None,
           "time_s": c.time_s, "mru": round(c.spent_ru / 1e6, 3)}
    shape_form = _shape_offset(c)
    if shape_form:
        out["extracted_shape"] = shape_form
    if c.verdict == Verdict.COUNTEREXAMPLE:
        out["cause"] = str(c.cause) or "unclassified"
        if c.cause == "formula":
            out["difference_shape"] = _shape_offset(c, minus_expected=True)
        out["overflow"] = _overflow_json(c, lines)
    out["witness"] = c.witness.json() if c.witness is not None and c.verdict == Verdict.PROVED else None
    out["domain"] = domain_json(c.problem) if c.problem is not None else None
    out["routing"] = c.routing.json() if c.routing is not None else None
    if c.verdict == Verdict.UNREACHABLE:
        out["excluded_by"] = c.unreachable
    if c.smt2:
        out["smt2"] = c.smt2
    if c.rows:
        out["rows_read"] = c.rows      # LSE: the slice offsets the kernel reads at a small shape (bytes)
    if c.verdict == Verdict.PROVED and c.prop == "address":
        out["all_iterations"] = c.loops    # every iteration of the loops that access it (addrsim.engine.loops)
    return out
