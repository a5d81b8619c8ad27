"""The two arithmetic modes, and where a machine result leaves the ideal one.

``bv`` is what the hardware computes: every IR operator truncates to its width (the MI300 /
CDNA4 ISA guides, chapters 4 and 6: SALU and VALU integer results are truncated to the
destination), and the host's ``u32(...)`` casts truncate the byte strides it passes.

``int`` is the same program over unbounded integers, the reading a kernel engineer has in
mind when writing ``batch_id * BAs >> 6``:

* ``add``, ``sub``, ``mul``, ``shl`` by a constant, and truncations (``extract`` of the low
  bits of a value, e.g. the host's ``u32`` cast) are exact: nothing wraps.
* Multiword arithmetic keeps its meaning.  A value split into 32-bit halves (a 48-bit pointer,
  the result of ``v_mad_u64_u32``) has exact halves: the low half is the value modulo 2**32
  and the high half the rest, so ``concat`` of the two is the whole value.  A 32-bit product
  whose high half is also computed (``s_mul_i32`` next to ``s_mul_hi_u32`` on the same
  operands) is a low half too.  Carries (``s_add_u32``'s SCC) are then 0, and the pair is the
  exact sum.
* An added or subtracted constant with its sign bit set is negative (``s_add_u32 s0, s0,
  -64`` is a subtraction), as the assembler's sign-extended immediates mean.
* Comparisons compare the exact values; bit operations the integers have no exact reading
  for (``xor``, variable shifts, ...) apply the hardware operator to the operands reduced to
  the node's width.

:func:`kept_wraps` finds the multiword low halves and :func:`ideal_eval` evaluates an expression
in ``int`` mode on concrete values (the reference the Z3 encoding of
:class:`addrsim.backends.z3_int.IntEncoder` with ``ideal=True`` is checked against; its table
:data:`IDEAL` is checked against the operator registry at import).
:func:`addrsim.prove.wraps.wrap_sites` finds, on a counterexample, the nodes whose machine
result leaves the exact one: the instruction that wraps.

May import addrsim.ir only.
"""
from __future__ import annotations

from typing import Dict, Iterable, List, Optional, Set, Tuple

from addrsim.ir import expr as X
from addrsim.ir.expr import Const, Expr, Op, Sym
from addrsim.ir.ops import FLOAT_OPS, OPS, require_backend

ARITH_MODES = ("bv", "int")


def kept_wraps(exprs: Iterable[Expr]) -> Set[int]:
    """Ids of the nodes of ``exprs`` that are the low half of a multiword value and so keep
    their truncation in ``int`` mode: ``extract(e, k, 0)`` where the upper bits of ``e`` are
    also extracted, and ``mul(a, b)`` where ``mulhu(a, b)`` (same operands, structurally) also
    occurs."""
    split: Set[int] = set()
    hi_products: Set[Tuple[int, int]] = set()
    nodes: List[Op] = []
    hm: dict = {}
    for e in exprs:
        for n in X.walk(e):
            if not isinstance(n, Op):
                continue
            if n.op == "extract" and n.params[1] > 0:
                split.add(X.shash(n.args[0], hm))
            elif n.op == "mulhu":
                a, b = (X.shash(x, hm) for x in n.args)
                hi_products.update({(a, b), (b, a)})
            elif n.op in ("extract", "mul"):
                nodes.append(n)
    keep = set()
    for n in nodes:
        if n.op == "extract" and X.shash(n.args[0], hm) in split:
            keep.add(id(n))
        elif n.op == "mul" and (X.shash(n.args[0], hm), X.shash(n.args[1], hm)) in hi_products:
            keep.add(id(n))
    return keep


def signed_const(c: Expr) -> Optional[int]:
    """The value of a constant operand read as a sign-extended immediate, else None."""
    if isinstance(c, Const):
        return X.to_signed(c.value, c.width) if c.width > 1 else c.value
    return None


def ideal_eval(e: Expr, env: Dict[str, int], keep: Set[int], memo: Optional[dict] = None) -> int:
    """Value of ``e`` in ``int`` mode (see the module docstring) on concrete symbol values
    ``env`` (as for :func:`addrsim.ir.expr.evaluate`; arrays as ``name + "[]"``).  ``keep``
    from :func:`kept_wraps`.  Raises KeyError naming a symbol without a value."""
    memo = {} if memo is None else memo
    stack = [(e, False)]
    while stack:
        n, ready = stack.pop()
        k = id(n)
        if k in memo:
            continue
        if isinstance(n, Const):
            memo[k] = n.value
            continue
        if isinstance(n, Sym):
            memo[k] = env[n.name]      # not masked: an exact value may exceed the symbol's width
            continue
        if not ready:
            stack.append((n, True))
            stack.extend((a, False) for a in n.args if id(a) not in memo)
            continue
        memo[k] = _ideal_op(n, [memo[id(a)] for a in n.args], keep)
    return memo[id(e)]


def _ideal_op(n: Op, a: List[int], keep: Set[int]) -> int:
    if id(n) in keep:
        return _machine(n, a)
    return IDEAL[n.op](n, a)


def _machine(n: Op, a: List[int]) -> int:
    """The hardware operator on the operands reduced to their widths."""
    return OPS[n.op].meaning([v & X.mask(x.width) for v, x in zip(a, n.args)], [x.width for x in n.args],
                             n.params, n.width)


def _add(n, a):
    b, c = signed_const(n.args[1]), signed_const(n.args[0])
    return (a[0] if c is None else c) + (a[1] if b is None else b)


def _sub(n, a):
    b = signed_const(n.args[1])
    return a[0] - (a[1] if b is None else b)


def _by_const(f):
    """A shift by a constant below the width is exact; others are the machine's (0 at >= width)."""
    return lambda n, a: f(a[0], n.args[1].value) if isinstance(n.args[1], Const) and n.args[1].value < n.width \
        else _machine(n, a)


def _div(f):
    return lambda n, a: f(a[0], a[1]) if a[1] > 0 else _machine(n, a)


def _and(n, a):
    w = n.width
    if w > 1:
        for x, c in ((a[0], n.args[1]), (a[1], n.args[0])):
            if isinstance(c, Const):
                m = c.value
                if m & (m + 1) == 0:
                    return x & m                       # low mask: exact reading x mod 2**k
                low = (~m) & X.mask(w)
                if low & (low + 1) == 0 and m == X.mask(w) & ~low:
                    return x - (x & low)               # clears the low bits: exact
    return _machine(n, a)


def _or_xor(n, a):
    za, zb = n.args
    if n.width > 1 and (X.maxbits(za) <= X.lowzeros(zb) or X.maxbits(zb) <= X.lowzeros(za)):
        return a[0] + a[1]                             # disjoint bits: a sum
    return _machine(n, a)


def _sel(n, a):
    raise KeyError(n.args[0].name + "[]")            # arrays are read by ideal_evaluate


IDEAL = {
    "add": _add, "sub": _sub, "mul": lambda n, a: a[0] * a[1],
    "mulhu": lambda n, a: (a[0] * a[1]) >> n.width, "mulhs": _machine,
    "and": _and, "or": _or_xor, "xor": _or_xor, "not": _machine,
    "shl": _by_const(lambda x, s: x << s), "lshr": _by_const(lambda x, s: x >> s), "ashr": _machine,
    "zext": lambda n, a: a[0], "sext": lambda n, a: a[0],
    "extract": lambda n, a: a[0] >> n.params[1] if n.params[1] else a[0],
    "concat": lambda n, a: (a[0] << n.args[1].width) + a[1],
    "ite": lambda n, a: a[1] if a[0] else a[2],
    "eq": lambda n, a: int(a[0] == a[1]),
    "ult": lambda n, a: int(a[0] < a[1]), "slt": lambda n, a: int(a[0] < a[1]),
    "ule": lambda n, a: int(a[0] <= a[1]), "sle": lambda n, a: int(a[0] <= a[1]),
    "udiv": _div(lambda x, d: x // d), "urem": _div(lambda x, d: x % d),
    "sel": _sel, **{op: _machine for op in FLOAT_OPS},
}
require_backend("exact integer, int mode (addrsim.backends.ideal)", IDEAL)


def ideal_evaluate(e: Expr, env: Dict[str, int], keep: Set[int], memo: Optional[dict] = None) -> int:
    """:func:`ideal_eval` that also reads ``sel`` (array) nodes from ``env``."""
    memo = {} if memo is None else memo
    for n in X.walk(e):
        if isinstance(n, Op) and n.op == "sel":
            off = ideal_evaluate(n.args[1], env, keep, memo)
            memo[id(n)] = env[n.args[0].name + "[]"].get(off & X.mask(64), 0) & X.mask(32)
    return ideal_eval(e, env, keep, memo)


