"""Proofs for idioms the solver cannot see through: integer division by float reciprocal.

Hand-written kernels divide small integers (``head_id / ratio`` for the key head under
grouped-query attention) with LLVM's 32-bit unsigned division expansion::

    v_cvt_f32_u32 r, d ; v_rcp_iflag_f32 r, r ; v_mul_f32 r, 0x4f7ffffe, r ; v_cvt_u32_f32 q, r
    ... one Newton step with v_mul_lo/v_mul_hi, then two compare-and-correct steps

The result is exact only because of the integer refinement that follows the estimate, and the
estimate depends on V_RCP_F32, whose result the ISA guide (MI300 ISA, VOP1 opcode table)
gives only to 1 ULP.  :func:`exact_divisions` finds each subterm that contains binary32
nodes, depends on at most two unknowns with a small bounded range, and is equal to
``udiv(x, d)`` for *every* value in the range and *every* reciprocal within 1 ULP of the true
one (the correctly rounded value and those of its two neighbours that lie within 1 ULP of
the exact reciprocal: together every binary32 value within 1 ULP).  The check is exhaustive (numpy, all points of the box), so it is a proof over
the bounded domain, not an assumption; the subterm is then replaced by ``udiv``.  Points with
``d == 0`` are excluded and keep the original term (the solver abstracts it), so the proof
never claims anything about division by zero.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import product
from typing import Dict, List, Optional, Tuple

import numpy as np

from addrsim.ir import expr as X
from addrsim.ir.expr import Const, Expr, Op, Sym

#: Largest box (points) checked exhaustively.
MAX_POINTS = 1 << 20


@dataclass
class DivisionProof:
    """One float-reciprocal division replaced by ``udiv``; ``points`` values were checked
    for each of ``variants`` reciprocal roundings."""

    term: str
    dividend: str
    divisor: str
    ranges: Dict[str, Tuple[int, int]]
    points: int
    variants: int


class _NoVec(Exception):
    pass


def has_float(e: Expr, memo: Dict[int, bool]) -> bool:
    k = id(e)
    if k not in memo:
        memo[k] = isinstance(e, Op) and (e.op in X.FLOAT_OPS or any(has_float(a, memo) for a in e.args))
    return memo[k]


def exact_divisions(e: Expr, ranges: Dict[str, Tuple[int, int]]) -> Tuple[Expr, List[DivisionProof], List[str]]:
    """Replace every float-reciprocal division in ``e`` that is exact over ``ranges`` (symbol
    name -> inclusive integer range) by ``udiv``.  Returns (new expression, proofs, reasons
    for float subterms left in place)."""
    memo: Dict[int, bool] = {}
    cache: Dict[tuple, dict] = {}
    if not has_float(e, memo):
        return e, [], []
    repl: Dict[int, Expr] = {}
    plain: Dict[int, Expr] = {}
    proofs: List[DivisionProof] = []
    failed: List[str] = []
    stack, seen = [e], set()
    while stack:
        n = stack.pop()
        if id(n) in seen or not has_float(n, memo):
            continue
        seen.add(id(n))
        if n.width == 32 and n.op not in X.FLOAT_OPS:
            r = _try_division(n, ranges, cache)
            if isinstance(r, tuple):
                repl[id(n)] = r[0]
                plain[id(n)] = r[2]
                proofs.append(r[1])
                continue
            if r:
                failed.append(r)
        stack.extend(n.args)
    if not repl:
        return e, [], failed or ["binary32 arithmetic on the address path that is not a proved division"]
    out = _replace(e, repl, {})
    # the d == 0 guards keep the original term; what matters is what is left outside them
    left = [] if not has_float(_replace(e, plain, {}), {}) else (failed or ["binary32 arithmetic left on the address path"])
    return out, proofs, left


def _replace(e: Expr, repl, memo):
    k = id(e)
    if k in repl:
        return repl[k]
    if k in memo:
        return memo[k]
    if isinstance(e, Op):
        r = X.rebuild(e, tuple(_replace(a, repl, memo) for a in e.args))
    else:
        r = e
    memo[k] = r
    return r


def _try_division(n: Expr, ranges, cache) -> Optional[object]:
    syms = [s for s in X.symbols(n).values()]
    if not syms or len(syms) > 2 or any(s.kind == "opaque" for s in syms):
        return None
    box = {}
    for s in syms:
        if s.name not in ranges:
            return None
        lo, hi = ranges[s.name]
        box[s.name] = (max(lo, 0), min(hi, X.mask(s.width)))
    npts = 1
    for lo, hi in box.values():
        npts *= hi - lo + 1
    divisors = []
    for m in X.walk(n):
        if isinstance(m, Op) and m.op == "f32_rcp" and isinstance(m.args[0], Op) and m.args[0].op == "f32_from_u32":
            divisors.append(m.args[0].args[0])
    if not divisors:
        return None
    if npts > MAX_POINTS and len([m for m in X.walk(n) if isinstance(m, Op) and m.op == "f32_rcp"]) == 1:
        r = _per_divisor(n, box, divisors)
        if r is not None:
            return r
        return f"float-reciprocal term over a domain of {npts} points (limit {MAX_POINTS}) not checked"
    names = sorted(box)
    bkey = tuple((k, box[k]) for k in names)
    if bkey not in cache:
        grids = np.meshgrid(*[np.arange(box[k][0], box[k][1] + 1, dtype=np.uint64) for k in names], indexing="ij")
        cache[bkey] = {"env": {k: g.ravel() for k, g in zip(names, grids)}, "memos": {}}
    env = cache[bkey]["env"]
    rcps = [m for m in X.walk(n) if isinstance(m, Op) and m.op == "f32_rcp"]
    if len(rcps) > 1:
        return "more than one reciprocal in one term: not checked"
    values = []
    try:
        for variant in (-1, 0, 1):
            memo = cache[bkey]["memos"].setdefault(variant, {})
            values.append(_vec(n, env, memo, [variant]))
    except _NoVec:
        return None
    for d in divisors:
        if X.symbols(d) and len(X.symbols(d)) > 2:
            continue
        for x in _dividend_candidates(n, d):
            try:
                dv = _vec(d, env, {}, [])
                xv = _vec(x, env, {}, [])
            except _NoVec:
                continue
            ok = dv != 0
            if not ok.any():
                continue
            want = np.where(ok, xv // np.where(ok, dv, 1), 0)
            if all(np.array_equal(np.where(ok, v, 0), want) for v in values):
                guarded = X.ite(X.eq(d, Const(0, 32)), n, X.udiv(x, d))
                return guarded, DivisionProof(repr(n)[:120], repr(x), repr(d), box, int(ok.sum()), len(values)), X.udiv(x, d)
    return f"binary32 term {repr(n)[:80]} is not udiv of its operands over {box}"


#: Largest divisor range proved one divisor value at a time (a Z3 query per value and rounding).
MAX_DIVISORS = 1024
PER_DIVISOR_RLIMIT = 5_000_000     # Z3 resource units per query (deterministic)


def _per_divisor(n: Expr, box, divisors):
    """The wide-dividend case (``BAs / head_dim``: a 32-bit dividend, a divisor of a few dozen
    values).  For each divisor value and each reciprocal within 1 ULP, the subterms that
    depend on the divisor alone (the estimate and its Newton step) are evaluated exactly, and
    Z3 proves that what is left, a bit-vector term in the dividend, equals ``udiv`` for every
    dividend in its range.  A proof over the bounded domain, as the exhaustive one; None when
    the term does not have that shape, a reason string when a query fails."""
    import z3
    from addrsim.backends.smt import IntEncoder
    d = divisors[0]
    if not isinstance(d, Sym) or any(x is not d and repr(x) != repr(d) for x in divisors):
        return None
    others = [k for k in box if k != d.name]
    if d.name not in box or len(others) != 1:
        return None
    dlo, dhi = box[d.name]
    if dhi - dlo + 1 > MAX_DIVISORS:
        return None
    other = others[0]
    xs = [x for x in _dividend_candidates(n, d) if set(X.symbols(x)) == {other}]
    if not xs:
        return None
    fm: Dict[int, bool] = {}
    for x in xs:
        ok, checked = True, 0
        for dv in range(max(dlo, 1), dhi + 1):
            for variant in (-1, 0, 1):
                t = _fold_divisor_terms(n, d.name, dv, variant, fm)
                if t is None or has_float(t, {}):
                    return None
                # exact integer encoding of the bit-vector semantics: with the divisor and the
                # reciprocal constant the query is linear (mulhu, the wrapping mul and udiv
                # by a constant become floor divisions with a remainder variable)
                enc = IntEncoder({other: box[other]})
                s = z3.Solver()
                s.set("rlimit", PER_DIVISOR_RLIMIT)
                s.add(enc.enc(t) != enc.enc(X.udiv(x, Const(dv, x.width))))
                s.add(*enc.side)
                r = s.check()
                if r == z3.sat:
                    ok = False
                    break
                if r != z3.unsat:
                    return f"division by {d.name}={dv}: the solver gave up within its resource budget"
                checked += 1
            if not ok:
                break
        if ok:
            guarded = X.ite(X.eq(d, Const(0, 32)), n, X.udiv(x, d))
            return guarded, DivisionProof(repr(n)[:120], repr(x), repr(d), box, checked, 3), X.udiv(x, d)
    return f"binary32 term {repr(n)[:80]} is not udiv of its operands over {box}"


def _fold_divisor_terms(n: Expr, dname: str, dv: int, variant: int, fm) -> Optional[Expr]:
    """``n`` with the divisor set to ``dv`` and every subterm that contains binary32 nodes and
    depends on the divisor alone replaced by its value (the reciprocal ``variant`` ULP from
    the correctly rounded one)."""
    env = {dname: np.array([dv], dtype=np.uint64)}
    memo: Dict[int, Expr] = {}
    vmemo: dict = {}

    def go(m: Expr) -> Expr:
        k = id(m)
        if k in memo:
            return memo[k]
        if isinstance(m, Op) and has_float(m, fm) and set(X.symbols(m)) <= {dname}:
            try:
                v = _vec(m, env, vmemo, [variant])
            except _NoVec:
                raise
            r = Const(int(np.asarray(v).reshape(-1)[0]), m.width)
        elif isinstance(m, Sym) and m.name == dname:
            r = Const(dv, m.width)
        elif isinstance(m, Op):
            r = X.rebuild(m, tuple(go(a) for a in m.args))
        else:
            r = m
        memo[k] = r
        return r
    try:
        return go(n)
    except _NoVec:
        return None


def _dividend_candidates(n: Expr, d: Expr) -> List[Expr]:
    out, seen = [], set()
    fm: Dict[int, bool] = {}
    for m in X.walk(n):
        if m is d or isinstance(m, Const) or m.width != 32 or has_float(m, fm):
            continue
        key = repr(m)
        if key in seen:
            continue
        seen.add(key)
        out.append(m)
    out.sort(key=lambda m: 0 if isinstance(m, Sym) else 1)
    return out[:24]


# ----------------------------------------------------------------------------- numpy evaluator

def _m(w):
    return np.uint64(X.mask(w)) if w < 64 else np.uint64(0xFFFFFFFFFFFFFFFF)


def _vec(e: Expr, env, memo, variant: List[int]):
    """Vectorised evaluation of ``e`` over uint64 arrays (widths up to 32 for products);
    ``variant`` gives, per f32_rcp node in visiting order, -1/0/+1 ULP from the nominal."""
    k = id(e)
    if k in memo:
        return memo[k]
    if isinstance(e, Const):
        r = np.uint64(e.value)
    elif isinstance(e, Sym):
        r = env[e.name]
    else:
        op, w = e.op, e.width
        a = [_vec(x, env, memo, variant) for x in e.args]
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            r = _vop(e, op, w, a, variant, memo)
    memo[k] = r
    return r


def _vop(e, op, w, a, variant, memo):
    M = _m(w)
    u = np.uint64
    if op == "add":
        return (a[0] + a[1]) & M
    if op == "sub":
        return (a[0] - a[1]) & M
    if op == "mul":
        if w > 32:
            raise _NoVec()
        return (a[0] * a[1]) & M
    if op == "mulhu":
        if w > 32:
            raise _NoVec()
        return ((a[0] * a[1]) >> u(w)) & M
    if op == "and":
        return a[0] & a[1]
    if op == "or":
        return a[0] | a[1]
    if op == "xor":
        return a[0] ^ a[1]
    if op == "not":
        return ~a[0] & M
    if op in ("shl", "lshr"):
        s = np.asarray(a[1], dtype=np.uint64)
        big = s >= u(w)
        s2 = np.where(big, u(0), s)
        v = (a[0] << s2) & M if op == "shl" else a[0] >> s2
        return np.where(big, u(0), v)
    if op == "zext":
        return a[0]
    if op == "extract":
        hi, lo = e.params
        return (a[0] >> u(lo)) & _m(hi - lo + 1)
    if op == "concat":
        return ((a[0] << u(e.args[1].width)) | a[1]) & M
    if op == "ite":
        return np.where(np.asarray(a[0]) != 0, a[1], a[2])
    if op == "eq":
        return (a[0] == a[1]).astype(np.uint64)
    if op == "ult":
        return (a[0] < a[1]).astype(np.uint64)
    if op == "ule":
        return (a[0] <= a[1]).astype(np.uint64)
    if op == "udiv":
        z = np.asarray(a[1]) == 0
        return np.where(z, M, a[0] // np.where(z, u(1), a[1]))
    if op == "urem":
        z = np.asarray(a[1]) == 0
        return np.where(z, a[0], a[0] % np.where(z, u(1), a[1]))
    if op == "f32_from_u32":
        return _fbits(np.asarray(a[0], dtype=np.uint64).astype(np.float64).astype(np.float32))
    if op == "f32_mul":
        return _fbits(_ffrom(a[0]) * _ffrom(a[1]))
    if op == "u32_from_f32":
        f = _ffrom(a[0]).astype(np.float64)
        f = np.where(np.isnan(f), 0.0, f)
        f = np.clip(np.trunc(f), 0.0, 4294967295.0)
        return f.astype(np.uint64)
    if op == "f32_rcp":
        pos = 0
        x = _ffrom(a[0]).astype(np.float64)
        exact = 1.0 / x
        r = exact.astype(np.float32)
        step = variant[pos] if pos < len(variant) else 0
        if step:
            # a neighbour of the correctly rounded value stands for the hardware result
            # only where it is within 1 ULP of the exact reciprocal; elsewhere keep r
            nb = np.nextafter(r, np.float32(np.inf if step > 0 else -np.inf)).astype(np.float32)
            ulp = np.spacing(np.abs(r)).astype(np.float64)
            r = np.where(np.abs(nb.astype(np.float64) - exact) <= ulp, nb, r)
        return _fbits(r)
    raise _NoVec()


def _ffrom(bits):
    return np.asarray(bits, dtype=np.uint64).astype(np.uint32).view(np.float32)


def _fbits(f):
    return np.asarray(f, dtype=np.float32).view(np.uint32).astype(np.uint64)
