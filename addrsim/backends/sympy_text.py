"""Readable formulas: the integer reading of an IR expression as a sympy expression.

The reading ignores wraparound (``u32(x)`` and 32-bit products appear as plain integers),
so it is for display and for the simplified difference only; verdicts never come from it.
Shifts right by a constant are ``floor(x / 2**k)``, masks with ``2**k - 1`` are ``Mod(x, 2**k)``.
"""
from __future__ import annotations

import sympy

from addrsim.ir import expr as X
from addrsim.ir.expr import Const, Expr, Sym


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


def to_sympy_nowrap(e: Expr, keep=None, memo=None):
    """The reading of ``e`` when no 32-bit value wraps, as a sympy expression, for the
    simplified differences of ``addrsim diff``: a 64-bit value split into 32-bit halves, or
    a product computed as ``s_mul_i32`` + ``s_mul_hi_u32`` (``keep``, from
    :func:`addrsim.backends.arith.kept_wraps`), is read whole: the low half is the value, the high
    half and the carries between the halves are 0.  Display only: verdicts never come from
    it (a wrap is the prover's business, :mod:`addrsim.backends.arith`)."""
    from addrsim.backends.arith import kept_wraps, signed_const
    keep = kept_wraps([e]) if keep is None else keep
    memo = {} if memo is None else memo

    def go(n):
        op = n.op
        a = [memo[id(x)] for x in n.args]
        if op == "extract":
            h, l = n.params
            if l == 0:
                return a[0]                            # a low half, or a truncation that does not wrap
            if l % 32 == 0:
                return sympy.Integer(0)                # an upper dword of a split value
            return sympy.floor(a[0] / 2 ** l)
        if op == "mulhu":
            return sympy.Integer(0)
        if op == "add":
            b = signed_const(n.args[1])
            return a[0] + (a[1] if b is None else b)
        if op == "sub":
            b = signed_const(n.args[1])
            return a[0] - (a[1] if b is None else b)
        if op == "mul":
            return a[0] * a[1]
        if op in ("zext", "sext"):
            return a[0]
        if op == "concat":
            return a[0] * 2 ** n.args[1].width + a[1]
        if op == "shl" and isinstance(n.args[1], Const):
            return a[0] * 2 ** n.args[1].value
        if op == "lshr" and isinstance(n.args[1], Const):
            return sympy.floor(a[0] / 2 ** n.args[1].value)
        if op in ("and", "or") and n.width > 1:
            for x, c in ((a[0], n.args[1]), (a[1], n.args[0])):
                if isinstance(c, Const) and op == "and" and c.value & (c.value + 1) == 0:
                    return x                           # a low mask: nothing above it when nothing wraps
            za, zb = n.args
            if op == "or" and (X.maxbits(za) <= X.lowzeros(zb) or X.maxbits(zb) <= X.lowzeros(za)):
                return a[0] + a[1]
        if op in ("ult", "ule"):
            d = sympy.expand(a[0] - a[1])
            if d.is_nonnegative and (op == "ult" or d.is_positive):
                return sympy.Integer(0)
            if d.is_negative or (op == "ule" and d.is_nonpositive):
                return sympy.Integer(1)
            return sympy.Function(op)(*a)
        if op == "ite":
            return sympy.Piecewise((a[1], sympy.Eq(a[0], 1)), (a[2], True))
        return to_sympy(n)

    stack = [(e, False)]          # post-order, so that deep expressions do not recurse deeply
    while stack:
        n, ready = stack.pop()
        if id(n) in memo:
            continue
        if isinstance(n, Const):
            memo[id(n)] = sympy.Integer(n.value)
        elif isinstance(n, Sym):
            memo[id(n)] = sympy.Symbol(n.name, integer=True, nonnegative=True)
        elif ready:
            memo[id(n)] = go(n)
        else:
            stack.append((n, True))
            stack.extend((x, False) for x in n.args)
    return memo[id(e)]
