"""Offsets in the engineer's terms: comparisons the domain decides folded away, and "same
offset" decided by the solver (issue 40, item 3: ``diff`` and ``explain``).

A kernel's byte offset often holds a comparison that is never true in a layout (the wheel's
``rows_left > 1 ? 4096 : 0`` soffsets, a 32-bit carry ``ult(lo + x, lo)``): shown as sympy
text it becomes ``Piecewise((..., Eq(xor(ult(...), 1), 1)), ...)``.  :func:`under_domain`
replaces each 1-bit comparison (``eq``, ``ult``, ``ule``, ``slt``, ``sle``) that the domain's
ranges decide over the integers (the operands' intervals in the encoder's int mode, no solver)
by its constant and folds the expression again.  Display only: it never makes a verdict.
:func:`same_offset` asks whether two offsets are equal in every shape of the domain (hardware
arithmetic, within a resource budget); the answer is True, False or None (undecided).

May import addrsim.ir, addrsim.backends and the prove modules below check (query).
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from addrsim.backends.z3_int import IntEncoder
from addrsim.ir import expr as X
from addrsim.ir.expr import Const, Expr, Op

COMPARISONS = ("eq", "ult", "ule", "slt", "sle")
SAME_RU = 2_000_000
"""Resource units of one "same offset" question (display, not a verdict)."""


def _decide(c: Op, enc: IntEncoder) -> Optional[int]:
    """1 or 0 when the integer intervals of the operands of the comparison ``c`` (no wraps:
    the reading the display shows; the domain's ranges) decide it, else None."""
    try:
        _, alo, ahi = enc._go(c.args[0])
        _, blo, bhi = enc._go(c.args[1])
    except Exception:          # an operation without an integer form: not decided here
        return None
    if c.op in ("slt", "sle") and min(alo, blo) < 0:
        return None
    strict = c.op in ("ult", "slt")
    if c.op == "eq":
        return 0 if ahi < blo or bhi < alo else 1 if alo == ahi == blo == bhi else None
    if ahi < blo or (not strict and ahi <= blo):
        return 1
    if alo > bhi or (strict and alo >= bhi):
        return 0
    low = _lowest_difference(c.args[1], c.args[0], enc.ranges)       # b - a >= low
    if low is not None and (low >= 1 or (not strict and low >= 0)):
        return 1
    low = _lowest_difference(c.args[0], c.args[1], enc.ranges)       # a - b >= low
    if low is not None and (low >= 0 if strict else low >= 1):
        return 0
    return None


def _lowest_difference(a: Expr, b: Expr, ranges) -> Optional[int]:
    """A lower bound of ``a - b`` over the integers (the no-wrap reading) when it is a
    polynomial: each symbol ``v`` written ``lo_v + t_v`` (``lo_v`` its range's low end,
    ``t_v >= 0``), the bound is the constant term if every other coefficient is non-negative
    (``256*nhead_q*seqlen_q - 256*nhead_q`` is ``256*t_n*t_s + 256*t_s``: at least 0).  None
    otherwise (a floor, a remainder or a negative coefficient)."""
    import sympy
    from addrsim.backends.sympy_text import to_sympy_nowrap
    try:
        d = sympy.expand(to_sympy_nowrap(a) - to_sympy_nowrap(b))
        syms = sorted(d.free_symbols, key=str)
        if not d.is_polynomial(*syms):
            return None
        shifted = sympy.Poly(sympy.expand(d.subs({v: ranges.get(str(v), (0, 0))[0] + sympy.Symbol(f"t_{v}")
                                                  for v in syms}, simultaneous=True)))
    except Exception:          # display only: not decided
        return None
    terms = dict(shifted.terms())
    const = sympy.sympify(terms.pop((0,) * len(shifted.gens), 0))
    if any(c < 0 for c in terms.values()) or not const.is_Integer:
        return None
    return int(const)


def under_domain(e: Expr, ranges: Dict[str, Tuple[int, int]]) -> Expr:
    """``e`` with every 1-bit comparison that the domain's ranges decide over the integers
    (the no-wrap reading ``diff`` and ``explain`` display) replaced by its constant, the
    expression rebuilt (``ite`` on a constant keeps its arm, a carry of 0 drops).  Symbols and
    units are those of ``e``."""
    decided: Dict[bytes, Optional[int]] = {}
    enc = IntEncoder(ranges, ideal=True)

    def step(out: Expr) -> Expr:
        if isinstance(out, Op) and out.op in COMPARISONS and out.width == 1:
            key = X.digest(out)
            if key not in decided:
                decided[key] = _decide(out, enc)
            if decided[key] is not None:
                return Const(decided[key], 1)
        return out
    return _bottom_up(e, step)


def _bottom_up(e: Expr, step) -> Expr:
    """``e`` rebuilt from its leaves up (each shared node once), ``step`` applied to every
    operator node after its arguments were rebuilt (it returns the node or a replacement)."""
    memo: Dict[int, Expr] = {}

    def go(n: Expr) -> Expr:
        if not isinstance(n, Op):
            return n
        if id(n) not in memo:
            memo[id(n)] = step(X.rebuild(n, tuple(go(a) for a in n.args)))
        return memo[id(n)]
    return go(e)


MERGE_RU = 1_000_000
"""Resource units of one "do these arms agree" question (display, not a verdict)."""
MERGE_MAX = 4
"""At most this many ``ite`` nodes are asked about per expression (display only)."""


def merged_arms(e: Expr, conds: List[Expr], ranges: Dict[str, Tuple[int, int]]) -> Expr:
    """``e`` with each ``ite(c, a, b)`` whose arms agree wherever ``c`` holds (then it is
    ``b``) or wherever it fails (then ``a``) in every model of ``conds``, over the integers
    (the no-wrap reading shown), replaced by that arm.  The README kernel's LSE patched into
    pattern B reads ``batch >= 2 ? 4*batch_id*nhead_q*seqlen_q : 4*batch_id*nhead_q`` in
    SBHD: with batch 1, batch_id is 0 and both arms are 0, so it is shown as the first arm
    alone (issue 40, item 3).  Each question within MERGE_RU units, at most MERGE_MAX of
    them; an undecided one keeps the ``ite``.  Display only: it never makes a verdict."""
    from addrsim.prove.query import Query
    asked = [0]

    def agree(c: Expr, a: Expr, b: Expr) -> bool:
        if asked[0] >= MERGE_MAX:
            return False
        asked[0] += 1
        q = Query(list(conds) + [c], X.eq(a, b), ranges, MERGE_RU, "int")
        q.cap = MERGE_RU
        try:
            return q.solve()[0] == "proved"
        except Exception:      # display only: not decided
            return False

    def step(out: Expr) -> Expr:
        if isinstance(out, Op) and out.op == "ite":
            c, a, b = out.args
            if agree(c, a, b):
                return b
            if agree(X.not_(c), a, b):
                return a
        return out
    return _bottom_up(e, step)


def same_offset(a: Expr, b: Expr, conds: List[Expr], ranges, arith: str = "bv") -> Optional[bool]:
    """Is ``a == b`` (byte offsets over the same symbols) in every model of ``conds``?  True
    when proved, False when refuted, None when undecided within SAME_RU units."""
    from addrsim.prove.query import Query
    if a.width != b.width:
        w = max(a.width, b.width)
        a, b = X.zext(a, w), X.zext(b, w)
    q = Query(list(conds), X.eq(a, b), ranges, SAME_RU, arith)
    q.cap = SAME_RU
    v = q.solve()[0]
    return True if v == "proved" else False if v == "refuted" else None
