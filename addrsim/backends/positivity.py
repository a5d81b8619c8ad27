"""Certificates that a polynomial is at least a constant: products of facts weighed by a
linear program (the bounds claims' "offset + size <= extent", no nonlinear solver).

Over the atoms of :class:`addrsim.ir.poly.Facts` (every atom a non-negative integer), to show
``d >= need`` it looks for rationals ``lam_i >= 0`` and products ``m_i * g_i`` (``m_i`` a
monomial, ``g_i >= 0`` a fact of the query: a condition ``a <= b``, the definition of a
wrapped node ``W <= T``, of a quotient ``c*U <= X``, an atom's upper bound ``hi - x``, ...; :meth:`Facts.tighten`\\ ed by
divisibility) such that the rest ``R = d - sum(lam_i * m_i * g_i)`` is at least ``need`` by
intervals alone (each monomial of R between its atoms' bounds; :meth:`Facts.mono_hi`).
Every ``m_i * g_i`` is non-negative, so ``d >= R >= need``: a Positivstellensatz-style
certificate (Handelman's products of linear facts).  The products are those that cancel a
monomial left negative, transitively (at most MAX_PRODUCTS), then, where those show nothing,
every fact times every divisor of a monomial of ``d`` (:func:`divisor_products`).  The weights
come from a linear program solved in floating point by HiGHS (PyPI ``highspy``, pinned), rounded
to rationals, and the certificate is then checked here in exact rationals, so a "yes" does not
rest on the solver.  Units: ITER_RU per simplex iteration (deterministic: one thread, fixed seed).

Why HiGHS and not Z3's exact simplex, which this module used until 2026-12-05: on the README
kernel's 608 programs both show the same 385 (HiGHS one more), in 4.1 s of process time
against 48.5 s; the divisor products then show 19 more (7 s), which Z3 did not finish within
its units (benchmarks/results/speed_2026-12-05g.txt).

Example (dK's bounds in bwd_hd128_bf16_a16_rtne, BHSD): the store's offset
``256*seqlen_k*(batch_id*nhead_q + head_id) + 49152*kv_tile + lane offset (<= 13296)``, wrapped
at 32 bits, plus 16 bytes stays below ``256*batch*nhead_q*seqlen_k``: products of
``batch - 1 - batch_id >= 0`` by ``256*seqlen_k*nhead_q``, of ``nhead_q - 1 - head_id >= 0``
by ``256*seqlen_k``, and ``U - 1 - kv_tile >= 0``, ``seqlen_k + 128 - 192*U >= 0`` (U the
launch's tile count ``(seqlen_k + 191) / 192``, tightened by ``seqlen_k mod 64 == 0``).

Units: those of the polynomial (bytes for an address).  Imports addrsim.ir, numpy and highspy.
"""
from __future__ import annotations

import heapq
import itertools
from fractions import Fraction
from typing import Dict, List, Optional, Tuple

import highspy
import numpy as np

from addrsim.ir import poly as P

MAX_PRODUCTS = 400
"""Products of a fact by a monomial tried per certificate (the dK BSHD example needs about 15 of the 400 its search makes)."""

MAX_WIDE = 4000
"""Divisor products per certificate at most (the README kernel's programs need at most 1710)."""

CERT_RU = 2_000_000
"""Resource units of one certificate, both families together."""

ITER_RU = 250
"""Resource units charged per simplex iteration (the README kernel's programs take 25 iterations
at the median, 393 at most; Z3's exact simplex charged about 5600 units an iteration's worth).
At 1000 the README kernel's K BSHD bounds check spent its 60 Mru on 42 of its 48 proofs and
stayed unknown; at 250 it reaches the 32-bit wrap at its 43rd access (a counterexample, minimal),
and no other check of the README job changes verdict (benchmarks/results/speed_2026-12-05g.txt)."""

WIDE_MONO = 1e15
"""A monomial whose interval is wider than this must keep a non-negative rest (its negative
part's cost would be past floating point's exact integers)."""


def _quotient(mu: P.Mono, nu: P.Mono) -> Optional[P.Mono]:
    """``mu / nu`` as a monomial, None when ``nu`` does not divide ``mu``."""
    d = dict(mu)
    for k, p in nu:
        if d.get(k, 0) < p:
            return None
        d[k] -= p
    return tuple(sorted(((k, p) for k, p in d.items() if p), key=repr))


def _is_interval(g: P.Poly) -> bool:
    """A fact ``k +- x >= 0`` on one atom: the atom's interval says it (and more, tightened)."""
    return sum(1 for m in g if m) == 1 and all(len(m) <= 1 and (not m or m[0][1] == 1) for m in g)


def products(F: P.Facts, d: P.Poly) -> List[P.Poly]:
    """The products ``m * g`` (``g`` a tightened fact or an atom's upper bound ``hi - x``,
    ``m`` a monomial) that can cancel a monomial left negative: first those of ``d``, then
    those each product subtracts, cheapest first.  Replacing a node by its definition (a
    wrapped sum by the sum, a quotient by dividend over divisor) costs nothing; every other
    fact (a workgroup id below its dimension, the tile count, an atom's bound) costs one, so
    definitions are followed to the shape variables before any fact about those is tried."""
    facts = [F.tighten(g) for g in F.nonneg if not _is_interval(g)]
    index: Dict[object, List[Tuple[int, P.Mono]]] = {}
    for i, g in enumerate(facts):
        for nu, c in g.items():
            if c < 0 and nu:
                for k, _ in nu:
                    index.setdefault(k, []).append((i, nu))
    todo = [(0, n, m) for n, m in enumerate(m for m, c in sorted(d.items(), key=repr) if c < 0 and m)]
    heapq.heapify(todo)
    seen, made, out = {m for _, _, m in todo}, set(), []
    order = len(todo)

    def push(prod, cost):
        nonlocal order
        out.append(prod)
        for mo, c in prod.items():
            if c > 0 and mo and mo not in seen:
                seen.add(mo)
                order += 1
                heapq.heappush(todo, (cost, order, mo))

    while todo and len(out) < MAX_PRODUCTS:
        cost, _, mu = heapq.heappop(todo)
        for k, _ in (mu if len(mu) > 1 or mu[0][1] > 1 else ()):
            m = _quotient(mu, ((k, 1),))        # an atom's upper bound times the rest
            if (k, m) not in made:
                made.add((k, m))
                prod = P.mul({m: 1}, {(): F.iv(k)[1], ((k, 1),): -1})
                if prod is not None:
                    push(prod, cost + 1)
        for i, nu in (x for k, _ in mu for x in index.get(k, ())):
            m = _quotient(mu, nu)
            if m is None or (i, m) in made:
                continue
            made.add((i, m))
            prod = P.mul({m: 1}, facts[i])
            if prod is not None:
                definition = len(nu) == 1 and nu[0][1] == 1 and not isinstance(nu[0][0], str)
                push(prod, cost + (0 if definition else 1))
    return out + _lower_products(F, d, out, seen, made)


def _lower_products(F: P.Facts, d: P.Poly, prods: List[P.Poly], seen, made) -> List[P.Poly]:
    """Products ``(x - lo) * mu`` of an atom's lower bound: they trade a monomial ``mu`` left
    negative for ``x * mu``, which ``d`` or a product can make positive (``256*nhead_q*seqlen_q``
    pays for ``-16128*nhead_q`` once ``seqlen_q >= 64``)."""
    gains = {m for m, c in d.items() if c > 0 and m}
    for p in prods:
        gains.update(m for m, c in p.items() if c < 0 and m)
    out = []
    for g in sorted(gains, key=repr):
        for k, _ in g:
            mu = _quotient(g, ((k, 1),))
            lo = F.iv(k)[0]
            if (not mu or mu not in seen or lo < 1 or ("lo", k, mu) in made
                    or len(prods) + len(out) >= MAX_PRODUCTS + MAX_PRODUCTS // 4):
                continue
            made.add(("lo", k, mu))
            prod = P.mul({mu: 1}, {((k, 1),): 1, (): -lo})
            if prod is not None:
                out.append(prod)
    return out


def _ranges(F: P.Facts, monos) -> Dict[P.Mono, Tuple[int, int]]:
    return {m: (F._mono_lo(m), F.mono_hi(m)) for m in monos if m}


def _rest_lower(d: P.Poly, prods: List[P.Poly], lam: List[Fraction], rng) -> Fraction:
    """The interval lower bound of ``d - sum(lam_i * prods_i)``, in exact rationals."""
    rest: Dict[P.Mono, Fraction] = {m: Fraction(c) for m, c in d.items()}
    for p, l in zip(prods, lam):
        if l:
            for m, c in p.items():
                rest[m] = rest.get(m, Fraction(0)) - l * c
    low = rest.pop((), Fraction(0))
    for m, r in rest.items():
        lo, hi = rng[m]
        low += min(r * lo, r * hi)
    return low


def divisor_products(F: P.Facts, d: P.Poly) -> List[P.Poly]:
    """The second family, systematic where :func:`products` is greedy: every tightened fact,
    and every atom's ``hi - x`` and ``x - lo``, times every divisor of a monomial of ``d``
    (Handelman products of degree one in the facts, at most MAX_WIDE).  It finds what the
    greedy search's cost order leaves past MAX_PRODUCTS: the README kernel's last K BSHD bounds
    query (a 128-row last tile, zero slack) needs ``nhead_k*(seqlen_k - seqlen_q)``,
    ``nhead_k*(seqlen_q - 64*floor(seqlen_q/64))`` and ``nhead_k*(floor(seqlen_q/64) - 3*kv_tile - 2)``
    together."""
    divs = {()}
    for m in d:
        for powers in itertools.product(*[range(p + 1) for _, p in m]):
            divs.add(tuple((k, e) for (k, _), e in zip(m, powers) if e))
    divs_sorted = sorted(divs, key=repr)
    facts = [F.tighten(g) for g in F.nonneg if not _is_interval(g)]
    atoms = sorted({k for m in d for k, _ in m} | {k for g in facts for m in g for k, _ in m}, key=repr)
    bounds = []
    for k in atoms:
        lo, hi = F.iv(k)
        bounds += [{(): hi, ((k, 1),): -1}, {((k, 1),): 1, (): -lo}]
    out = []
    for g in facts + bounds:
        for m in divs_sorted:
            prod = P.mul({m: 1}, g)
            if prod is not None:
                out.append(prod)
                if len(out) >= MAX_WIDE:
                    return out
    return out


def _fl(x: int) -> float:
    """``x`` as a float, clamped to +-1e300 (interval ends of high powers pass float's range)."""
    return float(x) if -1e300 < x < 1e300 else (1e300 if x > 0 else -1e300)


def _weights(d: P.Poly, prods: List[P.Poly], rng, need: int, iterations: int) -> Tuple[Optional[List[Fraction]], int]:
    """(weights ``lam_i`` rounded to rationals, or None where HiGHS finds none within
    ``iterations`` simplex iterations; the iterations taken).  The linear program, in floating
    point: columns ``lam_i >= 0`` and, per monomial ``m`` of the rest, ``v_m >= 0`` at least
    the rest's negative part (rows ``sum_i lam_i*p_i[m] - v_m <= d_m``); maximise the rest's
    interval lower bound ``r_0 + sum_m (lo_m*r_m - (hi_m - lo_m)*v_m)``, which is
    ``lo_m*r_m`` where ``r_m >= 0`` and ``hi_m*r_m`` where not.  The big numbers (the
    monomials' bounds) sit in the objective only; a monomial wider than WIDE_MONO must keep a
    non-negative rest.  Deterministic: one thread, a fixed seed, no time limit."""
    nonc = sorted(rng, key=repr)
    n, k = len(prods), len(nonc)
    width = [_fl(rng[m][1] - rng[m][0]) for m in nonc]
    cost = np.zeros(n + k)
    for i, p in enumerate(prods):
        cost[i] = _fl(p.get((), 0) + sum(rng[m][0] * c for m, c in p.items() if m))
    cost[n:] = [w if w <= WIDE_MONO else 0.0 for w in width]          # minimise the loss
    inf = highspy.kHighsInf
    start, idx, val = [0], [], []
    col_of: Dict[P.Mono, List[Tuple[int, int]]] = {m: [] for m in nonc}
    for i, p in enumerate(prods):
        for m, c in p.items():
            if m:
                col_of[m].append((i, c))
    for j, m in enumerate(nonc):
        for i, c in col_of[m]:
            idx.append(i)
            val.append(_fl(c))
        idx.append(n + j)
        val.append(-1.0)
        start.append(len(idx))
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = n + k, k
    lp.col_cost_ = cost
    lp.col_lower_ = np.zeros(n + k)
    lp.col_upper_ = np.array([inf] * n + [inf if w <= WIDE_MONO else 0.0 for w in width])
    lp.row_lower_ = np.full(k, -inf)
    lp.row_upper_ = np.array([_fl(d.get(m, 0)) for m in nonc])
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.start_ = np.array(start, dtype=np.int32)
    lp.a_matrix_.index_ = np.array(idx, dtype=np.int32)
    lp.a_matrix_.value_ = np.array(val)
    lp.a_matrix_.num_col_, lp.a_matrix_.num_row_ = n + k, k
    h = highspy._core._Highs()          # the bare class: its constructor prints no banner
    for opt, v in (("output_flag", False), ("threads", 1), ("random_seed", 0),
                   ("simplex_iteration_limit", int(iterations))):
        h.setOptionValue(opt, v)
    if h.passModel(lp) != highspy.HighsStatus.kOk:
        return None, 0
    h.run()
    info = h.getInfo()
    its = int(info.simplex_iteration_count)
    if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        return None, its
    top = _fl(d.get((), 0) + sum(rng[m][0] * d.get(m, 0) for m in nonc)) - info.objective_function_value
    if top < need - 1:
        return None, its
    x = h.getSolution().col_value[:n]
    return [Fraction(v).limit_denominator(1 << 20) if v > 1e-9 else Fraction(0) for v in x], its


def _shown(F: P.Facts, d: P.Poly, need: int, prods: List[P.Poly], iterations: int) -> Tuple[bool, int]:
    """(``d >= need`` shown with weights on ``prods``, simplex iterations)."""
    monos = set(d).union(*prods)
    monos.discard(())
    rng = _ranges(F, monos)
    lam, its = _weights(d, prods, rng, need, iterations)
    # d takes integer values (integer coefficients, integer atoms): above need - 1 is >= need
    return lam is not None and _rest_lower(d, prods, lam, rng) > need - 1, its


def certify(F: P.Facts, d: P.Poly, need: int, rlimit: int = None) -> Tuple[bool, int]:
    """(``d >= need`` in every model of the facts is shown, resource units spent: ITER_RU a
    simplex iteration, at most ``rlimit``, default CERT_RU).  The greedy products first, then
    the divisor products (:func:`divisor_products`) where those show nothing.  False means
    "not shown", never "false"."""
    if F.bound(d)[0] >= need:
        return True, 0
    left = (rlimit or CERT_RU) // ITER_RU
    spent = 0
    for family in (products, divisor_products):
        prods = family(F, d)
        if not prods or spent >= left:
            continue
        ok, its = _shown(F, d, need, prods, left - spent)
        spent += its
        if ok:
            return True, spent * ITER_RU
    return False, spent * ITER_RU
