"""Solver queries: the negated claim under the domain, decided, and minimised when refuted.

Owns :class:`Query` (integer encoding first, range obligations discharged, bit-vectors as
the fallback), :func:`solve`, :func:`decide_query` (a concrete probe, then the solver, then
minimisation), :func:`minimize` (the lexicographically smallest shape: batch, nhead_q,
seqlen_q, ...), :func:`query_key` (the structural cache key), :func:`array_facts` and the
variable ranges.  Every model a solver returns is checked by evaluation (:func:`violates`)
before it is believed.  May import addrsim.ir, addrsim.backends, addrsim.model and
prove.probe/machines/options.
"""
from __future__ import annotations

import hashlib
import time
from typing import Dict, List, Optional, Tuple

import z3

from addrsim.ir import expr as X
from addrsim.ir.expr import Const, Expr
from addrsim.model.models import SHAPE_VARS, Problem
from addrsim.prove.probe import probe, shrink
from addrsim.backends.z3_bv import holds_bv, to_bv
from addrsim.backends.z3_int import IntEncoder
from addrsim.backends.ideal import ideal_evaluate, kept_wraps

from addrsim.prove.machines import LANE, PTR_LIMIT
from addrsim.prove.options import MIN_BUDGET_S


def query_key(tag: tuple, claim: Expr, conds: List[Expr]) -> str:
    """Structural key of a query (``tag``, the claim, the conditions in any order, duplicates
    once): a stable hex digest (BLAKE2b over :func:`addrsim.ir.expr.digest` of each part), the
    same in every process and run, so the cache of decided queries is shared by sibling
    kernels, workers and runs (:mod:`addrsim.prove.store`)."""
    memo: dict = {}
    h = hashlib.blake2b(repr(tag).encode(), digest_size=20)
    h.update(X.digest(claim, memo))
    for d in sorted({X.digest(c, memo) for c in conds}):
        h.update(d)
    return h.hexdigest()


def decide_query(conds, claim, ranges, timeout_ms, prob, min_budget_s, arith="bv"):
    """(verdict, model, reason, minimal, query): a concrete probe first, then the solver; a
    counterexample is minimised within the budget.  ``arith`` "bv" or "int"
    (:mod:`addrsim.backends.ideal`)."""
    grid = prob.grid
    names = {"batch": grid["z"].name, "head": grid["y"].name, "tile": grid["x"].name, "lane": LANE}
    order = list(ORDER) + [grid["z"].name, grid["y"].name, grid["x"].name, LANE]
    budget = MIN_BUDGET_S if min_budget_s is None else min_budget_s
    keep = kept_wraps(conds + [claim]) if arith == "int" else None
    model = probe(conds, claim, ranges, order, names, keep=keep)
    if model is not None:
        if budget <= 0:
            return "refuted", model, None, False, None
        q = Query(conds, claim, ranges, timeout_ms, arith)
        model, minimal = minimize(q, model, prob, budget)
        return "refuted", model, None, minimal, None
    verdict, model, why, q = solve(conds, claim, ranges, timeout_ms, arith)
    if verdict != "refuted":
        return verdict, None, why, True, (q if verdict == "unknown" else None)
    model, minimal = minimize(q, model, prob, budget)
    return "refuted", model, None, minimal, None


def array_facts(exprs: List[Expr], prob: Problem) -> List[Expr]:
    """What the models say about the sequence-start arrays read in ``exprs``: for every pair
    of reads of one array, a smaller offset reads a value no larger (non-decreasing), reads
    4 bytes apart differ by at least ``step_min`` and at most ``step_max``, the first entry is ``first`` and entry
    ``count - 1`` is ``last`` (1-bit IR constraints)."""
    reads: Dict[str, List[Expr]] = {}
    for e in exprs:
        for n in X.walk(e):
            if isinstance(n, X.Op) and n.op == "sel" and n.args[0].kind == "array":
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
            k = repr(n.args[1])
            if k not in seen:
                seen.add(k)
                uniq.append(n)
        step = (spec or {}).get("step_max")
        smin = (spec or {}).get("step_min")
        for i, a in enumerate(uniq):
            for b in uniq[i + 1:]:
                oa, ob = a.args[1], b.args[1]
                va, vb = X.zext(a, 64), X.zext(b, 64)
                out.append(X.bor(X.band(X.ule(oa, ob), X.ule(va, vb)), X.band(X.ult(ob, oa), X.ule(vb, va))))
                for (lo, hi, vl, vh) in ((oa, ob, va, vb), (ob, oa, vb, va)):
                    nxt = X.bnot(X.eq(hi, X.add(lo, Const(4, 64))))
                    if step is not None:
                        out.append(X.bor(nxt, X.ule(X.sub(vh, vl), step)))
                    if smin is not None:
                        out.append(X.bor(nxt, X.ule(X.add(vl, smin), vh)))
    return out


def ranges_of(prob: Problem) -> Dict[str, Tuple[int, int]]:
    r = {}
    for v in SHAPE_VARS:
        r[v] = prob.bounds[v]
    g = prob.grid
    r[g["z"].name] = (0, prob.bounds["batch"][1] - 1)
    r[g["y"].name] = (0, prob.bounds["nhead_q"][1] - 1)
    r[g["x"].name] = (0, prob.bounds["seqlen_k"][1])
    r[LANE] = (0, 1023)
    return r


def _ptr_ranges(exprs) -> Dict[str, Tuple[int, int]]:
    out = {}
    for e in exprs:
        for s in X.symbols(e).values():
            if s.kind == "ptr":
                out[s.name] = (0, PTR_LIMIT - 1)
    return out


class Query:
    """The negated claim under the conditions, encoded once over integers (exact encoding)
    and lazily over bit-vectors; bounds on single variables are added per call."""

    def __init__(self, conds: List[Expr], claim: Expr, ranges, timeout_ms: int, arith: str = "bv"):
        self.conds, self.claim, self.timeout_ms = conds, claim, timeout_ms
        self.arith = arith
        self.ranges = dict(ranges)
        self.ranges.update(_ptr_ranges(conds + [claim]))
        self.keep = kept_wraps(conds + [claim]) if arith == "int" else frozenset()
        self.enc = IntEncoder(self.ranges, ideal=arith == "int", keep=self.keep)
        self.si = z3.Solver()
        self.si.set("timeout", timeout_ms)
        for c in conds:
            self.si.add(self.enc.holds(c))
        self.si.add(self.enc.enc(claim) == 0)
        self.si.add(*self.enc.side)
        self.sb = None
        self.bvars = None
        self.bmemo = None
        self.use_bv = False
        self.discharged = False
        self.sels = [n for e in conds + [claim] for n in X.walk(e) if isinstance(n, X.Op) and n.op == "sel"]

    def _int_check(self, bounds, tmo):
        """One check of the integer query under extra variable bounds: (z3 result, model or
        None, reason_unknown)."""
        s = self.si
        s.set("timeout", tmo)
        s.push()
        for k, (lo, hi) in bounds.items():
            v = self.enc.vars.get(k)
            if v is not None:
                s.add(v >= lo, v <= hi)
        r = s.check()
        mdl = None
        if r == z3.sat:
            zm = s.model()
            mdl = {k: zm.eval(v, model_completion=True).as_long() for k, v in self.enc.vars.items()}
            mdl.update(self._arrays(lambda t: zm.eval(t, model_completion=True),
                                    lambda n: self.enc.memo[id(n)][0]))
        why = s.reason_unknown() if r == z3.unknown else ""
        s.pop()
        return r, mdl, why

    def _discharge(self, budget_ms: int):
        """Prove, node by node, that the terms the integer encoding wraps stay in range
        under the conditions; re-encode the query without the ``mod`` of each one proved."""
        self.discharged = True
        deadline = time.time() + budget_ms / 1000
        base = z3.Solver()
        base.add(*self.enc.side)
        for c in self.conds:
            base.add(self.enc.holds(c))
        nowrap = set()
        for node, t, w in self.enc.wrapped:
            left = int((deadline - time.time()) * 1000)
            if left < 100:
                break
            base.set("timeout", min(left, max(500, budget_ms // 4)))
            base.push()
            base.add(z3.Or(t < 0, t >= (1 << w)))
            if base.check() == z3.unsat:
                nowrap.add(id(node))
            base.pop()
        if not nowrap:
            return
        self.discharged = "changed"
        self.nowrap_proved = len(nowrap)
        self.enc = IntEncoder(self.ranges, ideal=self.arith == "int", keep=self.keep, nowrap=nowrap)
        self.si = z3.Solver()
        self.si.set("timeout", self.timeout_ms)
        for c in self.conds:
            self.si.add(self.enc.holds(c))
        self.si.add(self.enc.enc(self.claim) == 0)
        self.si.add(*self.enc.side)

    def smt2(self) -> str:
        """The obligation last given to the solver, as SMT-LIB2 text (declarations, the
        conditions, the negated claim, ``(check-sat)``), replayable with any solver."""
        s = getattr(self, "last", None) or self.si
        head = (f"; addrsim obligation ({self.arith} mode): sat means a counterexample, unsat a proof\n"
                f"; symbols: {', '.join(sorted(self.ranges))}\n")
        return head + s.to_smt2()

    def _arrays(self, mdl_eval, term_of) -> Dict[str, Dict[int, int]]:
        """Array contents a solver model assigns: name + "[]" -> {byte offset: value}."""
        out: Dict[str, Dict[int, int]] = {}
        for n in self.sels:
            try:
                off = mdl_eval(term_of(n.args[1])).as_long()
                val = mdl_eval(term_of(n)).as_long()
            except Exception:
                continue
            out.setdefault(n.args[0].name + "[]", {})[off & X.mask(64)] = val & X.mask(32)
        return out

    def _bv(self):
        if self.sb is None:
            memo, vs = {}, {}
            s = z3.Solver()
            s.set("timeout", self.timeout_ms)
            for c in self.conds:
                s.add(holds_bv(c, memo, vs))
            s.add(to_bv(self.claim, memo, vs) == z3.BitVecVal(0, 1))
            for name, v in vs.items():
                if name in self.ranges:
                    lo, hi = self.ranges[name]
                    n = v.size()
                    s.add(z3.ULE(z3.BitVecVal(lo, n), v), z3.ULE(v, z3.BitVecVal(min(hi, (1 << n) - 1), n)))
            self.sb, self.bvars, self.bmemo = s, vs, memo
        return self.sb

    def solve(self, bounds: Dict[str, Tuple[int, int]] = None, timeout_ms: Optional[int] = None):
        """("proved", None, None) | ("refuted", model, None) | ("unknown", None, why)."""
        bounds = bounds or {}
        tmo = timeout_ms or self.timeout_ms
        self.si.set("timeout", tmo)
        if self.sb is not None:
            self.sb.set("timeout", tmo)
        if not self.use_bv:
            first = not self.discharged and bool(self.enc.wrapped)
            r, mdl, why = self._int_check(bounds, min(tmo, FIRST_TRY_MS) if first else tmo)
            if r == z3.unknown and first:
                # nonlinear wraps: discharge "this node does not wrap" as separate range
                # obligations, then retry without their mod (DOMAIN.md section 6)
                self._discharge(tmo)
                r, mdl, why = self._int_check(bounds, tmo)
            if r == z3.unsat:
                return "proved", None, None
            if mdl is not None and violates(self.conds, self.claim, mdl, self.keep if self.arith == "int" else None):
                return "refuted", mdl, None
            if self.arith == "int":
                self.last = self.si
                if r == z3.unknown:
                    return "unknown", None, f"solver gave up ({why}) after {tmo} ms"
                return "unknown", None, ("the integer encoding over-approximates " + "; ".join(sorted(set(
                    self.enc.abstracted)))[:300] + ", and its model is no counterexample")
            self.use_bv = True   # integer side inconclusive or abstracted: bit-vectors from now on
        s = self._bv()
        s.set("timeout", tmo)
        s.push()
        for k, (lo, hi) in bounds.items():
            v = self.bvars.get(k)
            if v is not None:
                n = v.size()
                s.add(z3.ULE(z3.BitVecVal(lo, n), v), z3.ULE(v, z3.BitVecVal(hi, n)))
        r = s.check()
        mdl = None
        if r == z3.sat:
            zm = s.model()
            mdl = {k: zm.eval(v, model_completion=True).as_long() for k, v in self.bvars.items()}
            mdl.update(self._arrays(lambda t: zm.eval(t, model_completion=True), lambda n: self.bmemo[id(n)]))
        why = s.reason_unknown() if r == z3.unknown else ""
        s.pop()
        self.last = s
        if r == z3.unsat:
            return "proved", None, None
        if r == z3.sat:
            if violates(self.conds, self.claim, mdl):
                return "refuted", mdl, None
            return "unknown", None, "solver model does not violate the claim when evaluated (engine bug)"
        return "unknown", None, f"solver gave up ({why}) after {tmo} ms"


def solve(conds: List[Expr], claim: Expr, ranges, timeout_ms: int, arith: str = "bv"):
    """Decide the negated claim once: (verdict, model, reason, Query)."""
    q = Query(conds, claim, ranges, timeout_ms, arith)
    v, m, why = q.solve()
    return v, m, why, q


def violates(conds, claim, mdl, keep=None) -> bool:
    """Does the model satisfy the conditions and break the claim, by evaluation (``keep``
    given: in int mode, :func:`addrsim.backends.ideal.ideal_evaluate`)?"""
    env = env_of(conds + [claim], mdl)
    if keep is not None:
        memo: dict = {}
        ev = lambda e: ideal_evaluate(e, env, keep, memo)  # noqa: E731
    else:
        memo = {}
        ev = lambda e: X.evaluate(e, env, memo)  # noqa: E731
    try:
        return all(ev(c) == 1 for c in conds) and ev(claim) == 0
    except KeyError:
        return False


def env_of(exprs, mdl):
    env = {k: v for k, v in mdl.items() if k.endswith("[]")}
    for e in exprs:
        for s in X.symbols(e).values():
            env.setdefault(s.name, mdl.get(s.name, 0))
    return env


ORDER = ("batch", "nhead_q", "seqlen_q", "nhead_k", "seqlen_k", "hdim_q", "hdim_v", "total_q", "total_k")


CLASSIFY_MS = 3000       # at least this for the int-mode query that classifies a counterexample


FIRST_TRY_MS = 1500      # integer query before range obligations are discharged (then the full timeout)






MIN_ATTEMPT_MS = 800     # solver timeout of one minimisation attempt


def minimize(q: Query, model, prob: Problem, budget_s: float = MIN_BUDGET_S):
    """Lexicographically smallest (batch, nhead_q, seqlen_q, ..., batch_id, head_id, tile,
    lane) counterexample: exponential then binary search on each variable in turn, the
    earlier ones fixed.  Variables the claim does not mention (group-mode totals in batch
    mode) are skipped.  Returns (model, minimal): ``minimal`` is False when the budget ran
    out or an attempt timed out, and the model is then the smallest found so far (still a
    counterexample: every model returned by the solver is checked by evaluation)."""
    grid = prob.grid
    claim_syms = set(X.symbols(q.claim))
    order = [v for v in ORDER if v not in ("total_q", "total_k") or v in claim_syms]
    order += [grid["z"].name, grid["y"].name, grid["x"].name, LANE]
    fixed: Dict[str, Tuple[int, int]] = {}
    deadline = time.time() + budget_s
    minimal = True
    for var in order:
        if var not in model:
            continue
        lo = q.ranges.get(var, (0, 0))[0]
        best = model
        hi = model[var]

        def attempt(ub):
            nonlocal minimal
            if time.time() > deadline:
                minimal = False
                return None
            b = dict(fixed)
            b[var] = (lo, ub)
            left_ms = (deadline - time.time()) * 1000
            v, m, _ = q.solve(b, int(max(min(left_ms, MIN_ATTEMPT_MS), min(left_ms / 4, 10000))))
            if v == "unknown":
                minimal = False
            return m if v == "refuted" else None

        step, cand = 1, lo
        while cand < hi and time.time() <= deadline:      # exponential search upwards
            m = attempt(cand)
            if m is not None:
                best, hi = m, m[var]
                break
            cand = min(hi, lo + step)
            step *= 2
        a = cand - step // 2 if cand > lo else lo
        while a < hi and time.time() <= deadline:         # bisection
            mid = (a + hi) // 2
            m = attempt(mid)
            if m is not None:
                best, hi = m, m[var]
            else:
                a = mid + 1
        if time.time() > deadline:
            minimal = False
        model = best
        fixed[var] = (model[var], model[var])
    if not minimal:
        # out of budget: shrink what is left by evaluation (cheap), keeping a counterexample
        rest = [v for v in order if v in model and (v not in fixed or time.time() > deadline)]
        model = dict(model, **shrink(q.conds, q.claim, q.ranges, rest, {k: v for k, v in model.items()
                                                                          if not k.endswith("[]")},
                                     keep=q.keep if q.arith == "int" else None))
    return model, minimal
