"""What a verdict assumed, whether its domain holds any shape, and whose bug a failure is.

A check (:func:`addrsim.prove.check`) is decided over the layers of a
:class:`addrsim.model.models.Problem` (bounds, grid, memory, traits, argument exactness, and
optionally one host entry point's routing).  This module makes its verdict final and
attributable (DOMAIN.md section 5):

- :func:`settle`: a "proved" needs a *witness*, a shape and (batch_id, head_id) of the domain
  at which the access is reached, replayed on the concrete interpreter and found at the
  expected offset; a domain without such a shape makes the verdict "unreachable", with the
  assumptions that exclude every shape (a minimal unsat core of the layers).
- :func:`route`: for a kernel counterexample, does each host entry point that launches the
  family reach a failing shape?  One that does not is *latent*, masked by a minimal unsat
  core of that entry point's routing conditions.
- :func:`host_limits`: each host-computed argument that a u32 cast can truncate inside device
  memory: the argument, its boundary in shape variables and the smallest such shape.

Solver budgets here are Z3 resource units (``rlimit``), not seconds, so the answers do not
depend on machine load.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import z3

from addrsim.ir import expr as X
from addrsim.ir.expr import Const, Expr
from addrsim.model.models import SHAPE_VARS, Assumption, Problem
from addrsim.backends import bitwuzla_run
from addrsim.backends.z3_bv import holds_bv
from addrsim.backends.z3_run import Isolated
from addrsim.prove.verdict import Verdict, Witness

CORE_RLIMIT = 20_000_000       # Z3 resource units per core query (deterministic)
FALSE = Const(0, 1)


@dataclass
class EntryRouting:
    """One host entry point's answer for a check: ``verdict`` over the kernel's domain and
    its routing; ``reachable`` whether it launches a failing shape (None: undecided)."""

    entry: str
    verdict: str
    reachable: Optional[bool]
    masked_by: List[str] = field(default_factory=list)
    shape: Optional[Dict[str, int]] = None
    reason: str = ""
    smt2: str = ""            # the routed check's undecided obligation (SMT-LIB2 file), if it wrote one
    sites: Optional[List[int]] = None   # instruction addresses of the wraps its counterexample goes through

    def json(self) -> dict:
        out = {"entry": self.entry, "verdict": self.verdict, "reachable": self.reachable,
               "masked_by": self.masked_by, "shape": self.shape, "reason": self.reason}
        if self.smt2:
            out["smt2"] = self.smt2
        if self.sites is not None:
            out["wrap_pcs"] = self.sites
        return out


def wrap_pcs(c) -> Optional[List[int]]:
    """The instruction addresses of the wraps that change the address of the counterexample of
    Check ``c`` (its ``overflow`` sites that matter); None when it has no counterexample.  A
    root cause reads them to say whether a routed counterexample goes through its own wrap."""
    if c.verdict != Verdict.COUNTEREXAMPLE:
        return None
    return sorted({w.pc for w in c.overflow if w.matters and w.pc is not None})


@dataclass
class Routing:
    """Does the host send a failing shape to this kernel?  ``verdict`` is the routed verdict
    over every entry point (counterexample when one reaches a failing shape)."""

    host: Optional[str]
    verdict: str
    reachable: Optional[bool]
    masked_by: List[str] = field(default_factory=list)
    entries: List[EntryRouting] = field(default_factory=list)

    def json(self) -> dict:
        return {"host": self.host, "verdict": self.verdict, "reachable": self.reachable,
                "masked_by": self.masked_by, "entry_points": [e.json() for e in self.entries]}


def describe(a: Assumption) -> str:
    """One line for an assumption: its text, layer and source."""
    where = f"{a.layer}: {a.entry}" if a.entry else a.layer
    return f"{a.text} [{where}; {a.source}]"


def domain_json(prob: Problem) -> dict:
    """The ``domain`` field of a check: host, layers, and every assumption in the domain."""
    out = {"host": prob.host, "host_chosen": prob.host_why, "layers": prob.layers(),
           "assumptions": [a.json() for a in prob.assumptions if prob.in_domain(a)]}
    implied = prob.implied()
    if implied:
        out["implied_ranges"] = {v: list(b) for v, b in sorted(implied.items())}
    return out


# ----------------------------------------------------------------------------- cores

def core(base: Sequence[Expr], named: Sequence[Tuple[str, Expr]], rlimit: int = CORE_RLIMIT,
         cache: Optional[dict] = None, holds_at: Optional[Callable[[Sequence[int]], bool]] = None) -> Optional[List[str]]:
    """A minimal subset of the ``named`` constraints (1-bit IR, bit-vector semantics) that is
    unsatisfiable together with ``base``; [] when ``base`` alone is; None when the whole set
    is satisfiable or the solver gives up within ``rlimit`` resource units.  ``cache`` (the
    query cache) keeps the answer under :func:`core_key`: every call is budgeted in resource
    units, so the answer is a function of the key, and sibling kernels reuse it.
    ``holds_at(indices)``: True when a known model of ``base`` (the kernel's counterexample)
    satisfies the ``named`` constraints at those indices, so that subset is satisfiable with
    ``base`` and needs no solver call; the answer is the same with or without it (a solver
    call there answers sat or unknown, and either keeps the constraint in the core), except
    that the constraints it violates are first asked alone of Bitwuzla (:func:`_violated_core`),
    so the answer is a function of the key with those indices."""
    holds_at = holds_at or (lambda idx: False)
    violated = tuple(i for i in range(len(named)) if not holds_at([i]))
    key = core_key(base, named, rlimit, violated) if cache is not None else None
    if key is not None and key in cache:
        return cache[key][1]
    got = _core(base, named, rlimit, holds_at, violated)
    if key is not None:
        cache[key] = ("core", got)
    return got


def core_key(base: Sequence[Expr], named: Sequence[Tuple[str, Expr]], rlimit: int,
             violated: Tuple[int, ...] = ()) -> str:
    """Stable key of a core query: ``rlimit``, the indices ``violated`` (of the ``named``
    constraints a known model of the base breaks), the ``base`` constraints in any order, and the
    ``named`` ones in order with their texts (BLAKE2b over :func:`addrsim.ir.expr.digest`),
    in canonical symbol names (:func:`addrsim.ir.expr.canonical_names`): the answer is a list
    of the texts, so buffers addressed alike (LSE and D) and sibling kernels share it."""
    memo: dict = {}
    rename = X.canonical_names(list(base) + [c for _, c in named])
    h = hashlib.blake2b(f"core {rlimit} bzla {CORE_BZLA_CALLS} {violated}".encode(), digest_size=20)
    for d in sorted({X.digest(c, memo, rename) for c in base}):
        h.update(d)
    for text, c in named:
        h.update(b"\0" + text.encode() + b"\0")
        h.update(X.digest(c, memo, rename))
    return h.hexdigest()


def _core(base: Sequence[Expr], named: Sequence[Tuple[str, Expr]], rlimit: int,
          holds_at: Callable[[Sequence[int]], bool], violated: Tuple[int, ...] = ()) -> Optional[List[str]]:
    if any(isinstance(c, Const) and c.value == 0 for c in base):
        return []
    if named and holds_at(range(len(named))):
        return None
    if violated and len(violated) < len(named):
        got = _violated_core(base, named, violated, holds_at)
        if got is not None:
            return got
    s, memo, vs = _base_solver(base)
    lits, label = [], {}
    for i, (text, c) in enumerate(named):
        p = z3.Bool(f"assume_{i}")
        label[str(p)] = text
        s.add(z3.Implies(p, holds_bv(c, memo, vs)) if not isinstance(c, Const) else
              (z3.Not(p) if c.value == 0 else z3.BoolVal(True)))
        lits.append(p)
    if s.check(rlimit, *lits)[0] != z3.unsat:
        return None
    keep = set(s.core_names())
    for name in sorted(keep, key=lambda n: int(n.split("_")[1])):   # deletion: drop what the core does not need
        trial = [i for i, p in enumerate(lits) if str(p) in keep and str(p) != name]
        if holds_at(trial):
            continue                    # satisfiable without it (a known model): it stays
        if s.check(rlimit, *[lits[i] for i in trial])[0] == z3.unsat:
            keep.discard(name)
    return [label[str(p)] for p in lits if str(p) in keep]


def _base_solver(base: Sequence[Expr]):
    """(a solver holding the ``base`` constraints in bit-vector semantics, its term memo, its
    variables): what every core question starts from."""
    memo, vs = {}, {}
    s = Isolated()
    s.add(*[holds_bv(c, memo, vs) for c in base if not isinstance(c, Const)])
    return s, memo, vs


CORE_BZLA_CALLS = 5000
"""Bitwuzla termination calls per question of :func:`_violated_core` (0.05 Mru at
:data:`addrsim.prove.query.BZLA_RU_PER_CALL`).  Measured 2026-12-07: the README kernel's and
gfx942 hd64 a16_rtna's LSE/D SBHD cores (a formula bug masked by ``batch_stride_q >=
stride_q``) are unsat in 601-712 calls, where Z3 gave up at CORE_RLIMIT (2.7-3.1 s each);
their dQ SBHD core (an i24 wrap) stays undecided at 100,000 calls and Z3 finds it."""


def _violated_core(base, named, violated: Tuple[int, ...], holds_at) -> Optional[List[str]]:
    """A minimal core among the ``named`` constraints at the indices ``violated`` (those a
    known model of ``base`` breaks: every core holds one), each question asked of Bitwuzla
    within CORE_BZLA_CALLS; None when the violated ones together are not shown unsat.
    Deletion as in :func:`_core`: a constraint whose removal leaves a set the known model
    satisfies is needed without a call; one whose removal Bitwuzla does not show unsat stays
    (the set kept is unsat in every case; minimal where each was decided)."""
    if not bitwuzla_run.AVAILABLE:
        return None

    def unsat(idx) -> bool:
        s, memo, vs = _base_solver(base)
        for i in idx:
            c = named[i][1]
            s.add(holds_bv(c, memo, vs) if not isinstance(c, Const) else z3.BoolVal(c.value != 0))
        return bitwuzla_run.check(s.smt2(), CORE_BZLA_CALLS)[0] == "unsat"

    if not unsat(violated):
        return None
    keep = list(violated)
    for i in violated:
        trial = [j for j in keep if j != i]
        if not holds_at(trial) and unsat(trial):
            keep = trial
    return [named[i][0] for i in keep]


def exclusion(prob: Problem, path: Sequence[Expr], pc: int, cache: Optional[dict] = None) -> List[str]:
    """The assumptions (and the path to the access at ``pc``) that together exclude every
    shape of ``prob``'s domain: a minimal unsat core."""
    named = [(describe(a), a.expr) for a in prob.assumptions if prob.in_domain(a)]
    conds = [c for c in path if not isinstance(c, Const)]
    if conds:
        e = conds[0]
        for c in conds[1:]:
            e = X.band(e, c)
        named.append((f"the path to the access at {pc:#x}", e))
    got = core([], named, cache=cache)
    return got if got is not None else ["(no core found within the solver budget)"]


# ----------------------------------------------------------------------------- witness

def find_witness(res, decide: Callable, replay: Callable):
    """A Witness for the proved check ``res``, "empty" when no shape of its domain reaches
    an access, or the reason a witness could not be confirmed (a string).  ``decide(conds)``
    returns a minimised model of ``conds`` or None when there is none; ``replay(case,
    model)`` replays it and returns a Witness or a reason.  Workgroups other than (0, 0) are
    preferred: batch_id >= 1 and head_id >= 1, then batch_id >= 1, then any."""
    prob: Problem = res.problem
    bid, hid = prob.grid["z"], prob.grid["y"]
    one = Const(1, 32)
    prefs = [[X.ule(one, bid), X.ule(one, hid)], [X.ule(one, bid)], [X.ule(one, hid)], []]
    reasons = []
    for case in res.cases:
        conds = case[1]
        for extra in prefs:
            model = decide(list(conds) + extra)
            if model is None:
                continue
            if isinstance(model, str):      # the solver gave up: no claim of emptiness
                reasons.append(model)
                break
            w = replay(case, model)
            if isinstance(w, Witness):
                return w
            return w        # a model of the domain that does not replay at the expected offset: never proved

    return reasons[0] if reasons else "empty"


def settle(res, decide: Callable, replay: Callable, cache: Optional[dict] = None):
    """Make the proved check ``res`` final: attach a witness, or turn it into "unreachable"
    (no shape of the domain reaches the access, ``res.unreachable`` names why) or "unknown"
    (the witness did not replay).  Other verdicts are returned unchanged."""
    if res.verdict != Verdict.PROVED:
        return res
    if res.problem is None or not res.cases:     # nothing to witness: never a bare "proved"
        res.verdict, res.reason = Verdict.UNKNOWN, "proof without a witness: no decided access"
        return res
    w = find_witness(res, decide, replay)
    if isinstance(w, Witness):
        res.witness = w
        return res
    if w == "empty":
        t, conds = (res.cases[0][0], res.cases[0][1]) if res.cases else (None, [])
        dom = {id(e) for e in res.problem.domain}
        path = [c for c in conds if id(c) not in dom]     # the path to the access, arguments substituted
        res.unreachable = exclusion(res.problem, path, t.access.instr.addr if t is not None else 0, cache)
        res.verdict = Verdict.UNREACHABLE
        res.reason = "no shape of the domain reaches the access: " + "; ".join(res.unreachable)
        return res
    res.verdict, res.reason = Verdict.UNKNOWN, f"proof without a witness: {w}"
    return res


# ----------------------------------------------------------------------------- routing

def route(res, run: Callable[[str], object], reaches: Optional[Callable] = None,
          cache: Optional[dict] = None) -> Routing:
    """Routing of the kernel check ``res`` through each entry point of its host.
    ``run(entry)`` decides the same check with that entry point's routing in the domain
    (a settled Check).  A kernel counterexample that no entry point reaches is latent.
    For a proved check the routed domain is a subset, so the routed verdict is proved or,
    when no routed shape reaches the access, unreachable: ``reaches(conds)`` (a model of
    ``conds`` or None, as :func:`find_witness`'s ``decide``) answers that without a rerun."""
    prob: Problem = res.problem
    host = prob.host if prob is not None else None
    entries = list(prob.entry_points) if prob is not None else []
    if res.verdict in (Verdict.UNKNOWN, Verdict.UNSUPPORTED) or prob is None:
        return Routing(host, res.verdict, None)
    if host is None:
        return Routing(None, res.verdict, None, [])       # no host model: nobody can say it is masked
    if not entries:
        return Routing(host, Verdict.UNREACHABLE, False, ["no entry point of the host launches this kernel family"])
    out: List[EntryRouting] = []
    for e in entries:
        if res.verdict == Verdict.PROVED and reaches is not None:
            out.append(_proved_route(res, prob, e, reaches, cache))
            continue
        if res.verdict == Verdict.COUNTEREXAMPLE and _admits(prob, e, res.counterexample):
            # the kernel's failing shape is launched through ``e``: no rerun (and when it is
            # the least of the kernel's domain it is the least of the routed one, a subset)
            out.append(EntryRouting(e, Verdict.COUNTEREXAMPLE, True, [], dict(res.counterexample.shape),
                                    res.reason or "", sites=wrap_pcs(res)))
            continue
        r = run(e)
        masked: List[str] = []
        reach: Optional[bool] = None
        if r.verdict == Verdict.COUNTEREXAMPLE:
            reach = True
        elif r.verdict in (Verdict.PROVED, Verdict.UNREACHABLE):
            reach = False
            if res.verdict == Verdict.COUNTEREXAMPLE:
                masked = _masking(res, prob, e, cache) if r.verdict == Verdict.PROVED else list(r.unreachable)
        out.append(EntryRouting(e, r.verdict, reach if res.verdict == Verdict.COUNTEREXAMPLE else
                                (None if r.verdict not in (Verdict.PROVED, Verdict.UNREACHABLE) else False),
                                masked, r.counterexample.shape if r.counterexample is not None else None,
                                r.reason or "", r.smt2 or "", wrap_pcs(r)))
    verdicts = [x.verdict for x in out]
    if Verdict.COUNTEREXAMPLE in verdicts:
        v = Verdict.COUNTEREXAMPLE
    elif all(x == Verdict.UNREACHABLE for x in verdicts):
        v = Verdict.UNREACHABLE
    elif Verdict.UNKNOWN in verdicts or Verdict.UNSUPPORTED in verdicts:
        v = Verdict.UNKNOWN
    else:
        v = Verdict.PROVED
    if res.verdict == Verdict.COUNTEREXAMPLE:
        reach = True if v == Verdict.COUNTEREXAMPLE else (False if v in (Verdict.PROVED, Verdict.UNREACHABLE) else None)
    else:
        reach = None if v == Verdict.UNKNOWN else False
    masked = sorted({m for x in out for m in x.masked_by}) if reach is False else []
    return Routing(host, v, reach, masked, out)


def _proved_route(res, prob: Problem, entry: str, reaches: Callable, cache: Optional[dict] = None) -> EntryRouting:
    """A proved kernel check through one entry point: proved when some routed shape reaches
    an access, unreachable (with the routing conditions that exclude them) when none does."""
    routing = [a.expr for a in prob.routing(entry)]
    why = ""
    for case in res.cases:
        m = reaches(list(case[1]) + routing)
        if isinstance(m, dict):
            return EntryRouting(entry, Verdict.PROVED, False)
        if isinstance(m, str):
            why = m
    if why:
        return EntryRouting(entry, Verdict.UNKNOWN, None, [], None, why)
    t = res.cases[0][0] if res.cases else None
    named = [(f"{a.text} [{a.source}]", a.expr) for a in prob.routing(entry)]
    base = list(res.cases[0][1]) if res.cases else []
    got = core(base, named, cache=cache)
    return EntryRouting(entry, Verdict.UNREACHABLE, False, got or [], None,
                        f"no shape routed through {entry} reaches the access at "
                        f"{t.access.instr.addr:#x}" if t is not None else "no access")


def _cex_env(prob: Problem, cex) -> Dict[str, object]:
    """The values of a counterexample for evaluating a domain condition: its shape (shape
    variables at their lower bounds where it names none), its workgroup ids and the
    sequence-start arrays it chose."""
    env: Dict[str, object] = dict({v: prob.bounds[v][0] for v in SHAPE_VARS}, **cex.shape)
    env.update({prob.grid["z"].name: cex.coords.get("batch_id", 0),
                prob.grid["y"].name: cex.coords.get("head_id", 0)})
    for name, vals in (cex.arrays or {}).items():
        env[name + "[]"] = {4 * int(i): int(v) for i, v in vals.items()}
    return env


def _holds_at(res, prob: Problem, entry: str) -> Optional[Callable[[Sequence[int]], bool]]:
    """For :func:`core`: do the routing conditions of ``entry`` at these indices all hold at
    the kernel's counterexample (a model, in bit-vector semantics, of the domain and its failing
    case, so of the core's base)?  None when there is no such model (no counterexample, or
    one of the integer reading)."""
    if res.counterexample is None or res.arith != "bv":
        return None
    return _routing_at(prob, entry, res.counterexample)


def _routing_at(prob: Problem, entry: str, cex) -> Callable[[Sequence[int]], bool]:
    """Do the routing conditions of ``entry`` at these indices all hold at the counterexample
    ``cex`` (evaluated; False when one reads a value the counterexample does not give)?"""
    env = _cex_env(prob, cex)
    conds = [a.expr for a in prob.routing(entry)]

    def holds(idx: Sequence[int]) -> bool:
        try:
            return all(X.evaluate(conds[i], env) != 0 for i in idx)
        except (KeyError, TypeError, ValueError):
            return False
    return holds


def _admits(prob: Problem, entry: str, cex) -> bool:
    """Every routing condition of ``entry`` holds at the counterexample ``cex``."""
    return cex is not None and _routing_at(prob, entry, cex)(range(len(prob.routing(entry))))


def _masking(res, prob: Problem, entry: str, cache: Optional[dict] = None) -> List[str]:
    """The routing conditions of ``entry`` that exclude the kernel's failing case: a minimal
    core of them against (kernel domain, the failing path, the negated claim)."""
    named = [(f"{a.text} [{a.source}]", a.expr) for a in prob.routing(entry)]
    if res.failing is not None and res.cases:
        # every failing case must be masked: the kernel domain and (some case's path and its
        # negated claim), against the routing conditions
        dom = {id(e) for e in prob.domain}
        alts = None
        for case in res.cases:
            part = X.bnot(case[2])
            for c in case[1]:
                if id(c) not in dom:
                    part = X.band(part, c)
            alts = part if alts is None else X.bor(alts, part)
        got = core(list(prob.domain) + [alts], named, cache=cache, holds_at=_holds_at(res, prob, entry))
        if got:
            return got
    # the solver could not decide the core: name the conditions the counterexample violates
    if res.counterexample is None:
        return ["(the routing conditions that mask it could not be decided)"]
    env = _cex_env(prob, res.counterexample)
    out = []
    for a in prob.routing(entry):
        try:
            if X.evaluate(a.expr, env) == 0:
                out.append(f"{a.text} [{a.source}] (violated at the counterexample's shape)")
        except KeyError:
            continue
    return out


# ----------------------------------------------------------------------------- host limits

def host_limits(prob: Problem, decide: Callable, memory_of: Callable) -> List[dict]:
    """Each host-computed kernel argument whose cast to its width (the host's u32) can
    truncate its value for a shape inside the bounds, traits and device memory: the
    argument, the boundary in shape variables, the smallest such shape (``decide(conds,
    claim)`` minimises a model that breaks ``claim``) and the memory it needs (bytes)."""
    base = [a.expr for a in prob.assumptions if a.layer in ("bounds", "memory", "traits")]
    out, seen = [], {}
    for a in prob.assumptions:
        if a.layer != "exact":
            continue
        name = a.text.split(" = ", 1)[0]
        value, width = prob.exact[name]
        key = X.shash(value)
        if key not in seen:
            seen[key] = decide(base, a.expr)     # an exception is addrsim's bug: exit 4, never hidden
        model = seen[key]
        if model is None:
            continue
        if isinstance(model, str):
            out.append({"argument": name, "layout": prob.layout, "boundary": boundary(value, width, prob),
                        "exact": a.text.split(" = ", 1)[1].rsplit(" < ", 1)[0], "shape": None,
                        "memory_bytes": 0, "source": a.source, "undecided": model})
            continue
        shape = prob.shape_of(model)
        out.append({"argument": name, "layout": prob.layout, "boundary": boundary(value, width, prob),
                    "exact": a.text.split(" = ", 1)[1].rsplit(" < ", 1)[0],
                    "shape": shape, "memory_bytes": memory_of(shape), "source": a.source})
    return out


def boundary(value: Expr, width: int, prob: Problem) -> str:
    """``value >= 2**width`` in shape variables, with a constant factor divided out
    (``256*nhead_q*seqlen_q >= 2**32`` reads ``nhead_q*seqlen_q >= 2**24``)."""
    import sympy
    from addrsim.backends.sympy_text import to_sympy
    try:
        e = sympy.factor_terms(sympy.expand(to_sympy(X.substitute(value, {k: Const(v, 64)
                                                                           for k, v in prob.fixed.items()}))))
        c, rest = e.as_coeff_Mul()
        limit = sympy.Integer(2) ** width
        if c > 0 and rest != 1:
            q = sympy.ceiling(limit / c)
            k = sympy.log(q, 2)
            rhs = f"2**{k}" if k.is_integer else str(q)
            return f"{rest} >= {rhs}"
        return f"{e} >= 2**{width}"
    except Exception:   # display only
        return f"value >= 2**{width}"
