"""Translations of the expression IR to Z3.

* :func:`to_bv`: exact, over Z3 bit-vectors (what the hardware computes).
* :class:`IntEncoder`: exact too, over Z3 integers: every ``w``-bit operation whose result
  could leave [0, 2**w) is wrapped in ``mod 2**w``; interval analysis over the domain bounds
  drops the ``mod`` where no wrap is possible, which is what makes nonlinear address
  identities provable (DOMAIN.md section 6).  Bit operations without an exact integer form
  (``and``/``or``/``xor`` with arbitrary operands, variable shifts) become fresh bounded
  integers and the encoding is marked ``abstracted``: then "unsat" is still a proof, but a
  model must be checked on the bit-vector side before it is believed.
"""
from __future__ import annotations

from typing import Dict, Tuple

import z3

from addrsim.ir import expr as X
from addrsim.ir.expr import Const, Expr, Op, Sym


def to_bv(e: Expr, memo: Dict[int, z3.ExprRef] = None, vars_: Dict[str, z3.ExprRef] = None) -> z3.ExprRef:
    """Z3 bit-vector term for ``e`` (1-bit nodes become 1-bit bit-vectors)."""
    memo = {} if memo is None else memo
    vars_ = {} if vars_ is None else vars_

    keep = memo.setdefault("_keep", [])   # nodes kept alive so that their ids stay valid

    def go(n: Expr):
        k = id(n)
        if k in memo:
            return memo[k]
        keep.append(n)
        if isinstance(n, Const):
            ck = ("_c", n.value, n.width)
            r = memo.get(ck)
            if r is None:
                r = memo[ck] = z3.BitVecVal(n.value, n.width)
        elif isinstance(n, Sym):
            r = vars_.get(n.name)
            if r is None:
                r = vars_[n.name] = z3.BitVec(n.name, n.width)
        else:
            a = [go(x) for x in n.args]
            op = n.op
            one, zero = z3.BitVecVal(1, 1), z3.BitVecVal(0, 1)
            b = lambda c: z3.If(c, one, zero)  # noqa: E731
            if op == "add": r = a[0] + a[1]
            elif op == "sub": r = a[0] - a[1]
            elif op == "mul": r = a[0] * a[1]
            elif op == "mulhu":
                w = n.width
                r = z3.Extract(2 * w - 1, w, z3.ZeroExt(w, a[0]) * z3.ZeroExt(w, a[1]))
            elif op == "mulhs":
                w = n.width
                r = z3.Extract(2 * w - 1, w, z3.SignExt(w, a[0]) * z3.SignExt(w, a[1]))
            elif op == "and": r = a[0] & a[1]
            elif op == "or": r = a[0] | a[1]
            elif op == "xor": r = a[0] ^ a[1]
            elif op == "not": r = ~a[0]
            elif op == "shl": r = a[0] << a[1]
            elif op == "lshr": r = z3.LShR(a[0], a[1])
            elif op == "ashr": r = a[0] >> a[1]
            elif op == "zext": r = z3.ZeroExt(n.width - n.args[0].width, a[0])
            elif op == "sext": r = z3.SignExt(n.width - n.args[0].width, a[0])
            elif op == "extract": r = z3.Extract(n.params[0], n.params[1], a[0])
            elif op == "concat": r = z3.Concat(a[0], a[1])
            elif op == "ite": r = z3.If(a[0] == one, a[1], a[2])
            elif op == "eq": r = b(a[0] == a[1])
            elif op == "ult": r = b(z3.ULT(a[0], a[1]))
            elif op == "ule": r = b(z3.ULE(a[0], a[1]))
            elif op == "slt": r = b(a[0] < a[1])
            elif op == "sle": r = b(a[0] <= a[1])
            elif op == "udiv": r = z3.UDiv(a[0], a[1])
            elif op == "urem": r = z3.URem(a[0], a[1])
            elif op == "sel":
                f = z3.Function("sel_" + n.args[0].name, z3.BitVecSort(64), z3.BitVecSort(32))
                r = f(a[1])
            elif op in X.FLOAT_OPS:
                # binary32 operators are uninterpreted functions: sound (no property of the
                # rounding is assumed); addrsim.prove.idioms proves the idioms that need more
                f = z3.Function(op, *([z3.BitVecSort(32)] * len(a)), z3.BitVecSort(32))
                r = f(*a)
            else:
                raise ValueError(f"no bit-vector translation for {op}")
        memo[k] = r
        return r

    return go(e)


def holds_bv(c: Expr, memo=None, vars_=None) -> z3.BoolRef:
    return to_bv(c, memo, vars_) == z3.BitVecVal(1, 1)


class IntEncoder:
    """Exact integer encoding of IR nodes, given integer ranges of the symbols.

    ``ranges`` maps symbol names to inclusive (lo, hi); unlisted symbols range over
    [0, 2**width).  With ``ideal=True`` the encoding is of ``int`` mode instead
    (:mod:`addrsim.backends.arith`): no node wraps except those in ``keep``
    (:func:`addrsim.backends.arith.kept_wraps`), constants added or subtracted are sign-extended
    immediates, and signed comparisons compare the exact values.  Nodes in ``nowrap`` were
    proved not to leave their range under the query's conditions (range obligations, DOMAIN.md
    section 6) and are encoded without ``mod``; ``wrapped`` lists the nodes that got one.  After encoding, ``side`` holds the constraints on fresh variables and
    ``abstracted`` lists the operations that were over-approximated."""

    def __init__(self, ranges: Dict[str, Tuple[int, int]], ideal: bool = False, keep=frozenset(),
                 nowrap=frozenset()):
        self.ranges = ranges
        self.ideal = ideal            # int mode (addrsim.backends.arith): no wraps except in ``keep``
        self.keep = keep
        self.nowrap = nowrap          # ids of nodes proved (separately) to stay in range
        self.wrapped = []             # (node, unwrapped term, width) of every ``mod`` emitted
        self._cur = None
        self.vars: Dict[str, z3.ArithRef] = {}
        self.side = []
        self.abstracted = []
        self.memo: Dict[int, Tuple[z3.ArithRef, int, int]] = {}
        self.arrays: Dict[str, z3.FuncDeclRef] = {}
        self._fresh = 0

    def var(self, name: str, width: int):
        """The integer variable of symbol ``name`` (created with its range)."""
        v = self.vars.get(name)
        if v is None:
            v = self.vars[name] = z3.Int(name)
            lo, hi = self.ranges.get(name, (0, X.mask(width)))
            self.side += [v >= lo, v <= hi]
        return v

    def fresh(self, width: int, why: str):
        self._fresh += 1
        v = z3.Int(f"abs{self._fresh}")
        self.side += [v >= 0, v <= X.mask(width)]
        self.abstracted.append(why)
        return v, 0, X.mask(width)

    def enc(self, e: Expr) -> z3.ArithRef:
        return self._go(e)[0]

    def holds(self, c: Expr) -> z3.BoolRef:
        return self.enc(c) == 1

    def interval(self, e: Expr) -> Tuple[int, int]:
        r = self._go(e)
        return r[1], r[2]

    def _wrap(self, t, lo, hi, w, force=False):
        m = 1 << w
        if not force and self.ideal and id(self._cur) not in self.keep:
            return t, lo, hi          # int mode: this node does not wrap
        if lo >= 0 and hi < m:
            return t, lo, hi
        if not force and id(self._cur) in self.nowrap:
            self.side += [t >= 0, t < m]             # proved separately not to wrap
            return t, max(lo, 0), min(hi, m - 1)
        if not force and self._cur is not None:
            self.wrapped.append((self._cur, t, w))
        return t % m, 0, m - 1

    def _go(self, n: Expr):
        k = id(n)
        if k in self.memo:
            return self.memo[k]
        w = n.width
        if isinstance(n, Const):
            r = (z3.IntVal(n.value), n.value, n.value)
        elif isinstance(n, Sym):
            lo, hi = self.ranges.get(n.name, (0, X.mask(w)))
            r = (self.var(n.name, w), lo, hi)
        else:
            prev, self._cur = self._cur, n
            r = self._op(n, w)
            self._cur = prev
        self.memo[k] = r
        return r

    def _op(self, n: Op, w: int):
        op = n.op
        if op == "sel":
            # an int32 array element read by the kernel: an uninterpreted function of the byte
            # offset, non-negative (sequence starts; AV:266-269 checks the int32 dtype)
            off = self._go(n.args[1])[0]
            f = self.arrays.get(n.args[0].name)
            if f is None:
                f = self.arrays[n.args[0].name] = z3.Function("sel_" + n.args[0].name, z3.IntSort(), z3.IntSort())
            t = f(off)
            self.side += [t >= 0, t < (1 << 31)]
            return t, 0, (1 << 31) - 1
        A = [self._go(a) for a in n.args] if op != "ite" else None
        exact = self.ideal and id(n) not in self.keep
        if exact and op in ("add", "sub"):
            # sign-extended immediates: adding 0xffffffc0 subtracts 64 (addrsim.backends.arith)
            A = [(z3.IntVal(v), v, v) if v is not None else x
                 for x, v in zip(A, (_signed(c) for c in n.args))]
        if exact and op == "sext":
            return A[0]
        if exact and op == "not":
            a, al, ah = self._wrap(*A[0], w, force=True)
            return X.mask(w) - a, X.mask(w) - ah, X.mask(w) - al
        if op == "add":
            (a, al, ah), (b, bl, bh) = A
            return self._wrap(a + b, al + bl, ah + bh, w)
        if op == "sub":
            (a, al, ah), (b, bl, bh) = A
            return self._wrap(a - b, al - bh, ah - bl, w)
        if op == "mul":
            (a, al, ah), (b, bl, bh) = A
            if isinstance(n.args[1], Const):
                t = a * n.args[1].value
            elif isinstance(n.args[0], Const):
                t = n.args[0].value * b
            else:
                t = a * b
            return self._wrap(t, al * bl, ah * bh, w)
        if op == "mulhu":
            (a, al, ah), (b, bl, bh) = A
            return a * b / (1 << w), (al * bl) >> w, (ah * bh) >> w
        if op == "not":
            a, al, ah = A[0]
            return X.mask(w) - a, X.mask(w) - ah, X.mask(w) - al
        if op in ("zext",):
            return A[0]
        if op == "sext":
            a, al, ah = A[0]
            wa = n.args[0].width
            if ah < (1 << (wa - 1)):
                return a, al, ah
            return z3.If(a >= (1 << (wa - 1)), a + (1 << w) - (1 << wa), a), 0, X.mask(w)
        if op == "extract":
            hi_b, lo_b = n.params
            a, al, ah = A[0]
            t = a / (1 << lo_b) if lo_b else a
            return self._wrap(t, al >> lo_b, ah >> lo_b, w)
        if op == "concat":
            (h, hl, hh), (l, ll, lh) = A
            wl = n.args[1].width
            return h * (1 << wl) + l, hl * (1 << wl) + ll, hh * (1 << wl) + lh
        if op == "lshr" and isinstance(n.args[1], Const):
            a, al, ah = A[0]
            s = n.args[1].value
            return (a / (1 << s) if s else a), al >> s, ah >> s
        if op == "shl" and isinstance(n.args[1], Const):
            a, al, ah = A[0]
            s = n.args[1].value
            return self._wrap(a * (1 << s), al << s, ah << s, w)
        if op == "and":
            (a, al, ah), (b, bl, bh) = A
            if w == 1:
                return a * b, al * bl, ah * bh
            for (x, xl, xh), c in ((A[0], n.args[1]), (A[1], n.args[0])):
                if isinstance(c, Const):
                    m = c.value
                    if m & (m + 1) == 0:  # low mask 2^k - 1
                        return self._wrap(x, xl, xh, m.bit_length(), force=True)
                    low = (~m) & X.mask(w)
                    if low & (low + 1) == 0 and m == X.mask(w) & ~low:  # clears the low bits
                        return x - x % (low + 1), 0, xh
            return self.fresh(w, f"and of {n.args[0]!r} and {n.args[1]!r}")
        if op in ("or", "xor"):
            (a, al, ah), (b, bl, bh) = A
            if w == 1:
                return (a + b - a * b if op == "or" else z3.If(a != b, 1, 0)), 0, 1
            za, zb = n.args
            if X.maxbits(za) <= X.lowzeros(zb) or X.maxbits(zb) <= X.lowzeros(za):
                return a + b, al + bl, ah + bh
            return self.fresh(w, f"{op} of {za!r} and {zb!r}")
        if op == "ite":
            c = self._go(n.args[0])[0]
            a, al, ah = self._go(n.args[1])
            b, bl, bh = self._go(n.args[2])
            return z3.If(c == 1, a, b), min(al, bl), max(ah, bh)
        if op in ("eq", "ult", "ule", "slt", "sle"):
            (a, al, ah), (b, bl, bh) = A
            if op in ("slt", "sle") and not exact:
                wa = n.args[0].width
                a = z3.If(a >= (1 << (wa - 1)), a - (1 << wa), a)
                b = z3.If(b >= (1 << (wa - 1)), b - (1 << wa), b)
            c = {"eq": a == b, "ult": a < b, "ule": a <= b, "slt": a < b, "sle": a <= b}[op]
            return z3.If(c, 1, 0), 0, 1
        if op in ("udiv", "urem"):
            (a, al, ah), (b, bl, bh) = A
            if bl > 0:
                if op == "udiv":
                    return a / b, al // max(bh, 1), ah // bl
                return a % b, 0, min(ah, bh - 1)
            # divisor may be 0: SMT-LIB semantics (udiv by 0 is all ones, urem by 0 is a)
            if op == "udiv":
                return z3.If(b == 0, X.mask(w), a / b), 0, X.mask(w)
            return z3.If(b == 0, a, a % b), 0, ah
        return self.fresh(w, f"{op} node")


def _signed(c: Expr):
    """A constant operand read as a sign-extended immediate; None for other nodes."""
    if isinstance(c, Const) and c.width > 1:
        return X.to_signed(c.value, c.width)
    return None
