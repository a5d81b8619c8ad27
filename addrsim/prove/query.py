"""Solver queries: the negated claim under the domain, decided, and minimised when refuted.

Owns :class:`Query` (in order: the identity by polynomial arithmetic, no solver; after the
probe, a certificate of products of facts for a comparison (:meth:`Query.certified`); the integer
encoding, whose no-wrap facts come from the conditions; range obligations discharged;
bit-vectors in Z3 then Bitwuzla; the integer stage once more without facts), :func:`solve`,
:func:`decide_query` (a vectorised concrete probe, then the solver, then minimisation),
:func:`minimize` (the lexicographically smallest shape: batch, nhead_q, seqlen_q, ...; each
"nothing smaller fails" decided on the narrowed sub-domain, :meth:`Query.solve_within`),
:func:`query_key` (the structural cache key), :func:`array_facts` and the variable ranges.
Every model a solver returns is checked by evaluation (:func:`violates`) before it is believed.  May import addrsim.ir, addrsim.backends, addrsim.model and
prove.probe/machines/options.
"""
from __future__ import annotations

import hashlib
import itertools
import math
from typing import Dict, List, Optional, Tuple

import numpy as np
import z3

from addrsim.ir import expr as X
from addrsim.ir.expr import Const, Expr
from addrsim.ir.bounded import ite_conditions, strengthened, with_conditions, without_dead_carries
from addrsim.prove.idioms import drop_zero_guards
from addrsim.ir.poly import cancelled, ring_identity
from addrsim.model.models import SHAPE_VARS, Problem
from addrsim.prove.probe import _Batch, _last_tiles, crossing, crossings_at, names_read, probe, shrink, uniform_arrays
from addrsim.backends.vector import NoVec
from addrsim.backends.pyfunc import CHECKERS
from addrsim.backends.z3_bv import holds_bv, to_bv
from addrsim.backends.z3_int import IntEncoder, signed_reads
from addrsim.backends.ideal import ideal_evaluate, kept_wraps
from addrsim.backends import bitwuzla_run
from addrsim.backends.z3_run import RU, WALLCLOCK_NOTE, Isolated

from addrsim.prove.cover import SITE_BOX_INT_RU, SITE_BZLA_RU, narrowed, wrap_cover
from addrsim.prove.machines import LANE, PTR_LIMIT


def query_key(tag: tuple, claim: Expr, conds: List[Expr], rename: Optional[Dict[str, str]] = None) -> str:
    """Structural key of a query (``tag``, the claim, the conditions in any order, duplicates
    once): a stable hex digest (BLAKE2b over :func:`addrsim.ir.expr.digest` of each part), the
    same in every process and run, so the cache of decided queries is shared by sibling
    kernels, workers and runs (:mod:`addrsim.prove.store`).  ``rename``: symbol names the
    digest uses instead (:func:`addrsim.ir.expr.canonical_names`)."""
    memo: dict = {}
    h = hashlib.blake2b(repr(tag).encode(), digest_size=20)
    h.update(X.digest(claim, memo, rename))
    for d in sorted({X.digest(c, memo, rename) for c in conds}):
        h.update(d)
    return h.hexdigest()


def decide_query(conds, claim, ranges, rlimit, prob, min_ru, arith="bv", quick: bool = False,
                 cap: Optional[int] = None, shown_least: bool = True):
    """(verdict, model, reason, minimal, query, used): a concrete probe first, then the solver;
    a counterexample is minimised within ``min_ru`` resource units.  ``rlimit``: resource
    units of one solver call; ``used``: the units every call spent (the same in every run).
    ``arith`` "bv" or "int" (:mod:`addrsim.backends.ideal`).  ``query`` is the Query when
    the answer is "unknown" (its SMT-LIB2 text) or when the wall clock's safety net stopped
    one of its solver calls (the answer, a shape not shown least above all, may then depend
    on the machine's load: the callers do not cache it), else None.  ``quick``: first the integer
    encoding on a solver asked once (:func:`_quick`).  ``cap``: units the solver stages may
    spend together (:attr:`Query.cap`; minimisation keeps its own ``min_ru``).  ``shown_least``
    False: the model is lowered by evaluation and the probe only, never shown least by the
    solver (a witness of a proved check: any shape of the domain will do, a small one reads
    best; gfx942 a32_rtna_psskddv_group spent 9% of its time showing its witnesses least)."""
    grid = prob.grid
    names = {"batch": grid["z"].name, "head": grid["y"].name, "tile": grid["x"].name, "lane": LANE}
    order = list(ORDER) + [grid["z"].name, grid["y"].name, grid["x"].name, LANE]
    keep = kept_wraps(conds + [claim]) if arith == "int" else None
    q = Query(conds, claim, ranges, rlimit, arith)
    q.cap = cap
    model = None if q.identity else probe(conds, claim, ranges, order, names, keep=keep,
                                              arrays=getattr(prob, "array_specs", None))
    if model is not None:
        if min_ru <= 0:
            return "refuted", model, None, False, None, 0
        model, minimal = minimize(q, model, prob, min_ru, solver=shown_least)
        return "refuted", model, None, minimal, _asked(q, "refuted"), q.used
    got = _quick(q) if quick and arith == "bv" and not q.identity else None
    if got == "proved":
        return "proved", None, None, True, _asked(q, "proved"), q.used
    if got is not None:
        model, minimal = minimize(q, q.complete(got), prob, min_ru, solver=shown_least)
        return "refuted", model, None, minimal, _asked(q, "refuted"), q.used
    if arith == "bv" and not q.identity and _proved_strengthened(q):
        return "proved", None, None, True, _asked(q, "proved"), q.used
    cover: dict = {"grid": names}
    verdict, model, why = _early_cover(q, cover)
    if verdict == "unknown" and not quick:
        verdict, model, why = _quick_then_cover(q, cover)
    if verdict == "unknown":
        verdict, model, why = q.solve()
    if verdict == "unknown" and arith == "bv" and not q.wallclock:
        verdict, model, why = _decided_by_cover(q, cover, why, COVER_BOXES_RU)
    if verdict != "refuted":
        return verdict, None, why, True, _asked(q, verdict), q.used
    model, minimal = minimize(q, q.complete(model), prob, min_ru, cover, solver=shown_least)
    return "refuted", model, None, minimal, _asked(q, "refuted"), q.used


def _asked(q: "Query", verdict: str) -> Optional["Query"]:
    """The query :func:`decide_query` returns beside ``verdict``: ``q`` when undecided or
    touched by the wall clock's safety net, else None."""
    return q if verdict == "unknown" or q.wallclock else None


QUICK_RU = RU // 4
"""Units of :func:`_quick`: the README kernel's routed Q SBHD bounds queries (56, two checks)
are all unsat there within 0.19 Mru (39 within 0.1), where certificates and the pushed
solvers spent the whole check budget (60 Mru) on the first of 28
(benchmarks/results/speed_2026-12-05d.txt, finding 1)."""


def _quick(q: "Query"):
    """The query's exact integer encoding (every node that may leave its width under ``mod``;
    the binary32 division idiom over-approximated) on a fresh solver asked once, within
    QUICK_RU: Z3 runs its preprocessing only on a solver that was never pushed, and decides
    in thousands of units claims its incremental core leaves undecided.  "proved" (unsat: the
    encoding over-approximates the machine), a model that breaks the claim by evaluation, or
    None.  Its units count in ``q.used``."""
    iso = q._int_solver()
    r, _ = q._check(iso, QUICK_RU)
    q._spent += iso.used
    if r == z3.unsat:
        return "proved"
    if r == z3.sat:
        mdl = q.complete(q._int_model(iso, q.enc))
        if violates(q.conds, q.claim, mdl):
            return mdl
    return None


EARLY_COVER_RU = RU
"""Units of the wrap cover tried before the whole query (:func:`_early_cover`): the 24
pinned wheel kernels' checks took 3400 s with it, 4220 s without (2026-12-03).  Not built
with Z3 here: so built (COVER_RU) and given 3 Mru, gfx942 hd128 a16_rtna_pddv K SBHD went from
27.1 to 1.9 Mru, but over the wheel 100 K/V SBHD checks of many queries (proved or
unsupported before) spent their 20 Mru check budget on covers that decide nothing and ended
unknown (benchmarks/results/speed_2026-12-07e.txt, item 2)."""


def _early_cover(q: "Query", cover: dict):
    """The wrap cover before the whole query, when it costs no solver to build (E' shown by
    normal forms, :func:`addrsim.prove.cover.wrap_cover` with ``free_only``), within
    EARLY_COVER_RU: an overflow is then decided box by box before Z3 and Bitwuzla spend
    their units on the whole formula (gfx942 a32_rtna_psskddv dV SBHD: 20 Mru of undecided
    whole-query calls before the cover refuted it).  ("proved" | "refuted" | "unknown",
    model, reason); ``cover`` keeps the cover for what follows."""
    if q.arith != "bv" or q.identity or q.wallclock:
        return "unknown", None, None
    return _cover_first(q, cover, EARLY_COVER_RU, free_only=True)


def _cover_first(q: "Query", cover: dict, budget_ru: int, free_only: bool):
    """The wrap cover built (by normal forms alone with ``free_only``, else with Z3 too) and
    decided box by box (:func:`_decided_by_cover`) within ``budget_ru`` resource units,
    building included: ("proved" | "refuted" | "unknown", model, None).  ``cover`` keeps
    what was built: a cover built with Z3 also when there is none (not built twice), a free
    one only when found (Z3 may still find one later)."""
    built, used = wrap_cover(q, free_only=free_only)
    q._spent += used
    if built is not None or not free_only:
        cover["cover"] = built
    if built is None:
        return "unknown", None, None
    verdict, model, _ = _decided_by_cover(q, cover, "", budget_ru - used)
    return verdict, model, None


QUICK_COVER_RU = 3 * RU
"""Units of the wrap cover built with Z3 before the whole query (:func:`_quick_then_cover`),
building included."""


def _quick_then_cover(q: "Query", cover: dict):
    """Before the whole query, where the free early cover was not built: certificates
    (:meth:`Query.certified`, no solver), the exact integer encoding on a fresh solver
    (:func:`_quick`, 0.25 Mru: "proved", or a model that breaks the claim), then the wrap
    cover built with Z3 and decided box by box within QUICK_COVER_RU.  gfx942 hd128
    a16_rtna_pddv K SBHD: its first query spent 24 Mru in the whole query's stages,
    undecided, before the cover refuted it in 2.4 Mru; so ordered the check went from 27.1 to
    3.3 Mru with the same least shape; the whole wheel 4165 -> 3047 Mru with no verdict,
    cause or reachability changed and 12 more counterexamples shown least
    (benchmarks/results/speed_2026-12-07f.txt items 2 and 3).  The cover alone first (no
    ``_quick``) made 100 K/V SBHD checks of the wheel unknown: their 16 to 48 queries, each
    proved by one cheap solver call before, spent up to 3 Mru each on covers that decided
    nothing (benchmarks/results/speed_2026-12-07e.txt items 2 and 4); without certificates
    first, the README kernel's dK BHSD bounds check went from 0.2 to 40 Mru (each of its 11
    queries proved by certificates at 0.005 Mru paid 3.5 Mru of cover first).  ("proved" |
    "refuted" | "unknown", model, None); ``cover`` keeps the cover (or None) for what
    follows.  Skipped where one solver call's units (``q.rlimit``) or the query's
    (``q.cap``) are below QUICK_COVER_RU: a budget asked that small is kept to."""
    small = min(q.rlimit, q.cap or q.rlimit) < QUICK_COVER_RU     # a solver call (or the query) may spend less
    if "cover" in cover or q.arith != "bv" or q.identity or small:
        return "unknown", None, None
    if q.certified():
        return "proved", None, None       # no solver (the README kernel's dK bounds queries)
    got = _quick(q)
    if got == "proved":
        return "proved", None, None
    if got is not None:
        return "refuted", got, None
    return _cover_first(q, cover, QUICK_COVER_RU, free_only=False)


STRENGTHEN_RU = 2 * RU
"""Units of the attempt on the strengthened claim (:func:`_proved_strengthened`), every stage
together: the README kernel's K BSHD bounds claim took 0.9 Mru there, where the claim itself
was undecided at 55 Mru."""


def _proved_strengthened(q: "Query") -> bool:
    """Is the query proved through a stronger claim with no 32-bit wrap on the small side of
    its comparisons (:func:`addrsim.ir.bounded.strengthened`: a bounds claim's offset taken
    exact)?  Only a proof is used: a model of the stronger claim is no counterexample.  Its
    units count in ``q.used``."""
    g = strengthened(q.goal, q.conds, q.ranges)
    if g is q.goal:
        return False
    if _proved_case(q, q.conds, g):
        return True
    # split on the conditions of its ite terms (a tile step taken or not): each case is a
    # polynomial comparison the certificates or Z3 over the integers decide
    cs = ite_conditions(g, SPLIT_CONDITIONS)
    if not cs:
        return False
    memo: dict = {}
    keys = [X.digest(c, memo) for c in cs]
    for values in itertools.product((0, 1), repeat=len(cs)):
        lits = [c if v else X.bnot(c) for c, v in zip(cs, values)]
        if not _proved_case(q, q.conds + lits, with_conditions(g, dict(zip(keys, values))), CASE_RU):
            return False
    return True


SPLIT_CONDITIONS = 3
"""Most ite conditions a strengthened claim is split on (2**3 cases): the README kernel's K
BSHD bounds claim has 3 (a min of the tiles left, and two of its comparisons); its 8 cases
were proved in 14 Mru where the claim itself was undecided at 55 Mru."""


CASE_RU = 4 * RU
"""Units of one case of the split, every stage together (the README kernel's K BSHD cases
took 0.9 to 2.9 Mru)."""


def proved_within(conds, goal, ranges, ru: int, arith: str) -> Tuple[bool, int, bool]:
    """(proved, units spent, cut by the wall clock): ``goal`` under ``conds`` with every stage
    of the query together within ``ru`` resource units.  Only a proof is read: a caller that
    asks a stronger or narrower question than its own has no use for the models."""
    sub = Query(conds, goal, ranges, ru, arith)
    sub.cap = ru
    proved = sub.solve()[0] == "proved"
    return proved, sub.used, sub.wallclock


def _proved_case(q: "Query", conds, goal, ru: int = STRENGTHEN_RU) -> bool:
    """:func:`proved_within` on ``q``'s ranges; its units count in ``q.used``."""
    proved, used, wall = proved_within(conds, goal, q.ranges, ru, q.arith)
    q._spent += used
    q.wallclock = q.wallclock or wall
    return proved


COVER_BOXES_RU = 3 * RU     # the same once the solvers left the whole query undecided
PIECE_BZLA_RU = RU // 10
"""Units of one site's Bitwuzla call in a piece of a batch box (:func:`_sub_boxes`), a fifth
of a batch box's (SITE_BZLA_RU): the site models found in pieces took 0.02 to 0.05 Mru, and
a piece left undecided at 0.5 Mru cost as much as ten decided ones (gfx942 a16_rtna_pddv V
SBHD, 2026-12-03)."""


SPLIT_ORDER = ("batch", "nhead_q", "seqlen_q", "seqlen_k")
"""The shape variables a box of the wrap cover is split along, in turn (the order in which a
minimal counterexample fixes them), each only where the claim reads it (:func:`_split_vars`)."""


def _split_vars(q: "Query") -> List[str]:
    """The variables of SPLIT_ORDER that ``q``'s goal reads, directly or through a condition
    on one of its workgroup ids, tile or lane variables (``kv_tile < ceil(seqlen_k / 192)``
    makes seqlen_k matter where the goal reads kv_tile): cutting along any other variable
    leaves every piece as hard as the box (gfx942 a32_rtna_psskddv dV SBHD, whose wrap needs
    a long seqlen_k, was cut 21 times along seqlen_q per nhead_q box)."""
    goal = set(X.symbols(q.goal))
    local = goal - set(ORDER)
    read = set(goal)
    for c in q.conds:
        cs = set(X.symbols(c))
        if cs & local:
            read |= cs
    return [v for v in SPLIT_ORDER if v in read and v in q.ranges and v in q.enc.vars]


def _geometric(lo: int, hi: int) -> List[Tuple[int, int]]:
    """[lo, hi] cut into [lo, lo], [lo+1, lo+2], [lo+3, lo+6], ...: each twice as wide as
    the one before, the last one ending at ``hi``; a partition of [lo, hi]."""
    out, a, w = [], lo, 1
    while a <= hi:
        out.append((a, min(hi, a + w - 1)))
        a, w = a + w, 2 * w
    return out


def _sub_boxes(q: "Query", box: Dict[str, Tuple[int, int]]) -> List[Dict[str, Tuple[int, int]]]:
    """``box`` cut along the first variable of SPLIT_ORDER that the query reads
    (:func:`_split_vars`) and ``box`` does not bound yet (:func:`_geometric` over its range);
    once every one is bounded, the first that is not a single value is halved (Bitwuzla finds
    a wrap of ``R*row mod 2**32`` into a head's window at one nhead_q, not over a range of
    them).  A partition of ``box``, so a claim that holds in every piece holds in ``box``.
    Empty when every variable is a single value."""
    if q.split_vars is None:
        q.split_vars = _split_vars(q)
    for v in q.split_vars:
        if v not in box:
            return [dict(box, **{v: r}) for r in _geometric(*q.ranges[v])]
    for v in q.split_vars:        # every one cut: halve the first that is not one value yet
        lo, hi = box[v]
        if lo < hi:
            mid = (lo + hi) // 2
            return [dict(box, **{v: (lo, mid)}), dict(box, **{v: (mid + 1, hi)})]
    return []


def _batch_boxes(q: "Query") -> List[Dict[str, Tuple[int, int]]]:
    """The batch range of ``q`` cut into boxes [1, 1], [2, 3], [4, 7], ... (a partition of
    the domain); one box, the whole domain, when the query does not read the batch."""
    if "batch" not in q.ranges or "batch" not in q.enc.vars:
        return [{}]
    return [{"batch": r} for r in _geometric(*q.ranges["batch"])]


COVER_MAX_BOXES = 2048
"""Most boxes one cover decision visits (with the units, a bound that holds when boxes cost
nothing: decided by the encoding over their ranges, or in a test's stub)."""


def _decided_by_cover(q: "Query", memo: dict, why: str, budget_ru: int):
    """The bit-vector query ``q`` that the solvers left undecided (``why``), decided by its
    wrap cover (:mod:`addrsim.prove.cover`) box by box: first over the batch
    (:func:`_batch_boxes`: a box of one batch value is far easier than the whole domain; on
    the README kernel's K SBHD, [1, 1] gives a counterexample in 0.03 Mru where the whole
    domain gave up), and a box the cover cannot decide is cut along nhead_q, then seqlen_q
    (:func:`_sub_boxes`), depth first, smallest values first.  On gfx942 a16_rtna_pddv K
    SBHD the batch box [1, 1] is undecided, and its piece nhead_q in [16, 31] gives a
    counterexample in 0.02 Mru.  "refuted" with the first site model that breaks the claim,
    "proved" when no wrap site can leave its width in any piece (and the claim holds wherever
    none does), else still "unknown" (``why``, and what the cover could not tell).  Pieces
    start while less than ``budget_ru`` resource units are spent (the first one always);
    they count in ``q.used``."""
    start, undecided, first, boxes = q.used, False, True, 0
    stack = list(reversed(_batch_boxes(q)))
    while stack:
        box = stack.pop()
        boxes += 1
        if not first and (q.used - start >= budget_ru or boxes > COVER_MAX_BOXES):
            undecided = True
            break
        first = False
        got = _covered(q, box, memo, SITE_BZLA_RU if len(box) < 2 else PIECE_BZLA_RU)
        if memo.get("cover") is None:
            return "unknown", None, why
        if got is None:
            subs = _sub_boxes(q, box)
            undecided = undecided or not subs
            stack.extend(reversed(subs))
        elif got[0] == "sat":
            return "refuted", got[1], None
    if not undecided:
        return "proved", None, None
    return "unknown", None, why + "; the wrap cover did not decide it either"


def array_facts(exprs: List[Expr], prob: Problem, memo: Optional[dict] = None) -> List[Expr]:
    """What the models say about the sequence-start arrays read in ``exprs``: for every pair
    of reads of one array, a smaller offset reads a value no larger (non-decreasing), reads
    4 bytes apart differ by at least ``step_min`` and at most ``step_max``, the first entry is ``first`` and entry
    ``count - 1`` is ``last`` (1-bit IR constraints).  ``memo`` (optional, shared by the
    queries of one check): each expression's reads and each pair's facts, built once (gfx942
    causal_br a32 psskddv_group: 1434 queries of 8 reads each, 9 s of a warm scan's 36 s)."""
    memo = {} if memo is None else memo
    reads: Dict[str, List[Expr]] = {}
    for e in exprs:
        for n in _array_reads(e, memo):
            reads.setdefault(n.args[0].name, []).append(n)
    out: List[Expr] = []
    for name, nodes in reads.items():
        spec = prob.array_specs.get(name)
        arr = nodes[0].args[0]
        extra = []
        if spec:
            if "first" in spec:
                extra.append((X.select(arr, Const(0, 64)), spec["first"]))
            if "last" in spec and "count" in spec:
                last_off = X.mul(X.sub(spec["count"], Const(1, 64)), Const(4, 64))
                extra.append((X.select(arr, last_off), spec["last"]))
        for n, v in extra:
            out.append(X.eq(X.zext(n, 64), v))
        uniq, seen = [], set()
        for n in nodes + [n for n, _ in extra]:
            k = _offset_text(n.args[1], memo)
            if k not in seen:
                seen.add(k)
                uniq.append((k, n))
        step = (spec or {}).get("step_max")
        smin = (spec or {}).get("step_min")
        for i, (ka, a) in enumerate(uniq):
            for kb, b in uniq[i + 1:]:
                key = ("pair", name, ka, kb)
                hit = memo.get(key)
                if hit is None or hit[0] is not step or hit[1] is not smin:
                    hit = memo[key] = (step, smin, _pair_facts(a, b, step, smin))
                out += hit[2]
    return out


def _array_reads(e: Expr, memo: dict) -> List[Expr]:
    """The reads ``sel(A, offset)`` of sequence-start arrays in ``e``, in walk order (memoised
    with ``e`` kept alive, so its id names it)."""
    key = ("reads", id(e))
    if key not in memo:
        memo[key] = (e, [n for n in X.walk(e) if isinstance(n, X.Op) and n.op == "sel" and n.args[0].kind == "array"])
    return memo[key][1]


def _offset_text(off: Expr, memo: dict) -> str:
    key = ("text", id(off))
    if key not in memo:
        memo[key] = (off, repr(off))
    return memo[key][1]


def _pair_facts(a: Expr, b: Expr, step, smin) -> List[Expr]:
    """:func:`array_facts` of two reads of one array: order, and the step between neighbours,
    written as sums of 32-bit entries and shape sizes (``vh <= vl + step``), which no 64-bit
    value leaves: a difference ``vh - vl`` wraps whenever the pair is read the other way
    round, and each such node was a no-wrap obligation of every group-mode query (56 per
    array of 8 reads, 64% of the discharge units of gfx950 hd192 causal a32 rtna
    psskddv_group, all satisfiable).  With the order fact the two forms state the same."""
    oa, ob = a.args[1], b.args[1]
    va, vb = X.zext(a, 64), X.zext(b, 64)
    out = [X.bor(X.band(X.ule(oa, ob), X.ule(va, vb)), X.band(X.ult(ob, oa), X.ule(vb, va)))]
    for (lo, hi, vl, vh) in ((oa, ob, va, vb), (ob, oa, vb, va)):
        nxt = X.bnot(X.eq(hi, X.add(lo, Const(4, 64))))
        if step is not None:
            out.append(X.bor(nxt, X.ule(vh, X.add(vl, step))))
        if smin is not None:
            out.append(X.bor(nxt, X.ule(X.add(vl, smin), vh)))
    return out


def ranges_of(prob: Problem, bounds: Optional[Dict[str, Tuple[int, int]]] = None) -> Dict[str, Tuple[int, int]]:
    """Each shape variable's, grid id's and the lane's (lo, hi), from ``bounds`` (default
    the problem's, which its domain implies)."""
    bounds = prob.bounds if bounds is None else bounds
    r = {v: bounds[v] for v in SHAPE_VARS}
    g = prob.grid
    r[g["z"].name] = (0, bounds["batch"][1] - 1)
    r[g["y"].name] = (0, bounds["nhead_q"][1] - 1)
    r[g["x"].name] = (0, bounds["seqlen_k"][1])
    r[LANE] = (0, 1023)
    return r


def weakened_query(conds: List[Expr], prob: Problem) -> Optional[Tuple[List[Expr], Dict[str, Tuple[int, int]]]]:
    """(``conds`` with the problem's memory condition replaced by its weaker one, the ranges
    of that domain: :meth:`addrsim.model.problem.Problem.weakened`), or None when there is
    no weaker one or ``conds`` do not hold the problem's (found by identity).  Every model
    of ``conds`` is one of the result, so the weakened query is asked first: its proof is a
    proof of ``conds``, and its least counterexample is theirs when it :func:`meets` them.
    Sibling families that differ only in the dQ accumulator (a16, a32) ask the same weakened
    queries, so the query store shares their answers."""
    w = prob.weakened()
    if w is None or not any(c is w[0] for c in conds):
        return None
    return [w[1] if c is w[0] else c for c in conds], ranges_of(prob, w[2])


def meets(conds: List[Expr], claim: Expr, model: Dict, arith: str = "bv") -> bool:
    """Does ``model`` give every symbol of ``conds`` and ``claim``, hold every one of
    ``conds`` and break ``claim`` by evaluation (``arith`` "int": the wraps the ideal
    encoding keeps, :func:`addrsim.backends.ideal.kept_wraps`)?"""
    need = {s for e in conds + [claim] for s in X.symbols(e)}
    keep = kept_wraps(conds + [claim]) if arith == "int" else None
    return all(s in model or s + "[]" in model for s in need) and violates(conds, claim, model, keep)


def _ptr_ranges(exprs) -> Dict[str, Tuple[int, int]]:
    out = {}
    for e in exprs:
        for s in X.symbols(e).values():
            if s.kind == "ptr":
                out[s.name] = (0, PTR_LIMIT - 1)
    return out


class SignedReads:
    """The ids of the nodes of ``roots`` read only as signed values
    (:func:`addrsim.backends.z3_int.signed_reads`; bit-vector mode only, else empty), computed
    on the first call and shared by a query's encoders.  It holds the roots, never the
    query: an encoder that held ``lambda: query.signed_ok`` made a reference cycle (query ->
    encoder -> query) that kept each query's Z3 contexts alive until Python's cyclic
    collector ran, which it does by object counts, blind to Z3's memory (the wheel scan's
    peak worker memory went from 1.03 GB to 3.98 GB in the session that added it)."""

    __slots__ = ("roots", "arith", "value")

    def __init__(self, roots: List[Expr], arith: str):
        self.roots, self.arith, self.value = roots, arith, None

    def __call__(self) -> frozenset:
        if self.value is None:
            self.value = signed_reads(self.roots) if self.arith == "bv" else frozenset()
        return self.value


class Query:
    """The negated claim under the conditions, encoded once over integers (exact encoding)
    and lazily over bit-vectors; bounds on single variables are added per call.

    In bv mode the integer encoding first learns the conditions' facts (dominance such as
    ``batch_id < batch``, monomial bounds from the memory and exact-argument layers,
    divisibility; :class:`addrsim.ir.poly.Facts`): a product they keep inside its width gets
    no ``mod``, and when the claim's two sides are then one polynomial over atoms
    (``identity``) it is proved with no solver call at all.  A comparison (a bounds claim:
    offset + size <= extent) may be shown by a certificate, products of the facts weighed by
    a linear program (``certified``, tried once, after the concrete probe found nothing).

    Every check runs in a solver of its own context on a resource limit
    (:class:`addrsim.backends.z3_run.Isolated`): ``rlimit`` resource units per call, the
    the integer stage INT_SHARE of it in bv mode (all of it in int mode), its first try
    FIRST_TRY_RU, each no-wrap obligation DISCHARGE_RU (DISCHARGE_TOTAL_RU for all).  ``used`` is the units spent so far: a function of the query alone."""

    def __init__(self, conds: List[Expr], claim: Expr, ranges, rlimit: int, arith: str = "bv",
                 facts: bool = True, fold: bool = True, certificates: bool = True, cones: Optional[dict] = None):
        self.conds, self.claim, self.rlimit = conds, claim, int(rlimit)
        self.cones = cones                    # cone sub-query -> proved, shared by one check's queries
        self.arith = arith
        # what the solvers decide: in bit-vector mode the claim with its double-word carry chains
        # folded into sums (equal at every point, X.fold_carries); models are checked against
        # the claim itself (violates)
        self.ranges = dict(ranges)
        self.ranges.update(_ptr_ranges(conds + [claim]))
        self.goal = X.fold_carries(claim) if arith == "bv" and fold else claim
        if arith == "bv" and fold:
            # and without the carries the conditions' bounds and the ranges rule out (a V#
            # base: its stride field and 48-bit sums, addrsim.ir.bounded)
            # (twice: a carry removed may leave a pair that folds, and the fold a carry to remove)
            for _ in range(2):
                before = self.goal
                self.goal = X.fold_carries(without_dead_carries(self.goal, conds, self.ranges))
                if self.goal is before:
                    break
            if any(v.kind == "carried" for v in X.symbols(self.goal).values()):
                # a loop obligation compares two copies of one body (addrsim.engine.loops):
                # the terms they share (the stride products of a V#) cancel before any solver
                self.goal = cancelled(self.goal)
        self.use_facts = facts and arith != "int"
        self._plain_tried = not self.use_facts
        self.split_vars: Optional[List[str]] = None   # the wrap cover's cut order (_split_vars)
        self.keep = kept_wraps(conds + [claim]) if arith == "int" else frozenset()
        self.signed_lazy = SignedReads(conds + [self.goal], arith)
        self.enc = self._encoder()
        if self.use_facts:
            # a proved float-reciprocal division keeps its binary32 term for d == 0
            # (addrsim.prove.idioms); where the facts show d > 0 (the GQA ratio) it is udiv alone
            before = self.goal
            self.goal = drop_zero_guards(self.goal, lambda d: self.enc.implied(
                X.ult(Const(0, d.width), d), certificates=False))
            if self.goal is not before:      # other readers: the signed reads afresh
                self.signed_lazy = SignedReads(conds + [self.goal], arith)
                self.enc = self._encoder()
        # symbols the rewrites cancelled (a bounds claim's pointer): still variables of every
        # encoding, in their ranges, so every model names them and the claim evaluates
        kept = set(X.symbols(self.goal)).union(*[X.symbols(c) for c in conds])
        self.lost = [v for k, v in sorted(X.symbols(claim).items()) if k not in kept and v.kind != "array"]
        self._with_lost(self.enc)
        self._spent = 0                       # units of solvers already dropped
        self._si: Optional[Isolated] = None   # the integer solver, built when first asked (:attr:`si`)
        # proved by polynomial arithmetic (issue 14, item 1): over atoms with the facts' no-wrap, or
        # (bit-vector mode) modulo 2**w once the double-word carry chains are folded into sums
        self.identity = (self.enc.implied(self.goal, certificates=False)
                         or (arith == "bv" and ring_identity(self.goal)))
        self._certified = None if certificates else False   # shown by certificates (tried once, in solve)
        self._cone_tried = False              # the goal's cone of conditions alone (tried once, in solve)
        self.box_cone = False                 # the cone by every solver first (a minimisation box), not the integers
        self._cone_last = False               # the cone by every solver after the whole query (tried once, in solve)
        self._relaxed_tried = False           # the integer stage with its bit masks relaxed (once, in solve)
        self.sb = None
        self._bzla = None      # (the solver it mirrors, bitwuzla_run.Session): one Bitwuzla instance per query
        self.bvars = None
        self.bmemo = None
        self.use_bv = False
        self.discharged = False
        self.wallclock = False                # a check stopped at the wall-clock safety limit
        self.cap: Optional[int] = None        # units this query may spend in all (None: each stage its own)
        self.sels = [n for e in conds + [self.goal] for n in X.walk(e) if isinstance(n, X.Op) and n.op == "sel"]
        self._reading: Dict[str, List[Expr]] = {}

    def complete(self, model: Optional[dict]) -> Optional[dict]:
        """``model`` with every symbol the rewrites cancelled (:attr:`lost`) given the low end
        of its range where the solver that made it did not name it (a wrap cover's site
        model): the claim then evaluates at it, with the same value (the symbol cancels)."""
        if model is None or not self.lost:
            return model
        out = dict(model)
        for v in self.lost:
            out.setdefault(v.name, self.ranges.get(v.name, (0, 0))[0])
        return out

    def conds_reading(self, name: str) -> List[Expr]:
        """The conditions that read the symbol ``name`` (memoised)."""
        if name not in self._reading:
            self._reading[name] = [c for c in self.conds if name in X.symbols(c)]
        return self._reading[name]

    @property
    def si(self) -> Isolated:
        """The solver of the integer encoding, built on first use (most queries are decided
        before it: by identity, the probe or a wrap cover; building it cost 12.5 s of the
        README kernel's cold scan, 39 ms per query)."""
        if self._si is None:
            self._si = self._int_solver()
        return self._si

    @property
    def used(self) -> int:
        """Resource units spent by every check of this query."""
        return self._spent + (self._si.used if self._si is not None else 0) + (self.sb.used if self.sb is not None else 0)

    @property
    def signed_ok(self) -> frozenset:
        """Ids of the nodes of the conditions and goal read only as signed values
        (:func:`addrsim.backends.z3_int.signed_reads`; bit-vector mode only), computed when an
        encoder first meets a sum or difference that may be negative (most queries have none:
        the walk cost 1% of the README kernel's checks)."""
        return self.signed_lazy()

    def _encoder(self, nowrap=frozenset(), masks: bool = True) -> IntEncoder:
        """The integer encoding; in bv mode it learns the conditions' facts first (no-wrap
        from dominance and monomial bounds, :class:`addrsim.ir.poly.Facts`).  ``masks``
        False: an ``and`` with a contiguous mask is a fresh integer (:meth:`_relaxed`)."""
        return IntEncoder(self.ranges, ideal=self.arith == "int", keep=self.keep, nowrap=nowrap,
                          facts_from=self.conds if self.use_facts else None, masks=masks,
                          signed_ok=self.signed_lazy)

    def _relaxed(self, bounds, iru):
        """The integer stage once more with its exact bit masks relaxed to fresh integers, when
        the exact encoding was undecided: an over-approximation, so "unsat" is still a proof,
        and a model is believed only when it breaks the claim by evaluation; Z3 finds such
        models sooner in the freer encoding (the README kernel's K SBHD address: 0.39 s where
        the exact encoding gave up after 0.82 s and Bitwuzla after 1.2 s).  Once per query, on
        a solver of its own within ``iru``; (z3 result, violating model or None).  Its units
        count in ``used``."""
        if self._relaxed_tried or not self.enc.exact_masks:
            return z3.unknown, None
        self._relaxed_tried = True
        enc = self._with_lost(self._encoder(masks=False))
        iso = self._int_solver(enc)
        iso.push()
        for k, (lo, hi) in bounds.items():
            v = enc.vars.get(k)
            if v is not None:
                iso.add(v >= lo, v <= hi)
        r, _ = self._check(iso, iru)
        self._spent += iso.used
        mdl = None
        if r == z3.sat:
            mdl = self._int_model(iso, enc)
            if not violates(self.conds, self.claim, mdl):
                mdl = None
        return r, mdl

    def certified(self) -> bool:
        """Is the claim shown by certificates over the conditions' facts (products of facts
        weighed by a linear program, :mod:`addrsim.backends.positivity`)?  Tried once per
        query (after the concrete probe has found no counterexample); its units count in
        ``used``."""
        if self._certified is None:
            before = self.enc.cert_used
            self._certified = bool(self.use_facts) and self.enc.implied(self.goal)
            self._spent += self.enc.cert_used - before
        return self._certified

    def _int_solver(self, enc: Optional[IntEncoder] = None) -> Isolated:
        """A solver of the conditions and the negated goal over ``enc`` (default: the query's)."""
        enc = enc or self.enc
        iso = Isolated()
        iso.add(*[enc.holds(c) for c in self.conds], enc.enc(self.goal) == 0, *enc.side)
        return iso

    def _with_lost(self, enc: IntEncoder) -> IntEncoder:
        """``enc`` with the symbols the rewrites cancelled (:attr:`lost`) encoded: still
        variables, in their ranges, so that every model names them and the claim evaluates."""
        for v in self.lost:
            enc.enc(v)
        return enc

    def _left(self) -> Optional[int]:
        """Units left under ``cap`` (None: no cap)."""
        return None if self.cap is None else self.cap - self.used

    def _check(self, iso: Isolated, rlimit: int):
        left = self._left()
        if left is not None:
            if left <= 0:
                return z3.unknown, "the attempt's resource units are spent"
            rlimit = min(rlimit, left)
        r, why = iso.check(rlimit)
        if r == z3.unknown and iso.wallclock:
            self.wallclock = True
        return r, why

    def _int_check(self, bounds, rlimit):
        """One check of the integer query under extra variable bounds: (z3 result, model or
        None, reason_unknown)."""
        s = self.si
        s.push()
        for k, (lo, hi) in bounds.items():
            v = self.enc.vars.get(k)
            if v is not None:
                s.add(v >= lo, v <= hi)
        r, why = self._check(s, rlimit)
        mdl = None
        if r == z3.sat:
            mdl = self._int_model(s, self.enc)
        s.pop()
        return r, mdl, why

    def _discharge(self):
        """Prove, node by node, that the terms the integer encoding wraps stay in range
        under the conditions (DISCHARGE_RU each, DISCHARGE_TOTAL_RU in all); re-encode the
        query without the ``mod`` of each one proved."""
        self.discharged = True
        base = Isolated()
        base.add(*self.enc.side, *[self.enc.holds(c) for c in self.conds])
        nowrap = set()
        left = self._left()
        total = DISCHARGE_TOTAL_RU if left is None else max(0, min(DISCHARGE_TOTAL_RU, left))
        for node, t, w in self.enc.wrapped:
            if base.used >= total:
                break
            base.push()
            base.add(z3.Or(t < 0, t >= (1 << w)))
            if self._check(base, min(DISCHARGE_RU, total - base.used))[0] == z3.unsat:
                nowrap.add(id(node))
            base.pop()
        self._spent += base.used
        if not nowrap:
            return
        self.discharged = "changed"
        self.nowrap_proved = len(nowrap)
        self.enc = self._with_lost(self._encoder(nowrap))
        if self._si is not None:
            self._spent += self._si.used
        self._si = None                       # rebuilt on the new encoding when next asked

    def smt2(self) -> str:
        """The obligation last given to the solver, as SMT-LIB2 text (declarations, the
        conditions, the negated claim, ``(check-sat)``), replayable with any solver."""
        s = getattr(self, "last", None) or self.si
        head = (f"; addrsim obligation ({self.arith} mode): sat means a counterexample, unsat a proof\n"
                f"; symbols: {', '.join(sorted(self.ranges))}\n")
        return head + s.smt2()

    def _int_model(self, iso: Isolated, enc: IntEncoder) -> Dict[str, int]:
        """The last model of ``iso`` over the integer encoding ``enc``: every variable and
        the array contents it assigns."""
        mdl = {k: iso.value(v) for k, v in enc.vars.items()}
        mdl.update(self._arrays(iso.value, lambda n: enc.memo[id(n)][0]))
        return mdl

    def _arrays(self, value, term_of) -> Dict[str, Dict[int, int]]:
        """Array contents a solver model assigns: name + "[]" -> {byte offset: value}."""
        out: Dict[str, Dict[int, int]] = {}
        for n in self.sels:
            try:
                off, val = value(term_of(n.args[1])), value(term_of(n))
            except (KeyError, z3.Z3Exception):
                continue
            if off is not None and val is not None:
                out.setdefault(n.args[0].name + "[]", {})[off & X.mask(64)] = val & X.mask(32)
        return out

    def _bv(self) -> Isolated:
        if self.sb is None:
            memo, vs = {}, {}
            fs = [holds_bv(c, memo, vs) for c in self.conds]
            fs.append(to_bv(self.goal, memo, vs) == z3.BitVecVal(0, 1))
            for v in self.lost:
                to_bv(v, memo, vs)
            for name, v in vs.items():
                if name in self.ranges:
                    lo, hi = self.ranges[name]
                    n = v.size()
                    fs += [z3.ULE(z3.BitVecVal(lo, n), v), z3.ULE(v, z3.BitVecVal(min(hi, (1 << n) - 1), n))]
            self.sb, self.bvars, self.bmemo = Isolated(), vs, memo
            self.sb.add(*fs)
        return self.sb

    def solve(self, bounds: Dict[str, Tuple[int, int]] = None, rlimit: Optional[int] = None,
              int_rlimit: Optional[int] = None):
        """("proved", None, None) | ("refuted", model, None) | ("unknown", None, why), each
        solver call within ``rlimit`` resource units (default: the query's), the integer
        stage within ``int_rlimit`` (default: INT_SHARE of it in bv mode, all in int mode)."""
        bounds = bounds or {}
        ru = int(rlimit or self.rlimit)
        iru = int_rlimit or (ru if self.arith == "int" else max(1, int(ru * INT_SHARE)))
        if self.identity or self.certified():
            return "proved", None, None    # without a solver: one polynomial, or products of facts
        if self._cone_tried is False:
            self._cone_tried = True
            if self._cone_proves(bounds, ru, iru, self._cone_first_whole()):
                return "proved", None, None
        if not self.use_bv:
            r, mdl, why = self._int_stage(bounds, iru)
            if r == z3.unknown and self.arith == "bv":
                r2, m2 = self._relaxed(bounds, iru)
                if r2 == z3.unsat or m2 is not None:
                    r, mdl = r2, m2
            if r == z3.unsat:
                return "proved", None, None
            if mdl is not None and violates(self.conds, self.claim, mdl, self.keep if self.arith == "int" else None):
                return "refuted", mdl, None
            if self.arith == "int":
                self.last = self.si
                if r == z3.unknown:
                    return "unknown", None, _gave_up(why, ru, self.wallclock)
                return "unknown", None, ("the integer encoding over-approximates " + "; ".join(sorted(set(
                    self.enc.abstracted)))[:300] + ", and its model is no counterexample")
            self.use_bv = True   # integer side inconclusive or abstracted: bit-vectors from now on
        s = self._bv()
        s.push()
        for k, (lo, hi) in bounds.items():
            v = self.bvars.get(k)
            if v is not None:
                n = v.size()
                s.add(z3.ULE(z3.BitVecVal(lo, n), v), z3.ULE(v, z3.BitVecVal(hi, n)))
        r, why = self._check(s, ru)
        mdl = None
        if r == z3.sat:
            mdl = {k: s.value(v) for k, v in self.bvars.items()}
            mdl.update(self._arrays(s.value, lambda n: self.bmemo[id(n)]))
        elif r == z3.unknown and not self.wallclock and bitwuzla_run.AVAILABLE:
            r, mdl = self._bitwuzla(s, ru, bool(bounds))
        s.pop()
        self.last = s
        if r == z3.unsat:
            return "proved", None, None
        if r == z3.sat:
            if violates(self.conds, self.claim, mdl):
                return "refuted", mdl, None
            if self.sels:
                return "unknown", None, "Bitwuzla's model leaves array contents addrsim cannot read back"
            return "unknown", None, "solver model does not violate the claim when evaluated (engine bug)"
        if not self._cone_first_whole() and not self._cone_last and not self.wallclock:
            # the cone by every solver, once the whole query is left undecided (gfx942
            # hd64_a16_rtna's Q SBHD is proved only so)
            self._cone_last = True
            if self._cone_proves(bounds, ru, iru, True):
                return "proved", None, None
        plain = self._plain(bounds, iru) if not self.wallclock else None
        if plain is not None:
            return plain
        return "unknown", None, _gave_up(why, ru, self.wallclock, bitwuzla_run.AVAILABLE)

    def _cone_first_whole(self) -> bool:
        """Is the goal's cone decided by every solver before the whole query?  Inside a
        minimisation box (:attr:`box_cone`), and for a loop obligation (``cones``: its goal
        has cancelled to pointer terms, and the obligations of one loop share the cone: by
        the whole query first, gfx942 hd64_a16_rtna's Q SBHD spent its 20 Mru check budget
        before the loop was proved); not for an access's claim over the whole domain, where
        the whole query mostly finds a counterexample (4222 of 5742 wheel checks)."""
        return self.box_cone or self.cones is not None

    def _cone_proves(self, bounds, ru, iru, every: bool) -> bool:
        """Is the goal proved from the conditions in its cone alone (those that share a
        symbol with it, transitively)?  Fewer hypotheses, so a proof holds for the whole
        query; tried when the cone leaves some condition out (a loop obligation whose goal
        has cancelled to its pointer terms does not need the path conditions and their
        products), once by every solver (``every``: first where :meth:`_cone_first_whole`,
        else after the whole query is undecided) and, when not first, once before by the
        integer stage alone (:meth:`_int_stage`: unsat, or the goal an identity).  Its units
        (the query's budget: a cut integer stage costs more) count in ``used``.  With
        ``cones`` (one dict per check), a cone sub-query already decided for
        an earlier obligation of the same check (the translation obligations of one loop
        share it: 4.9 Mru each on bwd_hd128_bf16_a32_rtna's Q SBHD) is not asked again; the
        order of a check's obligations is fixed, so its spending is the same in every run."""
        syms = set(X.symbols(self.goal))
        left = [(c, set(X.symbols(c))) for c in self.conds]
        keep: List[Expr] = []
        grew = True
        while grew:
            grew = False
            rest = []
            for c, cs in left:
                if cs & syms:
                    keep.append(c)
                    syms |= cs
                    grew = True
                else:
                    rest.append((c, cs))
            left = rest
        if not left or not keep:
            return False
        key = None
        if self.cones is not None and not bounds:
            key = query_key(("cone", self.arith, ru, iru, every), self.goal, keep)
            if key in self.cones:
                return self.cones[key]          # decided for an earlier obligation of the same check
        sub = Query(keep, self.claim, self.ranges, self.rlimit, self.arith, certificates=False)
        sub._cone_tried = sub._cone_last = True
        sub.cap = self._left()
        try:
            if every:
                proved = sub.solve(bounds, ru, iru)[0] == "proved"
            else:
                # over the whole domain the integer stage first: its unsat is a proof (the
                # encoding over-approximates the machine); after an undecided integer stage
                # the bit-vector solvers proved 1 of 14 cones of the gfx942 a32_rtna_psskddv
                # kernel, for 37.9 s and 37.5 Mru, where the whole query then found
                # counterexamples
                proved = sub.identity or sub._int_stage(bounds, iru)[0] == z3.unsat
        finally:
            self._spent += sub.used
            self.wallclock = self.wallclock or sub.wallclock
        if key is not None and not sub.wallclock:
            self.cones[key] = proved
        return proved

    def _int_stage(self, bounds, iru):
        """The integer encoding under ``bounds``: a first try, then (nonlinear wraps) the
        no-wrap range obligations discharged and one more try (DOMAIN.md section 7).
        (z3 result, model or None, reason_unknown)."""
        first = not self.discharged and bool(self.enc.wrapped)
        r, mdl, why = self._int_check(bounds, min(iru, FIRST_TRY_RU) if first else iru)
        if r == z3.unknown and first:
            self._discharge()
            r, mdl, why = self._int_check(bounds, iru)
        return r, mdl, why

    def _plain(self, bounds, iru):
        """Last resort of a bit-vector-mode query both solvers left undecided: the integer
        stage once more on the encoding without facts and without folded carries (the same
        formula up to which ``mod`` are written, so Z3's nonlinear search takes another path;
        once per query), within
        the integer stage's units.  ("proved" | "refuted", ...) or None."""
        if self.arith == "int" or self._plain_tried:
            return None
        self._plain_tried = True
        alt = Query(self.conds, self.claim, self.ranges, self.rlimit, self.arith, facts=False, fold=False)
        alt.cap = self._left()
        try:
            r, mdl, _ = alt._int_stage(bounds, iru)
        finally:
            self._spent += alt.used
            self.wallclock = self.wallclock or alt.wallclock
        if r == z3.unsat:
            return "proved", None, None
        if mdl is not None and violates(self.conds, self.claim, mdl):
            return "refuted", mdl, None
        return None

    def solve_within(self, bounds: Dict[str, Tuple[int, int]], rlimit: int, int_rlimit: int):
        """:meth:`solve` on the sub-domain ``bounds`` (variable -> inclusive range), encoded
        afresh over the narrowed ranges: the intervals and the facts then show most products
        cannot wrap there, so the integer stage is nearly linear (minimisation fixes the earlier
        variables and bounds the next).  The units it spends count in ``used``."""
        ranges = narrowed(self.ranges, bounds)
        if any(lo > hi for lo, hi in ranges.values()):
            return "proved", None, None          # an empty sub-domain holds no counterexample
        # no certificates here: near a counterexample the claim is false, and the linear
        # program would spend the minimisation's units for nothing
        sub = Query(self.conds, self.claim, ranges, rlimit, self.arith, certificates=False)
        sub.cap = ATTEMPT_CAP * rlimit       # every stage together, not each on its own
        sub.box_cone = True
        try:
            return sub.solve({}, rlimit, int_rlimit)
        finally:
            self._spent += sub.used
            self.wallclock = self.wallclock or sub.wallclock

    def _bitwuzla(self, s: Isolated, ru: int, session: bool = False):
        """The second solver on the same bit-vector formula, within ``ru`` resource units'
        worth of termination calls (BZLA_RU_PER_CALL each): (z3-style result, model).
        ``session``: a box of the query (see :meth:`bitwuzla_check`)."""
        left = self._left()
        if left is not None:
            if left <= 0:
                return z3.unknown, None
            ru = min(ru, left)
        ans, mdl, spent, wall = self.bitwuzla_check(s, max(1, ru // BZLA_RU_PER_CALL), session)
        self._spent += spent * BZLA_RU_PER_CALL
        self.wallclock = self.wallclock or wall
        return {"unsat": z3.unsat, "sat": z3.sat}.get(ans, z3.unknown), mdl

    def bitwuzla_check(self, s: Isolated, calls: int, session: bool = False):
        """Bitwuzla on the assertions of ``s`` (this query's bit-vector solver, with what the
        caller pushed) within ``calls`` termination calls: (answer, model or None, calls
        spent, cut by the wall clock).  The model holds every variable of the query and the
        array contents its reads saw (name + "[]" -> {byte offset: value}).

        ``session``: the question is one of many over the same base (a minimisation box, a
        wrap site's obligation): asked first, within SESSION_CALLS, of the query's one
        incremental instance (:class:`addrsim.backends.bitwuzla_run.Session`), which keeps
        the base bit-blasted and its learnt clauses; only if that is undecided, of a fresh
        instance within ``calls`` (the answer it always gave: bounds asserted at the base
        level let Bitwuzla's preprocessing fold them, which a pushed frame does not)."""
        names = self._named_reads(s)
        try:
            ans, vals, spent, wall = "unknown", None, 0, False
            if session:
                if self._bzla is None or self._bzla[0] is not s:
                    self._bzla = (s, bitwuzla_run.Session())
                ans, vals, spent, wall = self._bzla[1].check(s.smt2_frames(), min(calls, SESSION_CALLS))
            if not session or (ans == "unknown" and not wall and calls > SESSION_CALLS):
                ans, vals, more, wall = bitwuzla_run.check(s.smt2(), calls)
                spent += more
        finally:
            if names:
                s.pop_text()
        if ans != "sat":
            return ans, None, spent, wall
        mdl = {k: vals.get(k, 0) for k in self.bvars}
        for (off, val), n in names.items():
            if off in vals and val in vals:
                mdl.setdefault(n.args[0].name + "[]", {})[vals[off] & X.mask(64)] = vals[val] & X.mask(32)
        return ans, mdl, spent, wall

    def _named_reads(self, s: Isolated) -> Dict[Tuple[str, str], Expr]:
        """Give each array read of the query a name Bitwuzla reports (it gives the values of
        declared bit-vector constants only, not array contents): a pushed scope of
        definitions ``rdN_off = offset``, ``rdN_val = sel(array, offset)``, which change no
        answer (a text-only level: Z3 never sees it).  {(offset name, value name): the sel
        node}; empty (no level pushed) without array reads."""
        if not self.sels:
            return {}
        s.push_text()
        out, vs = {}, dict(self.bvars)
        for i, n in enumerate(self.sels):
            off, val = f"addrsim_rd{i}_off", f"addrsim_rd{i}_val"
            t_off, t_val = to_bv(n.args[1], self.bmemo, vs), to_bv(n, self.bmemo, vs)
            s.add(z3.BitVec(off, t_off.size()) == t_off, z3.BitVec(val, t_val.size()) == t_val)
            out[(off, val)] = n
        return out


def _gave_up(why: str, ru: int, wallclock: bool, portfolio: bool = False) -> str:
    if wallclock:
        return f"{WALLCLOCK_NOTE}: the solver passed the wall-clock safety limit ({why})"
    who = "Z3 and Bitwuzla gave up" if portfolio else "solver gave up"
    return f"{who} ({why}) within {ru / RU:g} Mru"


BZLA_RU_PER_CALL = 10
"""Resource units charged per Bitwuzla termination call.  Measured 2026-12-02 on the README
kernel's obligations (2-core machine): 65,000 to 200,000 calls a second, where Z3 counts about
700,000 units a second, so a call is worth about 10 units (session 7 had measured 1500 calls a
second and charged 1000 units: Bitwuzla then stopped after a tenth of a second, and the
counterexample of dV SBHD it finds in 256,000 calls, 1.2 s, was left "unknown")."""
SESSION_CALLS = 2000
"""Termination calls of a box's question in the query's Bitwuzla session before a fresh
instance is asked (:meth:`Query.bitwuzla_check`): a site obligation the session decides
takes 2 to a few hundred calls (gfx942 a16_rtna_pddv K SBHD, dK BSHD, 2026-12-07); one
it leaves undecided then costs at most 0.02 Mru more than before."""


def solve(conds: List[Expr], claim: Expr, ranges, rlimit: int, arith: str = "bv", cones: Optional[dict] = None):
    """Decide the negated claim once: (verdict, model, reason, Query); ``cones``: see
    :meth:`Query._cone_proves`."""
    q = Query(conds, claim, ranges, rlimit, arith, cones=cones)
    v, m, why = q.solve()
    return v, m, why, q


def _claim_value(conds, claim, mdl, keep=None) -> Optional[int]:
    """The claim's value under the model when it satisfies the conditions, by evaluation
    (``keep`` given: in int mode, :func:`addrsim.backends.ideal.ideal_evaluate`); None when a
    condition fails or a symbol has no value."""
    if keep is None:
        return CHECKERS(list(conds) + [claim]).value(mdl)      # compiled once per query: same values
    env = env_of(conds + [claim], mdl)
    memo: dict = {}
    ev = lambda e: ideal_evaluate(e, env, keep, memo)  # noqa: E731
    try:
        return ev(claim) if all(ev(c) == 1 for c in conds) else None
    except KeyError:
        return None


def violates(conds, claim, mdl, keep=None) -> bool:
    """Does the model satisfy the conditions and break the claim, by evaluation (``keep``
    given: in int mode, :func:`addrsim.backends.ideal.ideal_evaluate`)?"""
    return _claim_value(conds, claim, mdl, keep) == 0


def holds_exactly(conds, claim, mdl) -> bool:
    """Do the model's conditions and the claim hold when no 32-bit value wraps (int mode,
    the wraps of :func:`addrsim.backends.ideal.kept_wraps` kept)?  For a bit-vector
    counterexample: then a wrap is what breaks the claim."""
    return _claim_value(conds, claim, mdl, kept_wraps(list(conds) + [claim])) == 1


def env_of(exprs, mdl):
    """The evaluation environment of ``exprs`` under the model ``mdl``: its arrays, and each
    symbol the expressions read at its value in the model (0 where the model has none)."""
    env = {k: v for k, v in mdl.items() if k.endswith("[]")}
    for e in exprs:
        for n in names_read(e):
            if n not in env:
                env[n] = mdl.get(n, 0)
    return env


ORDER = ("batch", "nhead_q", "seqlen_q", "nhead_k", "seqlen_k", "hdim_q", "hdim_v", "total_q", "total_k")


# Budgets of the stages, in Z3 resource units (addrsim.backends.z3_run.RU = 1 Mru)
# Z3 counts far fewer units per second in nonlinear integer arithmetic (0.03-0.4 Mru/s
# measured) than on bit-vectors (1-4 Mru/s), so the integer stages get smaller budgets.
INT_SHARE = 0.3              # in bv mode, the integer stage gets this share of a query's budget
CLASSIFY_RU = RU // 2        # the int-mode query that classifies a counterexample
FIRST_TRY_RU = RU // 10      # integer query before range obligations are discharged (then its share)
DISCHARGE_RU = RU // 2       # one no-wrap obligation of the integer encoding
DISCHARGE_TOTAL_RU = 2 * RU  # all of one query's no-wrap obligations
MIN_ATTEMPT_RU = RU          # one minimisation attempt
MIN_ATTEMPT_INT_RU = RU // 2  # its integer stage (attempts fix variables: often nearly linear)
ATTEMPT_CAP = 2       # an attempt's stages together spend at most this many times its per-call units
                      # (uncapped, one attempt of swa_a32's Q BSHD spent 11.8 Mru of a 6 Mru minimisation)


CONFIRM_TRIES = 3     # candidate-then-proof rounds per variable before plain bisection


def _least(q: Query, model, var: str, lo: int, names, attempt, from_below: bool = False):
    """(the counterexample with the least ``var``, the variables before it fixed; whether
    that is proved).  A candidate from evaluation (:func:`_eval_floor`), then boxes
    [a, u] of ``var`` asked in turn, with nothing below ``a`` failing (proved):
    ``attempt(a, u)`` returns ("sat", model with ``var`` in the box), ("unsat", None),
    ("unknown", None) when the solvers could not tell, or ("stop", None) when the budget is
    spent.  First [lo, candidate - 1] (CONFIRM_TRIES rounds: one call shows most candidates
    minimal), then bisection; after an "unknown", boxes that gallop up from ``a`` (1, 2, 4,
    ... values wide: a narrow box near the low end is the easiest to decide, and the least
    failing value is often the smallest).  ``from_below``: galloping from ``lo`` at once (the
    batch, whose least failing value is most often 1 to 3, while the whole box below a
    candidate can cost a solver's whole budget)."""
    best = _eval_floor(q, model, var, lo, names)
    a = lo
    got = "unknown" if from_below else None
    for _ in range(0 if from_below else CONFIRM_TRIES):
        if best[var] <= a:
            return best, True
        got, m = attempt(a, best[var] - 1)
        if got == "sat":
            lower = _eval_floor(q, m, var, lo, names)
            if lower[var] >= best[var]:
                return best, False             # a model outside the box asked: no progress, stop honestly
            best = lower
        elif got == "unsat":
            return best, True
        else:
            break
    if got == "stop":
        return best, False
    step = 0 if got == "unknown" else None      # None: bisection; an int: galloping, 2**step wide
    while a < best[var]:
        u = (a + best[var] - 1) // 2 if step is None else min(best[var] - 1, a + (1 << step) - 1)
        got, m = attempt(a, u)
        if got == "stop":
            return best, False
        if got == "sat":
            lower = _eval_floor(q, m, var, lo, names)
            if lower[var] >= best[var]:
                return best, False             # a model outside the box asked: no progress, stop honestly
            best = lower
            step = None
        elif got == "unsat":
            a = u + 1
            step = None if step is None else step + 1
        elif u == a:
            return best, False                 # not even one value decided
        else:
            step = 0
    return best, True


def _probe_within(q: Query, bounds, order, pnames, arrays=None):
    """A counterexample of ``q`` inside ``bounds`` found by the concrete probe (deterministic
    sampling, :func:`addrsim.prove.probe.probe`), or None."""
    ranges = dict(q.ranges, **bounds)
    m = probe(q.conds, q.claim, ranges, order, pnames, keep=q.keep if q.arith == "int" else None, arrays=arrays)
    return m if m is not None and _in_box(m, bounds) else None


def _seen(found: list, box):
    """A counterexample seen already (each checked by evaluation) that lies inside ``box``, or None."""
    return next((m for m in found if _in_box(m, box)), None)


def _in_box(m, box) -> bool:
    """Does the model ``m`` lie inside ``box`` (variable -> inclusive range)?"""
    return all(lo <= m.get(k, lo) <= hi for k, (lo, hi) in box.items())


def _eval_floor(q: Query, model, var: str, lo: int, names):
    """``model`` with ``var`` lowered, by bisection over concrete evaluation, to the least
    value found that keeps it a counterexample of ``q`` (the other variables as in ``model``,
    except that the grid ids, nhead_k and seqlen_k follow a smaller batch, nhead_q or
    seqlen_q).  Cheap and never wrong: each candidate is checked by :func:`violates`; the
    solver then shows whether anything smaller fails.  The candidates of the next
    SPECULATE steps of the bisection are evaluated together (:func:`_candidates`, a
    function of the value alone), so the floor is the one a step-by-step bisection finds."""
    a, b, best = lo, model[var], model
    known: Dict[int, Optional[dict]] = {}
    while a < b:
        mid = (a + b) // 2
        xs = _fitting(mid, b)
        if any(x not in known for x in xs):
            todo = sorted({x for x in _speculated(a, b, SPECULATE) if x not in known})
            known.update(zip(todo, _candidates(q, model, var, todo, names)))
        hit = next((x for x in xs if known[x] is not None), None)
        if hit is None:
            a = mid + 1
        else:
            best, b = known[hit], hit
    return best


SPECULATE = 2         # bisection steps of :func:`_eval_floor` whose candidates are evaluated at once


def _speculated(a: int, b: int, steps: int) -> List[int]:
    """The values a bisection of [a, b) by :func:`_eval_floor` tries in its next ``steps``
    steps (each mid's :func:`_fitting` values), were each step decided at its mid itself."""
    out, frontier = [], [(a, b)]
    for _ in range(steps):
        nxt = []
        for lo, hi in frontier:
            if lo < hi:
                mid = (lo + hi) // 2
                out += _fitting(mid, hi)
                nxt += [(lo, mid), (mid + 1, hi)]
        frontier = nxt
    return out


def _candidates(q: Query, model, var: str, xs: List[int], names) -> List[Optional[dict]]:
    """For each value x of ``xs``: ``model`` lowered to ``var`` = x (:func:`_lowered`; in
    group mode with uniform sequence starts when its own do not fit), raised where it breaks
    nothing (:func:`_raised_many`, all at once), when that is a counterexample of ``q``
    (checked by :func:`violates`); else None."""
    keep = q.keep if q.arith == "int" else None
    fails = lambda t: violates(q.conds, q.claim, t, keep)  # noqa: E731
    ts = [_lowered(model, var, x, names) for x in xs]
    if names.get("arrays"):
        ts = [t if fails(t) else uniform_arrays(t, names["arrays"]) for t in ts]   # sequence starts that fit
    low = [i for i, t in enumerate(ts) if keep is None and not fails(t)]
    for i, t in zip(low, _raised_many(q, [ts[i] for i in low], var, names)):
        ts[i] = t                               # a smaller batch may need more heads or a longer sequence
    return [t if t is not None and fails(t) else None for t in ts]


GRAINS = (8, 64, 128, 192, 256)
"""Multiples a shape variable's traits ask for (hdim multiple of 8 in pddv kernels, seqlen of 64
in the non-padded ones, kv tiles of 128/192/256 rows): a bisection step of :func:`_eval_floor`
tries the value rounded up to each, below the current best."""


def _fitting(mid: int, below: int) -> List[int]:
    """``mid`` and ``mid`` rounded up to each of :data:`GRAINS`, those below ``below``, in
    increasing order: a bisection over values that the domain's traits mostly reject (a seqlen
    that is no multiple of 64) would otherwise read "does not fit" as "does not fail" and stop
    above the least failing value."""
    return sorted({x for x in [mid] + [-(-mid // g) * g for g in GRAINS] if x < below})


RAISE = ("hdim_q", "hdim_v", "nhead_q", "nhead_k", "seqlen_q", "seqlen_k")
RAISE_GRID = 48       # candidate values per variable and refinement round


def _raised(q: Query, t, var: str, names):
    """:func:`_raised_many` of the one point ``t``."""
    return _raised_many(q, [t], var, names)[0]


def _raised_many(q: Query, ts: List[dict], var: str, names) -> List[Optional[dict]]:
    """Each point of ``ts`` with the shape variables after ``var`` (hdim_q with hdim_v,
    nhead_q, seqlen_q, seqlen_k) raised, in that order, to about the largest value the
    conditions allow (evaluated over a grid of candidates, every point's at once,
    :class:`addrsim.prove.probe._Batch`; multiples of 64 included for the sequence traits),
    the grid ids to the last workgroup (batch_id = batch - 1, head_id = nhead_q - 1), then
    the last tile and a failing lane (:func:`_worst_tile_and_lane_many`): a 32-bit wrap lost
    by a smaller batch shows again there.  Where that point is no counterexample (bit-vector
    reading), the same with the point's own tile and lane.  None for a point that does not
    fit, or when numpy cannot evaluate the conditions.  Each point's result is the one it
    gets alone (the batches evaluate point by point)."""
    tile = names.get("tile")
    firsts: List[Optional[dict]] = [None] * len(ts)
    out: List[Optional[dict]] = [None] * len(ts)
    if ts and tile in ts[0] and tile in _after(names, var):
        # a tile of a larger shape may not exist in this one: from the first tile up
        lo = q.ranges.get(tile, (0, 0))[0]
        firsts = _raised_from_many(q, [dict(t, **{tile: lo}) for t in ts], var, names, True)
    for i, f in enumerate(firsts):
        if f is not None and violates(q.conds, q.claim, f):
            out[i] = f
    rest = [i for i, o in enumerate(out) if o is None]
    for i, got in zip(rest, _raised_from_many(q, [ts[i] for i in rest], var, names, False)):
        out[i] = got or firsts[i]
    return out


def _raised_from_many(q: Query, ts: List[dict], var: str, names, worst: bool) -> List[Optional[dict]]:
    """:func:`_raised_many` from each point of ``ts``; with ``worst``, then the last tile
    and a failing lane.  The variables after ``var`` are raised one at a time, each taking
    what the conditions (device memory) leave, so the order decides the point: first hdim_q
    (hdim_v following it: a padded kernel's least failing nhead_q needs hdim 120, not 72),
    nhead_q, seqlen_q, seqlen_k; for a point that then breaks nothing, the claim's own
    variables first, nhead_k among them (K's offset reads nhead_k and seqlen_k: raising
    seqlen_q first takes the memory K's rows need, and on gfx942 a32_rtna_psskddv K BHSD the
    batch stayed at 2849, not 2)."""
    out: List[Optional[dict]] = [None] * len(ts)
    first: List[Optional[dict]] = [None] * len(ts)
    todo = list(range(len(ts)))
    for order in (_raise_orders(q, ts[0], var) if ts else []):
        got = _raised_in_many(q, [dict(ts[i]) for i in todo], var, names, worst, order)
        left = []
        for i, g in zip(todo, got):
            if g is not None and violates(q.conds, q.claim, g):
                out[i] = g
            else:
                first[i] = first[i] or g
                left.append(i)
        todo = left
    for i in todo:
        out[i] = first[i]
    return out


def _raise_orders(q: Query, t, var: str) -> List[List[str]]:
    """The orders :func:`_raised_from_many` tries (see there), each once."""
    later = [v for v in RAISE if v in t and ORDER.index(v) > ORDER.index(var)] if var in ORDER else []
    read = set(X.symbols(q.claim))
    orders = [[v for v in later if v != "nhead_k"], [v for v in later if v in read] + [v for v in later if v not in read]]
    return [o for i, o in enumerate(orders) if o not in orders[:i]]


def _raised_in_many(q: Query, ts: List[dict], var: str, names, worst: bool, order: List[str]):
    """Each point of ``ts`` with the variables of ``order`` raised in that order
    (:func:`_raise_one_many`), the grid ids to the last workgroup and, with ``worst``, the
    last tile and a failing lane; None for a point that does not fit, and for every point
    when numpy cannot evaluate the conditions."""
    arrays = names.get("arrays")
    try:
        for v in order:
            ts = _raise_one_many(q, ts, v, names)
        ts = [_last_ids(t, names, var) for t in ts]
        ok = _Batch(q.conds, q.claim, ts, arrays).fits() if ts else []
        ts = [t if ok[i] else None for i, t in enumerate(ts)]
        if worst:
            ts = _worst_tile_and_lane_many(q, ts, names, var)
    except NoVec:
        return [None] * len(ts)
    return [None if t is None else uniform_arrays(t, arrays) for t in ts]


LANES = 1024          # work-items per workgroup at most (AMDGPUUsage: flat workgroup size <= 1024)


def _worst_tile_and_lane_many(q: Query, ts: List[Optional[dict]], names, var: str) -> List[Optional[dict]]:
    """Each point of ``ts`` (which fits; None stays None) with the tile id raised to the
    last tile its shape launches (by bisection over the conditions,
    :func:`addrsim.prove.probe._last_tiles`) and the lane set to the first lane, of every
    lane of the workgroup evaluated at once, at which the claim fails there: the largest
    offset a shape reaches, where a 32-bit wrap shows first (the tile and lane terms of an
    offset can move the least failing seqlen_q by tens of thousands).  Only what comes after
    ``var`` (the variable being lowered) in the minimisation order moves.  When no lane of
    the last tile fails, the tile whose offset straddles 2**32
    (:func:`addrsim.prove.probe.crossing_at`: a relative claim's workgroups wrap alike past
    it).  A point keeps its own tile and lane when none of that fails.  Raises NoVec."""
    free = _after(names, var)
    tile, lane = names.get("tile"), names.get("lane")
    arrays = names.get("arrays")
    live = [i for i, t in enumerate(ts) if t is not None]
    if not live or tile not in ts[live[0]] or lane not in free:
        return ts
    # the points fit: only the conditions that read the tile (then the lane) can change
    b = _Batch(q.conds_reading(tile), q.claim, [ts[i] for i in live], arrays)
    if tile in free:
        top = np.array([q.ranges.get(tile, (0, ts[i][tile]))[1] for i in live], dtype=np.uint64)
        _last_tiles(b, np.ones(len(live), dtype=bool), tile, top)
    out = list(ts)
    failing = b.fails()
    raised = {i: b.point(j) for j, i in enumerate(live)}
    rest = [i for j, i in enumerate(live) if not failing[j]]
    for j, i in enumerate(live):
        if failing[j]:
            out[i] = raised[i]
    if not rest or lane not in raised[rest[0]]:
        return out
    lane_hi = q.ranges.get(lane, (0, LANES - 1))[1]
    lanes = range(min(LANES, lane_hi + 1))
    hits = _first_failing_lanes(q, [raised[i] for i in rest], lane, lanes, arrays)
    for i, h in zip(rest, hits):
        if h is not None:
            out[i] = uniform_arrays(dict(raised[i], **{lane: lanes[h]}), arrays)
    if tile in free and not arrays:
        # the last tile has wrapped for both workgroups alike: the tile that straddles 2**32
        left = [i for i, h in zip(rest, hits) if h is None]
        got = crossings_at(q.conds, q.claim, [n for n, _, _ in q.enc.wrapped], [raised[i] for i in left], names,
                           [raised[i][tile] for i in left], lane_hi)
        for i, m in zip(left, got):
            if m is not None:
                out[i] = m
    return out


def _first_failing_lanes(q: Query, points: List[dict], lane: str, lanes: range, arrays) -> List[Optional[int]]:
    """For each point, the index in ``lanes`` of the first lane at which the claim fails
    (every lane of every point evaluated at once), or None."""
    k = len(lanes)
    b = _Batch.repeated(q.conds_reading(lane), q.claim, points, [k] * len(points), arrays)
    b.env[lane] = np.tile(np.asarray(lanes, dtype=np.uint64), len(points))
    b.sync()
    fails = b.fails().reshape(len(points), k)
    return [int(np.argmax(r)) if r.any() else None for r in fails]


def _after(names, var: str):
    """The grid ids and the lane that come after ``var`` in the minimisation order (batch,
    nhead_q, seqlen_q, ... then batch_id, head_id, tile, lane): those a candidate may move."""
    ids = [names.get(k) for k in ("batch", "head", "tile", "lane")]
    return set(ids[ids.index(var) + 1:]) if var in ids else set(ids)


def _last_ids(t, names, var: str = ""):
    t = dict(t)
    free = _after(names, var)
    if names["batch"] in t and "batch" in t and names["batch"] in free:
        t[names["batch"]] = max(t["batch"] - 1, 0)
    if names["head"] in t and "nhead_q" in t and names["head"] in free:
        t[names["head"]] = max(t["nhead_q"] - 1, 0)
    return t


def _raise_one_many(q: Query, ts: List[dict], v: str, names) -> List[dict]:
    """Each point of ``ts`` with ``v`` raised to about the largest value the conditions allow
    (the grid ids at the last workgroup): a grid of RAISE_GRID + 1 candidates from its value
    up, then between the last two that fit; every point's candidates in one batch.  A point
    none of whose candidates fits keeps its value.  Raises NoVec."""
    ts = list(ts)
    state = {i: (t[v], q.ranges.get(v, (t[v], t[v]))[1]) for i, t in enumerate(ts)}     # lo, hi
    for _ in range(2):                                   # a coarse grid, then between its last two fits
        live = [i for i, (lo, hi) in state.items() if lo < hi]
        if not live:
            break
        cands = [_raise_grid(*state[i]) for i in live]
        for i, c, ok in zip(live, cands, _trials_fit(q, [ts[i] for i in live], v, cands, names)):
            fit = np.flatnonzero(ok)
            if not len(fit):
                del state[i]
                continue
            k = int(fit[-1])
            ts[i] = _with(ts[i], v, c[k])
            state[i] = (c[k], c[k + 1] - 1 if k + 1 < len(c) else c[k])
    return ts


def _raise_grid(lo: int, hi: int) -> List[int]:
    """The candidates of one round of :func:`_raise_one_many` in [lo, hi]: RAISE_GRID + 1
    evenly spaced, the multiples of 64 among their steps (the sequence traits), and hi."""
    step = max(1, (hi - lo) // RAISE_GRID)
    return sorted({min(hi, lo + j * step) for j in range(RAISE_GRID + 1)} |
                  {c - c % 64 for c in range(lo, hi + 1, step) if c - c % 64 >= lo} | {hi})


def _trials_fit(q: Query, ts: List[dict], v: str, cands: List[List[int]], names) -> List[np.ndarray]:
    """For each point of ``ts`` and each of its candidates for ``v`` (its follower moving
    with it, :func:`_with`; the grid ids at the last workgroup, :func:`_last_ids`), whether
    the conditions hold: one boolean array per point, all evaluated in one batch."""
    reps = [len(c) for c in cands]
    b = _Batch.repeated(q.conds, q.claim, ts, reps, names.get("arrays"))
    env = b.env
    cv = np.concatenate([np.asarray(c, dtype=np.uint64) for c in cands])
    f = FOLLOWS.get(v)
    if f and f in env:
        same = np.repeat(np.array([t.get(f) == t[v] for t in ts]), reps)
        env[f] = np.where(same, cv, env[f])
    env[v] = cv
    for gid, dim in ((names["batch"], "batch"), (names["head"], "nhead_q")):
        if gid in env and dim in env:
            env[gid] = np.maximum(env[dim], np.uint64(1)) - np.uint64(1)
    b.sync()
    return np.split(b.fits(), np.cumsum(reps)[:-1])


FOLLOWS = {"seqlen_q": "seqlen_k", "hdim_q": "hdim_v"}
"""A shape variable and the one that moves with it where the two are equal (the kernels'
traits: seqlen_q == seqlen_k in the non-padded kernels, hdim_q == hdim_v)."""


def _with(t, v: str, x: int):
    u = dict(t)
    f = FOLLOWS.get(v)
    if f and u.get(f) == u[v]:
        u[f] = x
    u[v] = x
    return u


def _lowered(model, var: str, x: int, names):
    t = dict(model)
    t[var] = x
    if var == "batch" and names["batch"] in t:
        t[names["batch"]] = min(t[names["batch"]], max(x - 1, 0))
    if var == "nhead_q":
        if names["head"] in t:
            t[names["head"]] = min(t[names["head"]], max(x - 1, 0))
        if "nhead_k" in t and x > 0:
            t["nhead_k"] = math.gcd(t["nhead_k"], x)
    f = FOLLOWS.get(var)
    if f and t.get(f) == model[var]:
        t[f] = x
    return t


def _covered(q: Query, box, memo: dict, bzla_ru: int = SITE_BZLA_RU, int_ru: int = 0):
    """A minimisation attempt decided by the query's wrap cover (:mod:`addrsim.prove.cover`,
    built once per minimisation, in ``memo``): ("unsat", None) when no wrap site can leave its
    width inside ``box`` (so no counterexample lies there), ("sat", model) for a site model
    that breaks the claim, None when the cover cannot tell.  Its units count in ``q.used``;
    ``bzla_ru``: the units of each site's Bitwuzla call; ``int_ru``: of a site's second integer
    try (:meth:`addrsim.prove.cover.WrapCover.attempt`)."""
    if "cover" not in memo:
        memo["cover"], used = wrap_cover(q)
        q._spent += used
    cov = memo["cover"]
    if cov is None:
        return None
    before = cov.used
    try:
        got, m = cov.attempt(box, lambda m: violates(q.conds, q.claim, m), BZLA_RU_PER_CALL, bzla_ru, int_ru)
    finally:
        q._spent += cov.used - before
        q.wallclock = q.wallclock or cov.base.wallclock     # an answer cut by time is never cached
    if got == "unknown" and memo.get("grid"):
        # the thin band of a tile offset crossing 2**32, by evaluation (no solver units)
        m = crossing(q.conds, q.claim, [n for n, _, _ in q.enc.wrapped], dict(q.ranges, **box), memo["grid"])
        if m is not None and _in_box(m, box):
            return "sat", m
    return None if got == "unknown" else (got, m)


PIECES_MAX = 32       # pieces one minimisation attempt is cut into at most
FINE_MAX = 16         # values a later shape variable may take for its pieces
PIECE_RU = RU // 4    # one piece's solver call


def _values(q: Query, v: str, lo: int, hi: int, limit: int, at: Dict[str, int]) -> Optional[List[int]]:
    """The values of shape variable ``v`` in [lo, hi] that the query's conditions allow
    where the variables of ``at`` take those values (a family's trait ``hdim_q % 8 == 0``,
    ``nhead_q % nhead_k == 0`` at a given nhead_q), or None when there are more than
    ``limit``.  Only conjuncts that read nothing but ``v`` and ``at`` are evaluated, so no
    value a model may take is left out."""
    if hi - lo + 1 > 64 * limit:
        return None
    known = set(at) | {v}
    alone = [c for c in X.conjuncts(q.conds) if v in X.symbols(c) and set(X.symbols(c)) <= known]
    out = [x for x in range(lo, hi + 1) if all(X.evaluate(c, dict(at, **{v: x})) for c in alone)]
    return out if len(out) <= limit else None


def _pieces(q: Query, box, var: str, order) -> List[Dict[str, Tuple[int, int]]]:
    """``box`` cut into pieces where ``var`` (unless it has more than PIECES_MAX values) and
    every later shape variable of ORDER with few allowed values (:func:`_values`: hdim_q of
    a pddv kernel, 72..120 by 8) or one value in each piece (hdim_v, equal to hdim_q; not
    nhead_k, one of the divisors of nhead_q) take one value each: the solvers decide a
    32-bit row offset's wrap into a head's window at one (nhead_q, hdim_q) in 0.01 to 0.3
    Mru, and not within 4 Mru over a range of them (gfx942 a16_rtna_pddv dK BSHD, nhead_q
    18, every hdim).  A partition of ``box`` (a value no model may take is left out only by
    a condition that reads nothing else), least ``var`` first; empty when ``var`` is no
    shape variable or nothing would be cut.  Later variables are cut while the pieces stay
    at most PIECES_MAX."""
    if var not in ORDER:
        return []
    lo, hi = box[var]
    at = {k: a for k, (a, b) in box.items() if a == b}
    first = _values(q, var, lo, hi, PIECES_MAX, at)
    out = [dict(box)] if first is None else [dict(box, **{var: (x, x)}) for x in first]
    cut = first is not None and lo < hi
    for v in order[order.index(var) + 1:]:
        lo_v, hi_v = q.ranges.get(v, (0, 0))
        if v not in ORDER or v not in q.enc.vars or v in box or lo_v == hi_v:
            continue
        few = _values(q, v, lo_v, hi_v, FINE_MAX, {}) is not None
        each = [_values(q, v, lo_v, hi_v, FINE_MAX, {k: a for k, (a, b) in p.items() if a == b}) for p in out]
        if not few and any(vals is None or len(vals) > 1 for vals in each):
            continue                          # many values (nhead_k, a divisor of nhead_q): left whole
        nxt = [dict(p, **{v: (x, x)}) for p, vals in zip(out, each) for x in vals]
        if len(nxt) > PIECES_MAX:
            break
        out, cut = nxt, True
    return out if cut else []


def _by_pieces(q: Query, pieces, decided: set, found: list, spent):
    """An attempt decided piece by piece (:func:`_pieces`), least first, each piece within
    PIECE_RU and all of them within MIN_ATTEMPT_RU: ("sat", model) at the first piece with a
    counterexample, ("unsat", None) when none holds one, ("stop", None) once ``spent()``,
    else ("unknown", None).  An undecided piece does not stop the others (a later one may
    hold the counterexample: gfx942 hd192 causal_br psskddv K BSHD at batch 2 fails at
    hdim_q 192, the last piece).  Pieces shown empty are kept in ``decided`` (key: the
    sorted box) and not asked again."""
    start, undecided = q.used, False
    for p in pieces:
        if spent():
            return "stop", None
        if q.used - start >= MIN_ATTEMPT_RU:
            return "unknown", None
        key = tuple(sorted(p.items()))
        if key in decided:
            continue
        m = _seen(found, p)
        if m is not None:
            return "sat", m
        v, m, _ = q.solve_within(p, PIECE_RU, PIECE_RU // 2)
        if v == "refuted":
            found.append(m)
            return "sat", m
        if v == "proved":
            decided.add(key)
        undecided = undecided or v != "proved"
    return ("unknown", None) if undecided else ("unsat", None)


def minimize(q: Query, model, prob: Problem, budget_ru: int, cover: Optional[dict] = None, solver: bool = True):
    """Lexicographically smallest (batch, nhead_q, seqlen_q, ..., batch_id, head_id, tile,
    lane) counterexample: each variable in turn, the earlier ones fixed, lowered by
    evaluation and then shown minimal by the solver (:func:`_least`), each attempt within
    MIN_ATTEMPT_RU resource units, until the
    attempts have spent ``budget_ru`` in all.  Variables the claim does not mention
    (group-mode totals in batch mode) are skipped.  Returns (model, minimal): ``minimal`` is
    False when the budget ran out or an attempt was undecided, and the model is then the
    smallest found so far (still a counterexample: every model returned by the solver is
    checked by evaluation).  The same query and budget give the same model in every run.
    ``cover``: the memo of the query's wrap cover when the caller built it already.
    ``solver`` False: evaluation and the probe only ("minimal" only where every variable
    reached the low end of its range)."""
    grid = prob.grid
    claim_syms = set(X.symbols(q.claim))
    order = [v for v in ORDER if v not in ("total_q", "total_k") or v in claim_syms]
    order += [grid["z"].name, grid["y"].name, grid["x"].name, LANE]
    fixed: Dict[str, Tuple[int, int]] = {}
    pnames = {"batch": grid["z"].name, "head": grid["y"].name, "tile": grid["x"].name, "lane": LANE}
    names = dict(pnames)
    start = q.used
    arrays = getattr(prob, "array_specs", None)
    names["arrays"] = arrays
    spent = lambda: q.used - start >= budget_ru  # noqa: E731
    minimal = True
    cover = {"grid": pnames} if cover is None else cover
    found = [model]          # counterexamples seen (each checked by evaluation): a box holding one is sat
    decided: set = set()     # pieces shown to hold no counterexample (:func:`_by_pieces`)
    for var in order:
        if var not in model:
            continue
        lo = q.ranges.get(var, (0, 0))[0]

        def attempt(a, ub):
            if spent():
                return "stop", None
            b = dict(fixed)
            b[var] = (a, ub)
            m = _seen(found, b)                # a counterexample seen already (a sat box, a candidate)
            if m is not None:
                return "sat", m
            m = _probe_within(q, b, order, pnames, arrays) if var in ORDER else None   # by evaluation first
            if m is not None:
                found.append(m)
                return "sat", m
            if not solver:
                return "unknown", None
            # then the wrap sites alone; a box of one value may ask an undecided site once more
            got = _covered(q, b, cover, int_ru=SITE_BOX_INT_RU if a == ub else 0)
            if got is not None:
                if got[0] == "sat":
                    got = ("sat", q.complete(got[1]))
                    found.append(got[1])
                return got
            if cover.get("cover") is not None and a < ub:
                return "unknown", None         # narrower boxes first: the whole query costs the most
            pieces, ru, before = _pieces(q, b, var, order), MIN_ATTEMPT_RU, q.used
            if pieces:                         # one (var, hdim_q) at a time first, then the whole box
                got = _by_pieces(q, pieces, decided, found, spent)
                if got[0] != "unknown" or spent():
                    return got
                ru = max(PIECE_RU, MIN_ATTEMPT_RU - (q.used - before) // ATTEMPT_CAP)   # both within one attempt's units
            v, m, _ = q.solve_within(b, ru, min(ru, MIN_ATTEMPT_INT_RU))
            if v == "refuted":
                found.append(m)
            return {"refuted": ("sat", m), "proved": ("unsat", None)}.get(v, ("unknown", None))

        model, proved = _least(q, model, var, lo, names, attempt, var == "batch")
        minimal = minimal and proved
        fixed[var] = (model[var], model[var])
    if not minimal:
        # out of budget: shrink what is left by evaluation (cheap), keeping a counterexample
        rest = [v for v in order if v in model and (v not in fixed or spent())]
        model = dict(model, **shrink(q.conds, q.claim, q.ranges, rest, {k: v for k, v in model.items()
                                                                          if not k.endswith("[]")},
                                     keep=q.keep if q.arith == "int" else None, arrays=arrays))
    return model, minimal
