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
monomial left negative, transitively (at most MAX_PRODUCTS); the weights come from Z3 over
linear real arithmetic (a linear program) within a resource limit, and the certificate is
then checked here in exact rationals, so a "yes" does not rest on the solver.

Example (dK's bounds in bwd_hd128_bf16_a16_rtne, BHSD): the store's offset
``256*seqlen_k*(batch_id*nhead_q + head_id) + 49152*kv_tile + lane offset (<= 13296)``, wrapped
at 32 bits, plus 16 bytes stays below ``256*batch*nhead_q*seqlen_k``: products of
``batch - 1 - batch_id >= 0`` by ``256*seqlen_k*nhead_q``, of ``nhead_q - 1 - head_id >= 0``
by ``256*seqlen_k``, and ``U - 1 - kv_tile >= 0``, ``seqlen_k + 128 - 192*U >= 0`` (U the
launch's tile count ``(seqlen_k + 191) / 192``, tightened by ``seqlen_k mod 64 == 0``).

Units: those of the polynomial (bytes for an address).  Imports addrsim.ir, z3 and :mod:`addrsim.backends.z3_run`.
"""
from __future__ import annotations

import heapq
from fractions import Fraction
from typing import Dict, List, Optional, Tuple

import z3

from addrsim.ir import poly as P
from addrsim.backends.z3_run import SAFETY_MS, _rlimit_count

MAX_PRODUCTS = 400
"""Products of a fact by a monomial tried per certificate (the dK BSHD example needs about 15 of the 400 its search makes)."""

CERT_RU = 2_000_000
"""Resource units of the linear program (Z3 linear real arithmetic) per certificate."""


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


def _num(v) -> str:
    return str(v) if v >= 0 else f"(- {-v})"


def _program(d: P.Poly, prods: List[P.Poly], monos, rng, need: int) -> str:
    """The linear program as SMT-LIB2 text (QF_LRA): weights ``l_i >= 0``, and for every
    monomial of the rest a ``t_j`` at most its coefficient times either end of the
    monomial's range; the sum of the ``t_j`` and the constant at least ``need``."""
    out = [f"(declare-fun l{i} () Real)" for i in range(len(prods))]
    out += [f"(assert (>= l{i} 0.0))" for i in range(len(prods))]
    low = []
    for j, m in enumerate(monos):
        terms = [f"(* {_num(p[m])} l{i})" for i, p in enumerate(prods) if m in p]
        r = f"(- {_num(d.get(m, 0))} (+ 0 {' '.join(terms)}))" if terms else _num(d.get(m, 0))
        if m == ():
            low.append(r)
            continue
        lo, hi = rng[m]
        out.append(f"(declare-fun t{j} () Real)")
        out.append(f"(assert (<= t{j} (* {_num(lo)} {r})))")
        out.append(f"(assert (<= t{j} (* {_num(hi)} {r})))")
        low.append(f"t{j}")
    out.append(f"(assert (>= (+ 0 {' '.join(low)}) {_num(need)}))")
    return "\n".join(out)


def certify(F: P.Facts, d: P.Poly, need: int, rlimit: int = None) -> Tuple[bool, int]:
    """(``d >= need`` in every model of the facts is shown, resource units spent).  False
    means "not shown", never "false"."""
    if F.bound(d)[0] >= need:
        return True, 0
    prods = products(F, d)
    if not prods:
        return False, 0
    monos = sorted(set(d).union(*prods), key=repr)
    rng = _ranges(F, monos)
    ctx = z3.Context()
    s = z3.SolverFor("QF_LRA", ctx=ctx)
    s.set("ctrl_c", False)               # SIGINT is the CLI's, never a canceled answer
    s.set("rlimit", int(rlimit or CERT_RU))
    s.set("timeout", SAFETY_MS)
    s.add(z3.parse_smt2_string(_program(d, prods, monos, rng, need), ctx=ctx))
    ans = s.check()
    used = _rlimit_count(s)
    if ans != z3.sat:
        return False, used
    mdl = s.model()
    vals = []
    for i in range(len(prods)):
        x = mdl.eval(z3.Real(f"l{i}", ctx), model_completion=True)
        vals.append(Fraction(x.numerator_as_long(), x.denominator_as_long()))
    return _rest_lower(d, prods, vals, rng) >= need, used
