"""Shape ranges that a domain's conditions imply: one inequality between two monomials, its
common factors cancelled.

A host's routing often says in strides what it means in one shape variable. The wheel's
codegen.py launches its fast kernels only when ``batch_stride_q >= stride_q`` (G2:1287-1309);
in SBHD (elements) that is ``nhead_q*hdim_q >= batch*nhead_q*hdim_q``, i.e. ``batch <= 1``.
Stated as a product the solvers meet it as a nonlinear constraint and search for what the
range says at once: the README kernel's routed K SBHD bounds check ran 99.5 s to "unknown" with it, 30.5 s
with ``batch`` in [1, 1] (dV SBHD: 35.5 s unknown, 2.7 s proved).

:func:`implied_ranges` reads each condition ``A <= B``, ``A < B`` or ``A == B`` (unsigned,
the conjuncts of a 1-bit ``and``) whose sides are single monomials ``c * x1**k1 * ...`` over
symbols with known ranges, built from ``add``/``mul``/``shl`` by a constant, ``zext`` and
constants, with no wrap at their width (checked from the ranges: every coefficient is
positive, so the largest value is at the upper bounds). Common factors are cancelled (each
is at least 1, so the relation between the rest is unchanged); then ``c_a * x <= c_b * Y``
bounds ``x`` above by ``floor(c_b*max(Y)/c_a)``, and ``c_a * X <= c_b * y`` bounds ``y``
below by ``ceil(c_a*min(X)/c_b)`` (one less, one more for ``<``). Repeated to a fixpoint
(at most :data:`ROUNDS` passes). Every bound is implied by the conditions under the ranges,
so narrowing the ranges a query asserts changes no verdict: the same shapes are in the
domain. Units: those of the symbols (elements, counts). Imports nothing of addrsim outside
the IR.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from addrsim.ir import expr as X
from addrsim.ir.expr import Const, Expr, Op, Sym

ROUNDS = 4
Mono = Tuple[int, Dict[str, int]]        # (coefficient, {symbol name: power})


def monomial(e: Expr) -> Optional[Mono]:
    """``e`` as one monomial ``(c, {name: power})`` over its symbols, or None when it is not
    one (a sum of two monomials, a division, any other operator)."""
    if isinstance(e, Const):
        return e.value, {}
    if isinstance(e, Sym):
        return 1, {e.name: 1}
    if not isinstance(e, Op):
        return None
    if e.op == "zext":
        return monomial(e.args[0])
    if e.op == "mul":
        a, b = monomial(e.args[0]), monomial(e.args[1])
        if a is None or b is None:
            return None
        powers = dict(a[1])
        for k, p in b[1].items():
            powers[k] = powers.get(k, 0) + p
        return a[0] * b[0], powers
    if e.op == "shl" and isinstance(e.args[1], Const):
        a = monomial(e.args[0])
        return None if a is None else (a[0] << e.args[1].value, a[1])
    if e.op == "add" and any(isinstance(x, Const) and x.value == 0 for x in e.args):
        return monomial(e.args[1] if isinstance(e.args[0], Const) else e.args[0])
    return None


def _extreme(m: Mono, ranges, hi: bool) -> int:
    c, powers = m
    v = c
    for k, p in powers.items():
        v *= ranges[k][1 if hi else 0] ** p
    return v


def _fits(e: Expr, ranges) -> bool:
    """Does no node of ``e`` wrap: every product and shift below it, at its own width, has its
    largest value (at the upper bounds: every factor is non-negative) below ``2**width``?"""
    for n in X.walk(e):
        m = monomial(n)
        if m is None or not all(k in ranges and ranges[k][0] >= 0 for k in m[1]):
            return False
        if _extreme(m, ranges, True) >= (1 << n.width):
            return False
    return True


def relations(conds: List[Expr]) -> List[Tuple[Expr, Expr, int]]:
    """``(A, B, strict)`` for each ``A <= B`` (strict 0) or ``A < B`` (strict 1) among the
    conditions and the conjuncts of their 1-bit ``and``; ``A == B`` gives both directions."""
    out = []
    for c in X.conjuncts(conds):
        if c.op in ("ule", "ult"):
            out.append((c.args[0], c.args[1], int(c.op == "ult")))
        elif c.op == "eq":
            out += [(c.args[0], c.args[1], 0), (c.args[1], c.args[0], 0)]
    return out


def _cancelled(a: Mono, b: Mono, ranges) -> Optional[Tuple[Mono, Mono]]:
    """Both sides with their common factors removed (each at least 1 in ``ranges``)."""
    pa, pb = dict(a[1]), dict(b[1])
    for k in set(pa) & set(pb):
        if ranges[k][0] < 1:
            return None
        m = min(pa[k], pb[k])
        pa[k] -= m
        pb[k] -= m
    return (a[0], {k: p for k, p in pa.items() if p}), (b[0], {k: p for k, p in pb.items() if p})


def _tightened(a: Mono, b: Mono, strict: int, ranges) -> Dict[str, Tuple[int, int]]:
    """New bounds from ``a <= b`` (``a < b`` when strict), sides cancelled: a lone variable
    of power 1 on either side, bounded by the other side's extreme value."""
    out = {}
    if len(a[1]) == 1 and a[0] > 0:
        (x, p), = a[1].items()
        if p == 1:
            out[x] = (ranges[x][0], min(ranges[x][1], (_extreme(b, ranges, True) - strict) // a[0]))
    if len(b[1]) == 1 and b[0] > 0:
        (y, p), = b[1].items()
        if p == 1:
            need = _extreme(a, ranges, False) + strict
            out[y] = (max(ranges[y][0], -(-need // b[0])), ranges[y][1])
    return out


def implied_ranges(conds: List[Expr], ranges: Dict[str, Tuple[int, int]]) -> Dict[str, Tuple[int, int]]:
    """``ranges`` ({symbol name: (lo, hi)}, inclusive) narrowed by what the conditions imply
    (module docstring); an empty range (lo > hi) means no point satisfies them. Symbols not in
    ``ranges`` are never bounded and block the conditions that read them."""
    r = dict(ranges)
    rels = [(a, b, s, monomial(a), monomial(b)) for a, b, s in relations(conds)]
    rels = [x for x in rels if x[3] is not None and x[4] is not None]
    for _ in range(ROUNDS):
        changed = False
        for a, b, strict, ma, mb in rels:
            if not (_fits(a, r) and _fits(b, r)):
                continue
            cut = _cancelled(ma, mb, r)
            if cut is None:
                continue
            for k, v in _tightened(*cut, strict, r).items():
                if v != r[k]:
                    r[k], changed = v, True
        if not changed:
            break
    return r
