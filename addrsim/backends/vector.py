"""The vectorised backend: numpy evaluation of an IR expression over many points at once.

Owns :func:`vec`, :class:`NoVec` and :data:`VECTOR` (operator -> numpy function) with
:data:`UNSUPPORTED` (operator -> why there is none), checked against
:data:`addrsim.ir.ops.OPS` at import.  May import addrsim.ir only.

Values are uint64 arrays: sums and products wrap mod 2**64, which is exact for every width
up to 64; the high halves ``mulhu``/``mulhs`` are exact to 32-bit operands (wider ones raise
NoVec, and the caller falls back to the exact evaluator).  ``f32_rcp`` can stand for a
neighbour of the correctly rounded reciprocal (``variant``: -1/0/+1 ULP), the 1-ULP accuracy of
V_RCP_F32 (MI300 ISA guide, VOP1 opcode table) that :mod:`addrsim.prove.idioms` quantifies over.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Dict, List, Optional, Sequence

import numpy as np

from addrsim.ir import expr as X
from addrsim.ir.expr import Const, Expr, Sym
from addrsim.ir.ops import require_backend

U = np.uint64


class NoVec(Exception):
    """The expression has an operator (or width) the vectorised backend does not evaluate."""


@lru_cache(maxsize=None)
def _m(w):
    return U(X.mask(w)) if w < 64 else U(0xFFFFFFFFFFFFFFFF)


def vec(e: Expr, env, memo, variant: List[int]):
    """Vectorised value of ``e``; ``env`` maps symbol names to uint64 arrays (or scalars);
    ``variant[0]`` is the ULP step of every f32_rcp node.  Raises NoVec."""
    k = id(e)
    if k in memo:
        return memo[k]
    if isinstance(e, Const):
        r = U(e.value)
    elif isinstance(e, Sym):
        r = env[e.name]
    elif e.op == "sel":
        # memory reads: env[array + "[]"] is a function of the byte-offset array (a dict, the
        # scalar evaluator's form, has no vectorised reading)
        f = env.get(e.args[0].name + "[]")
        if not callable(f):
            raise NoVec("memory reads of an array given as a table")
        r = np.asarray(f(np.asarray(vec(e.args[1], env, memo, variant), dtype=np.uint64)), dtype=np.uint64)
    else:
        if e.op in UNSUPPORTED:
            raise NoVec(UNSUPPORTED[e.op])
        a = [vec(x, env, memo, variant) for x in e.args]
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            r = VECTOR[e.op](e, a, variant)
    memo[k] = r
    return r


class Program:
    """Expressions compiled once for repeated vectorised evaluation: their DAG's nodes in
    dependency order (each shared node once), so :meth:`run` is one loop over numpy calls
    under one ``np.errstate``, without recursion or a memo (about 3x faster than :func:`vec`
    per node on the probe's conditions, measured 2026-12-03).  Same values as :func:`vec`.
    An operator without a vectorised form raises NoVec from :meth:`run` (as :func:`vec`
    does when it reaches it)."""

    def __init__(self, exprs: Sequence[Expr]):
        self.exprs = tuple(exprs)        # kept: the programs cache is keyed by their ids
        index: Dict[int, int] = {}
        steps: list = []
        self.novec: Optional[str] = None
        stack = [(e, False) for e in reversed(self.exprs)]
        while stack:
            e, ready = stack.pop()
            if id(e) in index:
                continue
            if not ready and not isinstance(e, (Const, Sym)):
                stack.append((e, True))
                args = e.args[1:] if e.op == "sel" else e.args      # sel: the array is read by name
                stack.extend((a, False) for a in reversed(args) if id(a) not in index)
                continue
            index[id(e)] = len(steps)
            if isinstance(e, Const):
                steps.append((0, U(e.value), None))
            elif isinstance(e, Sym):
                steps.append((1, e.name, None))
            elif e.op == "sel":
                steps.append((2, e, (e.args[0].name + "[]", index[id(e.args[1])])))
            else:
                if e.op in UNSUPPORTED and self.novec is None:
                    self.novec = UNSUPPORTED[e.op]
                steps.append((3, e, tuple(index[id(a)] for a in e.args)))
        self.steps = steps
        self.out = [index[id(e)] for e in self.exprs]

    def run(self, env, variant: Sequence[int] = (0,)) -> list:
        """The values of the expressions (uint64 arrays or scalars), in order; raises NoVec
        and KeyError (a symbol ``env`` does not give), like :func:`vec`."""
        if self.novec is not None:
            raise NoVec(self.novec)
        v: list = [None] * len(self.steps)
        variant = list(variant)
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            for i, (kind, x, args) in enumerate(self.steps):
                if kind == 3:
                    v[i] = VECTOR[x.op](x, [v[j] for j in args], variant)
                elif kind == 0:
                    v[i] = x
                elif kind == 1:
                    v[i] = env[x]
                else:
                    f = env.get(args[0])
                    if not callable(f):
                        raise NoVec("memory reads of an array given as a table")
                    v[i] = np.asarray(f(np.asarray(v[args[1]], dtype=np.uint64)), dtype=np.uint64)
        return [v[j] for j in self.out]


class IdCache:
    """A bounded cache of ``factory(exprs)`` by the identity of the expressions (each entry
    keeps its expressions alive, so an id is never reused while cached); least recently
    used entries go first.  A memo: the values are functions of the expressions."""

    def __init__(self, factory, size: int = 256):
        self.factory, self.size, self._d = factory, size, {}

    def __call__(self, exprs: Sequence[Expr]):
        k = tuple(id(e) for e in exprs)
        hit = self._d.pop(k, None)
        if hit is None:
            exprs = tuple(exprs)
            hit = (exprs, self.factory(exprs))
            if len(self._d) >= self.size:
                self._d.pop(next(iter(self._d)))
        self._d[k] = hit
        return hit[1]


def _narrow(f):
    def g(e, a, variant):
        if e.width > 32:
            raise NoVec(f"{e.op} of {e.width}-bit operands (uint64 products are exact to 32 bits)")
        return f(e, a, variant)
    return g


def _shift(left):
    def g(e, a, variant):
        w = e.width
        s = np.asarray(a[1], dtype=np.uint64)
        big = s >= U(w)
        s2 = np.where(big, U(0), s)
        v = (a[0] << s2) & _m(w) if left else a[0] >> s2
        return np.where(big, U(0), v)
    return g


def _div(e, a, variant):
    z = np.asarray(a[1]) == 0
    if e.op == "udiv":
        return np.where(z, _m(e.width), a[0] // np.where(z, U(1), a[1]))
    return np.where(z, a[0], a[0] % np.where(z, U(1), a[1]))


def _ffrom(bits):
    return np.asarray(bits, dtype=np.uint64).astype(np.uint32).view(np.float32)


def _fbits(f):
    return np.asarray(f, dtype=np.float32).view(np.uint32).astype(np.uint64)


def _u32_from_f32(e, a, variant):
    f = _ffrom(a[0]).astype(np.float64)
    f = np.where(np.isnan(f), 0.0, f)
    f = np.clip(np.trunc(f), 0.0, 4294967295.0)
    return f.astype(np.uint64)


def _f32_rcp(e, a, variant):
    x = _ffrom(a[0]).astype(np.float64)
    exact = 1.0 / x
    r = exact.astype(np.float32)
    step = variant[0] if variant else 0
    if step:
        # a neighbour of the correctly rounded value stands for the hardware result only
        # where it is within 1 ULP of the exact reciprocal; elsewhere keep r
        nb = np.nextafter(r, np.float32(np.inf if step > 0 else -np.inf)).astype(np.float32)
        ulp = np.spacing(np.abs(r)).astype(np.float64)
        r = np.where(np.abs(nb.astype(np.float64) - exact) <= ulp, nb, r)
    return np.where(np.isnan(r), U(0x7FC00000), _fbits(r))      # NaN: the canonical quiet NaN


def _signed(x, w):
    """Two's-complement value of the ``w``-bit unsigned array ``x`` as int64 (w <= 64)."""
    x = np.asarray(x, dtype=np.uint64)
    if w == 64:
        return x.view(np.int64)
    s = U(1 << (w - 1))
    return (x ^ s).astype(np.int64) - np.int64(1 << (w - 1))


def _sext(e, a, variant):
    wa = e.args[0].width
    x = np.asarray(a[0], dtype=np.uint64)
    neg = (x >> U(wa - 1)) & U(1)
    high = _m(e.width) & ~_m(wa)
    return np.where(neg != 0, x | high, x)


def _ashr(e, a, variant):
    w = e.width
    s = np.asarray(a[1], dtype=np.uint64)
    big = s >= U(w)
    v = _signed(a[0], w) >> np.where(big, U(w - 1), s).astype(np.int64)
    return v.astype(np.uint64) & _m(w)


def _mulhs(e, a, variant):
    w = e.width
    if w > 32:
        raise NoVec(f"mulhs of {w}-bit operands (int64 products are exact to 32 bits)")
    p = _signed(a[0], w) * _signed(a[1], w)
    return (p >> np.int64(w)).astype(np.uint64) & _m(w)


def _spred(strict):
    def g(e, a, variant):
        w = e.args[0].width
        x, y = _signed(a[0], w), _signed(a[1], w)
        return ((x < y) if strict else (x <= y)).astype(np.uint64)
    return g


VECTOR = {
    "add": lambda e, a, v: (a[0] + a[1]) & _m(e.width),
    "sub": lambda e, a, v: (a[0] - a[1]) & _m(e.width),
    # uint64 products wrap mod 2**64, and 2**w divides 2**64: exact for every width <= 64
    "mul": lambda e, a, v: (a[0] * a[1]) & _m(e.width),
    "mulhs": _mulhs, "ashr": _ashr, "sext": _sext, "slt": _spred(True), "sle": _spred(False),
    "mulhu": _narrow(lambda e, a, v: ((a[0] * a[1]) >> U(e.width)) & _m(e.width)),
    "and": lambda e, a, v: a[0] & a[1],
    "or": lambda e, a, v: a[0] | a[1],
    "xor": lambda e, a, v: a[0] ^ a[1],
    "not": lambda e, a, v: ~a[0] & _m(e.width),
    "shl": _shift(True),
    "lshr": _shift(False),
    "zext": lambda e, a, v: a[0],
    "extract": lambda e, a, v: (a[0] >> U(e.params[1])) & _m(e.params[0] - e.params[1] + 1),
    "concat": lambda e, a, v: ((a[0] << U(e.args[1].width)) | a[1]) & _m(e.width),
    "ite": lambda e, a, v: np.where(np.asarray(a[0]) != 0, a[1], a[2]),
    "eq": lambda e, a, v: (a[0] == a[1]).astype(np.uint64),
    "ult": lambda e, a, v: (a[0] < a[1]).astype(np.uint64),
    "ule": lambda e, a, v: (a[0] <= a[1]).astype(np.uint64),
    "udiv": _div,
    "urem": _div,
    "f32_from_u32": lambda e, a, v: _fbits(np.asarray(a[0], dtype=np.uint64).astype(np.float64).astype(np.float32)),
    "f32_mul": lambda e, a, v: _fbits(_ffrom(a[0]) * _ffrom(a[1])),
    "u32_from_f32": _u32_from_f32,
    "f32_rcp": _f32_rcp,
    "sel": None,          # evaluated in vec() itself: it reads env[array + "[]"], a function
}
UNSUPPORTED = {}
require_backend("numpy vectorised (addrsim.backends.vector)", VECTOR, UNSUPPORTED)
