"""Polynomials over atoms, and bounds on them from facts: no-wrap without a solver.

A :data:`Poly` is the exact value of an IR node as a polynomial with integer coefficients
over *atoms*: a symbol, or a node that is not a sum or product (a division, a shift right, a
wrapped result, a fresh abstraction).  Every atom is a non-negative integer (an IR value is
unsigned), with an interval.  :class:`Facts` holds what the query's conditions say about
the atoms: ``a <= b + k`` (dominance: ``batch_id < batch``, ``seqlen_q == seqlen_k``),
monomial bounds ``m <= B`` (read off a condition ``c1*m1 + c2*m2 + ... <= K`` with positive
coefficients: the device-memory layer, the exact-argument layer) and divisibility
(``nhead_q mod nhead_k == 0``).  :meth:`Facts.bound` bounds a polynomial from them: the idea
of LLVM ScalarEvolution's no-wrap-from-ranges, with the memory constraint supplying the
ranges of products (issue 14, item 1).

Units: whatever the node's are (bytes for an address, elements for a count); bounds are
inclusive.  Imports nothing of addrsim outside the IR.
"""
from __future__ import annotations

import math
from itertools import product as _product
from typing import Dict, List, Optional, Tuple

Mono = Tuple[Tuple[object, int], ...]      # sorted ((atom key, power), ...); () is the constant
Poly = Dict[Mono, int]                     # monomial -> non-zero coefficient

MAX_TERMS = 48        # larger polynomials are not tracked (the node becomes an atom)
MAX_DEGREE = 8
MAX_REWRITES = 64     # dominance rewrites tried per monomial


def const(c: int) -> Poly:
    return {(): c} if c else {}


def atom(key) -> Poly:
    return {((key, 1),): 1}


def _accumulate(out: Poly, m: Mono, c: int) -> None:
    v = out.get(m, 0) + c
    if v:
        out[m] = v
    else:
        out.pop(m, None)


def add(a: Poly, b: Poly, sign: int = 1) -> Optional[Poly]:
    """``a + sign*b``; None when the result has more than MAX_TERMS monomials."""
    out = dict(a)
    for m, c in b.items():
        _accumulate(out, m, sign * c)
    return out if len(out) <= MAX_TERMS else None


def scale(a: Poly, k: int) -> Poly:
    return {m: c * k for m, c in a.items()} if k else {}


def _mono_mul(x: Mono, y: Mono) -> Mono:
    d = dict(x)
    for k, p in y:
        d[k] = d.get(k, 0) + p
    return tuple(sorted(d.items(), key=repr))


def mul(a: Poly, b: Poly) -> Optional[Poly]:
    """``a*b``; None past MAX_TERMS monomials or MAX_DEGREE."""
    if len(a) * len(b) > MAX_TERMS * 4:
        return None
    out: Poly = {}
    for (ma, ca), (mb, cb) in _product(a.items(), b.items()):
        m = _mono_mul(ma, mb)
        if sum(p for _, p in m) > MAX_DEGREE:
            return None
        _accumulate(out, m, ca * cb)
    return out if len(out) <= MAX_TERMS else None


def exact_quotient(a: Poly, b: Poly) -> Optional[Poly]:
    """``a / b`` as a polynomial when ``b`` is one monomial with a positive coefficient that
    divides every term of ``a`` (``(2*nhead_q*hdim_q) / hdim_q`` is ``2*nhead_q``); None
    otherwise.  Exact over the integers: floor(a / b) = a / b there (every atom is an
    integer and b >= 1 wherever it is used as a divisor)."""
    if len(b) != 1:
        return None
    (mb, cb), = b.items()
    if cb <= 0:
        return None
    out: Poly = {}
    for m, c in a.items():
        if c % cb:
            return None
        d = dict(m)
        for k, e in mb:
            if d.get(k, 0) < e:
                return None
            d[k] -= e
            if not d[k]:
                del d[k]
        _accumulate(out, tuple(sorted(d.items(), key=repr)), c // cb)
    return out


def substitute(p: Poly, key, q: Poly) -> Optional[Poly]:
    """``p`` with the atom ``key`` replaced by the polynomial ``q``; None past the limits."""
    out: Poly = {}
    for m, c in p.items():
        term: Optional[Poly] = {tuple((k, e) for k, e in m if k != key): c}
        for k, e in m:
            if k == key:
                for _ in range(e):
                    term = mul(term, q) if term is not None else None
        if term is None:
            return None
        out = add(out, term)
        if out is None:
            return None
    return out


def canon(p: Poly) -> tuple:
    """A hashable form of ``p``, the same for equal polynomials."""
    return tuple(sorted(p.items(), key=repr))


def normal(p: Optional[Poly], facts: "Facts", floors: Dict[object, Tuple[Poly, int]],
           quotients: Dict[Tuple[object, object], object], depth: int = 0) -> Optional[Poly]:
    """``p`` in a normal form equal to it in every model of the conditions behind ``facts``,
    so that two polynomials equal there more often have the same form:

    - a dividend ``c`` with ``c mod d == 0`` (``facts.divides``), ``d >= 1`` and a quotient
      atom ``q = floor(c / d)`` (``quotients[(c, d)]``) is ``d*q`` (the GQA ratio: ``nhead_q``
      is ``nhead_k * (nhead_q / nhead_k)``);
    - atoms known equal (``facts.same``: ``hdim_q == hdim_v``) are one atom;
    - an atom ``a`` that is a multiple of g > 1 (``facts.gran``) is ``g * a'``, ``a'`` the
      atom ``("div", a, g)``;
    - a floor atom ``floor(x / d)`` (``floors[key] = (x, d)``, d a constant >= 1, x the exact
      polynomial of the dividend) is ``K + floor(A / d)`` where ``x = d*K + A`` splits each
      coefficient c into ``d*(c // d) + c mod d`` (exact: every atom is an integer); the
      floor of A is 0 when the facts bound A inside [0, d), else the atom
      ``("floor", canon(A), d)``, one for every dividend with the same normal form (the
      floor of a slice offset read by both sides of a claim, ``4*floor(x/4)`` with x a
      multiple of 4: x).

    Units: those of ``p``.  None past the size limits (MAX_TERMS, MAX_DEGREE) or below
    depth 8 of nested floors."""
    if p is None or depth > 8:
        return None
    out: Poly = {}
    for m, c in p.items():
        term: Optional[Poly] = const(c)
        for k, e in m:
            f = _normal_atom(k, facts, floors, quotients, depth)
            for _ in range(e):
                term = mul(term, f) if term is not None and f is not None else None
        out = add(out, term) if term is not None and out is not None else None
        if out is None:
            return None
    return out


def _normal_atom(k, facts: "Facts", floors, quotients, depth: int) -> Optional[Poly]:
    """The normal form of the atom ``k`` (:func:`normal`)."""
    k = facts.rep(k)
    for (c, d), q in quotients.items():
        if facts.rep(c) == k and (c, d) in facts.divides and facts.iv(d)[0] >= 1:
            return mul(_normal_atom(d, facts, {}, {}, depth), atom(q))
    if k in floors:
        x, d = floors[k]
        nx = normal(x, facts, floors, quotients, depth + 1)
        if nx is None:
            return atom(k)
        whole = {m: c // d for m, c in nx.items() if c // d}
        rest = {m: c % d for m, c in nx.items() if c % d}
        if rest:
            lo, hi = facts.bound(rest)
            if not (0 <= lo and hi < d):
                return add(whole, atom(("floor", canon(rest), d)))
        return whole
    g = facts.gran.get(k, 1)
    return scale(atom(("div", k, g)), g) if g > 1 else atom(k)


def single_atom(p: Optional[Poly]):
    """The atom key when ``p`` is exactly one atom (coefficient 1), else None."""
    if p and len(p) == 1:
        (m, c), = p.items()
        if c == 1 and len(m) == 1 and m[0][1] == 1:
            return m[0][0]
    return None


class Facts:
    """What the conditions of one query say about its atoms (each fact holds in every model
    of the conditions).  ``interval[key]`` is an atom's (lo, hi); ``below[key]`` the list of
    (other, k) with ``key <= other + k``; ``mono`` the (monomial, B) with ``monomial <= B``;
    ``divides`` the (c, d) with ``c mod d == 0``."""

    def __init__(self):
        self.interval: Dict[object, Tuple[int, int]] = {}
        self.below: Dict[object, List[Tuple[object, int]]] = {}
        self.mono: List[Tuple[Dict[object, int], int]] = []
        self.divides = set()
        self.nonneg: List[Poly] = []          # polynomials >= 0 in every model (certificates)
        self._nonneg_seen = set()
        self.gran: Dict[object, int] = {}     # atom -> a constant that divides it in every model
        self.same: Dict[object, object] = {}  # atom -> an atom equal to it (a union-find forest)
        self._hi: Dict[Mono, int] = {}        # mono_hi's answers while interval, below and mono stay
        self._by_mono: Dict[Mono, List[int]] = {}   # monomial -> indexes in nonneg of the facts with it

    def copy(self) -> "Facts":
        """An independent copy (for facts that hold in one case of a split)."""
        f = Facts()
        f.interval = dict(self.interval)
        f.below = {k: list(v) for k, v in self.below.items()}
        f.mono = list(self.mono)
        f.divides = set(self.divides)
        f.nonneg = list(self.nonneg)
        f._nonneg_seen = set(self._nonneg_seen)
        f._by_mono = {k: list(v) for k, v in self._by_mono.items()}
        f.gran = dict(self.gran)
        f.same = dict(self.same)
        return f

    # ------------------------------------------------------------------ learning

    def set_interval(self, key, lo: int, hi: int) -> None:
        """Record that the atom ``key`` lies in [lo, hi] (replacing what was known)."""
        if self.interval.get(key) != (lo, hi):
            self.interval[key] = (lo, hi)
            self._hi.clear()

    def dominate(self, a, b, k: int) -> None:
        """Record ``a <= b + k`` (also as the fact ``b + k - a >= 0``)."""
        if a != b:
            self._hi.clear()
            self.below.setdefault(a, []).append((b, k))
            self.assume_nonneg(add(add(atom(b), atom(a), -1), const(k)))

    def upper(self, p: Poly, limit: int) -> None:
        """Record what ``p <= limit`` says about each monomial of ``p`` (all coefficients
        positive, every atom non-negative: each monomial is at most what the others leave)."""
        if not p or any(c <= 0 for c in p.values()):
            return
        lows = {m: c * self._mono_lo(m) for m, c in p.items()}
        total = sum(lows.values())
        for m, c in p.items():
            if m == ():
                continue
            room = limit - (total - lows[m])
            if room < 0:
                continue
            self.mono.append((dict(m), room // c))
            self._hi.clear()

    def equate(self, a, b) -> None:
        """Record ``a == b`` (``hdim_q == hdim_v``): both get one representative, the
        smaller by ``repr`` (the same in every run), with both granularities."""
        ra, rb = self.rep(a), self.rep(b)
        if ra != rb:
            keep, other = sorted((ra, rb), key=repr)
            self.same[other] = keep
            g = math.lcm(self.gran.get(keep, 1), self.gran.get(other, 1))
            if g > 1:
                self.gran[keep] = g

    def rep(self, key):
        """The representative of the atoms known equal to ``key``."""
        while key in self.same:
            key = self.same[key]
        return key

    def multiple_of(self, key, g: int) -> None:
        """Record that the atom ``key`` is a multiple of the constant ``g`` (``key mod g == 0``)."""
        if g > 1:
            self.gran[key] = math.lcm(self.gran.get(key, 1), g)
            r = self.rep(key)
            if r != key:
                self.gran[r] = math.lcm(self.gran.get(r, 1), g)

    def mono_gran(self, m: Mono) -> int:
        """A constant that divides the monomial ``m`` in every model (product of its atoms'
        granularities)."""
        g = 1
        for k, p in m:
            g *= self.gran.get(k, 1) ** p
        return g

    def tighten(self, p: Poly) -> Poly:
        """``p >= 0`` tightened by integrality: when every non-constant term of ``p`` is a
        multiple of h (coefficient times the monomial's granularity), p's value is congruent
        to its constant k mod h, so ``p >= 0`` implies ``p >= k mod h`` (gcd tightening: from
        ``seqlen_k + 191 - 192*U >= 0`` and ``seqlen_k mod 64 == 0``, ``seqlen_k + 128 - 192*U >= 0``)."""
        h = 0
        for m, c in p.items():
            if m != ():
                h = math.gcd(h, abs(c) * self.mono_gran(m))
        if h <= 1:
            return p
        k = p.get((), 0)
        return add(p, const(-(k % h))) or p

    def assume_nonneg(self, p: Optional[Poly]) -> None:
        """Record ``p >= 0`` (it holds in every model of the conditions); :meth:`tighten` is
        applied where it is used (granularities may be learnt later)."""
        if not p or len(p) > MAX_TERMS:
            return
        key = tuple(sorted(p.items(), key=repr))
        if key not in self._nonneg_seen:
            self._nonneg_seen.add(key)
            self.nonneg.append(p)
            for m in p:
                if m != ():
                    self._by_mono.setdefault(m, []).append(len(self.nonneg) - 1)

    def bound_by_facts(self, p: Poly, need_lo: int = None, need_hi: int = None,
                       steps: int = 3) -> Tuple[int, int]:
        """:meth:`bound`, tightened by the recorded facts ``g >= 0`` that share a monomial
        with ``p``: ``p <= p + g`` and ``p >= p - g``, each fact taken once, greedily while the
        bound improves, at most ``steps`` facts a side; a side already at ``need_lo`` (or
        ``need_hi``) or better is not tightened (default: always).  An array's entries in order
        (``sel_b - sel_a >= 0``) and its steps (``sel_b <= sel_a + seqlen_q``) bound the
        difference of two reads, which intervals alone, monomial by monomial, do not."""
        lo, hi = self.bound(p)
        if not self._by_mono or len(p) < 2:
            return lo, hi
        if need_lo is None or lo < need_lo:
            lo = self._side(p, -1, steps)[0]
        if need_hi is None or hi > need_hi:
            hi = self._side(p, 1, steps)[1]
        return lo, hi

    def _side(self, p: Poly, sign: int, steps: int) -> Tuple[int, int]:
        """(lo, hi) of ``p`` after adding ``sign`` times facts (see :meth:`bound_by_facts`):
        sign 1 lowers the upper bound, -1 raises the lower one."""
        best, used = self.bound(p), set()
        for _ in range(steps):
            pick = None
            for m in p:
                for i in self._by_mono.get(m, ()):
                    if i in used:
                        continue
                    q = add(p, self.nonneg[i], sign)
                    if q is None:
                        continue
                    b = self.bound(q) if q else (0, 0)
                    if (b[1] < best[1]) if sign > 0 else (b[0] > best[0]):
                        pick, best = (i, q), b
            if pick is None or not pick[1]:
                break
            used.add(pick[0])
            p = pick[1]
        return best

    def propagate(self, rounds: int = 3) -> None:
        """Tighten atoms' intervals from the linear facts (bound propagation): a fact
        ``rest - c*x >= 0`` (c > 0, x an atom) gives ``x <= floor(max(rest) / c)``, rounded down
        to x's granularity; ``rest + c*x >= 0`` gives ``x >= ceil(-max(rest) / c)``.  Integer
        rounding is what a rational certificate cannot do itself (``tid_x <= 255`` and
        ``64*q <= tid_x & 0x3c0 <= tid_x`` give ``q <= 3``, not 3.98)."""
        for _ in range(rounds):
            changed = False
            for g in self.nonneg:
                for m, c in g.items():
                    if len(m) != 1 or m[0][1] != 1:
                        continue
                    x = m[0][0]
                    rest = {k: v for k, v in g.items() if k != m}
                    top = self.bound(rest)[1]
                    lo, hi = self.iv(x)
                    gr = self.gran.get(x, 1)
                    if c < 0:
                        nhi = (top // -c) // gr * gr
                        if nhi < hi:
                            hi, changed = nhi, True
                    else:
                        nlo = -(top // c)
                        nlo = -(-nlo // gr) * gr
                        if nlo > lo:
                            lo, changed = nlo, True
                    self.set_interval(x, lo, hi)
            if not changed:
                return

    # ------------------------------------------------------------------ bounds

    def iv(self, key) -> Tuple[int, int]:
        return self.interval.get(key, (0, 1 << 64))

    def _mono_lo(self, m: Mono) -> int:
        lo = 1
        for k, p in m:
            lo *= self.iv(k)[0] ** p
        return lo

    def _mono_hi_range(self, m: Dict[object, int]) -> int:
        hi = 1
        for k, p in m.items():
            hi *= self.iv(k)[1] ** p
        return hi

    def _rewrites(self, m: Mono):
        """Monomials at least as large as ``m`` (each atom replaced by itself or by an atom
        that dominates it with k <= 0, transitively), as {atom: power}."""
        options = []
        for k, p in m:
            opts, seen, todo = [k], {k}, [k]
            while todo:
                a = todo.pop()
                for b, off in self.below.get(a, ()):
                    if off <= 0 and b not in seen:
                        seen.add(b)
                        opts.append(b)
                        todo.append(b)
            options.append([(o, p) for o in opts])
        for n, combo in enumerate(_product(*options)):
            if n >= MAX_REWRITES:
                return
            d: Dict[object, int] = {}
            for k, p in combo:
                d[k] = d.get(k, 0) + p
            yield d

    def mono_hi(self, m: Mono) -> int:
        """An upper bound of the monomial ``m``: the product of its atoms' upper bounds, or,
        after dominance rewrites, a monomial fact covering part of it (the rest by ranges).
        Memoised until an interval, a dominance or a monomial bound is learnt."""
        got = self._hi.get(m)
        if got is None:
            got = self._hi[m] = self._mono_hi(m)
        return got

    def _mono_hi(self, m: Mono) -> int:
        best = self._mono_hi_range(dict(m))
        for d in self._rewrites(m):
            best = min(best, self._mono_hi_range(d))
            for fm, fb in self.mono:
                inter = {k: min(p, fm[k]) for k, p in d.items() if k in fm}
                if not inter:
                    continue
                rest_f = 1
                for k, p in fm.items():
                    rest_f *= self.iv(k)[0] ** (p - inter.get(k, 0))
                if rest_f < 1:
                    continue
                rest_m = {k: p - inter.get(k, 0) for k, p in d.items() if p - inter.get(k, 0) > 0}
                best = min(best, (fb // rest_f) * self._mono_hi_range(rest_m))
        return best

    def bound(self, p: Poly) -> Tuple[int, int]:
        """(lo, hi) of the polynomial ``p`` in every model of the conditions."""
        lo = hi = 0
        for m, c in p.items():
            mlo = self._mono_lo(m)
            mhi = self.mono_hi(m) if m else 1
            if c > 0:
                lo, hi = lo + c * mlo, hi + c * mhi
            else:
                lo, hi = lo + c * mhi, hi + c * mlo
        return lo, hi


# ---------------------------------------------------------------------- identities mod 2**w

def ring(e, width: int, memo: Optional[dict] = None) -> Optional[Poly]:
    """The value of the IR node ``e`` as a polynomial modulo ``2**width`` over atoms keyed by
    their structural digest (:func:`addrsim.ir.expr.digest`): ``add``, ``sub``, ``mul`` and
    ``shl`` by a constant at ``width`` bits are the ring operations of Z/2**width (what the
    hardware's truncating operators are); ``zext`` and ``concat`` are exact (``concat(h, l)``
    is ``h * 2**|l| + l``, over the narrower values); any other node is an atom.  Coefficients are
    reduced mod ``2**width``.  None past MAX_TERMS monomials or MAX_DEGREE."""
    from addrsim.ir import expr as X
    memo = {} if memo is None else memo
    dig: dict = memo.setdefault("digest", {})
    m = (1 << width) - 1

    def narrow(n) -> Optional[Poly]:
        # a narrower value's exact value: zext is the value, concat(h, l) = h * 2**|l| + l
        if isinstance(n, X.Const):
            return const(n.value)
        if isinstance(n, X.Op) and n.op == "zext":
            return narrow(n.args[0])
        if isinstance(n, X.Op) and n.op == "concat":
            h, l = narrow(n.args[0]), narrow(n.args[1])
            return None if h is None or l is None else add(scale(h, 1 << n.args[1].width), l)
        return atom(("z", X.digest(n, dig)) if n.width < width else X.digest(n, dig))

    def go(n) -> Optional[Poly]:
        k = id(n)
        if k in memo:
            return memo[k]
        if isinstance(n, X.Const):
            r: Optional[Poly] = const(n.value & m)
        elif isinstance(n, X.Op) and n.width == width and n.op in ("add", "sub", "mul"):
            a, b = go(n.args[0]), go(n.args[1])
            r = None if a is None or b is None else (mul(a, b) if n.op == "mul" else
                                                      add(a, b, -1 if n.op == "sub" else 1))
        elif isinstance(n, X.Op) and n.width == width and n.op == "shl" and isinstance(n.args[1], X.Const):
            a = go(n.args[0])
            r = None if a is None else (scale(a, 1 << n.args[1].value) if n.args[1].value < width else {})
        elif isinstance(n, X.Op) and n.op in ("zext", "concat"):
            r = narrow(n)
        else:
            r = atom(X.digest(n, dig))
        if r is not None:
            r = {mo: c & m for mo, c in r.items() if c & m}
        memo[k] = r
        return r
    return go(e)


def ring_identity(claim) -> bool:
    """Does the 1-bit IR claim hold for every value of its symbols in hardware (bit-vector)
    arithmetic, by polynomial arithmetic modulo 2**w alone?  ``eq(a, b)`` when ``a - b`` is the
    zero polynomial mod 2**w (:func:`ring`), ``and`` of such, the constant 1.  Sound for the
    bit-vector reading only (over unbounded integers ``a`` and ``b`` may differ by a multiple
    of 2**w).  False means "not shown", never "false"."""
    from addrsim.ir import expr as X
    if isinstance(claim, X.Const):
        return claim.value == 1
    if not isinstance(claim, X.Op):
        return False
    if claim.op == "and" and claim.width == 1:
        return all(ring_identity(a) for a in claim.args)
    if claim.op != "eq":
        return False
    memo: dict = {}
    w = claim.args[0].width
    a, b = ring(claim.args[0], w, memo), ring(claim.args[1], w, memo)
    if a is None or b is None:
        return False
    d = add(a, b, -1)
    return d is not None and not any(c & ((1 << w) - 1) for c in d.values())


def cancelled(claim):
    """``eq(a, b)`` as ``eq(d, 0)``, d the polynomial ``a - b`` modulo 2**w (:func:`ring`)
    rebuilt as an expression, when that has fewer nodes; ``claim`` itself otherwise.  Equal
    in bit-vector arithmetic at every point (``a == b`` iff ``a - b == 0 mod 2**w``): a loop
    obligation whose V# stride products appear on both sides reaches the solvers without
    them (addrsim.prove.query)."""
    from addrsim.ir import expr as X
    if not (isinstance(claim, X.Op) and claim.op == "eq"):
        return claim
    w = claim.args[0].width
    memo: dict = {}
    a, b = ring(claim.args[0], w, memo), ring(claim.args[1], w, memo)
    d = add(a, b, -1) if a is not None and b is not None else None
    if d is None:
        return claim
    dig = memo["digest"]
    nodes = {}
    for n in X.walk(claim):
        k = X.digest(n, dig)
        nodes.setdefault(k, n)
        nodes.setdefault(("z", k), n)
    out = X.Const(0, w)
    for mono, c in sorted(d.items(), key=lambda mc: repr(mc[0])):
        c &= (1 << w) - 1
        if not c:
            continue
        term = X.Const(c, w)
        for key, e in mono:
            n = nodes.get(key)
            if n is None:
                return claim
            v = X.zext(n, w) if isinstance(key, tuple) and key[:1] == ("z",) else n
            for _ in range(e):
                term = X.mul(term, v)
        out = X.add(out, term)
    r = X.eq(out, X.Const(0, w))
    return r if sum(1 for _ in X.walk(r)) < sum(1 for _ in X.walk(claim)) else claim
