"""Checks: does each access of a buffer land where the model says, for every shape?

Owns :func:`check` (one kernel, one buffer, one layout, one property) and the stages it runs.
May import every lower layer and the other prove modules except domain (which settles a
check's "proved" afterwards).

For one kernel, one buffer and one layout, the claim proved is

    for every shape in the domain (bounds, grid ranges, memory, the family's traits, exact kernel
    arguments and, with ``routed``, one host entry point's routing: addrsim.model.models.Assumption),
    every (batch_id, head_id, kv_tile) in the grid and every lane of the workgroup, on every
    explored path: address(batch_id, head_id) == address(0, 0) + expected(batch_id, head_id)

where ``address`` is the byte address the access computes (64-bit, hardware arithmetic) and
``expected`` the model's byte offset.  The query goes first to Z3 over integers with an exact
encoding of the bit-vector semantics (:class:`addrsim.backends.z3_int.IntEncoder`), then, if that is
inconclusive, over bit-vectors.  A counterexample is minimized (batch, then nhead_q, then
seqlen_q, then the other dimensions and ids) and replayed on the concrete interpreter before
it is reported; one that does not replay makes the verdict "unknown".

The stages, in order: :func:`_refusal` (what makes the check unsupported before any query),
:func:`_targets_decided` (one query per access; the first refuted one becomes the
counterexample, :func:`_counterexample`), :func:`_loop_check` (every later iteration).
"""
from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field, replace as replace_dc
from collections import Counter
from typing import Callable, Dict, List, Optional, Tuple

import z3

from addrsim.backends.ideal import kept_wraps
from addrsim.backends.z3_int import IntEncoder
from addrsim.engine.explore import Exploration
from addrsim.ir import expr as X
from addrsim.ir.expr import Const, Expr, Sym
from addrsim.model.models import Problem, build_problem, buffer_pointer
from addrsim.prove.idioms import exact_divisions
from addrsim.prove.machines import LANE
from addrsim.prove.options import Options
from addrsim.backends.z3_bv import holds_bv
from addrsim.backends.z3_run import RU, decided
from addrsim.prove.query import (CLASSIFY_RU, Query, array_facts, decide_query, env_of, holds_exactly, meets,
                                 proved_within, query_key, ranges_of, solve, violates, weakened_query)
from addrsim.prove.replay import (REPLAY_ITERATIONS, Subject, bounds_counterexample, confirm_loop, replay_site,
                                  ideal_counterexample, memory_needed, replay)
from addrsim.prove.coverage import Fault, coverage
from addrsim.prove.cover import wrap_cover
from addrsim.prove.simplify import merged_arms, under_domain
from addrsim.prove.standin import StandIn, stand_in
from addrsim.prove.targets import Target, opaque_in, pointers_in, targets_for
from addrsim.prove.verdict import Cause, Check, Records, ReplayFailure, Verdict, counterexample
from addrsim.prove.wraps import last_workgroup, wrap_sites


@dataclass
class _Ctx:
    """What the stages of one check share: the kernel, its exploration, the buffer's pointer
    argument, the problem, the options, the query cache and the result being filled."""

    sub: Subject
    ex: Exploration
    buffer: str
    layout: str
    ptr: str
    prob: Problem
    opts: Options
    cache: Optional[dict]
    prop: str
    res: Check
    t0: float
    spent: int = 0      # resource units charged to this check (the same in every run)
    cones: dict = field(default_factory=dict)   # cone sub-queries decided by this check's loop obligations
    known: dict = field(default_factory=dict)   # claim digest -> condition-digest sets it was proved under (wider domain)
    refuted: dict = field(default_factory=dict)  # claim digest -> [(condition digests, model)] at a proven minimum
    left: dict = field(default_factory=dict)     # claim digest -> [(condition digests, why)] where another check stopped
    memory_matters: bool = False    # a weakened query's least counterexample needed more memory (_weak_first)
    facts: dict = field(default_factory=dict)   # array_facts' memo: reads and pair facts built once a check

    def always(self, path: List[Expr]) -> Callable[[Expr], bool]:
        """:func:`always_true` for the path conditions ``path`` of one access (never the
        domain's or the array facts, which no merge left), memoised per kernel (in its
        exploration's ``derived``); not charged to the check, so that reuse
        (:func:`fingerprint`) costs the same whatever the cache holds."""
        memo = self.ex.derived.setdefault("always true", {})
        ids = {id(c) for c in path}
        return lambda c: id(c) in ids and always_true(c, memo)

    def subsumed(self, fp) -> bool:
        """Was the claim of fingerprint ``fp`` (:func:`fingerprint`) proved under a subset of
        its conditions?"""
        return any(s <= fp[2] for s in self.known.get(fp[1], ()))

    def proved_under(self, fp) -> None:
        self.res.proved_cases.add(fp[1:])

    def carried(self, fp, conds: List[Expr], claim: Expr) -> Optional[dict]:
        """A proven-minimal counterexample of the same claim under a subset of ``conds``
        (another buffer's, :func:`check`'s ``refuted``), in this query's names, when it
        satisfies every one of ``conds`` and breaks the claim by evaluation: then it is this
        query's least counterexample too (its failing set is a subset of the other's)."""
        back = {c: n for n, c in fp[0].items()}
        for cs, model in self.refuted.get(fp[1], ()):
            m = X.rename_model(model, back)
            if cs <= fp[2] and meets(conds, claim, m, self.opts.arith):
                return m
        return None

    def refuted_under(self, fp, model: dict) -> None:
        self.res.refuted_cases.append((fp[1], fp[2], X.rename_model(model, fp[0])))

    def left_by(self, fp) -> Optional[str]:
        """Why another check (the donor's, :func:`check`'s ``known``) stopped unknown at this
        claim under a subset of these conditions, or None."""
        return next((why for cs, why in self.left.get(fp[1], ()) if cs <= fp[2]), None)

    def stopped_at(self, fp, why: str, inherited: bool = False) -> None:
        where = "" if inherited else f"{self.buffer} {self.layout} {self.prop}: "
        self.res.undecided_cases.append((fp[1], fp[2], where + why))

    def reused(self, fp, conds: List[Expr], claim: Expr):
        """("proved", None), ("refuted", model in this query's names) or ("unknown", why) from
        the records of ``known``, in that order, else None (this check decides the query)."""
        if self.subsumed(fp):
            return "proved", None
        m = self.carried(fp, conds, claim)
        if m is not None:
            return "refuted", m
        why = self.left_by(fp)
        return ("unknown", why) if why is not None else None

    def out_of_budget(self) -> bool:
        return self.spent >= self.opts.check_ru

    def done(self, verdict: Verdict, reason: Optional[str] = None) -> Check:
        self.res.verdict, self.res.reason = verdict, reason
        self.res.time_s = round(time.time() - self.t0, 3)
        self.res.spent_ru = self.spent
        return self.res

    def cached(self, key):
        return self.cache.get(key) if self.cache is not None else None

    def keep(self, key, value, load_dependent: bool = False):
        """Cache ``value`` under ``key`` unless it is ``load_dependent`` (an answer cut by
        the wall-clock safety net)."""
        if self.cache is not None and not load_dependent:
            self.cache[key] = value
        return value


def check(sub: Subject, ex: Exploration, buffer: str, layout: str, opts: Options = Options(),
          cache: Optional[dict] = None, prop: str = "address", routed: Optional[str] = None,
          known: Records = Records()) -> Check:
    """Verdict for ``buffer`` in ``layout`` (see the module docstring for the claim).

    ``prop`` "address" (the module docstring's claim) or "bounds": every access of the
    buffer outside loops and in each loop's first iteration (a buffer accessed in a loop is
    then "unsupported": :func:`_later_iterations`), for every shape, coordinate and lane,
    passes the V# range check (record index, or byte offset plus size, below num_records)
    and lies inside the tensor's allocation [pointer, pointer + extent) (extent in bytes
    from the model's ``extent``).
    ``opts.arith`` "bv" classifies a counterexample as an overflow when int mode proves the
    same claim.  ``cache`` (optional, shared across calls) maps a structural hash of each
    query to its decision, so identical address computations in sibling kernels are decided
    once.  ``routed``: the host entry point whose routing joins the domain (None: the kernel's
    own domain, :data:`addrsim.model.models.KERNEL_LAYERS`).  ``known``: the Records of checks
    decided before this one, of this buffer on a wider domain (the kernel's, before a routed
    rerun) or of another buffer whose claims have the same :func:`fingerprint` (V's check
    after K's): a claim proved there under a subset of a query's conditions is proved here
    without a query (more hypotheses, the same conclusion); a proven-minimal counterexample of
    the same claim is this query's when it meets its conditions (:meth:`_Ctx.carried`); where
    that check stopped unknown, this one stops too, with its reason.  Records are read before
    the query cache and charge no units, so the answer is the same in every run.  A "proved" from here is not
    final: the caller (:func:`addrsim.prove.domain.settle`) asks for a witness, or makes it
    "unreachable".  Raises InputError for a model that does not describe the kernel."""
    t0 = time.time()
    prob = build_problem(sub.ms, sub.kernel, layout, Sym(LANE, 32, "lane"), opts.bounds, sub.arch, opts.memory_gib,
                         routed)
    res = Check(buffer, layout, Verdict.UNKNOWN, arith=opts.arith, prop=prop, problem=prob,
                expected=prob.expected_text.get(buffer, ""))
    ctx = _Ctx(sub, ex, buffer, layout, buffer_pointer(sub.ms, sub.kernel, buffer), prob, opts, cache, prop, res,
               t0, known=_by_claim(known.proved), refuted=_by_claim(known.refuted), left=_by_claim(known.undecided))
    setup = _setup(ctx)
    if isinstance(setup, Check):
        return setup
    tg, env, zero_ids = setup
    expected = prob.expected[buffer] if prop == "address" else prob.extent[buffer]
    covered = coverage(sub, ex, prob, buffer, ctx.ptr, cache) if prop == "address" else None
    decided = _targets_decided(ctx, tg, env, expected, zero_ids)
    if decided is None and prop == "bounds" and buffer in prob.slices:     # slice containment (issue 36)
        decided = _targets_decided(ctx, tg, env, expected, zero_ids, "slice")
    if decided is not None:
        if isinstance(covered, Fault) and _coverage_wins(res, decided[0]):
            return _uncovered(ctx, covered)
        return ctx.done(*decided)
    if prop == "address":
        if isinstance(covered, Fault):    # it wins over any loop verdict: no induction to run
            return _uncovered(ctx, covered)
        lc = _loop_check(ctx, env, expected, zero_ids)
        if lc is not None:
            verdict, why, cex = lc
            if cex is not None:
                res.counterexample, res.cause = cex, Cause.LOOP
                cex.memory_bytes = memory_needed(prob, cex)
            return ctx.done(verdict, why + (_dump(ctx, lambda: "") if verdict == Verdict.UNKNOWN else ""))
        res.loops = True
        if isinstance(covered, str):      # the relative claim holds; the absolute one was not decided
            return ctx.done(Verdict.UNKNOWN, f"{buffer}'s store coverage (prove/coverage.py) was not decided: "
                                             f"{covered}")
    else:
        later = _later_iterations(sub.code, ex, ctx.ptr, tg)
        if later:
            return ctx.done(Verdict.UNSUPPORTED, later)
    return ctx.done(Verdict.PROVED)


def _setup(ctx: _Ctx):
    """The stages before any query: the accesses (``targets``), what refuses the check (a capped
    case split, a wrong base pointer, :func:`_refusal`, loads from memory the models do not
    describe, a swizzle bit not proved 0), the argument environment.  Returns the finished
    Check of a refusal, else (targets, environment, the reference workgroup's ids)."""
    sub, ex, prob, buffer = ctx.sub, ctx.ex, ctx.prob, ctx.buffer
    every = ctx.prop == "bounds"          # each access reads its own offset from the V#
    tg = targets_for(ex, ctx.ptr, every)
    capped = ex.derived.get("capped", {}).get((ctx.ptr, every))
    if capped:
        return ctx.done(Verdict.UNKNOWN, capped)
    wrong = stand_in(sub, ex, prob, buffer, ctx.ptr, stand_ins=not tg)
    if wrong is not None:
        return _wrong_base(ctx, wrong)
    refused, tg = _refusal(ctx, tg)
    if refused is not None:
        return ctx.done(Verdict.UNSUPPORTED, refused)
    if not _in_loop(sub.code, ex, ctx.ptr):
        prob.restrict_exact(symbols_read(tg))    # exactness of the arguments these addresses read only
    env = {k: v for k, v in prob.kernargs.items() if not any(s.kind == 'ptr' for s in X.symbols(v).values())}
    env.update(prob.arrays)      # pointer arguments that hold a sequence-start array
    undeclared = sorted({n.args[0].name for t in tg for n in X.walk(t.address)
                         if isinstance(n, X.Op) and n.op == "sel" and n.args[0].name not in prob.arrays})
    if undeclared:
        return ctx.done(Verdict.UNSUPPORTED, "address depends on memory the models do not describe: loads from "
                        + ", ".join(undeclared))
    zero_ids = {prob.grid["z"].name: Const(0, 32), prob.grid["y"].name: Const(0, 32)}
    ctx.res.extracted, ctx.res.difference, ctx.res.offset_sym, ctx.res.shape_offset_sym = _formulas_cached(
        ctx, tg[0].address, zero_ids)
    swizzled = _swizzle_refused(ctx, tg, env)
    if swizzled is not None:
        return ctx.done(*swizzled)
    return tg, env, zero_ids


def address_setup(sub: Subject, ex: Exploration, buffer: str, layout: str, opts: Options,
                  cache: Optional[dict] = None):
    """The address check's stages before any query (:func:`_setup`) for another claim over the
    same accesses (:mod:`addrsim.prove.contract`): ``(problem, targets, environment, reference
    ids)``, or the refusal as ``(verdict, reason)``: every instruction, branch, division,
    case split and swizzle bit those accesses depend on is understood, or the claim is not
    stated."""
    prob = build_problem(sub.ms, sub.kernel, layout, Sym(LANE, 32, "lane"), opts.bounds, sub.arch, opts.memory_gib)
    res = Check(buffer, layout, Verdict.UNKNOWN, arith=opts.arith, prop="address", problem=prob)
    ctx = _Ctx(sub, ex, buffer, layout, buffer_pointer(sub.ms, sub.kernel, buffer), prob, opts, cache, "address",
               res, time.time())
    setup = _setup(ctx)
    if isinstance(setup, Check):
        return setup.verdict, setup.reason or ""
    return (prob,) + setup


def _wrong_base(ctx: _Ctx, w: StandIn) -> Check:
    """A counterexample of cause ``base``: the buffer addressed through another pointer
    argument (:mod:`addrsim.prove.standin`); its offsets are those of the access's address
    from the buffer's own pointer, as built and as meant, at a small shape of the domain."""
    model = dict({s.name: 0 for s in ctx.prob.grid.values()}, **w.shape, **w.ids)
    cex = counterexample(ctx.prob, model, w.kernargs, w.extracted, w.expected, w.pc,
                         "evaluation of the explored address (pointer bases 2**40 apart)")
    cex.memory_bytes = memory_needed(ctx.prob, cex)
    cex.minimal = False        # the base is wrong at every shape; this is a small one, not minimised
    ctx.res.counterexample, ctx.res.cause = cex, Cause.BASE
    ctx.res.accesses = [w.pc]
    return ctx.done(Verdict.COUNTEREXAMPLE, w.reason())


def _coverage_wins(res: Check, verdict: Verdict) -> bool:
    """Whether a store-coverage fault (found at a small shape) replaces the relative check's
    verdict: it does unless that verdict is a counterexample wrong over the integers already
    (formula, unclassified: a wrong slice offset at small shapes, the better attribution);
    an overflow needs large shapes, and unknown or unsupported decided nothing."""
    return verdict != Verdict.COUNTEREXAMPLE or res.cause in (Cause.OVERFLOW, Cause.LOOP)


def _uncovered(ctx: _Ctx, f: Fault) -> Check:
    """A counterexample of cause ``layout``: one workgroup's stores break its tile
    (:mod:`addrsim.prove.coverage`); both offsets are the faulting byte's offset from the
    workgroup's slice base (the reason says what is wrong with it)."""
    model = dict(f.shape, **f.ids, **{LANE: max(f.lane, 0) + 64 * max(f.wave, 0)})
    cex = counterexample(ctx.prob, model, {}, f.offset, f.offset, f.pc,
                         "a run of every wave of the workgroup on the concrete interpreter")
    cex.memory_bytes = memory_needed(ctx.prob, cex)
    cex.minimal = False                 # a test at a small shape, not a minimised one
    ctx.res.counterexample, ctx.res.cause = cex, Cause.LAYOUT
    ctx.res.overflow, ctx.res.failing = [], None
    ctx.res.accesses = [f.pc] if f.pc else []
    return ctx.done(Verdict.COUNTEREXAMPLE, f.reason())


def symbols_read(tg: List[Target]) -> set:
    """Names of the symbols the accesses' addresses, range checks and path conditions read."""
    used = set()
    for t in tg:
        used |= set(X.symbols(t.address)) | set(X.symbols(t.access.in_range))
        for c in t.conds:
            used |= set(X.symbols(c))
    return used


# ----------------------------------------------------------------------------- refusal

def _refusal(ctx: _Ctx, tg: List[Target]) -> Tuple[Optional[str], List[Target]]:
    """(why the check cannot be made (unsupported) or None, the targets with their float
    divisions proved exact)."""
    ex, ptr, prob, buffer = ctx.ex, ctx.ptr, ctx.prob, ctx.buffer
    bad_ends = [e for e in ex.ends if e.reason in ("unsupported", "budget") and ptr not in e.reached]
    if bad_ends:
        return ("; ".join(sorted({e.detail for e in bad_ends}))[:500]), tg
    if getattr(ex, "bad_branches", None):
        # a branch into the middle of an instruction or out of the kernel: the loops and paths
        # addrsim sees are not the ones the hardware runs
        return ("branch target is not the start of an instruction of this kernel: "
                + "; ".join(ex.bad_branches[:3])), tg
    # a path that loops back before touching the buffer is covered by the loop's exit (explored
    # with what the body writes forgotten) unless the buffer is accessed inside that loop,
    # where iterations after the first could touch it first
    back_ends = [e for e in ex.ends if e.reason == "backedge" and ptr not in e.reached]
    in_loop = [e for e in back_ends if e.loop and any(e.loop[0] <= t.access.instr.addr <= e.loop[1] for t in tg)]
    if in_loop:
        return ((f"{ptr} is first accessed inside the loop {in_loop[0].loop[0]:#x}-{in_loop[0].loop[1]:#x} on a "
                f"path whose first iteration skips it")), tg
    if not tg:
        return (f"no buffer access whose V# base is the {ptr} argument was found"), tg
    ctx.res.accesses = sorted({t.access.instr.addr for t in tg})
    notes = sorted({n for t in tg for n in t.access.notes})
    if notes:
        return ("; ".join(notes)), tg
    tg, proofs, left = _prove_divisions(tg, prob, ex, ptr, ctx.cache)
    if left:
        return ("; ".join(sorted(set(left)))[:500]), tg
    ctx.res.division_proofs = proofs
    opq = sorted({n for t in tg for n in opaque_in(t.address)})
    if opq:
        return ("address depends on values addrsim does not model: " + "; ".join(opq)[:400]), tg
    if buffer not in prob.expected:
        return (f"layout {ctx.layout} defines no strides for the tensor of buffer {buffer}"), tg
    if ctx.prop == "bounds":
        if buffer not in prob.extent:
            return f"the models give no allocation extent of {buffer} for family {prob.family} in layout {ctx.layout}", tg
        if any(opaque_in(t.access.in_range) for t in tg):
            return "the V# range check depends on values addrsim does not model", tg
    return None, tg


# ----------------------------------------------------------------------------- one query per access

def _claim(ctx: _Ctx, t: Target, a: Expr, a00: Expr, env, expected: Expr, part: str = "") -> Expr:
    """The claim of one access: the relative address claim, or for bounds the allocation and
    V# claim (``part`` "") then slice containment (``part`` "slice")."""
    if ctx.prop == "bounds":
        own = _own(ctx.prob, ctx.buffer)
        if part == "slice":
            return _contained(t, a, env, ctx.ptr, *own)
        return _bounds_claim(t, a, env, ctx.ptr, expected, *(own[:2] if own else ()))
    return X.eq(a, X.add(a00, expected))


def reference(a: Expr, zero_ids, prob: Problem) -> Expr:
    """The address ``a`` (byte address, 64-bit) of a workgroup's access, read in the
    reference workgroup the claim measures every slice from: batch_id = head_id = 0
    (``zero_ids``), the same lane, tile and shape.

    In group mode (``prob.arrays``) the reference sequence has the workgroup's own lengths:
    the reference reads the sequence-start arrays shifted to the workgroup's batch, entry i
    being ``seqstart[batch_id + i] - seqstart[batch_id]``.  So every read ``sel(A, off)``
    of the zeroed address becomes ``sel(A, off + 4*batch_id) - sel(A, 4*batch_id)``.  A
    kernel may place a lane's rows by its sequence's length (the last q tile first, a
    clamp to the last row), and sequence 0 with other lengths is then no reference: on
    gfx950 hd64 a32_rtna_pssk_group, LSE of batch 1 with 1 row against batch 0 with 65 rows
    differs by 32 rows, while against a batch 0 of 1 row it is the expected offset
    (2026-12-03).  In batch mode the zeroed address itself."""
    a00 = X.substitute(a, zero_ids)
    names = set(prob.arrays) | {s_.name for s_ in prob.arrays.values()}     # read through the argument or the array
    if not names:
        return a00
    start = X.mul(X.zext(prob.grid["z"], 64), Const(4, 64))
    memo: dict = {}

    def shifted(e: Expr) -> Expr:
        if id(e) in memo:
            return memo[id(e)][1]
        r = e
        if isinstance(e, X.Op):
            r = X.rebuild(e, tuple(shifted(x) for x in e.args))
            if isinstance(r, X.Op) and r.op == "sel" and r.args[0].name in names:
                if isinstance(r.args[1], Const) and r.args[1].value == 0:
                    r = Const(0, 32)        # the reference sequence starts at row 0
                else:
                    r = X.sub(X.select(r.args[0], X.add(r.args[1], start)), X.select(r.args[0], start))
        memo[id(e)] = (e, r)
        return r
    return shifted(a00)


def _targets_decided(ctx: _Ctx, tg: List[Target], env, expected, zero_ids, part: str = ""):
    """Decide the claim (:func:`_claim`, its ``part``) at every access: None when all are
    proved, else (verdict, reason) with the counterexample or the SMT-LIB2 dump recorded in
    ``ctx.res``."""
    res, prob, opts = ctx.res, ctx.prob, ctx.opts
    ranges = ranges_of(prob)
    seen_keys = set()
    cases = []
    smemo: dict = {}         # the accesses share their paths' conditions and address terms
    dmemo: dict = {}         # and their claims' subterms (digests)
    for t in tg:
        a = X.substitute(t.address, env, smemo)
        a00 = reference(a, zero_ids, prob)
        claim = _claim(ctx, t, a, a00, env, expected, part)
        path = [X.substitute(c, env, smemo) for c in t.conds]
        conds = path + list(prob.domain)
        conds += array_facts(conds + [claim, expected], prob, ctx.facts)
        conds += group_lemmas(ctx, claim)
        cases.append((t, conds, claim, a, a00, X.digest(claim, dmemo), path))
    repeats = Counter(c[5] for c in cases)
    shared: Dict[bytes, bool] = {}        # claim digest -> proved on the domain alone
    for t, conds, claim, a, a00, dk, path in cases:
        res.cases.append((t, conds, claim, a, a00))
        fp = fingerprint(claim, conds, ctx.always(path))
        reuse = ctx.reused(fp, conds, claim)     # before the cache: the same answer in every run
        if reuse is not None and reuse[0] == "proved":
            continue
        if reuse is None and repeats[dk] >= SHARED_CLAIM_MIN and not ctx.out_of_budget():
            if dk not in shared:
                shared[dk] = _proved_on_domain(ctx, claim, expected, ranges)
            if shared[dk]:
                continue
        quick = prob.routed is not None          # a routed rerun's claims: the quick integer try first
        tag = (opts.arith, ctx.prop + part, opts.budgets()) + (("quick",) * quick)
        key, stored, asked = _canonical_key(tag, claim, conds)
        if key in seen_keys:
            continue
        seen_keys.add(key)
        smt = lambda: Query(conds, claim, ranges, opts.query_ru, opts.arith).smt2()  # noqa: E731  # in this query's names
        if reuse is not None and reuse[0] == "unknown":
            why = f"left undecided, as in a check of the same claim under fewer conditions ({reuse[1]})"
            ctx.stopped_at(fp, reuse[1], inherited=True)
            return Verdict.UNKNOWN, why + _dump(ctx, smt)
        # a carried counterexample is not cached: the key names decide_query's own answer
        hit = ("refuted", stored(reuse[1]), None, True, None, 0) if reuse is not None else ctx.cached(key)
        if hit is None and not ctx.out_of_budget():
            hit = _weak_first(ctx, tag, claim, conds, stored, quick)
        if hit is None:
            if ctx.out_of_budget():
                why = (f"check budget of {opts.check_ru / RU:g} Mru spent before every access was decided "
                       f"({len(seen_keys) - 1} of {len(tg)} queries done)")
                ctx.stopped_at(fp, why)
                return Verdict.UNKNOWN, why + _dump(ctx, smt)
            hit = _decided(ctx, key, stored, conds, claim, ranges, quick, f"{len(seen_keys) - 1} of {len(tg)}")
        verdict, model, why, minimal, _, used = hit
        model = asked(model)
        ctx.spent += used
        if verdict == "proved":
            ctx.proved_under(fp)
            continue
        if verdict == "unknown":
            ctx.stopped_at(fp, why)
            return Verdict.UNKNOWN, why + _dump(ctx, smt)
        if minimal:
            ctx.refuted_under(fp, model)
        return _counterexample(ctx, t, key, model, minimal, a, a00, env, expected, conds, claim, ranges)
    return None


def _decided(ctx: _Ctx, key, stored, conds, claim, ranges, quick: bool, done: str):
    """(verdict, model in cache names, reason, minimal, None, units) of one access's query by
    :func:`decide_query`, kept in the cache under ``key`` unless the wall clock or the check
    budget cut it (``quick``: a routed rerun's query, capped by what is left of the check's
    budget; ``done``: how many queries were decided, for that reason)."""
    opts = ctx.opts
    cap = opts.check_ru - ctx.spent if quick else None     # a routed rerun: the check budget caps it
    v, m_, w_, mini, q, used = decide_query(conds, claim, ranges, opts.query_ru, ctx.prob, opts.min_ru,
                                            opts.arith, quick, cap)
    capped = cap is not None and used >= cap
    if v == "unknown" and capped:
        w_ = (f"check budget of {opts.check_ru / RU:g} Mru spent before every access was decided "
              f"({done} queries done; the last one stopped at the budget)")
    # an answer the cap or the wall clock cut is not a function of the key: not cached
    return ctx.keep(key, (v, stored(m_), w_, mini, None, used), q is not None and (q.wallclock or capped))


def _weak_first(ctx: _Ctx, tag, claim, conds, stored, quick: bool):
    """The answer (in ``stored``'s names, no units: they are charged here) of the query on
    the weakened domain (:func:`addrsim.prove.query.weakened_query`) when it answers the
    real one, else None: when it proves the claim, or finds a counterexample that
    :func:`meets` every real condition.  One proven minimal there is the least here (the real
    failing set is a subset of the weak one); one whose minimisation ran out of budget is
    reported as not minimal, as the real query's would be (deciding that again cost the
    gfx950 a16 kernel 27 s for 5 checks, 1 of which it then minimised).  Its key is the one
    a real query of the same conditions has: the a16 kernel's queries answer the a32's.  Once
    a weak counterexample lies outside the real memory limit, the check's later queries skip
    this phase (``--memory-gib 16`` on the a32 kernel's dQ: 32 queries, each minimised twice)."""
    w = weakened_query(conds, ctx.prob) if not ctx.memory_matters else None
    if w is None:
        return None
    conds_w, ranges = w
    key, stored_w, asked_w = _canonical_key(tag, claim, conds_w)
    hit = ctx.cached(key)
    if hit is None:
        hit = _decided(ctx, key, stored_w, conds_w, claim, ranges, quick, "the weak")
    ctx.spent += hit[5]
    if hit[0] == "proved":
        return "proved", None, None, True, None, 0
    if hit[0] == "refuted" and meets(conds, claim, asked_w(hit[1]), ctx.opts.arith):
        return "refuted", stored(asked_w(hit[1])), None, hit[3], None, 0
    ctx.memory_matters = hit[0] == "refuted"     # this check's claims need the whole memory limit: no more
    return None


def _by_claim(cases) -> Dict[bytes, list]:
    """``proved_cases`` (claim digest, condition digests) or ``refuted_cases`` (claim digest,
    condition digests, model) grouped by claim digest: the rest of each entry, in order."""
    out: Dict[bytes, list] = {}
    for c in cases:
        out.setdefault(c[0], []).append(c[1] if len(c) == 2 else c[1:])
    return out


def fingerprint(claim: Expr, conds: List[Expr], always: Callable[[Expr], bool] = lambda c: False):
    """(names, claim digest, frozenset of condition digests) of a query, for reuse across
    buffers and domains (:meth:`_Ctx.subsumed`, :meth:`_Ctx.carried`).  ``names`` renames the
    pointer, opaque and loop-carried symbols canonically, the claim's first and then those of
    the conditions alone (:func:`addrsim.ir.expr.canonical_names`; no other name has ``#`` or
    ``@L``): a bijection of the query's symbols, so a proof of one query is a proof of every
    query with the same fingerprint (V's claim in K's names), and a model of one is a model
    of the other (:meth:`_Ctx.carried`).  The digests, not ``names``, also read each symbol
    that an ``eq`` of the conditions sets equal to another as its class's
    (:func:`addrsim.ir.expr.equal_symbols`: a query with its conditions is the same query
    so rewritten) and leave out the conditions ``always`` says are true for every value
    (:func:`always_true`).  gfx950 psskddv kernels address V with hdim_v where K's stride has
    hdim_q, and K's path keeps a merged branch's ``p or not p``: V's SBHD check then reuses
    K's counterexample (17.7 s to 0.5 s)."""
    names = X.canonical_names([claim], rest=conds)
    classes = X.equal_symbols(conds)
    digest_names = dict(names, **{s: names.get(c, c) for s, c in classes.items()})
    memo: dict = {}
    return names, X.digest(claim, memo, digest_names), frozenset(X.digest(c, memo, digest_names) for c in conds
                                                                  if not always(c))


def _swizzle_refused(ctx: _Ctx, tg: List[Target], env):
    """None when every access's address is the hardware's: its V#'s swizzle_enable and
    add_tid_enable bits are constants (the engine then built the address by the ISA guide's
    formula, linear or swizzled: :func:`addrsim.isa.memory.buffer_offset`), or not constants but
    proved 0 on the domain and the path (the engine built the linear address); else (verdict,
    reason): unsupported when a bit that is not a constant may be 1, unknown when the query runs
    out of budget.  gfx950's odo, dq_convert and dq_shuffle add the 64-bit base into V# dword1
    (``s_addc_u32 s13, s35, s25``), whose bit 31 is swizzle_enable: 0 only because the address
    stays below 2**63, which the 48-bit pointer and the tensor's extent guarantee; a syntactic
    check cannot see it."""
    prob, opts = ctx.prob, ctx.opts
    ranges = ranges_of(prob)
    seen = set()
    for t in tg:
        lin = X.substitute(t.access.linear, env)
        if isinstance(lin, Const):
            continue
        path = [X.substitute(c, env) for c in t.conds]

        def attempt(dom, rng):
            conds = path + dom
            conds += array_facts(conds + [lin], prob, ctx.facts)
            key, _, _ = _canonical_key(("linear V#", opts.arith, opts.budgets()), lin, conds)
            proved = key in seen or _proved_cached(ctx, key, conds, lin, rng)   # a key seen was proved
            seen.add(key)
            return proved
        if not _proved_either(ctx, ranges, attempt):
            return Verdict.UNSUPPORTED, (f"V# swizzle_enable/add_tid_enable at {t.access.instr.addr:#x} is computed "
                                         f"and not proved 0: the address was built linear (a computed swizzle bit "
                                         f"is not modelled)")
    return None


LEMMA_RU = RU // 10
"""Resource units to prove one head-group lemma from the domain (:func:`group_lemmas`)."""

VALID_RU = RU // 100
"""Z3 resource units to show one merged-path condition true for every value (:func:`always_true`)."""


def group_lemmas(ctx: _Ctx, claim: Expr) -> List[Expr]:
    """Facts the domain implies that the solvers do not find within a budget: each K/V head
    group the claim reads, ``udiv(head_id, nhead_q/nhead_k)``, is below nhead_k (head_id <
    nhead_q, which is the ratio times nhead_k: an integer GQA ratio, the traits layer).  On
    gfx942 a32_rtna_psskddv K BHSD, batch 1 cannot wrap because of it (kv_tile*192 + group*
    seqlen_k < nhead_k*seqlen_k, whose bytes fit in 32 bits by the exact layer): with it the
    minimisation's batch-1 box is unsat in 27k units, without it undecided after 2.8 Mru.
    A lemma is added only once it is proved from the domain conditions that read no other
    symbol than the division's and nhead_k (:func:`_shown_from_domain`, memoised per
    kernel), so it changes no answer, only what the solvers must derive."""
    head = ctx.prob.grid["y"].name
    nk = Sym("nhead_k", 64, "shape")        # another symbol of that name is another variable: nothing proved
    memo = ctx.ex.derived.setdefault("group lemmas", {})
    out = []
    for n in X.walk(claim):
        if not (isinstance(n, X.Op) and n.op == "udiv" and isinstance(n.args[0], Sym) and n.args[0].name == head):
            continue
        lemma = X.ult(n, X.extract(nk, n.width - 1, 0) if n.width <= nk.width else X.zext(nk, n.width))
        if _shown_from_domain(lemma, ctx.prob, memo):
            out.append(lemma)
    return out


def _shown_from_domain(lemma: Expr, prob: Problem, memo: dict) -> bool:
    """Is ``lemma`` proved from the conjuncts of the domain that read only its symbols (the
    query pipeline, :func:`addrsim.prove.query.solve`, within LEMMA_RU: Z3's bit-vector
    solver alone leaves the nested divisions undecided after 1 Mru)?  ``memo`` keys the
    answer by the lemma, those conjuncts and the ranges of its symbols, so a problem with
    other hypotheses (another layer set) is asked again."""
    names = set(X.symbols(lemma))
    if ("domain", id(prob)) not in memo:        # the problem kept alive with its conjuncts' symbols
        memo[("domain", id(prob))] = (prob, [(c, set(X.symbols(c))) for c in X.conjuncts(prob.domain)],
                                      ranges_of(prob))
    _, conjuncts, ranges = memo[("domain", id(prob))]
    hyps = [c for c, syms in conjuncts if syms <= names]
    key = (X.digest(lemma), frozenset(X.digest(c) for c in hyps), tuple(sorted((k, ranges.get(k)) for k in names)))
    if key not in memo:
        memo[key] = solve(hyps, lemma, ranges, LEMMA_RU)[0] == "proved"
    return memo[key]


def always_true(c: Expr, memo: dict) -> bool:
    """Is ``c``, a disjunction that merged paths leave (``p or not p``; on gfx950 psskddv dK,
    ``m <= 1 or (m > 1 and m <= 2)`` where m = min(x, 2)), true for every value of its
    symbols?  Z3 over bit-vectors shows its negation unsat within VALID_RU (False when it
    does not, or ``c`` is no ``or``); ``memo`` maps its digest to the answer."""
    if not (isinstance(c, X.Op) and c.op == "or"):
        return False
    d = X.digest(c)
    if d not in memo:
        memo[d] = decided([z3.Not(holds_bv(c))], VALID_RU)[0] == z3.unsat
    return memo[d]

SHARED_CLAIM_MIN = 3
"""A claim (one address expression against the model) shared by at least this many accesses
of a check is first tried on the domain alone, without any access's path conditions: one
proof then covers each of them (gfx950 psskddv_group LSE/D: 41 accesses on different paths,
about 1 Mru each, ran out of the check budget after 13 to 36)."""


def _proved_on_domain(ctx: _Ctx, claim: Expr, expected: Expr, ranges) -> bool:
    """Is ``claim`` proved under the problem's domain alone (fewer hypotheses than any
    access's query: a proof holds on every path)?  One solver pass within the query budget
    (on the weakened domain first, :func:`_proved_either`), cached like every query; its
    units count in the check's."""
    prob, opts = ctx.prob, ctx.opts

    def attempt(dom, rng):
        conds = dom + array_facts(dom + [claim, expected], prob, ctx.facts)
        key, _, _ = _canonical_key(("domain alone", opts.arith, ctx.prop, opts.budgets()), claim, conds)
        return _proved_cached(ctx, key, conds, claim, rng)
    if not _proved_either(ctx, ranges, attempt):
        return False
    real = list(prob.domain)
    ctx.proved_under(fingerprint(claim, real + array_facts(real + [claim, expected], prob, ctx.facts)))
    return True


def _proved_either(ctx: _Ctx, ranges, attempt: Callable) -> bool:
    """``attempt(domain, ranges)`` (proved?) on the weakened domain
    (:func:`addrsim.prove.query.weakened_query`: its proof is a proof of the problem's), then
    on the problem's (with ``ranges``).  When only the second proves it, the check's claims
    need the whole memory limit: its later queries skip the weakened domain
    (``_Ctx.memory_matters``)."""
    w = None if ctx.memory_matters else weakened_query(list(ctx.prob.domain), ctx.prob)
    if w is not None and attempt(*w):
        return True
    if attempt(list(ctx.prob.domain), ranges):
        ctx.memory_matters = ctx.memory_matters or w is not None
        return True
    return False


def _proved_cached(ctx: _Ctx, key, conds, goal, ranges) -> bool:
    """Is ``goal`` proved under ``conds`` (:func:`proved_within`, every stage within the
    query budget)?  Cached under ``key`` like every query; its units count in the check's."""
    hit = ctx.cached(key)
    if hit is None:
        proved, used, wall = proved_within(conds, goal, ranges, ctx.opts.query_ru, ctx.opts.arith)
        hit = ctx.keep(key, (proved, used), wall)
    ctx.spent += hit[1]
    return hit[0]


def _canonical_key(tag: tuple, claim: Expr, conds: List[Expr]):
    """(key, stored, asked) of a query kept in the cache in names that do not depend on the
    buffer's pointer or where the code lies (:func:`addrsim.ir.expr.canonical_names`: Q and
    dO, sibling kernels): ``stored(model)`` renames a model of this query for the cache,
    ``asked(model)`` renames a cached one back into this query's names."""
    names = X.canonical_names([claim] + conds)
    back = {c: n for n, c in names.items()}
    return (query_key(tag, claim, conds, names), lambda m: X.rename_model(m, names),
            lambda m: X.rename_model(m, back))


def _replayed(ctx: _Ctx, t, key, model, a, a00, env, expected, conds, claim):
    """The counterexample of ``model`` confirmed (bounds, int mode, or the concrete replay),
    or a ReplayFailure; reused from the cache for the same query at the same access of the
    same code (:func:`addrsim.prove.replay.replay_site`): another check, or an earlier run."""
    rkey = ("replay", ctx.opts.arith, key, replay_site(ctx.sub, t.access.instr.addr))
    cex = ctx.cached(rkey)
    if cex is None:
        if ctx.prop == "bounds":
            cex = bounds_counterexample(ctx.sub, ctx.prob, t, model, a, env, ctx.ptr, expected, conds + [claim],
                                        ctx.opts.arith, _own(ctx.prob, ctx.buffer), ctx.cache)
        elif ctx.opts.arith == "int":
            cex = ideal_counterexample(ctx.prob, model, t, a, a00, expected, conds + [claim])
        else:
            cex = replay(ctx.sub, ctx.prob, t, model, a, a00, expected, ctx.buffer, store=ctx.cache)
        return ctx.keep(rkey, cex)
    if isinstance(cex, ReplayFailure):
        return cex
    if getattr(ctx.cache, "earlier", lambda k: False)(rkey):     # read from the query store
        return replace_dc(cex, replayed_on=cex.replayed_on or "an earlier run of the same query")
    return replace_dc(cex)      # replayed in this run, on this kernel's access (this check or another)


def _counterexample(ctx: _Ctx, t, key, model, minimal, a, a00, env, expected, conds, claim, ranges):
    """(verdict, reason) of a refuted access: the replayed counterexample and its cause."""
    res, prob, buffer = ctx.res, ctx.prob, ctx.buffer
    cex = _replayed(ctx, t, key, model, a, a00, env, expected, conds, claim)
    if isinstance(cex, ReplayFailure):
        return Verdict.UNKNOWN, str(cex)
    res.failing = res.cases[-1]
    res.counterexample = cex
    cex.minimal = minimal
    cex.memory_bytes = memory_needed(prob, cex)
    why = f"access at {t.access.instr.addr:#x} ({t.access.instr.text})"
    if ctx.prop == "bounds":
        res.cause = Cause(cex.cause)
        why += {"allocation": f": inside the V#'s num_records but outside the allocation of {buffer} "
                              f"(offset {cex.extracted}, extent {cex.expected} bytes)",
                "num_records": f": inside the allocation of {buffer} (offset {cex.extracted} of {cex.expected} "
                               f"bytes) but past the V#'s num_records: reads return 0, writes are dropped",
                "layout": f": {'stores' if t.access.kind == 'store' else 'reads'} outside the workgroup's own "
                          f"(batch, head) slice of {buffer} (offset {cex.extracted} from the slice base, which "
                          f"the workgroup may reach up to {cex.expected} bytes): another workgroup's data"
                }.get(cex.cause, "")
        if ctx.opts.arith == "bv" and holds_exactly(conds, claim, model):
            res.overflow = _sites(ctx, t, model)
            if res.overflow and res.overflow[0].matters:
                why += f"; in bounds without 32-bit wraps: {res.overflow[0].describe()}"
    elif ctx.opts.arith == "bv":
        res.cause, res.overflow = _classify(ctx, conds, claim, ranges, key, t, model)
        if res.cause == Cause.OVERFLOW:
            first = res.overflow[0].describe() if res.overflow else "no single wrapping node found"
            why += f"; OVERFLOW: the check is proved in int mode, and fails in bv because of {first}"
        elif res.cause == Cause.FORMULA:
            why += "; the formula is wrong over the integers too (int mode refutes it)"
    else:
        res.cause = Cause.FORMULA
    return Verdict.COUNTEREXAMPLE, why


def _classify(ctx: _Ctx, conds, claim, ranges, key, t, model):
    """Cause of a bv counterexample: (OVERFLOW, wrap sites) when int mode proves the claim,
    or when the claim's normal forms agree once its 32-bit sites may not wrap (the wrap
    cover's E', :func:`addrsim.prove.cover.wrap_cover` with ``free_only``: every
    counterexample then wraps one of them); (FORMULA, []) when int mode refutes it too;
    (UNCLASSIFIED, []) when undecided."""
    ckey = ("int", CLASSIFY_RU, key)
    v = ctx.cached(ckey)
    if v is None and violates(conds, claim, model, kept_wraps(conds + [claim])):
        v = ctx.keep(ckey, "refuted")   # the counterexample itself breaks the claim over the integers
    if v is None and wrap_cover(Query(conds, claim, ranges, CLASSIFY_RU, "bv"), free_only=True)[0] is not None:
        # no solver: gfx942 a16_rtna_pddv dK BSHD's floor(hdim*(...)/2) terms, which the
        # integer solver leaves undecided within CLASSIFY_RU
        v = ctx.keep(ckey, "proved")
    if v is None:
        # its own budget: minimisation may have spent the check's, and the int query is
        # usually easy (no wraps)
        q = Query(conds, claim, ranges, CLASSIFY_RU, "int")
        v = ctx.keep(ckey, q.solve()[0], q.wallclock)
    if v == "refuted":
        return Cause.FORMULA, []
    if v != "proved":
        return Cause.UNCLASSIFIED, []
    return Cause.OVERFLOW, _sites(ctx, t, model)


def _sites(ctx: _Ctx, t, model) -> list:
    """The wrap sites of the access's address at the counterexample ``model``
    (:func:`addrsim.prove.wraps.wrap_sites`), those that change the address first."""
    prob = ctx.prob
    env = env_of([t.address], model)
    env.update({k: v for k, v in model.items() if not k.endswith("[]")})
    env.update(prob.fixed)
    for parg, arr in prob.arrays.items():      # reads through a sequence-start pointer argument
        env[parg + "[]"] = model.get(arr.name + "[]", {})
    args = {k: e for k, e in prob.kernargs.items() if not any(s.kind == "ptr" for s in X.symbols(e).values())}
    try:
        sites = wrap_sites(t.address, args, env, getattr(ctx.ex, "origin", None) or {},
                           last_workgroup(prob.grid_count, prob.lane.name, _gqa_exact(prob)))
    except Exception:   # the explanation must never hide the verdict
        sites = []
    return sites


def _gqa_exact(prob: Problem) -> bool:
    """Does the kernel's domain make nhead_q a multiple of nhead_k (a traits assumption)?"""
    return any(a.text.replace(" ", "") == "nhead_q%nhead_k==0" and prob.in_domain(a) for a in prob.assumptions)


def smt2_name(symbol: str, buffer: str, layout: str, prop: str, arith: str, routed: Optional[str] = None) -> str:
    """File name of an undecided obligation: one per kernel, buffer, layout, property
    (address or bounds), arithmetic and domain (the kernel's own, or routed through a host
    entry point), so no check overwrites another's."""
    import re
    tail = f".routed-{routed}" if routed else ""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{symbol}.{buffer}.{layout}.{prop}.{arith}{tail}") + ".smt2"


def _dump(ctx: _Ctx, text_fn) -> str:
    """Write an undecided obligation as SMT-LIB2 under ``opts.smt_dir``; the reason's suffix
    (without a folder: how to ask for one)."""
    if not ctx.opts.smt_dir:
        return " (--smt-dir DIR writes the obligation as SMT-LIB2)"
    from pathlib import Path
    try:
        text = text_fn()
        if not text:
            return ""
        d = Path(ctx.opts.smt_dir)
        d.mkdir(parents=True, exist_ok=True)
        name = smt2_name(ctx.sub.kernel.symbol, ctx.buffer, ctx.layout, ctx.prop, ctx.res.arith, ctx.prob.routed)
        (d / name).write_text(text)
        ctx.res.smt2 = str(d / name)
        return f" (obligation written to {d / name})"
    except OSError as e:
        return f" (obligation not written: {e})"


# ----------------------------------------------------------------------------- loops

def _loops_accessing(code, ex, ptr):
    """The (header, back-edge branch) loops of the kernel that access the buffer at ``ptr``."""
    from addrsim.engine.loops import loops_of
    pcs = {a.instr.addr for a in ex.accesses if ptr in X.symbols(a.base)}
    return [(h, e) for h, e in loops_of(code) if any(h <= pc <= e for pc in pcs)]


def _in_loop(code, ex, ptr) -> bool:
    """Whether some loop of the kernel accesses the buffer at ``ptr`` (its later iterations may
    read any argument: every exactness assumption is then kept)."""
    return bool(_loops_accessing(code, ex, ptr))


def _later_iterations(code, ex, ptr, tg) -> str:
    """Why a bounds check that proved every target is not a proof ("" when it is): the
    loops that access the buffer, whose iterations after the first no obligation covers
    (the loop induction proves the address property only; a bounds proof of a later
    iteration needs the trip count)."""
    loops = _loops_accessing(code, ex, ptr)
    if not loops:
        return ""
    where = ", ".join(f"{h:#x}-{e:#x}" for h, e in loops)
    n = len({t.access.instr.addr for t in tg})
    return (f"bounds of the iterations after the first of loop {where} are not checked (the loop "
            f"induction proves the address property only); the {n} accesses checked, each loop's "
            f"first iteration included, are in bounds and inside the workgroup's own slice where the models give one")


def _loop_check(ctx: _Ctx, env, expected, zero_ids):
    """Every iteration of each loop that accesses the buffer (addrsim.engine.loops): None when
    the induction proves it, else (verdict, reason, Counterexample or None)."""
    from addrsim.engine.cfg import cfg_of
    from addrsim.engine.loops import generic_iteration, loops_of, obligations
    ex, ptr = ctx.ex, ctx.ptr
    ptr_accs = [a.instr.addr for a in ex.accesses if ptr in X.symbols(a.base) and pointers_in(a.base) == [ptr]]
    first_pcs = frozenset(t.access.instr.addr for t in targets_for(ex, ptr))   # proved for iteration 1
    bodies = ex.derived.setdefault("bodies", {})
    irreducible = {(lp.head, lp.latch) for lp in cfg_of(ctx.sub.code).loops if lp.irreducible}
    for head, end in loops_of(ctx.sub.code):
        if not any(head <= pc <= end for pc in ptr_accs):
            continue
        if (head, end) in irreducible:
            return Verdict.UNSUPPORTED, (f"loop {head:#x}-{end:#x}: irreducible control flow (its cycle is entered "
                                         f"other than through {head:#x}); the induction does not cover it"), None
        if head in getattr(ex, "capped_heads", ()):
            return Verdict.UNKNOWN, (f"loop {head:#x}-{end:#x} is entered in more than "
                                     f"{len(ex.heads.get(head, []))} states; only those were checked"), None
        for k, entry in enumerate(ex.heads.get(head, [])):
            if (head, end, k) not in bodies:
                bodies[(head, end, k)] = generic_iteration(ctx.sub.code, entry, head, end, lambda a: pointers_in(a.base),
                                                           ex.seen)
            ind = obligations(bodies[(head, end, k)], ptr, pointers_in, zero_ids, expected, env, first_pcs,
                              lambda e: reference(e, zero_ids, ctx.prob))
            if ind.verdict == "unsupported":
                return Verdict.UNSUPPORTED, ind.reason, None
            if ind.verdict == "capped":
                return Verdict.UNKNOWN, ind.reason, None
            for ob in ind.obligations:
                out = _loop_obligation(ctx, ob, head, end, ptr_accs, expected)
                if out is not None:
                    return out
    return None


def _loop_obligation(ctx: _Ctx, ob, head, end, ptr_accs, expected):
    """Decide one loop obligation (and its fallbacks, ``ob[4]``: an obligation tried when it
    does not hold, or a callable yielding obligations that must all hold): None when proved, else
    (verdict, reason, Counterexample or None)."""
    ranges = ranges_of(ctx.prob)
    v, model, why, what, pc = None, None, "", ob[2], ob[3]
    while ob is not None:
        path, claim, what, pc = ob[:4]
        last = [None]           # the last answer: the problem's domain's unless the weakened one proved it

        def attempt(dom, rng):
            conds = path + dom
            conds += array_facts(conds + [claim], ctx.prob, ctx.facts)
            key, stored, asked = _canonical_key(("loop", ctx.opts.arith, ctx.opts.budgets()), claim, conds)
            hit = ctx.cached(key)
            if hit is None:
                if ctx.out_of_budget():
                    last[0] = None
                    return False
                v_, model_, why_, q = solve(conds, claim, rng, ctx.opts.query_ru, ctx.opts.arith, ctx.cones)
                hit = ctx.keep(key, (v_, stored(model_), why_, q.used), q.wallclock)
            ctx.spent += hit[3]
            last[0] = (hit[0], asked(hit[1]), hit[2])
            return hit[0] == "proved"
        _proved_either(ctx, ranges, attempt)
        if last[0] is None:
            return (Verdict.UNKNOWN, f"check budget of {ctx.opts.check_ru / RU:g} Mru spent before the "
                                     f"loop {head:#x}-{end:#x} was proved", None)
        v, model, why = last[0]
        ob = ob[4] if v != "proved" and len(ob) > 4 else None
        if callable(ob):      # yields obligations that must all hold (addrsim.engine.loops._merged)
            return next((out for each in ob() if (out := _loop_obligation(ctx, each, head, end, ptr_accs, expected))
                         is not None), None)
    if v == "proved":
        return None
    if v == "unknown":
        return Verdict.UNKNOWN, f"loop {head:#x}-{end:#x}, {what}: {why}", None
    # refuted for some loop-carried values: confirm on the concrete interpreter
    target_pc = pc or next(p for p in ptr_accs if head <= p <= end)
    cex = confirm_loop(ctx.sub, ctx.prob, model, target_pc, expected, ctx.buffer)
    if cex is not None:
        return Verdict.COUNTEREXAMPLE, (f"iteration {cex.iteration}: the {what} in the loop {head:#x}-{end:#x} is "
                                        f"not the same for every (batch_id, head_id)"), cex
    return Verdict.UNKNOWN, (f"loop {head:#x}-{end:#x}: the {what} is not provably the same for every "
                             f"(batch_id, head_id) over all loop-carried values, and replaying the first "
                             f"{REPLAY_ITERATIONS} iterations found no wrong address"), None


# ----------------------------------------------------------------------------- claims and divisions

def _within(a: Expr, size: int, lo: Expr, n: Expr) -> Expr:
    """1-bit: [a, a + size) lies inside [lo, lo + n) (bytes, 64-bit)."""
    return X.band(X.ule(lo, a), X.ule(X.add(a, Const(size, 64)), X.add(lo, n)))


def _own(prob: Problem, buffer: str):
    """(slice base offset, slice bytes, reach bytes) of ``buffer``'s (batch, head) slice, or
    None where the models give no slice (group mode, dQ accumulators)."""
    sl = prob.slices.get(buffer)
    return None if sl is None else (prob.expected[buffer], sl, prob.reach.get(buffer, sl))


def _bounds_claim(t: Target, a: Expr, env, ptr: str, extent: Expr, slice_base=None, slice_n=None) -> Expr:
    """1-bit: an access that passes the V# range check lies inside the allocation
    [ptr, ptr + extent), and an access inside the workgroup's own (batch, head) slice
    [ptr + slice_base, + slice_n) passes the range check (bytes, 64-bit).  The first fails
    on a real out-of-allocation access; the second when tensor data the workgroup owns is
    silently read as 0 (or a write dropped).  An access outside the slice that the V#
    clamps (padding rows) is allowed."""
    p = X.zext(Sym(ptr, 48, "ptr"), 64)
    in_r = X.substitute(t.range_check, env)
    ok = X.bor(X.bnot(in_r), _within(a, t.access.size, p, extent))
    if slice_base is not None:
        own = _within(a, t.access.size, X.add(p, slice_base), slice_n)
        ok = X.band(ok, X.bor(X.bnot(own), in_r))
    return ok


def _contained(t: Target, a: Expr, env, ptr: str, slice_base: Expr, slice_n: Expr, reach: Expr) -> Expr:
    """1-bit, slice containment (issue 36): an access that passes the V# range check lies
    inside the workgroup's own reach [ptr + slice_base, + reach) (bytes, 64-bit): the
    (batch, head) slice, plus the padded rows of a last tile that loads read and discard (the
    models' ``buffers.*.reach``).  It fails when a lane reaches into another workgroup's
    slice: a lane term shifted too far, a wave's rows past the tile, a 32-bit offset that
    wraps back into another head.  Decided after the allocation claim (:func:`_bounds_claim`)
    is proved, so a smaller query finds the allocation faults first."""
    p = X.zext(Sym(ptr, 48, "ptr"), 64)
    in_r = X.substitute(t.range_check, env)
    return X.bor(X.bnot(in_r), _within(a, t.access.size, X.add(p, slice_base), reach))


def _prove_divisions(tg: List[Target], prob: Problem, ex: Exploration, ptr: str, store: Optional[dict] = None):
    """Targets with their float-reciprocal divisions proved exact and replaced by udiv
    (addrsim.prove.idioms); cached on the exploration per pointer, targets and ranges, and
    each term's answer in ``store`` (the query cache)."""
    ranges = ranges_of(prob)
    enc = IntEncoder(ranges)
    for name, e in prob.kernargs.items():
        if not any(s.kind == "ptr" for s in X.symbols(e).values()):
            try:
                ranges[name] = enc.interval(e)
            except Exception:
                pass
    used = set()
    for t in tg:
        used |= set(X.symbols(t.address))
        for c in t.conds:
            used |= set(X.symbols(c))
    # keyed by the targets too: the address and bounds properties select different accesses
    key = (ptr, tuple((t.access.instr.addr, len(t.conds)) for t in tg),
           tuple(sorted((k, v) for k, v in ranges.items() if k in used)))
    cache = ex.derived.setdefault("divisions", {})
    if key in cache:
        return cache[key]
    out, proofs, left = [], [], []
    origin = getattr(ex, "origin", None)      # rebuilt nodes keep their instruction (wrap sites)
    for t in tg:
        a, p1, l1 = exact_divisions(t.address, ranges, origin, store)
        conds = []
        for c in t.conds:
            c2, p2, _ = exact_divisions(c, ranges, store=store)   # float left in a condition is abstracted
            conds.append(c2)
            p1 += p2
        in_r, p3, _ = exact_divisions(t.access.in_range, ranges, store=store)   # the V# check reads the same offsets
        out.append(Target(t.access, conds, a, in_r))
        p1 += p3
        proofs += p1
        left += l1
    uniq = {(p.dividend, p.divisor): p for p in proofs}
    cache[key] = (out, list(uniq.values()), left)
    return cache[key]


def _formulas_cached(ctx: _Ctx, address: Expr, zero_ids):
    """:func:`formulas` (symbolic) of ``address``, kept in the check's cache under a structural
    key of everything it reads (the address, the workgroup ids set to 0, the kernel
    arguments' contract and the expected offset), so sibling kernels and the other
    properties do not expand the same sympy expressions again.  Display only; the sympy
    values are stored as trees (:func:`addrsim.backends.sympy_text.to_tree`)."""
    prob = ctx.prob
    memo: dict = {}
    h = hashlib.blake2b(f"formulas {ctx.buffer}".encode(), digest_size=20)
    h.update(X.digest(address, memo) + X.digest(prob.expected[ctx.buffer], memo))
    for name, v in sorted(zero_ids.items()):
        h.update(name.encode() + b"=" + X.digest(v, memo))
    for name, v in sorted(prob.kernargs.items()):
        h.update(name.encode() + b"=" + X.digest(v, memo))
    key = ("formulas", h.hexdigest())
    hit = _formulas_read(ctx.cached(key))
    if hit is None:
        from addrsim.backends.sympy_text import to_tree
        hit = formulas(address, zero_ids, prob, ctx.buffer, symbolic=True)
        try:                          # sympy values as trees (backends.sympy_text.to_tree) for the store
            ctx.keep(key, ("formulas", hit[0], hit[1]) + tuple(None if e is None else to_tree(e) for e in hit[2:]))
        except ValueError:            # a node without a stored form: kept in memory only
            ctx.keep(key, hit)
    return hit


def _formulas_read(got):
    """A cached :func:`formulas` value: the stored form's trees rebuilt; None for none or a
    tree that does not rebuild (decided again)."""
    if not (isinstance(got, tuple) and got and got[0] == "formulas"):
        return got
    from addrsim.backends.sympy_text import from_tree
    try:
        return got[1], got[2], *(None if t is None else from_tree(t) for t in got[3:])
    except (ValueError, TypeError, RecursionError):
        return None


def formulas(address: Expr, zero_ids, prob: Problem, buffer: str, symbolic: bool = False):
    """(extracted offset in kernel-argument terms, expanded extracted - expected in shape
    terms), both as sympy text; integer readings (32-bit wraparound not shown).  Expressions
    with more than FORMULA_NODES nodes are not expanded (display only, never a verdict).
    With ``symbolic``, also the two sympy expressions: the byte offset in kernel-argument
    terms and in shape terms (the layout's contract substituted), None where not shown."""
    import sympy
    from addrsim.backends.sympy_text import to_sympy
    try:
        if sum(1 for _ in X.walk(address)) > FORMULA_NODES:
            out = ("<offset expression too large to display>", "", None, None)
            return out if symbolic else out[:2]
        off = sympy.expand(to_sympy(address) - to_sympy(reference(address, zero_ids, prob)))
        full = X.substitute(address, {k: v for k, v in prob.kernargs.items() if v.width != 64 or k not in X.symbols(v)})
        full_off = sympy.expand(to_sympy(full) - to_sympy(reference(full, zero_ids, prob)))
        diff = sympy.expand(full_off - to_sympy(prob.expected[buffer]))
        out = (str(off), str(diff), None, None)
        if symbolic:               # readings without wraps: multiword values whole (addrsim diff)
            from addrsim.backends.sympy_text import to_sympy_nowrap
            arrays = {n.args[0].name for n in X.walk(full) if isinstance(n, X.Op) and n.op == "sel"}
            ptr0 = {n: X.Const(0, v.width) for n, v in X.symbols(full).items() if v.kind == "ptr" and n not in arrays}
            rng = ranges_of(prob)     # comparisons the domain decides over the integers folded (prove.simplify)
            ideal = lambda e: to_sympy_nowrap(under_domain(X.substitute(e, ptr0), rng))  # noqa: E731
            # in shape terms, also arms that agree where the domain takes them (prove.simplify)
            shaped = lambda e: to_sympy_nowrap(merged_arms(  # noqa: E731
                under_domain(X.substitute(e, ptr0), rng), prob.domain, rng))
            out = (str(off), str(diff), sympy.expand(ideal(address) - ideal(reference(address, zero_ids, prob))),
                   sympy.expand(shaped(full) - shaped(reference(full, zero_ids, prob))))
    except Exception as e:  # formula display must never hide a verdict
        out = (f"<formula not shown: {type(e).__name__}>", "", None, None)
    return out if symbolic else out[:2]


FORMULA_NODES = 400
