"""The sympy backend: readable formulas, the integer reading of an IR expression.

Owns :func:`to_sympy` (table :data:`SYMPY`) and :func:`to_sympy_nowrap` (table
:data:`NOWRAP`), both checked against :data:`addrsim.ir.ops.OPS` at import.  May import
addrsim.ir and addrsim.backends.ideal.

The reading ignores wraparound (``u32(x)`` and 32-bit products appear as plain integers),
so it is for display and for the simplified difference only; verdicts never come from it.
Shifts right by a constant are ``floor(x / 2**k)``, masks with ``2**k - 1`` are
``Mod(x, 2**k)``; operators without an integer reading are shown as functions (``xor(a, b)``).
"""
from __future__ import annotations

import sympy

from addrsim.backends.ideal import kept_wraps, signed_const
from addrsim.ir import expr as X
from addrsim.ir.expr import Const, Expr, Sym
from addrsim.ir.ops import OPS, require_backend


def _post_order(e: Expr, memo: dict, node):
    """Fill ``memo`` (node id -> sympy) in post-order with ``node(n)`` for operator nodes."""
    stack = [(e, False)]
    while stack:
        n, ready = stack.pop()
        if id(n) in memo:
            continue
        if isinstance(n, Const):
            memo[id(n)] = sympy.Integer(n.value)
        elif isinstance(n, Sym):
            memo[id(n)] = sympy.Symbol(n.name, integer=True, nonnegative=True)
        elif ready:
            memo[id(n)] = node(n, [memo[id(x)] for x in n.args])
        else:
            stack.append((n, True))
            stack.extend((x, False) for x in n.args)
    return memo[id(e)]


def _fn(n, a):
    """An operator without an integer reading, shown as a function of its operands; its value
    is a bit-vector's, a non-negative integer (so the floor of a multiple of it is read whole)."""
    return sympy.Function(n.op, integer=True, nonnegative=True)(*a)


def _const_shift(f):
    def g(n, a):
        c = n.args[1]
        if not isinstance(c, Const):
            return _fn(n, a)
        return f(a[0], c.value) if c.value < n.width else sympy.Integer(0)     # shifted out
    return g


def _and(n, a):
    c = n.args[1]
    if isinstance(c, Const) and (c.value & (c.value + 1)) == 0:
        return sympy.Mod(a[0], c.value + 1)
    return _fn(n, a)


def _is_zero_test(c: Expr) -> bool:
    return isinstance(c, X.Op) and c.op == "eq" and isinstance(c.args[1], Const) and c.args[1].value == 0


_RELATIONS = {"ult": sympy.StrictLessThan, "slt": sympy.StrictLessThan, "ule": sympy.LessThan,
              "sle": sympy.LessThan, "eq": sympy.Eq}


def _truth(c):
    """The sympy condition a 1-bit reading ``c`` is true under, for a Piecewise: a comparison
    function (``ult(BAs, Seqs)``) as the relation it names (``BAs < Seqs``; the signed ones
    alike: the display reads non-negative values), ``xor(x, 1)`` as the negation of ``x``'s;
    else ``Eq(c, 1)``."""
    name = getattr(getattr(c, "func", None), "__name__", "")
    if name in _RELATIONS and len(c.args) == 2:
        return _RELATIONS[name](*c.args)
    if name == "xor" and len(c.args) == 2 and 1 in c.args:
        other = c.args[0] if c.args[1] == 1 else c.args[1]
        return sympy.Not(_truth(other))
    return sympy.Eq(c, 1)


def _ite(n, a):
    if isinstance(n.args[2], X.Op) and n.args[2].op == "udiv" and _is_zero_test(n.args[0]):
        return a[2]                  # a proved division guarded against a zero divisor
    try:
        cond = _truth(a[0])
    except Exception:                # display only
        cond = sympy.Eq(a[0], 1)
    return sympy.Piecewise((a[1], cond), (a[2], True))


def _cmp(n, a):
    """A comparison of a value with itself read as its truth value (``ult(Q, Q)`` is 0); any
    other comparison shown as a function."""
    if n.width == 1 and sympy.expand(a[0] - a[1]) == 0:
        return sympy.Integer(0 if n.op in ("ult", "slt") else 1)
    return _fn(n, a)


SYMPY = {
    **{op: _fn for op in OPS},       # no integer reading: shown as a function
    **{op: _cmp for op in ("eq", "ult", "ule", "slt", "sle")},
    "add": lambda n, a: a[0] + a[1],
    "sub": lambda n, a: a[0] - a[1],
    "mul": lambda n, a: a[0] * a[1],
    "zext": lambda n, a: a[0],
    "sext": lambda n, a: a[0],
    "extract": lambda n, a: sympy.floor(a[0] / 2 ** n.params[1]) if n.params[1] else a[0],
    "concat": lambda n, a: a[0] * 2 ** n.args[1].width + a[1],
    "lshr": _const_shift(lambda x, s: sympy.floor(x / 2 ** s)),
    "shl": _const_shift(lambda x, s: x * 2 ** s),
    "and": _and,
    "udiv": lambda n, a: sympy.floor(a[0] / a[1]),
    "urem": lambda n, a: sympy.Mod(a[0], a[1]),
    "ite": _ite,
}
require_backend("sympy display (addrsim.backends.sympy_text.SYMPY)", SYMPY)


def to_sympy(e: Expr, memo=None):
    """The integer reading of ``e`` (wraparound ignored), as a sympy expression."""
    return _post_order(e, {} if memo is None else memo, lambda n, a: SYMPY[n.op](n, a))


# ------------------------------------------------------------------ the no-wrap reading

def _extract_nowrap(n, a):
    lo = n.params[1]
    if lo == 0:
        return a[0]                            # a low half, or a truncation that does not wrap
    if lo % 32 == 0:
        return sympy.Integer(0)                # an upper dword of a split value
    return sympy.floor(a[0] / 2 ** lo)


def _addsub(sign):
    def f(n, a):
        b = signed_const(n.args[1])
        return a[0] + sign * (a[1] if b is None else b)
    return f


def _andor_nowrap(n, a):
    if n.width > 1:
        c = n.args[1] if isinstance(n.args[1], Const) else n.args[0]
        x = a[0] if c is n.args[1] else a[1]
        if n.op == "and" and isinstance(c, Const) and c.value & (c.value + 1) == 0:
            return x                           # a low mask: nothing above it when nothing wraps
        za, zb = n.args
        if n.op == "or" and (X.maxbits(za) <= X.lowzeros(zb) or X.maxbits(zb) <= X.lowzeros(za)):
            return a[0] + a[1]
    return None


def _cmp_nowrap(n, a):
    d = sympy.expand(a[0] - a[1])
    if d.is_nonnegative and (n.op == "ult" or d.is_positive):
        return sympy.Integer(0)
    if d.is_negative or (n.op == "ule" and d.is_nonpositive):
        return sympy.Integer(1)
    return sympy.Function(n.op)(*a)


NOWRAP = {
    **{op: None for op in OPS},      # None: the plain reading (to_sympy) of the node
    "extract": _extract_nowrap,
    "mulhu": lambda n, a: sympy.Integer(0),
    "add": _addsub(1),
    "sub": _addsub(-1),
    "mul": lambda n, a: a[0] * a[1],
    "zext": lambda n, a: a[0],
    "sext": lambda n, a: a[0],
    "concat": lambda n, a: a[0] * 2 ** n.args[1].width + a[1],
    "shl": _const_shift(lambda x, s: x * 2 ** s),
    "lshr": _const_shift(lambda x, s: sympy.floor(x / 2 ** s)),
    "and": _andor_nowrap,
    "or": _andor_nowrap,
    "ult": _cmp_nowrap,
    "ule": _cmp_nowrap,
    "ite": _ite,
}
require_backend("sympy no-wrap display (addrsim.backends.sympy_text.NOWRAP)", NOWRAP)


def readable(e):
    """``e`` (sympy) for display: a floor of an integer read as the integer (lane terms that
    cancel), expanded and its common factors taken out."""
    import sympy
    e = e.replace(lambda x: isinstance(x, sympy.floor) and x.args[0].is_integer, lambda x: x.args[0])
    return sympy.factor_terms(sympy.expand(e))


def to_sympy_nowrap(e: Expr, keep=None, memo=None):
    """The reading of ``e`` when no 32-bit value wraps, as a sympy expression, for the
    simplified differences of ``addrsim diff``: a 64-bit value split into 32-bit halves, or
    a product computed as ``s_mul_i32`` + ``s_mul_hi_u32`` (``keep``, from
    :func:`addrsim.backends.ideal.kept_wraps`), is read whole: the low half is the value, the
    high half and the carries between the halves are 0.  Display only: verdicts never come
    from it (a wrap is the prover's business, :mod:`addrsim.prove.wraps`)."""
    keep = kept_wraps([e]) if keep is None else keep

    def node(n, a):
        f = NOWRAP[n.op]
        r = f(n, a) if f is not None else None
        return to_sympy(n) if r is None else r

    return _post_order(e, {} if memo is None else memo, node)


#: The sympy classes a stored formula may be rebuilt from (:func:`from_tree`), by name: the
#: nodes :func:`to_sympy`, :func:`to_sympy_nowrap` and ``sympy.expand`` make of them.
_TREE_CLASSES = {c.__name__: c for c in (
    sympy.Add, sympy.Mul, sympy.Pow, sympy.Mod, sympy.floor, sympy.ceiling, sympy.Max, sympy.Min, sympy.Abs,
    sympy.Piecewise, sympy.functions.elementary.piecewise.ExprCondPair, sympy.StrictLessThan, sympy.LessThan,
    sympy.StrictGreaterThan, sympy.GreaterThan, sympy.Eq, sympy.Ne, sympy.And, sympy.Or, sympy.Not)}
_INT_NONNEG = sympy.Symbol("x", integer=True, nonnegative=True).assumptions0


def to_tree(e) -> object:
    """A sympy expression as nested lists of ints and strings, for a JSON store: ``["I", n]``,
    ``["Q", p, q]``, ``["S", name, kind]`` (kind 1: an integer >= 0, 0: no assumptions),
    ``["T"]``/``["F"]`` (true, false), ``["U", name, kind, args...]`` (an undefined function),
    ``[class name, args...]`` for :data:`_TREE_CLASSES`.  Raises ValueError for anything
    else (such a formula is not stored)."""
    if isinstance(e, sympy.Integer):
        return ["I", int(e)]
    if isinstance(e, sympy.Rational):
        return ["Q", int(e.p), int(e.q)]
    if isinstance(e, sympy.Symbol):
        if e.assumptions0 == _INT_NONNEG:
            return ["S", e.name, 1]
        if e.assumptions0 == {"commutative": True}:
            return ["S", e.name, 0]
        raise ValueError(f"symbol {e} with other assumptions")
    if e is sympy.true or e is sympy.false:
        return ["T"] if e is sympy.true else ["F"]
    f = e.func
    if isinstance(f, sympy.core.function.UndefinedFunction):
        kw = getattr(f, "_kwargs", {})
        kind = 1 if kw.get("integer") and kw.get("nonnegative") else 0 if not kw else None
        if kind is None:
            raise ValueError(f"function {f} with other assumptions")
        return ["U", f.__name__, kind] + [to_tree(a) for a in e.args]
    if _TREE_CLASSES.get(f.__name__) is not f:
        raise ValueError(f"no stored form for {f.__name__}")
    return [f.__name__] + [to_tree(a) for a in e.args]


def from_tree(t) -> object:
    """The sympy expression :func:`to_tree` gave ``t`` for (``e.func(*e.args) == e`` holds for
    every sympy expression).  Raises ValueError for a tree it did not make."""
    if not isinstance(t, list) or not t or not isinstance(t[0], str):
        raise ValueError("not a formula tree")
    tag, rest = t[0], t[1:]
    if tag == "I" and len(rest) == 1 and isinstance(rest[0], int):
        return sympy.Integer(rest[0])
    if tag == "Q" and len(rest) == 2 and all(isinstance(x, int) for x in rest) and rest[1] > 0:
        return sympy.Rational(rest[0], rest[1])
    if tag == "S" and len(rest) == 2 and isinstance(rest[0], str):
        return sympy.Symbol(rest[0], integer=True, nonnegative=True) if rest[1] == 1 else sympy.Symbol(rest[0])
    if tag in ("T", "F") and not rest:
        return sympy.true if tag == "T" else sympy.false
    if tag == "U" and len(rest) >= 2 and isinstance(rest[0], str):
        f = sympy.Function(rest[0], integer=True, nonnegative=True) if rest[1] == 1 else sympy.Function(rest[0])
        return f(*[from_tree(a) for a in rest[2:]])
    if tag in _TREE_CLASSES:
        return _TREE_CLASSES[tag](*[from_tree(a) for a in rest])
    raise ValueError(f"unknown formula node {tag!r}")
