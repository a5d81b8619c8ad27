"""Readable formulas: the integer reading of an IR expression as a sympy expression.

The reading ignores wraparound (``u32(x)`` and 32-bit products appear as plain integers),
so it is for display and for the simplified difference only; verdicts never come from it.
Shifts right by a constant are ``floor(x / 2**k)``, masks with ``2**k - 1`` are ``Mod(x, 2**k)``.
"""
from __future__ import annotations

import sympy

from . import expr as X
from .expr import Const, Expr, Sym


def to_sympy(e: Expr, memo=None):
    memo = {} if memo is None else memo
    k = id(e)
    if k in memo:
        return memo[k]
    if isinstance(e, Const):
        r = sympy.Integer(e.value)
    elif isinstance(e, Sym):
        r = sympy.Symbol(e.name, integer=True, nonnegative=True)
    else:
        a = [to_sympy(x, memo) for x in e.args] if e.op != "ite" else None
        op = e.op
        if op == "add": r = a[0] + a[1]
        elif op == "sub": r = a[0] - a[1]
        elif op == "mul": r = a[0] * a[1]
        elif op in ("zext", "sext"): r = a[0]
        elif op == "extract": r = sympy.floor(a[0] / 2 ** e.params[1]) if e.params[1] else a[0]
        elif op == "concat": r = a[0] * 2 ** e.args[1].width + a[1]
        elif op == "lshr" and isinstance(e.args[1], Const): r = sympy.floor(a[0] / 2 ** e.args[1].value)
        elif op == "shl" and isinstance(e.args[1], Const): r = a[0] * 2 ** e.args[1].value
        elif op == "and" and isinstance(e.args[1], Const) and (e.args[1].value & (e.args[1].value + 1)) == 0:
            r = sympy.Mod(a[0], e.args[1].value + 1)
        elif op == "udiv": r = sympy.floor(a[0] / a[1])
        elif op == "urem": r = sympy.Mod(a[0], a[1])
        elif op == "ite" and isinstance(e.args[2], X.Op) and e.args[2].op == "udiv" \
                and isinstance(e.args[0], X.Op) and e.args[0].op == "eq" and isinstance(e.args[0].args[1], Const) \
                and e.args[0].args[1].value == 0:
            r = to_sympy(e.args[2], memo)   # a proved division guarded against a zero divisor
        elif op == "ite":
            c = to_sympy(e.args[0], memo)
            r = sympy.Piecewise((to_sympy(e.args[1], memo), sympy.Eq(c, 1)), (to_sympy(e.args[2], memo), True))
        elif op in ("eq", "ult", "ule"):
            r = sympy.Function(op)(*a)
        else:
            r = sympy.Function(op)(*a)
    memo[k] = r
    return r
