"""Rewrites that hold under the bounds a query's conditions state and the ranges its solver
calls assert: carries that cannot happen, values that cannot vary; and a stronger claim.

Owns :func:`upper_bounds` (the bounds ``E < c`` / ``E <= c`` the conditions state, by
expression, and the variables' ranges), :func:`interval` and :func:`upper` (bounds of any
expression from them), :func:`without_dead_carries` (the rewrite), :func:`strengthened`
(a claim that implies the given one) and the case split helpers :func:`ite_conditions` /
:func:`with_conditions`.  May import addrsim.ir.expr only.

A buffer access inside a loop reads its V# from a 64-bit register pair that the loop advances
with ``s_add_u32``/``s_addc_u32``: after :func:`addrsim.ir.expr.fold_carries` its stride field
(bits 61..48, MI300 ISA guide 9.1.5 "Buffer resource") is bits 61..48 of ``base + step``, and
the 48-bit base and the step are zero-extended sums.  The loop induction
(:mod:`addrsim.engine.loops`) assumes the base stays a canonical user address (below 2**47),
so no carry reaches bit 48 and no 48-bit sum wraps, but a bit-blasting solver has to find that
out under two 64-bit multiplications by the stride (more than 45 s of Z3 and Bitwuzla for one
obligation of the README kernel, undecided).  Rewritten, the stride field of the advanced base
is the same term as the base's own, the products cancel as polynomials, and the obligation is
linear.  The rules, each an equality at every point where the conditions and ranges hold
(bit-vector arithmetic; widths in bits):

- ``extract[h:l](P + S)`` is ``extract[h:l](P)`` when S has no bit at or above l and
  ``upper(P mod 2**l) + upper(S) < 2**l`` (the low l bits do not carry);
- ``zext(a + b)`` is ``zext(a) + zext(b)`` when ``upper(a) + upper(b) < 2**width(a)``;
- an ``extract`` whose :func:`interval` is one value is that constant (the stride field of a
  V# whose base lies below 2**47), and so is a comparison whose sides' intervals do not meet;
- ``A + C <= B + C`` is ``A <= B`` when neither sum wraps (a bounds claim's shared pointer).

The rewritten formula is decided under the same conditions, so a proof of it is a proof of
the original; a model is always checked against the original claim (addrsim.prove.query).
"""
from __future__ import annotations

from typing import Dict, Iterable, Optional, Tuple

from addrsim.ir import expr as X
from addrsim.ir.expr import Const, Expr, Op


class Bounds:
    """What the conditions and the variables' ranges bound: upper bounds (inclusive,
    unsigned) the conditions state, keyed by expression digest, and the ranges
    ``{symbol name: (lo, hi)}`` (inclusive) every solver call of the query asserts."""

    def __init__(self, ranges: Optional[Dict[str, Tuple[int, int]]] = None):
        self.by: Dict[bytes, int] = {}
        self.ranges = dict(ranges or {})
        self.dmemo: dict = {}
        self.memo: Dict[int, tuple] = {}     # id -> (node, interval): the node is kept alive
        self._alive: Dict[int, Expr] = {}

    def _key(self, e: Expr) -> bytes:
        self._alive[id(e)] = e       # the digest memo is keyed by node id: keep the node alive
        return X.digest(e, self.dmemo)

    def note(self, e: Expr, bound: int) -> None:
        k = self._key(e)
        self.by[k] = min(self.by.get(k, bound), bound)

    def stated(self, e: Expr) -> Optional[int]:
        return self.by.get(self._key(e))


def upper_bounds(conds: Iterable[Expr], ranges: Optional[Dict[str, Tuple[int, int]]] = None) -> Bounds:
    """The bounds ``E < c`` and ``E <= c`` (unsigned, c a constant) among the conditions and
    the conjuncts of their 1-bit ``and``; ``extract[h:0](concat(A, B))`` is also noted in the
    form :func:`addrsim.ir.expr.extract` gives its bits (``concat(extract[h-w:0](A), B)``,
    w the width of B), as the canonical-address bound of a 64-bit pair is stated.  ``ranges``
    (symbol name -> inclusive (lo, hi)) are kept beside them."""
    b = Bounds(ranges)
    for c in X.conjuncts(conds):
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
    """An upper bound (inclusive, unsigned) of ``e`` wherever the conditions of ``b`` hold
    (:func:`interval`)."""
    return interval(e, b)[1]


def interval(e: Expr, b: Bounds) -> Tuple[int, int]:
    """(lo, hi), inclusive unsigned bounds of ``e`` wherever the conditions and ranges of
    ``b`` hold: the stated bound, the symbol's range, ``2**maxbits(e) - 1`` and the bounds
    through the operations that provably do not wrap (:func:`_op_interval`)."""
    if isinstance(e, Const):
        return e.value, e.value
    hit = b.memo.get(id(e))
    if hit is not None and hit[0] is e:
        return hit[1]
    lo, hi = 0, (1 << X.maxbits(e)) - 1
    s = b.stated(e)
    if s is not None:
        hi = min(hi, s)
    if isinstance(e, X.Sym) and e.name in b.ranges:
        r = b.ranges[e.name]
        lo, hi = max(lo, r[0]), min(hi, r[1])
    elif isinstance(e, Op):
        ol, oh = _op_interval(e, b)
        lo, hi = max(lo, ol), min(hi, oh)
    if lo > hi:          # no point satisfies the conditions: claim nothing
        lo, hi = 0, (1 << e.width) - 1
    b.memo[id(e)] = (e, (lo, hi))
    return lo, hi


def _op_interval(e: Op, b: Bounds) -> Tuple[int, int]:
    """Bounds of ``e`` from its operands' (unsigned; full range where the operation may wrap)."""
    full = (0, (1 << e.width) - 1)
    a = e.args
    if e.op in ("lshr", "shl") and not isinstance(a[1], Const):
        return full
    iv = [interval(x, b) for x in a]
    if e.op == "zext" or (e.op == "sext" and iv[0][1] < 1 << (a[0].width - 1)):
        return iv[0]
    if e.op == "ite":
        return min(iv[1][0], iv[2][0]), max(iv[1][1], iv[2][1])
    if e.op in ("add", "mul"):
        f = (lambda x, y: x + y) if e.op == "add" else (lambda x, y: x * y)
        return (f(iv[0][0], iv[1][0]), f(iv[0][1], iv[1][1])) if f(iv[0][1], iv[1][1]) <= full[1] else full
    if e.op == "sub":
        return (iv[0][0] - iv[1][1], iv[0][1] - iv[1][0]) if iv[0][0] >= iv[1][1] else full
    if e.op == "or":
        return max(iv[0][0], iv[1][0]), min(iv[0][1] + iv[1][1], (1 << max(iv[0][1], iv[1][1]).bit_length()) - 1)
    if e.op == "and":
        return 0, min(iv[0][1], iv[1][1])
    if e.op == "lshr":
        return iv[0][0] >> a[1].value, iv[0][1] >> a[1].value
    if e.op == "shl":
        return (iv[0][0] << a[1].value, iv[0][1] << a[1].value) if iv[0][1] << a[1].value <= full[1] else full
    if e.op == "udiv" and iv[1][0] > 0:     # a zero divisor gives all ones (SMT-LIB bvudiv)
        return iv[0][0] // iv[1][1], iv[0][1] // iv[1][0]
    if e.op == "concat":
        w = a[1].width
        return (iv[0][0] << w) + iv[1][0], (iv[0][1] << w) + iv[1][1]
    if e.op == "extract":
        h, l_ = e.params
        if iv[0][0] >> (h + 1) == iv[0][1] >> (h + 1):     # the field does not wrap between lo and hi
            return iv[0][0] >> l_ & full[1], iv[0][1] >> l_ & full[1]
        return 0, min(full[1], iv[0][1] >> l_)
    return full


def without_dead_carries(e: Expr, conds: Iterable[Expr], ranges: Optional[Dict[str, Tuple[int, int]]] = None) -> Expr:
    """``e`` with the carries the conditions (and the variables' ``ranges``) rule out removed
    (the module docstring's rules, bottom-up); ``e`` itself when none applies."""
    b = upper_bounds(conds, ranges)
    if not b.by and not b.ranges:
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
                return X.add(_rewrite(X.zext(x, r.width), b, memo), _rewrite(X.zext(y, r.width), b, memo))
    if r.op == "extract":
        lo, hi = interval(r, b)
        if lo == hi:         # one value wherever the conditions hold (a V# stride field)
            return Const(lo, r.width)
    if r.op in ("ult", "ule"):
        common = _cancel_common(r, b)
        if common is not None:
            return _rewrite(common, b, memo)
        (al, ah), (bl, bh) = interval(r.args[0], b), interval(r.args[1], b)
        strict = r.op == "ult"
        if ah < bl or (not strict and ah == bl):
            return Const(1, 1)
        if al > bh or (strict and al == bh):
            return Const(0, 1)
    return r


def _terms(e: Expr, b: Bounds, out: list) -> None:
    """The addends of ``e`` through every ``add`` that cannot wrap (:func:`upper`)."""
    if isinstance(e, Op) and e.op == "add" and upper(e.args[0], b) + upper(e.args[1], b) < (1 << e.width):
        _terms(e.args[0], b, out)
        _terms(e.args[1], b, out)
    else:
        out.append(e)


def _cancel_common(r: Op, b: Bounds) -> Optional[Expr]:
    """``A + C <= B + C`` (or <) as ``A <= B`` when neither sum can wrap: the allocation
    check of a bounds claim compares ``ptr + offset`` with ``ptr + extent``; without the
    48-bit pointer the solver is left with the offsets.  None when no addend is shared."""
    xs, ys = [], []
    _terms(r.args[0], b, xs)
    _terms(r.args[1], b, ys)
    keys = {}
    for i, y in enumerate(ys):
        keys.setdefault(X.digest(y, b.dmemo), []).append(i)
    drop_x, drop_y = set(), set()
    for i, x in enumerate(xs):
        js = keys.get(X.digest(x, b.dmemo))
        if js and not isinstance(x, Const):
            drop_x.add(i)
            drop_y.add(js.pop())
    if not drop_x:
        return None
    w = r.args[0].width
    return (X.ult if r.op == "ult" else X.ule)(_sum([t for i, t in enumerate(xs) if i not in drop_x], w),
                                               _sum([t for i, t in enumerate(ys) if i not in drop_y], w))


def _sum(ts: list, width: int) -> Expr:
    """The sum of the terms ``ts`` (0 when there are none)."""
    out = ts[0] if ts else Const(0, width)
    for t in ts[1:]:
        out = X.add(out, t)
    return out


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


# ------------------------------------------------------------------ strengthening

def strengthened(e: Expr, conds: Iterable[Expr], ranges: Optional[Dict[str, Tuple[int, int]]] = None) -> Expr:
    """A claim that implies ``e`` wherever the conditions hold, with no 32-bit wrap on the
    small side of its comparisons: in ``A <= B`` (and ``A < B``), each ``zext(W)`` among the
    addends of A, W a 32-bit sum of products of unsigned values, is replaced by W computed
    over 64 bits.  ``W mod 2**32`` is at most W's exact value, so the new A is at least the old
    one: ``A' <= B`` implies ``A <= B`` (a bounds claim: the wrapped 32-bit offset of an
    access lies below its exact offset, so an exact offset inside the allocation proves the
    wrapped one is too).  A proof of the result is a proof of ``e``; its counterexamples are
    not counterexamples of ``e``.  Only through ``and`` and the 64-bit sums that cannot wrap
    (:func:`upper`); ``e`` itself where nothing applies."""
    b = upper_bounds(conds, ranges)
    return _strengthen(e, b)


def _strengthen(e: Expr, b: Bounds) -> Expr:
    if isinstance(e, Op) and e.width == 1 and e.op == "and":
        return X.band(_strengthen(e.args[0], b), _strengthen(e.args[1], b))
    if not (isinstance(e, Op) and e.op in ("ule", "ult")):
        return e
    ts: list = []
    _terms(e.args[0], b, ts)
    wide = [_widened(t, b) for t in ts]
    if all(w is t for w, t in zip(wide, ts)):
        return e
    out = _sum(wide, e.args[0].width)
    if upper(out, b) >= 1 << e.args[0].width:
        return e                      # the exact sum might wrap at 64 bits: nothing shown
    return (X.ult if e.op == "ult" else X.ule)(out, e.args[1])


def _widened(t: Expr, b: Bounds) -> Expr:
    """``zext(W)`` (W 32-bit: add, mul and ite over unsigned leaves) as W over the width of
    ``t`` with no wrap, when that provably fits; else ``t``."""
    if not (isinstance(t, Op) and t.op == "zext" and isinstance(t.args[0], Op)
            and t.args[0].op in ("add", "mul", "ite")):
        return t
    w = _exact(t.args[0], t.width)
    return w if w is not None and upper(w, b) < (1 << t.width) - 1 else t


def _exact(w: Expr, width: int) -> Optional[Expr]:
    if isinstance(w, Op) and w.op in ("add", "mul"):
        a, c = _exact(w.args[0], width), _exact(w.args[1], width)
        return None if a is None or c is None else (X.add if w.op == "add" else X.mul)(a, c)
    if isinstance(w, Op) and w.op == "ite":
        a, c = _exact(w.args[1], width), _exact(w.args[2], width)
        return None if a is None or c is None else X.ite(w.args[0], a, c)
    if isinstance(w, Op) and w.op in ("sub", "xor", "not", "sext"):
        return None                   # may be a negative number read as unsigned
    return X.zext(w, width)


def ite_conditions(e: Expr, limit: int) -> Optional[list]:
    """The distinct conditions of the multi-bit ``ite`` nodes of ``e`` (first seen first), or
    None when there are more than ``limit`` (a case split over them would be too wide)."""
    seen: Dict[bytes, Expr] = {}
    memo: dict = {}
    for n in X.walk(e):
        if isinstance(n, Op) and n.op == "ite" and n.width > 1:
            seen.setdefault(X.digest(n.args[0], memo), n.args[0])
            if len(seen) > limit:
                return None
    return list(seen.values())


def with_conditions(e: Expr, values: Dict[bytes, int]) -> Expr:
    """``e`` with every 1-bit node whose digest is in ``values`` replaced by that constant
    (one case of a split: equal to ``e`` wherever the conditions take those values)."""
    memo: Dict[int, Expr] = {}
    dmemo: dict = {}

    def go(n: Expr) -> Expr:
        if id(n) in memo:
            return memo[id(n)]
        r = n
        if isinstance(n, Op):
            v = values.get(X.digest(n, dmemo)) if n.width == 1 else None
            r = Const(v, 1) if v is not None else X.rebuild(n, tuple(go(a) for a in n.args))
        memo[id(n)] = r
        return r
    return go(e)
