"""Rewrites that hold under the upper bounds a query's conditions state: carries that cannot happen.

Owns :func:`upper_bounds` (the bounds ``E < c`` / ``E <= c`` the conditions state, by
expression), :func:`upper` (an upper bound of any expression from them) and
:func:`without_dead_carries` (the rewrite).  May import addrsim.ir.expr only.

A buffer access inside a loop reads its V# from a 64-bit register pair that the loop advances
with ``s_add_u32``/``s_addc_u32``: after :func:`addrsim.ir.expr.fold_carries` its stride field
(bits 61..48, MI300 ISA guide 9.1.5 "Buffer resource") is bits 61..48 of ``base + step``, and
the 48-bit base and the step are zero-extended sums.  The loop induction
(:mod:`addrsim.engine.loops`) assumes the base stays a canonical user address (below 2**47),
so no carry reaches bit 48 and no 48-bit sum wraps, but a bit-blasting solver has to find that
out under two 64-bit multiplications by the stride (more than 45 s of Z3 and Bitwuzla for one
obligation of the README kernel, undecided).  Rewritten, the stride field of the advanced base
is the same term as the base's own, the products cancel as polynomials, and the obligation is
linear.  Two rules, each an equality at every point where the conditions hold (bit-vector
arithmetic; widths in bits):

- ``extract[h:l](P + S)`` is ``extract[h:l](P)`` when S has no bit at or above l and
  ``upper(P mod 2**l) + upper(S) < 2**l`` (the low l bits do not carry);
- ``zext(a + b)`` is ``zext(a) + zext(b)`` when ``upper(a) + upper(b) < 2**width(a)``.

The rewritten formula is decided under the same conditions, so a proof of it is a proof of
the original; a model is always checked against the original claim (addrsim.prove.query).
"""
from __future__ import annotations

from typing import Dict, Iterable, Optional

from addrsim.ir import expr as X
from addrsim.ir.expr import Const, Expr, Op


class Bounds:
    """Upper bounds (inclusive, unsigned) the conditions state, keyed by expression digest."""

    def __init__(self):
        self.by: Dict[bytes, int] = {}
        self.dmemo: dict = {}
        self.memo: Dict[int, int] = {}
        self._alive: Dict[int, Expr] = {}

    def _key(self, e: Expr) -> bytes:
        self._alive[id(e)] = e       # the digest memo is keyed by node id: keep the node alive
        return X.digest(e, self.dmemo)

    def note(self, e: Expr, bound: int) -> None:
        k = self._key(e)
        self.by[k] = min(self.by.get(k, bound), bound)

    def stated(self, e: Expr) -> Optional[int]:
        return self.by.get(self._key(e))


def upper_bounds(conds: Iterable[Expr]) -> Bounds:
    """The bounds ``E < c`` and ``E <= c`` (unsigned, c a constant) among the conditions and
    the conjuncts of their 1-bit ``and``; ``extract[h:0](concat(A, B))`` is also noted in the
    form :func:`addrsim.ir.expr.extract` gives its bits (``concat(extract[h-w:0](A), B)``,
    w the width of B), as the canonical-address bound of a 64-bit pair is stated."""
    b = Bounds()
    work = list(conds)
    while work:
        c = work.pop()
        if not isinstance(c, Op) or c.width != 1:
            continue
        if c.op == "and":
            work.extend(c.args)
            continue
        if c.op not in ("ult", "ule") or not isinstance(c.args[1], Const):
            continue
        bound = c.args[1].value - (1 if c.op == "ult" else 0)
        if bound < 0:
            continue
        e = c.args[0]
        b.note(e, bound)
        if isinstance(e, Op) and e.op == "extract" and e.params[1] == 0 and isinstance(e.args[0], Op) \
                and e.args[0].op == "concat" and e.params[0] >= e.args[0].args[1].width:
            hi, lo = e.args[0].args
            b.note(X.concat(X.extract(hi, e.params[0] - lo.width, 0), lo), bound)
    return b


def upper(e: Expr, b: Bounds) -> int:
    """An upper bound (inclusive, unsigned) of ``e`` wherever the conditions of ``b`` hold:
    the least of the stated bound, ``2**maxbits(e) - 1`` and the bound through zext, ite,
    a non-wrapping add and a low extract."""
    if isinstance(e, Const):
        return e.value
    k = id(e)
    if k in b.memo:
        return b.memo[k]
    m = (1 << X.maxbits(e)) - 1
    s = b.stated(e)
    if s is not None:
        m = min(m, s)
    if isinstance(e, Op):
        a = e.args
        if e.op == "zext":
            m = min(m, upper(a[0], b))
        elif e.op == "ite":
            m = min(m, max(upper(a[1], b), upper(a[2], b)))
        elif e.op == "add":
            t = upper(a[0], b) + upper(a[1], b)
            if t < (1 << e.width):
                m = min(m, t)
        elif e.op == "extract" and e.params[1] == 0:
            m = min(m, upper(a[0], b))
    b.memo[k] = m
    return m


def without_dead_carries(e: Expr, conds: Iterable[Expr]) -> Expr:
    """``e`` with the carries the conditions rule out removed (the module docstring's two
    rules, bottom-up); ``e`` itself when none applies."""
    b = upper_bounds(conds)
    if not b.by:
        return e
    memo: Dict[int, tuple] = {}
    return _rewrite(e, b, memo)


def _rewrite(e: Expr, b: Bounds, memo: Dict[int, tuple]) -> Expr:
    k = id(e)
    if k in memo:
        return memo[k][1]
    r = e
    if isinstance(e, Op):
        args = tuple(_rewrite(a, b, memo) for a in e.args)
        if any(x is not y for x, y in zip(args, e.args)):
            r = X.rebuild(e, args)
        if isinstance(r, Op):
            r = _rule(r, b, memo)
    memo[k] = (e, r)
    return r


def _rule(r: Op, b: Bounds, memo) -> Expr:
    if r.op == "extract" and r.params[1] > 0 and isinstance(r.args[0], Op) and r.args[0].op == "add":
        hi, lo = r.params
        for p, s in _addends(*r.args[0].args):
            if X.maxbits(s) <= lo and upper(X.extract(p, lo - 1, 0), b) + upper(s, b) < (1 << lo):
                return _rewrite(X.extract(p, hi, lo), b, memo)
    if r.op == "zext" and isinstance(r.args[0], Op) and r.args[0].op == "add":
        for x, y in _addends(*r.args[0].args):
            if upper(x, b) + upper(y, b) < (1 << x.width):
                return X.add(X.zext(x, r.width), X.zext(y, r.width))
    return r


def _addends(a: Expr, c: Expr):
    """The ways to read the sum ``a + c`` as P + S: both orders, and where one is
    ``[extract[k:0]](concat(H, A))`` and the other ``zext(B)`` (A and B of one width), also
    ``[extract[k:0]](concat(H, B)) + zext(A)``: the same value, as a folded carry chain may
    keep either operand of the low word in the pair (:func:`addrsim.ir.expr.fold_carries`)."""
    for p, s in ((a, c), (c, a)):
        yield p, s
        if not (isinstance(s, Op) and s.op == "zext"):
            continue
        core, k = p, None
        if isinstance(p, Op) and p.op == "extract" and p.params[1] == 0:
            core, k = p.args[0], p.params[0]
        if isinstance(core, Op) and core.op == "concat" and core.args[1].width == s.args[0].width:
            swapped = X.concat(core.args[0], s.args[0])
            yield (swapped if k is None else X.extract(swapped, k, 0)), X.zext(core.args[1], s.width)
