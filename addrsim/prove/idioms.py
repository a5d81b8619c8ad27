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
from typing import Dict, List, Optional, Tuple

import numpy as np

from addrsim.backends.vector import NoVec, vec
from addrsim.backends.z3_run import decided
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


def has_float(e: Expr, memo: Dict[int, bool]) -> bool:
    k = id(e)
    if k not in memo:
        memo[k] = isinstance(e, Op) and (e.op in X.FLOAT_OPS or any(has_float(a, memo) for a in e.args))
    return memo[k]


def exact_divisions(e: Expr, ranges: Dict[str, Tuple[int, int]],
                    origin: Optional[Dict[int, tuple]] = None,
                    store: Optional[dict] = None) -> Tuple[Expr, List[DivisionProof], List[str]]:
    """Replace every float-reciprocal division in ``e`` that is exact over ``ranges`` (symbol
    name -> inclusive integer range) by ``udiv``.  Returns (new expression, proofs, reasons
    for float subterms left in place).  ``origin`` (optional; node id -> (node, pc, text) of
    the instruction that produced it, :mod:`addrsim.prove.wraps`): each rebuilt node, and each
    ``udiv`` put in, is entered as produced by the instruction of the node it replaces, so a
    wrap in it is still named by its instruction.  ``store`` (the query cache) keeps each
    term's answer (:func:`_stored_division`), so another check or kernel does not prove the
    same term over the same ranges again."""
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
            r = _stored_division(n, ranges, cache, store)
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
    out = _replace(e, repl, {}, origin)
    # the d == 0 guards keep the original term; what matters is what is left outside them
    left = [] if not has_float(_replace(e, plain, {}), {}) else (failed or ["binary32 arithmetic left on the address path"])
    return out, proofs, left


def drop_zero_guards(e: Expr, nonzero) -> Expr:
    """``e`` with each guard ``ite(d == 0, T, U)`` that :func:`exact_divisions` leaves (T
    the binary32 term, U its proved ``udiv``) replaced by U where ``nonzero(d)`` (a predicate
    that is True only when d != 0 at every point of the query's conditions; e.g. the GQA
    ratio ``nhead_q / nhead_k`` under the traits layer).  An equality wherever the
    conditions hold; the solvers then see no binary32 arithmetic at all."""
    memo: Dict[int, bool] = {}
    verdict: Dict[bytes, bool] = {}
    repl: Dict[int, Expr] = {}
    for n in X.walk(e):
        if not (isinstance(n, Op) and n.op == "ite" and isinstance(n.args[0], Op) and n.args[0].op == "eq"):
            continue
        d, zero = n.args[0].args
        if not (isinstance(zero, Const) and zero.value == 0 and has_float(n.args[1], memo)
                and not has_float(n.args[2], memo)):
            continue
        k = X.digest(d)
        if k not in verdict:
            verdict[k] = bool(nonzero(d))
        if verdict[k]:
            repl[id(n)] = n.args[2]
    return _replace(e, repl, {}) if repl else e


def _replace(e: Expr, repl, memo, origin: Optional[Dict[int, tuple]] = None):
    k = id(e)
    if k in memo:
        return memo[k]
    if k in repl:
        r = repl[k]
    elif isinstance(e, Op):
        r = X.rebuild(e, tuple(_replace(a, repl, memo, origin) for a in e.args))
    else:
        r = e
    memo[k] = r
    if origin is not None and r is not e and k in origin and id(r) not in origin and isinstance(r, Op):
        o = origin[k]
        origin[id(r)] = (r,) + tuple(o[1:])
    return r


def _stored_division(n: Expr, ranges, cache, store: Optional[dict]):
    """:func:`_try_division` of ``n``, kept in ``store`` under the term's digest and the ranges
    of its symbols (the answer is a function of both): a proof as the positions of its
    divisor and dividend among the term's candidates (rebuilt here, with the counts the proof
    checked), a reason, or None."""
    if store is None:
        return _try_division(n, ranges, cache)
    syms = sorted(X.symbols(n))
    key = ("division", X.digest(n).hex(), tuple((k, tuple(ranges[k]) if k in ranges else None) for k in syms))
    got = store.get(key)
    if isinstance(got, tuple) and len(got) == 2 and got[0] == "division":
        r = _rebuilt(n, got[1])
        if r is not False:
            return r
    r = _try_division(n, ranges, cache)
    value = r if not isinstance(r, tuple) else _positions(n, r)
    if value is not False:
        store[key] = ("division", value)
    return r


def _divisors(n: Expr) -> List[Expr]:
    return [m.args[0].args[0] for m in X.walk(n) if isinstance(m, Op) and m.op == "f32_rcp"
            and isinstance(m.args[0], Op) and m.args[0].op == "f32_from_u32"]


def _positions(n: Expr, r) -> object:
    """A proof of :func:`_try_division` as [divisor position, dividend position, box, points,
    variants]; False when its operands are not found again (not stored)."""
    _, proof, plain = r
    x, d = plain.args
    ds = _divisors(n)
    for i, dd in enumerate(ds):
        if dd is d or repr(dd) == repr(d):
            xs = _dividend_candidates(n, dd)
            for j, xx in enumerate(xs):
                if xx is x or repr(xx) == repr(x):
                    return [i, j, [[k, lo, hi] for k, (lo, hi) in sorted(proof.ranges.items())], proof.points,
                            proof.variants]
    return False


def _rebuilt(n: Expr, got) -> object:
    """The answer :func:`_positions` stored, for ``n`` again; False when it does not fit."""
    if got is None or isinstance(got, str):
        return got
    try:
        i, j, box, points, variants = got
        d = _divisors(n)[i]
        x = _dividend_candidates(n, d)[j]
        box = {str(k): (int(lo), int(hi)) for k, lo, hi in box}
    except (ValueError, TypeError, IndexError):
        return False
    guarded = X.ite(X.eq(d, Const(0, 32)), n, X.udiv(x, d))
    return guarded, DivisionProof(repr(n)[:120], repr(x), repr(d), box, int(points), int(variants)), X.udiv(x, d)


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
            values.append(vec(n, env, memo, [variant]))
    except NoVec:
        return None
    for d in divisors:
        if X.symbols(d) and len(X.symbols(d)) > 2:
            continue
        for x in _dividend_candidates(n, d):
            try:
                dv = vec(d, env, {}, [])
                xv = vec(x, env, {}, [])
            except NoVec:
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
    from addrsim.backends.z3_int import IntEncoder
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
                r, _ = decided([enc.enc(t) != enc.enc(X.udiv(x, Const(dv, x.width))), *enc.side],
                               PER_DIVISOR_RLIMIT)
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
                v = vec(m, env, vmemo, [variant])
            except NoVec:
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
    except NoVec:
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
