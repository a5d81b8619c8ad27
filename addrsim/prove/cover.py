"""The wrap cover of a bit-vector query: the few 32-bit wraps every counterexample goes through.

Owns :class:`WrapCover` and :func:`wrap_cover`, which counterexample minimisation
(:func:`addrsim.prove.query.minimize`) asks first when it must show that nothing below a
candidate fails, and when evaluation found no smaller failing shape.

Why it is sound.  The query's integer encoding E (:class:`addrsim.backends.z3_int.IntEncoder`,
bit-vector mode) is exact: every node that may leave its width gets ``mod 2**w`` around its
unwrapped term ``t``.  Take a set S of those nodes and the encoding E' that drops their ``mod``
(each ``t`` then assumed inside [0, 2**w)).  At any point where no node of S leaves its range,
E and E' take the same values (node by node, from the leaves up).  So when E' is unsatisfiable
(the claim holds wherever S does not wrap: what "int mode proves the claim" means for an
overflow), every counterexample makes some node of S wrap, and

    no counterexample inside the bounds B  <=  for each n in S: domain and B and t_n out of range is unsat.

Each such site obligation is small (one term of the address, not the whole claim): Z3 decides
it over the integers, and Bitwuzla over bit-vectors, where thin bands of solutions (a stride
that must be a multiple of 64 and stay exact while the next head's offset passes 2**32) are
found in a few hundred calls (measured 2026-12-03 on the README kernel's BSHD Q: 612 calls).
A model of a site obligation is a counterexample only if it breaks the claim when evaluated
(:func:`addrsim.prove.query.violates`); otherwise the cover says "unknown" and the caller asks
the whole query.

E' is first tried without a solver, by normal forms of both sides (:func:`addrsim.ir.poly.normal`:
the GQA ratio, multiples, equal shape variables, floors split at their divisor).  In a box,
a site that the query's encoding over the box's ranges keeps inside its width (intervals and
facts) is unsat there with no solver call (:meth:`WrapCover._exact_in`).

S starts as every wrapped node of an operator with a site form (add, sub, mul, shl by a
constant, a truncating extract), less the low halves of multiword values
(:func:`addrsim.backends.ideal.kept_wraps`).  A site whose obligation is undecided, or whose
model breaks nothing, is left out when E' still holds with its ``mod`` kept (the same kv_tile
product on both sides of the claim: a harmless wrap), so it does not block the proofs; that
is tried once per site, when needed, as S stays a cover for every later box.  May import addrsim.ir, addrsim.backends and
addrsim.prove.machines (never addrsim.prove.query: it is handed the Query).
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import z3

from addrsim.backends import bitwuzla_run
from addrsim.backends.ideal import kept_wraps
from addrsim.backends.z3_int import IntEncoder
from addrsim.backends.z3_run import RU, Isolated
from addrsim.ir.expr import Const, Expr

COVER_RU = RU // 4            # E' without every candidate's mod (once per query)
SHRINK_RU = RU                # E' with one more node's mod kept (once per candidate)
SHRINK_TOTAL_RU = 4 * RU      # all the sites tried for leaving out, per query
# A causal bottom-right kernel's 32-bit kv_tile*192 - (seqlen_k - seqlen_q) wraps as a signed
# offset and breaks nothing; showing so took up to 0.7 Mru (gfx942 causal_br a32 psskddv_group
# dQ BSHD, 19 sites).  At RU // 4 each (RU in all) such sites stayed, every box of the
# minimisation asked them of Bitwuzla (0.5 Mru, undecided), and nhead_q was not shown minimal.
SITE_INT_RU = RU // 20        # one site obligation over the integers (Z3)
SITE_BZLA_RU = RU // 2        # the same over bit-vectors (Bitwuzla), when Z3 did not decide it
# In a minimisation box of one value a site Z3's first try and Bitwuzla leave undecided may be
# decided by Z3 over the integers on a fresh solver (now asked before Bitwuzla there): gfx950
# hd192 a32_rtna_psskddv dK BHSD's batch = 1 box, whose 32-bit row offset wraps in a thin band
# (sat at 0.11 Mru, a counterexample), was undecided at 0.05 + 0.5 Mru, and the minimisation
# then reported batch=2 nhead_q=6 "not proven minimal" after 3.3 Mru more.  Asked in wider
# boxes too, such tries spent gfx942 causal_a16_rtna_pddv dK SBHD's budget undecided (nhead_q
# in [1, 127] and [1, 39]: 1 Mru each), and its shape was no longer shown least.
SITE_BOX_INT_RU = RU          # that site once more over the integers (fresh), in a box of one value
GLOBAL_BZLA_RU = 100          # a site over the whole domain, once (unsat there in 2 calls, 20 units)
SITE_OPS = ("add", "sub", "mul", "shl", "extract")


class WrapCover:
    """The sites of a query (see the module docstring), decided under variable bounds.
    ``used``: resource units spent so far (Bitwuzla calls at the query's rate)."""

    def __init__(self, q, sites: List[Tuple[Expr, z3.ArithRef, int]]):
        self.q, self.sites, self.used = q, sites, 0
        self._kept: set = set()       # ids of sites tried for leaving out (once each)
        self._shrunk = 0              # units spent trying
        self._bv_only: set = set()    # ids of sites Z3 over the integers left undecided once
        self._global: set = set()     # ids of sites Bitwuzla was asked over the whole domain
        self._int_failed: set = set() # ids of sites the second integer try left undecided once
        self._unsat: Dict[int, List[dict]] = {}   # site id -> boxes in which it cannot wrap
        self.base = self._solver({})

    def _solver(self, bounds: Dict[str, Tuple[int, int]]) -> Isolated:
        """A Z3 solver of the query's integer encoding (its conditions and side facts), with
        ``bounds`` (variable -> inclusive range) asserted."""
        s = Isolated()
        s.add(*self.q.enc.side, *[self.q.enc.holds(c) for c in self.q.conds])
        self._bound(s, bounds)
        return s

    def _bound(self, s: Isolated, bounds: Dict[str, Tuple[int, int]]) -> None:
        for k, (lo, hi) in bounds.items():
            v = self.q.enc.vars.get(k)
            if v is not None:
                s.add(v >= lo, v <= hi)

    def attempt(self, bounds: Dict[str, Tuple[int, int]], violates, bzla_ru_per_call: int,
                bzla_ru: int = SITE_BZLA_RU, int_ru: int = 0):
        """("unsat", None): no counterexample inside ``bounds`` (variable -> inclusive range);
        ("sat", model): a counterexample there (checked by ``violates``); ("unknown", None).
        ``bzla_ru``: resource units of each site's Bitwuzla call; ``int_ru``: those of one more
        integer try of a site Z3's first try left undecided, on a fresh solver, before
        Bitwuzla (0: none; minimisation's boxes of one value,
        SITE_BOX_INT_RU, where "nothing below" must be shown, not the query's own decision,
        whose boxes share one budget: there it made gfx950 hd192 a32_rtna_psskddv V SBHD
        unknown)."""
        base = self.base
        exact = None                          # built when a site needs it (often none does)
        base.push()
        try:
            self._bound(base, bounds)
            for site in list(self.sites):
                if any(_inside(bounds, b) for b in self._unsat.get(id(site[0]), ())):
                    continue                  # unsat in a box that holds this one: no solver call
                if exact is None:
                    exact = self._exact_in(bounds)
                if id(site[0]) in exact:
                    self._unsat.setdefault(id(site[0]), []).append(dict(bounds))
                    continue                  # inside its width all over the box: no solver call
                got, m = self._site(*site, bounds, violates, bzla_ru_per_call, bzla_ru, int_ru)
                if got == "unsat":
                    self._unsat.setdefault(id(site[0]), []).append(dict(bounds))
                if got == "unknown" and self._leave_out(site):
                    continue
                if got != "unsat":
                    return got, m
            return "unsat", None
        finally:
            base.pop()

    def _exact_in(self, bounds: Dict[str, Tuple[int, int]]) -> set:
        """Ids of the nodes that cannot leave their width inside ``bounds``: the query's
        integer encoding built afresh over the narrowed ranges, whose intervals and facts
        (device memory, the grid) then bound them (:meth:`IntEncoder._fits`).  On gfx942
        a32_rtna_psskddv dV SBHD a box of seqlen_k <= 4095 holds no wrap, which neither Z3
        (0.05 Mru) nor Bitwuzla (0.5 Mru) showed for its three 32-bit sums."""
        q = self.q
        if not bounds:
            return q.enc.exact
        enc = IntEncoder(narrowed(q.ranges, bounds), facts_from=q.conds if q.use_facts else None,
                         signed_ok=q.signed_lazy)
        for c in q.conds:
            enc.holds(c)
        enc.enc(q.goal)
        return enc.exact

    def _leave_out(self, site) -> bool:
        """Drop ``site`` from the cover when E' still holds with its ``mod`` kept (a harmless
        wrap, the same on both sides of the claim, whose models never break it); tried once
        per site, within SHRINK_RU, and not past SHRINK_TOTAL_RU in all."""
        if id(site[0]) in self._kept or len(self.sites) < 2 or self._shrunk >= SHRINK_TOTAL_RU:
            return False
        self._kept.add(id(site[0]))
        rest = [x for x in self.sites if x is not site]
        ok, u = _without(self.q, rest, SHRINK_RU)
        self.used += u
        self._shrunk += u
        if ok:
            self.sites = rest
        return ok

    def _site(self, n, t, w, bounds, violates, per_call, bzla_ru, int_ru: int = 0):
        if id(n) not in self._bv_only:
            got = self._site_int(t, w, SITE_INT_RU, violates)
            if got[0] != "unknown":
                return got
            # Z3 over the integers did not prove this site here (a thin band, or a model that
            # breaks nothing): later boxes go to Bitwuzla directly (on the README kernel's dK
            # SBHD such calls were 41 of 316 site calls and 11 s of its 30 s)
            self._bv_only.add(id(n))
        if int_ru and id(n) not in self._int_failed:
            # a box of one value: a fresh Z3 over the integers before Bitwuzla (results
            # 2026-12-07e item 6: 8 more counterexamples of the wheel proven least, 0 lost,
            # +1% units; asked after Bitwuzla it proved fewer)
            got = self._site_int(t, w, int_ru, violates, bounds)
            if got[0] != "unknown":
                return got
            self._int_failed.add(id(n))         # not asked so again: its units are the minimisation's
        return self._site_bv(n, bounds, violates, per_call, bzla_ru)

    def _site_int(self, t, w, ru: int, violates, bounds=None):
        """The site obligation over the integers (Z3), within ``ru``: on the base, with the
        box's bounds pushed, or (``bounds`` given) on a fresh solver of the same assertions,
        whose search does not start from where the base's earlier questions left it (the
        gfx950 hd192 dK BHSD site above: undecided at 1 Mru on the base, sat at 0.11 Mru
        fresh).  ("unsat", None), ("sat", a model that breaks the claim), or ("unknown",
        None) (undecided, or a model that breaks nothing).  A fresh solver stopped by the wall
        clock's safety net marks the base so (:func:`addrsim.prove.query._covered` then keeps
        the answer out of the cache)."""
        q = self.q
        s = self.base if bounds is None else self._solver(bounds)
        s.push()
        s.add(z3.Or(t < 0, t >= (1 << w)))
        before = s.used
        r, _ = s.check(ru)
        self.used += s.used - before
        self.base.wallclock = self.base.wallclock or s.wallclock
        m = None
        if r == z3.sat:
            m = {k: s.value(v) for k, v in q.enc.vars.items()}
            m.update(q._arrays(s.value, lambda x: q.enc.memo[id(x)][0]))
        s.pop()
        if r == z3.unsat:
            return "unsat", None
        if m is not None and violates(m):
            return "sat", m
        return "unknown", None

    def _site_bv(self, n, bounds, violates, per_call, bzla_ru):
        """The site obligation over bit-vectors, in Bitwuzla: the query's own formula with
        the node's operands read at twice their width.  A site already unsat in some box is
        asked once over the whole domain, within GLOBAL_BZLA_RU: unsat there, no
        counterexample wraps it, and no box asks it again (gfx950 a16_psskddv's address scan
        asked 25 such sites in 5 to 11 boxes each, 80 ms a call, where the whole domain was
        unsat in 2 calls; asking every site so, before any box, added 39 undecided calls)."""
        if not bitwuzla_run.AVAILABLE:
            return "unknown", None
        if bounds and id(n) not in self._global and self._unsat.get(id(n)):
            self._global.add(id(n))
            if self._bv_call(n, {}, violates, per_call, GLOBAL_BZLA_RU)[0] == "unsat":
                self._unsat.setdefault(id(n), []).append({})
                return "unsat", None
        return self._bv_call(n, bounds, violates, per_call, bzla_ru)

    def _bv_call(self, n, bounds, violates, per_call, bzla_ru):
        """One Bitwuzla call of the site obligation inside ``bounds`` ({}: the whole domain)."""
        q = self.q
        s = q._bv()
        f = site_bv(n, q.bmemo)
        if f is None:
            return "unknown", None
        s.push_text()                 # Bitwuzla's question alone: Z3 never checks it
        try:
            for k, (lo, hi) in bounds.items():
                v = q.bvars.get(k)
                if v is not None:
                    s.add(z3.ULE(z3.BitVecVal(lo, v.size()), v), z3.ULE(v, z3.BitVecVal(hi, v.size())))
            s.add(f)
            ans, m, spent, _ = q.bitwuzla_check(s, max(1, bzla_ru // per_call), session=True)
        finally:
            s.pop_text()
        self.used += spent * per_call
        if ans == "unsat":
            return "unsat", None
        if ans == "sat" and violates(m):
            return "sat", m
        return "unknown", None


def narrowed(ranges: Dict[str, Tuple[int, int]], bounds: Dict[str, Tuple[int, int]]) -> Dict[str, Tuple[int, int]]:
    """``ranges`` (variable -> inclusive range) intersected with ``bounds``; a variable whose
    intersection is empty gets lo > hi."""
    out = dict(ranges)
    for k, (lo, hi) in bounds.items():
        a, b = out.get(k, (lo, hi))
        out[k] = (max(a, lo), min(b, hi))
    return out


def _inside(inner: Dict[str, Tuple[int, int]], outer: Dict[str, Tuple[int, int]]) -> bool:
    """Is the box ``inner`` inside ``outer`` (variable -> inclusive range; a variable a box
    does not name takes its whole range)?  A site that cannot wrap in ``outer`` then cannot
    wrap in ``inner`` either: the obligation of ``inner`` has every constraint of ``outer``'s."""
    for k, (lo, hi) in outer.items():
        if k not in inner:
            return False
        a, b = inner[k]
        if a < lo or b > hi:
            return False
    return True


def site_bv(n: Expr, memo) -> Optional[z3.BoolRef]:
    """The bit-vector formula "node ``n`` leaves its width" over its operands' terms in
    ``memo`` (node id -> Z3 bit-vector term); None for an operator without one."""
    try:
        a = [memo[id(x)] for x in n.args]
    except KeyError:
        return None
    w = n.width
    if n.op == "add":
        return z3.UGE(z3.ZeroExt(w, a[0]) + z3.ZeroExt(w, a[1]), 1 << w)
    if n.op == "mul":
        return z3.UGE(z3.ZeroExt(w, a[0]) * z3.ZeroExt(w, a[1]), 1 << w)
    if n.op == "sub":
        return z3.ULT(a[0], a[1])
    if n.op == "shl" and isinstance(n.args[1], Const):
        s = n.args[1].value
        return z3.LShR(a[0], w - s) != 0 if 0 < s < w else None
    if n.op == "extract":
        hi, lo = n.params
        top = a[0].size()
        return z3.LShR(a[0], hi + 1) != 0 if hi + 1 < top else None
    return None


def wrap_cover(q, free_only: bool = False) -> Tuple[Optional[WrapCover], int]:
    """(the cover of the bit-vector Query ``q``, resource units spent building it).  The
    cover is None when there is none: int mode, no wrapped node, or the claim not shown
    without the candidates' wraps (E' not unsat within COVER_RU: the bug is not an
    overflow, or the solver could not tell; with ``free_only``, E' not shown by normal
    forms, without a solver)."""
    if q.arith != "bv" or not q.enc.wrapped:
        return None, 0
    keep = kept_wraps(q.conds + [q.goal])
    cands = [(n, t, w) for n, t, w in q.enc.wrapped
             if id(n) not in keep and n.op in SITE_OPS and (n.op != "shl" or isinstance(n.args[1], Const))]
    if not cands:
        return None, 0
    ok, used = _without(q, cands, 0 if free_only else COVER_RU)
    return (WrapCover(q, cands) if ok else None), used


def _without(q, sites, rlimit: int) -> Tuple[bool, int]:
    """Is the query unsat once the ``mod`` of every node of ``sites`` is dropped (E')?
    (answer, units spent; ``rlimit`` 0: by normal forms only, no solver).  A check the wall
    clock's safety net stopped marks ``q`` (its "no cover" then depends on the machine's load,
    and the query's answer is kept out of the cache)."""
    ids = frozenset(id(n) for n, _, _ in sites) | frozenset(q.enc.nowrap)
    facts = q.conds if q.use_facts else None
    if facts is not None and IntEncoder(q.ranges, nowrap=ids, facts_from=facts,
                                        signed_ok=q.signed_lazy).implied(q.goal, certificates=False):
        return True, 0          # the same normal form on both sides (addrsim.ir.poly.normal)
    if rlimit <= 0:
        return False, 0
    e2 = IntEncoder(q.ranges, nowrap=ids, facts_from=facts, signed_ok=q.signed_lazy)    # afresh: the check above adds facts
    iso = Isolated()
    iso.add(*[e2.holds(c) for c in q.conds], e2.enc(q.goal) == 0, *e2.side)
    r, _ = iso.check(rlimit)
    q.wallclock = q.wallclock or iso.wallclock
    return r == z3.unsat, iso.used
