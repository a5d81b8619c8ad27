"""The Z3 bit-vector backend: exact, what the hardware computes.

Owns :func:`to_bv` and :func:`holds_bv`, and :data:`BV` (operator -> translation), checked
against :data:`addrsim.ir.ops.OPS` at import.  May import addrsim.ir only.  1-bit IR nodes
become 1-bit bit-vectors; binary32 operators and ``sel`` are uninterpreted functions (sound:
no property of the rounding or of the array is assumed; :mod:`addrsim.prove.idioms` proves
the idioms that need more).
"""
from __future__ import annotations

from typing import Dict, Optional

import z3

from addrsim.ir import expr as X
from addrsim.ir.expr import Const, Expr, Sym
from addrsim.ir.ops import FLOAT_OPS, require_backend
from addrsim.backends.z3_run import RU, decided

_ONE, _ZERO = z3.BitVecVal(1, 1), z3.BitVecVal(0, 1)


def _b(c):
    return z3.If(c, _ONE, _ZERO)


def _mulh(ext):
    def f(n, a):
        w = n.width
        return z3.Extract(2 * w - 1, w, ext(w, a[0]) * ext(w, a[1]))
    return f


def _sel(n, a):
    f = z3.Function("sel_" + n.args[0].name, z3.BitVecSort(64), z3.BitVecSort(32))
    return f(a[1])


def _float(n, a):
    f = z3.Function(n.op, *([z3.BitVecSort(32)] * len(a)), z3.BitVecSort(32))
    return f(*a)


BV = {
    "add": lambda n, a: a[0] + a[1],
    "sub": lambda n, a: a[0] - a[1],
    "mul": lambda n, a: a[0] * a[1],
    "mulhu": _mulh(z3.ZeroExt),
    "mulhs": _mulh(z3.SignExt),
    "and": lambda n, a: a[0] & a[1],
    "or": lambda n, a: a[0] | a[1],
    "xor": lambda n, a: a[0] ^ a[1],
    "not": lambda n, a: ~a[0],
    "shl": lambda n, a: a[0] << a[1],
    "lshr": lambda n, a: z3.LShR(a[0], a[1]),
    "ashr": lambda n, a: a[0] >> a[1],
    "zext": lambda n, a: z3.ZeroExt(n.width - n.args[0].width, a[0]),
    "sext": lambda n, a: z3.SignExt(n.width - n.args[0].width, a[0]),
    "extract": lambda n, a: z3.Extract(n.params[0], n.params[1], a[0]),
    "concat": lambda n, a: z3.Concat(a[0], a[1]),
    "ite": lambda n, a: z3.If(a[0] == _ONE, a[1], a[2]),
    "eq": lambda n, a: _b(a[0] == a[1]),
    "ult": lambda n, a: _b(z3.ULT(a[0], a[1])),
    "ule": lambda n, a: _b(z3.ULE(a[0], a[1])),
    "slt": lambda n, a: _b(a[0] < a[1]),
    "sle": lambda n, a: _b(a[0] <= a[1]),
    "udiv": lambda n, a: z3.UDiv(a[0], a[1]),
    "urem": lambda n, a: z3.URem(a[0], a[1]),
    "sel": _sel,
    **{op: _float for op in FLOAT_OPS},
}
require_backend("Z3 bit-vector (addrsim.backends.z3_bv)", BV)


def to_bv(e: Expr, memo: Dict[int, z3.ExprRef] = None, vars_: Dict[str, z3.ExprRef] = None) -> z3.ExprRef:
    """Z3 bit-vector term for ``e``.  ``memo`` (node id -> term) and ``vars_`` (symbol name
    -> Z3 constant) may be shared across calls; the nodes are kept alive in ``memo`` so
    that their ids stay valid."""
    memo = {} if memo is None else memo
    vars_ = {} if vars_ is None else vars_
    keep = memo.setdefault("_keep", [])
    stack = [(e, False)]
    while stack:                      # post-order: deep expressions do not recurse
        n, ready = stack.pop()
        k = id(n)
        if k in memo:
            continue
        if isinstance(n, Const):
            ck = ("_c", n.value, n.width)
            r = memo.get(ck)
            if r is None:
                r = memo[ck] = z3.BitVecVal(n.value, n.width)
        elif isinstance(n, Sym):
            r = vars_.get(n.name)
            if r is None:
                r = vars_[n.name] = z3.BitVec(n.name, n.width)
        elif ready:
            r = BV[n.op](n, [memo[id(x)] for x in n.args])
        else:
            stack.append((n, True))
            stack.extend((x, False) for x in n.args if id(x) not in memo)
            continue
        keep.append(n)
        memo[k] = r
    return memo[id(e)]


def holds_bv(c: Expr, memo=None, vars_=None) -> z3.BoolRef:
    """The Z3 formula "the 1-bit expression ``c`` is 1"."""
    return to_bv(c, memo, vars_) == _ONE


def offset_from(base: Expr, p: Sym) -> Optional[Expr]:
    """``base - zext(p)`` as an expression free of ``p`` when ``base`` (64-bit) is the pointer
    ``p`` plus an offset computed in any way (32-bit halves with carries, ...): the candidate
    is ``base`` with ``p`` set to 0, kept only if Z3 proves base == zext(p) + candidate for
    every value of every symbol (bit-vector validity within 1 Mru, :mod:`addrsim.backends.z3_run`); None otherwise.  The engine asks
    this when a scalar load reads through a pointer argument."""
    cand = X.substitute(base, {p.name: Const(0, p.width)})
    if p.name in X.symbols(cand):
        return None
    memo, vs = {}, {}
    r, _ = decided([to_bv(base, memo, vs) != to_bv(X.add(X.zext(p, 64), cand), memo, vs)], RU)
    return cand if r == z3.unsat else None
