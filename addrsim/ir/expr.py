"""Bit-vector expression IR shared by the semantics, the symbolic executor and the prover.

An expression is an immutable tree of :class:`Const`, :class:`Sym` and :class:`Op` nodes, each
with a width in bits (width 1 is a boolean).  The operators follow SMT-LIB's fixed-size
bit-vector theory (unsigned wraparound at ``width`` bits), which is also how the CDNA3/CDNA4
ALUs compute (AMD Instinct MI300 ISA Reference Guide, sections 4 "Scalar ALU operations" and
6 "Vector ALU operations": results are truncated to the destination width).

Every operator is declared once in :mod:`addrsim.ir.ops` with its exact meaning on Python
integers; the constructors below fold constants with it and :func:`evaluate` (the concrete
backend) computes with it, so the concrete interpreter and the symbolic executor cannot
disagree about what an operator means.  :data:`CONSTRUCT` (operator -> simplifying
constructor) is checked against the registry at import.

Constructors simplify a little (constant folding, neutral elements, extract/concat
fusion, masks that cannot change a value); everything else is left to the solver.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Tuple

from addrsim.ir import ops as _ops
from addrsim.ir.ops import FLOAT_OPS, OPS, mask, require_backend

to_signed = _ops.to_signed     # re-exported: the IR's users read X.mask, X.to_signed, X.FLOAT_OPS


class Expr:
    """Base class of IR nodes.  ``width`` is the size in bits (1 for booleans)."""

    __slots__ = ()
    width: int

    # operator sugar keeps semantics code short; all of it goes through the constructors
    def __add__(self, o): return add(self, _lift(o, self.width))
    def __sub__(self, o): return sub(self, _lift(o, self.width))
    def __mul__(self, o): return mul(self, _lift(o, self.width))
    def __and__(self, o): return and_(self, _lift(o, self.width))
    def __or__(self, o): return or_(self, _lift(o, self.width))


@dataclass(frozen=True, eq=False)
class Const(Expr):
    """A ``width``-bit constant; ``value`` is kept in [0, 2**width)."""

    value: int
    width: int

    def __post_init__(self):
        object.__setattr__(self, "value", self.value & mask(self.width))

    def __repr__(self):
        return f"{self.value:#x}:{self.width}" if self.value > 9 else f"{self.value}:{self.width}"


@dataclass(frozen=True, eq=False)
class Sym(Expr):
    """A named ``width``-bit unknown.

    ``kind`` says where it comes from: ``arg`` (a kernel argument from the metadata), ``ptr``
    (the 48-bit address held by a pointer argument), ``id`` (workgroup id), ``lane``
    (work-item id), ``shape`` (a problem dimension of a model), ``opaque`` (a value addrsim
    does not model: data loaded from memory, floating point, an unknown instruction; ``note``
    says which).
    """

    name: str
    width: int
    kind: str = "arg"
    note: str = ""

    def __repr__(self):
        return self.name


@dataclass(frozen=True, eq=False)
class Op(Expr):
    """Operator node.  ``params`` carries static operands (extract bounds, target widths)."""

    op: str
    args: Tuple[Expr, ...]
    width: int
    params: Tuple[int, ...] = ()
    _key: int = field(default=0, compare=False, repr=False)
    _mb: int = field(default=-1, compare=False, repr=False)     # cached maxbits
    _lz: int = field(default=-1, compare=False, repr=False)     # cached lowzeros

    def __repr__(self):
        p = f"{list(self.params)}" if self.params else ""
        return f"{self.op}{p}({', '.join(map(repr, self.args))})"


def _lift(o, width):
    return o if isinstance(o, Expr) else Const(int(o), width)


def select(array: Sym, offset: Expr) -> Expr:
    """The 32-bit word at byte ``offset`` (64-bit Expr) of the memory ``array`` (a Sym naming
    a kernel pointer argument or a model array): what an ``s_load_dword`` from a buffer the
    kernel reads (a sequence-start array) returns.  Concretely evaluated from
    ``env[array.name + "[]"]``, a dict offset -> value."""
    if offset.width != 64:
        raise ValueError("select offset must be 64 bits")
    return Op("sel", (array, offset), 32)


def fop(op: str, *args: Expr) -> Expr:
    """A binary32 operator node (``op`` in FLOAT_OPS); folds constants."""
    for a in args:
        if a.width != 32:
            raise ValueError(f"{op} needs 32-bit operands")
    return _mk(op, tuple(args), 32)


def _mk(op: str, args: Tuple[Expr, ...], width: int, params: Tuple[int, ...] = ()) -> Expr:
    for a in args:                  # a loop, not all(): the most called function of exploration
        if not isinstance(a, Const):
            return Op(op, args, width, params)
    meaning = OPS[op].meaning
    if meaning is None:             # sel reads memory: kept
        return Op(op, args, width, params)
    return Const(meaning([a.value for a in args], [a.width for a in args], params, width), width)


def _is(e: Expr, v: int) -> bool:
    return isinstance(e, Const) and e.value == (v & mask(e.width))


def maxbits(e: Expr) -> int:
    """An upper bound on the number of significant (possibly non-zero) low bits of ``e``
    (cached on the node: linear in the DAG, not the tree)."""
    if isinstance(e, Const):
        return e.value.bit_length()
    if isinstance(e, Sym):
        return e.width
    if e._mb < 0:
        object.__setattr__(e, "_mb", _maxbits(e))
    return e._mb


def _maxbits(e: Op) -> int:
    op, a = e.op, e.args
    if op == "zext":
        return maxbits(a[0])
    if op == "concat":
        return maxbits(a[1]) if _is(a[0], 0) else a[1].width + maxbits(a[0])
    if op == "and":
        return min(maxbits(a[0]), maxbits(a[1]))
    if op in ("or", "xor"):
        return max(maxbits(a[0]), maxbits(a[1]))
    if op == "lshr" and isinstance(a[1], Const):
        return max(maxbits(a[0]) - a[1].value, 0)
    if op == "shl" and isinstance(a[1], Const):
        return min(e.width, maxbits(a[0]) + a[1].value)
    if op == "add":
        return min(e.width, max(maxbits(a[0]), maxbits(a[1])) + 1)
    if op == "mul":
        return min(e.width, maxbits(a[0]) + maxbits(a[1]))
    if op == "extract":
        return min(e.width, max(maxbits(a[0]) - e.params[1], 0))
    if op == "ite":
        return max(maxbits(a[1]), maxbits(a[2]))
    if e.width == 1:
        return 1
    return e.width


def lowzeros(e: Expr) -> int:
    """A lower bound on the number of trailing zero bits of ``e`` (cached on the node)."""
    if isinstance(e, Const):
        return e.width if e.value == 0 else (e.value & -e.value).bit_length() - 1
    if isinstance(e, Sym):
        return 0
    if e._lz < 0:
        object.__setattr__(e, "_lz", _lowzeros(e))
    return e._lz


def _lowzeros(e: Op) -> int:
    op, a = e.op, e.args
    if op == "shl" and isinstance(a[1], Const):
        return min(e.width, lowzeros(a[0]) + a[1].value)
    if op == "mul":
        return min(e.width, lowzeros(a[0]) + lowzeros(a[1]))
    if op in ("add", "or", "xor", "ite"):
        return min(lowzeros(x) for x in (a if op != "ite" else a[1:]))
    if op == "and":
        return max(lowzeros(a[0]), lowzeros(a[1]))
    if op == "concat":
        return lowzeros(a[1]) if not _is(a[1], 0) else a[1].width + lowzeros(a[0])
    if op == "zext":
        return lowzeros(a[0])
    return 0


# --------------------------------------------------------------------------------------
# Constructors (with light simplification)
# --------------------------------------------------------------------------------------

def const(value: int, width: int) -> Const:
    return Const(value, width)


def add(a: Expr, b: Expr) -> Expr:
    _same(a, b)
    if _is(a, 0):
        return b
    if _is(b, 0):
        return a
    if isinstance(a, Const) and not isinstance(b, Const):
        a, b = b, a
    # (x + c1) + c2 -> x + (c1 + c2)
    if isinstance(b, Const) and isinstance(a, Op) and a.op == "add" and isinstance(a.args[1], Const):
        return add(a.args[0], _mk("add", (a.args[1], b), a.width))
    return _mk("add", (a, b), a.width)


def sub(a: Expr, b: Expr) -> Expr:
    _same(a, b)
    if _is(b, 0):
        return a
    if a is b:
        return Const(0, a.width)
    return _mk("sub", (a, b), a.width)


def mul(a: Expr, b: Expr) -> Expr:
    _same(a, b)
    if isinstance(a, Const) and not isinstance(b, Const):
        a, b = b, a
    if _is(b, 0):
        return Const(0, a.width)
    if _is(b, 1):
        return a
    return _mk("mul", (a, b), a.width)


def mulhu(a: Expr, b: Expr) -> Expr:
    _same(a, b)
    if _is(a, 0) or _is(b, 0):
        return Const(0, a.width)
    if maxbits(a) + maxbits(b) <= a.width:
        return Const(0, a.width)
    return _mk("mulhu", (a, b), a.width)


def mulhs(a: Expr, b: Expr) -> Expr:
    _same(a, b)
    return _mk("mulhs", (a, b), a.width)


def and_(a: Expr, b: Expr) -> Expr:
    _same(a, b)
    if isinstance(a, Const) and not isinstance(b, Const):
        a, b = b, a
    if _is(b, 0):
        return Const(0, a.width)
    if isinstance(b, Const):
        m, w = b.value, a.width
        known_zero = (~mask(maxbits(a)) | mask(lowzeros(a))) & mask(w)
        if (~m & mask(w)) & ~known_zero == 0:      # the mask only clears bits already zero
            return a
    if a is b:
        return a
    if isinstance(b, Const) and isinstance(a, Op) and a.op == "and" and isinstance(a.args[1], Const):
        return and_(a.args[0], Const(a.args[1].value & b.value, a.width))   # (x & c1) & c2
    return _mk("and", (a, b), a.width)


def or_(a: Expr, b: Expr) -> Expr:
    _same(a, b)
    if isinstance(a, Const) and not isinstance(b, Const):
        a, b = b, a
    if _is(b, 0):
        return a
    if _is(b, -1):
        return b
    if a is b:
        return a
    return _mk("or", (a, b), a.width)


def xor(a: Expr, b: Expr) -> Expr:
    _same(a, b)
    if _is(b, 0):
        return a
    if _is(a, 0):
        return b
    return _mk("xor", (a, b), a.width)


def not_(a: Expr) -> Expr:
    return _mk("not", (a,), a.width)


def shl(a: Expr, s: Expr) -> Expr:
    """``a << s`` with ``s`` already reduced by the caller; shifts >= width give 0."""
    s = _fit(s, a.width)
    if _is(s, 0):
        return a
    return _mk("shl", (a, s), a.width)


def lshr(a: Expr, s: Expr) -> Expr:
    s = _fit(s, a.width)
    if _is(s, 0):
        return a
    if isinstance(s, Const) and maxbits(a) <= s.value:
        return Const(0, a.width)
    return _mk("lshr", (a, s), a.width)


def ashr(a: Expr, s: Expr) -> Expr:
    s = _fit(s, a.width)
    if _is(s, 0):
        return a
    return _mk("ashr", (a, s), a.width)


def zext(a: Expr, width: int) -> Expr:
    if width == a.width:
        return a
    assert width > a.width, (width, a.width)
    if isinstance(a, Op) and a.op == "zext":
        return zext(a.args[0], width)
    return _mk("zext", (a,), width)


def sext(a: Expr, width: int) -> Expr:
    if width == a.width:
        return a
    assert width > a.width
    return _mk("sext", (a,), width)


def extract(a: Expr, hi: int, lo: int, _memo: Optional[dict] = None) -> Expr:
    """Bits ``hi``..``lo`` (inclusive) of ``a``.  Pushed through concat, zext, bitwise
    operators, ite and the low bits of add/sub/mul, once per (node, bits) within one call
    (``_memo``): without it a DAG whose nodes are shared (the byte permutes of a bf16 packing
    loop, gfx942 a32_rtne_psskddv) became a tree, and a scan worker grew past 20 GB."""
    w = hi - lo + 1
    assert 0 <= lo <= hi < a.width, (hi, lo, a.width)
    if lo == 0 and w == a.width:
        return a
    if not isinstance(a, Op):
        return Const(0, w) if lo >= maxbits(a) and not isinstance(a, Const) else _mk("extract", (a,), w, (hi, lo))
    memo = {} if _memo is None else _memo
    key = (id(a), hi, lo)
    if key not in memo:
        memo[key] = (a, _extract_op(a, hi, lo, w, memo))
    return memo[key][1]


def _extract_op(a: Op, hi: int, lo: int, w: int, memo: dict) -> Expr:
    """:func:`extract` of an operator node."""
    part = lambda e, h, l: extract(e, h, l, memo)  # noqa: E731,E741
    if a.op == "extract":
        return part(a.args[0], hi + a.params[1], lo + a.params[1])
    if a.op == "concat":
        h, l = a.args
        if hi < l.width:
            return part(l, hi, lo)
        if lo >= l.width:
            return part(h, hi - l.width, lo - l.width)
    if a.op == "zext":
        inner = a.args[0]
        if hi < inner.width:
            return part(inner, hi, lo)
        if lo >= inner.width:
            return Const(0, w)
        return zext(part(inner, inner.width - 1, lo), w)
    if a.op in ("and", "or", "xor"):
        return {"and": and_, "or": or_, "xor": xor}[a.op](part(a.args[0], hi, lo), part(a.args[1], hi, lo))
    if a.op in ("add", "sub", "mul") and lo == 0:
        f = {"add": add, "sub": sub, "mul": mul}[a.op]
        return f(part(a.args[0], hi, 0), part(a.args[1], hi, 0))
    if a.op == "ite":
        return ite(a.args[0], part(a.args[1], hi, lo), part(a.args[2], hi, lo))
    if lo >= maxbits(a):
        return Const(0, w)
    return _mk("extract", (a,), w, (hi, lo))


def concat(hi: Expr, lo: Expr) -> Expr:
    """``hi`` in the upper bits, ``lo`` in the lower bits."""
    if isinstance(hi, Op) and hi.op == "extract" and isinstance(lo, Op) and lo.op == "extract":
        if hi.args[0] is lo.args[0] and hi.params[1] == lo.params[0] + 1:
            return extract(hi.args[0], hi.params[0], lo.params[1])
    if _is(hi, 0):
        return zext(lo, hi.width + lo.width)
    if isinstance(hi, Op) and hi.op == "zext":   # zero high bits stay zero
        return zext(concat(hi.args[0], lo), hi.width + lo.width)
    return _mk("concat", (hi, lo), hi.width + lo.width)


def fold_carries(e: Expr, memo: Optional[dict] = None) -> Expr:
    """``e`` with every 64-bit (generally, double-word) carry chain written as one sum:
    ``concat(H + zext(carry), A + B)``, where ``carry`` is ``ult(A + B, A)`` (the SCC of
    ``s_add_u32``, the VCC of ``v_add_co_u32``, consumed by ``s_addc_u32``/``v_addc_co_u32``:
    MI300 ISA guide, 4.2 SALU and 6.2 VALU), is ``concat(H, B) + zext(A)``; ``concat`` of
    the high and low parts of one value ``E`` is ``E``; and a high word used alone (a V#'s
    stride field) is bits 32 and up of the folded sum.  Equal in bit-vector arithmetic for
    every value (tests/test_nowrap.py checks it at random points); it leaves a formula the
    solvers decide by ring arithmetic (:func:`addrsim.ir.poly.ring_identity`) where
    bit-blasting the adders costs seconds (a loop's pointer step).  Linear in the DAG, times
    at most 2**8 orientations tried per pair (8 carries deep)."""
    return _fold_high_words(_fold_concats(e, {} if memo is None else memo), {})


def _fold_concats(e: Expr, memo: dict) -> Expr:
    k = id(e)
    if k in memo:
        return memo[k][1]
    if isinstance(e, Op):
        args = tuple(_fold_concats(a, memo) for a in e.args)
        r = _fold_pair(args[0], args[1], memo.setdefault("digest", {}), 8) if e.op == "concat" else rebuild(e, args)
        if isinstance(r, Op) and r.op == e.op and all(x is y for x, y in zip(r.args, e.args)):
            r = e         # nothing folded: keep the node (its identity names its instruction)
    else:
        r = e
    memo[k] = (e, r)
    return r


def _fold_high_words(e: Expr, memo: dict) -> Expr:
    """A high word ``H + zext(ult(A + B, A))`` used on its own (a V#'s stride field read from
    word 1 after the base was advanced) as the high half of the folded double-word sum."""
    k = id(e)
    if k in memo:
        return memo[k][1]
    r = e
    if isinstance(e, Op):
        r = rebuild(e, tuple(_fold_high_words(a, memo) for a in e.args))
        low = _carried_low(r) if isinstance(r, Op) and r.op == "add" else None
        if low is not None:
            whole = _fold_pair(r, low, memo.setdefault("digest", {}), 8)
            if not (isinstance(whole, Op) and whole.op == "concat"):
                r = extract(whole, whole.width - 1, low.width)
    memo[k] = (e, r)
    return r


def _carry_of(z: Expr):
    """(S, A) when ``z`` is ``zext(ult(S, A))``, the carry of a sum S as ``s_add_u32`` writes
    it (A an operand of S, checked by the caller), else None."""
    c = z.args[0] if isinstance(z, Op) and z.op == "zext" else None
    if isinstance(c, Op) and c.op == "ult" and c.width == 1:
        return c.args[0], c.args[1]
    return None


def _carried_low(hi: Op) -> Optional[Expr]:
    """The low word ``A + B`` whose carry ``hi`` adds, or None."""
    for z in hi.args:
        sa = _carry_of(z)
        if sa and isinstance(sa[0], Op) and sa[0].op == "add":
            return sa[0]          # :func:`_fold_pair` reads it as a sum, or leaves the pair
    return None


def _operand_pairs(lo: Op, a: Expr, dmemo: dict):
    """The ways (keep, out) to read the low word ``lo`` as ``keep + out`` for a carry
    ``ult(lo, a)``: ``a`` one of lo's operands (either may leave the pair), or ``a`` a
    constant c, read as ``(lo - c) + c``.  The second is the carry of a chain whose
    constant steps were merged by :func:`add` (three ``s_add_u32 s, s, 0x1000`` leave
    ``x + 0x3000`` with the carries ``ult(x + 0x1000, 0x1000)``, ``ult(x + 0x2000, 0x1000)``,
    ...): ``S < c`` is the carry of ``(S - c) + c`` for every S, so the reading is exact."""
    if any(_same_tree(a, x, dmemo) for x in lo.args):
        yield lo.args[1], lo.args[0]
        yield lo.args[0], lo.args[1]
    elif isinstance(a, Const) and a.value:
        yield add(lo, Const(-a.value, lo.width)), a
    else:       # ult(x + 0x2000, x + 0x1000): the carry of a + (lo - a), lo - a a constant
        from addrsim.ir.poly import add as padd, ring
        memo = {"digest": dmemo}
        pl, pa = ring(lo, lo.width, memo), ring(a, lo.width, memo)
        d = None if pl is None or pa is None else padd(pl, pa, -1)
        if d is not None and set(d) <= {()}:
            yield a, Const(d.get((), 0), lo.width)


def _low_bits(e: Expr, w: int) -> Expr:
    """The low ``w`` bits of ``e`` with the truncation pushed through the ring operations
    (``add``, ``sub``, ``mul``: the low bits of a sum are the sum of the low bits) and
    ``zext``/``concat`` (the low word of a 48-bit base ``K + zext(off)`` is ``K[31:0] + off``)."""
    if e.width == w:
        return e
    if isinstance(e, Const):
        return Const(e.value & mask(w), w)
    if isinstance(e, Op) and e.op in ("add", "sub", "mul"):
        return {"add": add, "sub": sub, "mul": mul}[e.op](_low_bits(e.args[0], w), _low_bits(e.args[1], w))
    if isinstance(e, Op) and e.op == "zext" and e.args[0].width >= w:
        return _low_bits(e.args[0], w)
    if isinstance(e, Op) and e.op == "zext":
        return zext(e.args[0], w)
    if isinstance(e, Op) and e.op == "concat" and e.args[1].width >= w:
        return _low_bits(e.args[1], w)
    return extract(e, w - 1, 0)


def _same_tree(a: Expr, b: Expr, dmemo: dict) -> bool:
    """Structurally equal, or two sums equal as polynomials modulo 2**width (a low-bits
    ``extract`` of a sum read as the sum of the low bits, :func:`_low_bits`)."""
    if a is b or (a.width == b.width and digest(a, dmemo) == digest(b, dmemo)):
        return True
    a, b = (_low_bits(x.args[0], x.width) if isinstance(x, Op) and x.op == "extract" and x.params[1] == 0
            else x for x in (a, b))
    if not (isinstance(a, Op) and isinstance(b, Op) and a.op == b.op == "add" and a.width == b.width):
        return False
    from addrsim.ir.poly import ring        # sums: equal as polynomials mod 2**width
    pa, pb = ring(a, a.width, {"digest": dmemo}), ring(b, b.width, {"digest": dmemo})
    return pa is not None and pa == pb


def _fold_pair(hi: Expr, lo: Expr, dmemo: dict, depth: int) -> Expr:
    """:func:`concat` of ``hi`` and ``lo`` with the carries of :func:`fold_carries` folded."""
    w = hi.width + lo.width
    if isinstance(hi, Op) and hi.op == "extract" and hi.params == (hi.args[0].width - 1, lo.width) \
            and _same_tree(extract(hi.args[0], lo.width - 1, 0), lo, dmemo):
        return hi.args[0]
    if depth and isinstance(hi, Op) and hi.op == "add" and isinstance(lo, Op) and lo.op == "add":
        for h, z in ((hi.args[0], hi.args[1]), (hi.args[1], hi.args[0])):
            sa = _carry_of(z)
            if not (sa and _same_tree(sa[0], lo, dmemo)):
                continue
            # the carry of lo = A + B: either operand may leave the pair (the value is
            # H * 2**32 + A + B); keep the one whose own carry is in H, so chains fold
            plain = None
            for keep, out in _operand_pairs(lo, sa[1], dmemo):
                inner = _fold_pair(h, keep, dmemo, depth - 1)
                r = add(inner, zext(out, w))
                if not (isinstance(inner, Op) and inner.op == "concat"):
                    return r
                plain = plain or r
            if plain is not None:
                return plain
    return concat(hi, lo)


def ite(c: Expr, a: Expr, b: Expr) -> Expr:
    _same(a, b)
    assert c.width == 1
    if isinstance(c, Const):
        return a if c.value else b
    if a is b or (isinstance(a, Const) and isinstance(b, Const) and a.value == b.value):
        return a
    if a.width == 1 and _is(a, 1) and _is(b, 0):
        return c
    return _mk("ite", (c, a, b), a.width)


def eq(a, b):
    _same(a, b)
    if a is b:
        return Const(1, 1)
    return _mk("eq", (a, b), 1)


def ult(a, b):
    _same(a, b)
    if _is(b, 0):
        return Const(0, 1)          # nothing is below 0 unsigned
    return _mk("ult", (a, b), 1)


def ule(a, b): _same(a, b); return _mk("ule", (a, b), 1)
def slt(a, b): _same(a, b); return _mk("slt", (a, b), 1)
def sle(a, b): _same(a, b); return _mk("sle", (a, b), 1)


def bnot(c: Expr) -> Expr:
    if isinstance(c, Op) and c.op == "xor" and c.width == 1 and _is(c.args[1], 1):
        return c.args[0]
    return xor(c, Const(1, 1))


def band(a: Expr, b: Expr) -> Expr: return and_(a, b)
def bor(a: Expr, b: Expr) -> Expr: return or_(a, b)


def udiv(a, b): _same(a, b); return _mk("udiv", (a, b), a.width)
def urem(a, b): _same(a, b); return _mk("urem", (a, b), a.width)


def _same(a: Expr, b: Expr):
    if a.width != b.width:
        raise ValueError(f"width mismatch: {a!r} is {a.width} bits, {b!r} is {b.width} bits")


def _fit(s: Expr, width: int) -> Expr:
    if s.width == width:
        return s
    if s.width < width:
        return zext(s, width)
    if isinstance(s, Const):
        return Const(min(s.value, mask(width)), width)
    return ite(ult(s, Const(width, s.width)), extract(s, width - 1, 0), Const(mask(width), width))


# --------------------------------------------------------------------------------------
# Traversal helpers
# --------------------------------------------------------------------------------------

def conjuncts(conds: Iterable[Expr]) -> List[Op]:
    """The 1-bit operator nodes among ``conds`` and, flattened, the conjuncts of their 1-bit
    ``and`` (in no particular order); constants, symbols and wider nodes are left out."""
    out: List[Op] = []
    work = list(conds)
    while work:
        c = work.pop()
        if not isinstance(c, Op) or c.width != 1:
            continue
        if c.op == "and":
            work.extend(c.args)
        else:
            out.append(c)
    return out


def walk(e: Expr) -> Iterable[Expr]:
    """Every node of ``e`` once (by identity), parents before children."""
    seen = set()
    stack = [e]
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        yield n
        if isinstance(n, Op):
            stack.extend(n.args)


def digest(e: Expr, memo: Optional[dict] = None, rename: Optional[Dict[str, str]] = None) -> bytes:
    """A stable structural digest of ``e`` (16 bytes of BLAKE2b): equal trees give equal
    digests whatever their sharing, in every process and run (unlike :func:`shash`, which uses
    Python's per-process ``hash``).  ``rename`` (optional) maps symbol names to the names the
    digest uses (a bijection, :func:`canonical_names`; give the same one with a shared
    ``memo``).  Linear in the number of distinct nodes."""
    memo = {} if memo is None else memo
    rename = rename or {}
    stack = [(e, False)]
    while stack:
        n, done = stack.pop()
        k = id(n)
        if k in memo:
            continue
        if isinstance(n, Const):
            text = f"c{n.width}:{n.value}".encode()
        elif isinstance(n, Sym):
            text = f"s{n.width}:{n.kind}:{rename.get(n.name, n.name)}".encode()
        elif done:
            text = f"o{n.op}:{n.width}:{n.params}".encode() + b"".join(memo[id(a)] for a in n.args)
        else:
            stack.append((n, True))
            stack.extend((a, False) for a in n.args if id(a) not in memo)
            continue
        memo[k] = hashlib.blake2b(text, digest_size=16).digest()
    return memo[id(e)]


_CODE_ADDR = re.compile(r"@0x[0-9a-f]+")
_OPAQUE = re.compile(r"opaque(\d+)")


_RENAMED = ("carried", "opaque", "ptr")     # the symbol kinds canonical_names renames


def canonical_names(es: Iterable[Expr], rest: Iterable[Expr] = ()) -> Dict[str, str]:
    """Names for the symbols of ``es`` that do not depend on where the code lies: in every
    loop-carried symbol (kind "carried") the loop head's address ``@0x6048`` becomes its rank
    among the heads these symbols name (``@L0``, ``@L1``, ...), and each opaque value
    (``opaque17``) its rank among the opaque numbers (``opaque#0``, ...), and each buffer
    pointer argument (kind "ptr") its rank among the pointers' names (``ptr#0``, ...).  A
    bijection on the symbols of ``es`` (each part changes by an injective map, and no other
    name has ``#`` or ``@L``), so a query and its renaming are the same query up to the names
    of its free variables: sibling kernels whose code moved by a few instructions, and
    buffers addressed alike (dK and dV, Q and dO), get the same key, and a model of one
    translates to the other (:func:`rename_model`).  Other symbols keep their names.
    ``rest``: more expressions (a query's conditions) whose symbols that ``es`` lacks are
    ranked after, among themselves (``opaque#c0``, ``@Lc0``, ``ptr#c0``): the names of
    ``es`` do not depend on ``rest``, and the whole map stays a bijection."""
    first = {v.name: v for e in es for v in symbols(e).values() if v.kind in _RENAMED}
    out = _ranked(first.values(), "")
    more = {v.name: v for e in rest for v in symbols(e).values() if v.kind in _RENAMED and v.name not in first}
    out.update(_ranked(more.values(), "c"))
    return out


def _ranked(syms, tag: str) -> Dict[str, str]:
    """:func:`canonical_names` of the symbols ``syms``, each rank written after ``tag``."""
    heads = sorted({int(m[3:], 16) for v in syms for m in _CODE_ADDR.findall(v.name)})
    nums = sorted({int(m) for v in syms if v.kind == "opaque" for m in _OPAQUE.findall(v.name)})
    hrank = {h: i for i, h in enumerate(heads)}
    nrank = {n: i for i, n in enumerate(nums)}
    ptrs = sorted(v.name for v in syms if v.kind == "ptr")
    out = {p: f"ptr#{tag}{i}" for i, p in enumerate(ptrs)}
    for v in syms:
        if v.kind == "ptr":
            continue
        name = _CODE_ADDR.sub(lambda m: f"@L{tag}{hrank[int(m.group(0)[3:], 16)]}", v.name)
        if v.kind == "opaque":
            name = _OPAQUE.sub(lambda m: f"opaque#{tag}{nrank[int(m.group(1))]}", name)
        if name != v.name:
            out[v.name] = name
    return out


def equal_symbols(conds: Iterable[Expr]) -> Dict[str, str]:
    """Symbol name -> the name of its class, for the symbols that an ``eq`` conjunct of
    ``conds`` (:func:`conjuncts`) sets equal to another symbol of the same width and kind
    (each class named by its least name): wherever ``conds`` hold, the two are one value,
    so a query over ``conds`` is the same query with every name of a class replaced by the
    class's (gfx950 psskddv kernels build K's stride from hdim_q and V's from hdim_v, which
    their domain sets equal)."""
    parent: Dict[str, str] = {}

    def find(s: str) -> str:
        while parent.get(s, s) != s:
            s = parent[s]
        return s
    for c in conjuncts(conds):
        if c.op != "eq":
            continue
        a, b = c.args
        if isinstance(a, Sym) and isinstance(b, Sym) and (a.width, a.kind) == (b.width, b.kind):
            ra, rb = sorted((find(a.name), find(b.name)))
            if ra != rb:
                parent[rb] = ra
    return {s: find(s) for s in parent}


def rename_model(model: Optional[dict], names: Dict[str, str]) -> Optional[dict]:
    """``model`` (symbol name -> value; a sequence-start array as ``name[]``) with its keys
    mapped by ``names``; keys ``names`` does not mention are kept."""
    if model is None:
        return None
    out = {}
    for k, v in model.items():
        base, arr = (k[:-2], "[]") if k.endswith("[]") else (k, "")
        out[names.get(base, base) + arr] = v
    return out


def shash(e: Expr, memo: Optional[dict] = None) -> int:
    """Structural hash of ``e`` (equal trees hash equal, whatever their sharing); linear in
    the number of distinct nodes."""
    memo = {} if memo is None else memo
    stack = [(e, False)]
    while stack:
        n, done = stack.pop()
        k = id(n)
        if k in memo:
            continue
        if isinstance(n, Const):
            memo[k] = hash(("c", n.value, n.width))
        elif isinstance(n, Sym):
            memo[k] = hash(("s", n.name, n.width, n.kind))
        elif done:
            memo[k] = hash((n.op, n.width, n.params) + tuple(memo[id(a)] for a in n.args))
        else:
            stack.append((n, True))
            stack.extend((a, False) for a in n.args if id(a) not in memo)
    return memo[id(e)]


def symbols(e: Expr) -> Dict[str, Sym]:
    return {n.name: n for n in walk(e) if isinstance(n, Sym)}


def substitute(e: Expr, env: Dict[str, Expr], memo: Optional[dict] = None) -> Expr:
    """Replace symbols by name with expressions of the same width, re-simplifying."""
    memo = {} if memo is None else memo
    k = id(e)
    if k in memo:
        return memo[k][1]
    if isinstance(e, Sym):
        r = env.get(e.name, e)
        if r.width != e.width:
            raise ValueError(f"substitution for {e.name} has width {r.width}, expected {e.width}")
    elif isinstance(e, Const):
        r = e
    else:
        args = tuple(substitute(a, env, memo) for a in e.args)
        r = rebuild(e, args)
    memo[k] = (e, r)
    return r


def rebuild(e: Op, args: Tuple[Expr, ...]) -> Expr:
    """The node ``e`` with new arguments, through the simplifying constructors."""
    if all(x is y for x, y in zip(args, e.args)):
        return e
    return CONSTRUCT[e.op](e, args)


def _keep(e: Op, args):
    return _mk(e.op, args, e.width, e.params)


def _binary(f):
    return lambda e, args: f(*args)


CONSTRUCT = {
    **{n: _binary(f) for n, f in (
        ("add", add), ("sub", sub), ("mul", mul), ("mulhu", mulhu), ("mulhs", mulhs), ("and", and_),
        ("or", or_), ("xor", xor), ("shl", shl), ("lshr", lshr), ("ashr", ashr), ("concat", concat),
        ("eq", eq), ("ult", ult), ("ule", ule), ("slt", slt), ("sle", sle), ("udiv", udiv), ("urem", urem),
        ("ite", ite))},
    "not": lambda e, args: not_(args[0]),
    "zext": lambda e, args: zext(args[0], e.width),
    "sext": lambda e, args: sext(args[0], e.width),
    "extract": lambda e, args: extract(args[0], *e.params),
    "sel": _keep,
    **{n: _keep for n in FLOAT_OPS},
}
require_backend("constructors (addrsim.ir.expr)", CONSTRUCT)


def evaluate(e: Expr, env: Dict[str, int], memo: Optional[dict] = None) -> int:
    """Concrete value of ``e`` given integer values for its symbols.

    Raises KeyError naming the first symbol without a value."""
    memo = {} if memo is None else memo
    k = id(e)
    if k in memo:
        return memo[k]
    if isinstance(e, Const):
        v = e.value
    elif isinstance(e, Sym):
        v = env[e.name] & mask(e.width)
    else:
        if e.op == "ite":
            c = evaluate(e.args[0], env, memo)
            v = evaluate(e.args[1] if c else e.args[2], env, memo)
        elif e.op == "sel":
            off = evaluate(e.args[1], env, memo)
            v = env[e.args[0].name + "[]"].get(off, 0) & mask(32)
        else:
            vals = [evaluate(a, env, memo) for a in e.args]
            v = OPS[e.op].meaning(vals, [a.width for a in e.args], e.params, e.width)
    memo[k] = v
    return v
