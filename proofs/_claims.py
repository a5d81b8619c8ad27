"""A small framework for checked statements about address arithmetic (issue 5).

A :class:`Claim` says: for every assignment of its variables inside their domain, where the
precondition holds, the kernel's value (``lhs``) equals the true value (``rhs``).  :func:`check`
asks Z3 for an assignment where they differ:

* ``unsat`` for every parameter case  -> verdict ``"proved"``;
* ``sat``                            -> verdict ``"counterexample"``: the model is shrunk
  (batch first, then nhead_q, then seqlen_q, then whatever the claim lists, by repeated
  solving with tightening bounds), replayed in plain Python (the replay must reproduce the
  mismatch, otherwise :class:`ReplayError` is raised: an engine bug, never a verdict), and
  returned with both sides' values;
* anything else (resource limit, ``unknown``)  -> verdict ``"unknown"``, never ``"proved"``;
* a precondition that no point of the domain satisfies -> verdict ``"vacuous"`` (a statement
  "proved" only because its precondition is false would prove nothing).  A proved claim
  carries a witness point where the precondition holds and both sides agree.

Statements are written once, as plain Python functions of an environment ``v`` (a dict from
names to values).  The same function is run twice: on Z3 integer terms to build the query,
and on Python ints to replay a counterexample.  The helpers below (``div``, ``u32``, ``shr``,
``ite``, ``all_``, ``any_``, ``not_``, ``ne``) dispatch on their arguments' types, so one
definition serves both.  Arithmetic is over the mathematical integers (Z3 ``Int``): exact;
32-bit behaviour is written explicitly with ``u32(x) = x mod 2**32`` (what ``s_mul_i32``,
``s_add_u32`` and the host's cast of a stride to a 32-bit argument keep, DOMAIN.md sections 1
and 5).

Units: every stride, offset and size in these proofs is in **bytes** unless its name ends in
``_elems`` or the docstring says elements; shape names (batch, nhead_q, seqlen_q, hdim_q, ...)
count elements/rows/heads.  Domain bounds follow addrsim's (models/fmha_bwd_v3.yaml `shape`):
batch 1..4096, nhead 1..256, seqlen 1..2**20.

Nonlinear integer products are hard for Z3 in general: claims substitute the values a kernel
fixes (head dim, element size, accumulator size) as parameter *cases* before solving, and a
claim is proved only when every case is.
"""
from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Tuple

import z3

from addrsim.model.parse import compile_stride

U32 = 2 ** 32
GiB = 2 ** 30

# addrsim's default shape bounds (models/fmha_bwd_v3.yaml `shape`), inclusive
BATCH = (1, 4096)
NHEAD = (1, 256)
SEQLEN = (1, 2 ** 20)
HDIMS = (128, 64, 192, 256)        # the kernel families' head dims; 128 (the shift-by-6 case) first


# --------------------------------------------------------------------------- dual helpers

def is_sym(*xs) -> bool:
    """True if any argument is a Z3 term (the statement is being built, not replayed)."""
    return any(isinstance(x, z3.ExprRef) for x in xs)


# The Z3 context of the check in progress: every claim is checked in a fresh context, so that
# its verdict and timing do not depend on what was checked before in the same process (Z3's
# heuristics see term ids and caches).
_CTX = None


def _bool(x):
    """A Z3 Boolean for a Python bool or a Z3 Boolean term."""
    return z3.BoolVal(x, ctx=_CTX) if isinstance(x, bool) else x


def div(a, b):
    """Integer division of non-negative values (floor), on Z3 terms or Python ints."""
    if is_sym(a, b):
        return a / b            # Z3 Int division: floor for a positive divisor
    return a // b


def mod(a, b):
    """Remainder of non-negative values."""
    return a % b


def u32(x):
    """The low 32 bits of a non-negative integer: a 32-bit register (s_mul_i32, s_add_u32, the
    host's cast of a stride to a 32-bit kernel argument)."""
    return x % U32


def shr(x, k: int):
    """Logical right shift of a non-negative integer by a constant (s_lshr_b32 / s_lshr_b64)."""
    return div(x, 2 ** k)


def ite(c, a, b):
    """if c then a else b (s_cselect / a branch on SCC)."""
    if isinstance(c, bool):
        return a if c else b
    return z3.If(c, a, b)


def all_(*cs):
    if any(is_sym(c) for c in cs):
        return z3.And(*[_bool(c) for c in cs])
    return all(cs)


def any_(*cs):
    if any(is_sym(c) for c in cs):
        return z3.Or(*[_bool(c) for c in cs])
    return any(cs)


def not_(c):
    return z3.Not(c) if is_sym(c) else (not c)


def implies(a, b):
    return any_(not_(a), b)


def eq(a, b):
    """a == b for numbers or Booleans (for Booleans: a <=> b)."""
    if is_sym(a, b):
        if _is_boolish(a) or _is_boolish(b):
            return _bool(a) == _bool(b)
        return a == b
    return a == b


def ne(a, b):
    return not_(eq(a, b))


def _is_boolish(x) -> bool:
    return isinstance(x, bool) or (isinstance(x, z3.ExprRef) and z3.is_bool(x))


# --------------------------------------------------------------------------- claims

@dataclass(frozen=True)
class Dom:
    """Inclusive integer range of a variable, optionally restricted to multiples of ``step``
    (offset from 0)."""
    lo: int
    hi: int
    step: int = 1

    def holds(self, x: int) -> bool:
        return self.lo <= x <= self.hi and x % self.step == 0


@dataclass(frozen=True)
class Claim:
    """One checked statement.

    name, pattern: identifier (``A.abi.64bit``) and fix pattern (``"A"``..``"D"``).
    statement: the statement in words, with units.
    variables: free variables and their domains (``Dom``); names of shapes follow addrsim.
    lhs: the value the kernel forms (the fix pattern's formula).
    rhs: the true value (what the tensor's meaning demands).
    precondition: the explicit precondition (a Boolean of ``v``); ``domain`` holds the
        dependent bounds that are part of the problem itself (batch_id < batch, ...).
    cases: parameter values substituted before solving (head dim, element size, ...); the
        claim is proved when it is proved for every case.
    expect: "proved" or "counterexample".
    dropped: for a counterexample claim made by dropping a precondition, that precondition:
        a real counterexample must violate it.
    expect_shape: the expected minimal counterexample (values of some minimised variables).
    minimize: variables shrunk first, in this order (batch, nhead_q, seqlen_q by default); the
        others follow in declaration order.
    source: where the statement comes from (DOMAIN.md section, aiter file and line).
    lhs_text, rhs_text: names of both sides in reports.
    lemmas: (text, fact) hints, each proved by :func:`check` before it is used (see there).
    """
    name: str
    pattern: str
    statement: str
    variables: Mapping[str, Dom]
    lhs: Callable[[dict], Any]
    rhs: Callable[[dict], Any]
    precondition: Callable[[dict], Any] = lambda v: True
    domain: Callable[[dict], Any] = lambda v: True
    cases: Sequence[Mapping[str, int]] = ({},)
    expect: str = "proved"
    dropped: Optional[Callable[[dict], Any]] = None
    expect_shape: Optional[Mapping[str, int]] = None
    minimize: Sequence[str] = ("batch", "nhead_q", "seqlen_q")
    source: str = ""
    lhs_text: str = ""
    rhs_text: str = ""
    lemmas: Sequence[Tuple[str, Callable[[dict], Any]]] = ()


@dataclass
class Result:
    claim: Claim
    verdict: str                       # "proved" | "counterexample" | "unknown" | "vacuous"
    model: Dict[str, int] = field(default_factory=dict)   # counterexample, or (proved) a witness that
    #                                    the precondition is satisfiable; variables and case parameters
    lhs: Any = None                    # both sides at the model (Python values)
    rhs: Any = None
    minimal: bool = False              # every shrinking query was answered
    case: Dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    reason: str = ""                   # why "unknown"
    lemmas: Dict[str, int] = field(default_factory=dict)   # lemma text -> cases it was proved in

    @property
    def ok(self) -> bool:
        return self.verdict == self.claim.expect

    def shape(self, names: Sequence[str] = ("batch", "nhead_q", "seqlen_q")) -> Dict[str, int]:
        return {n: self.model[n] for n in names if n in self.model}


class ReplayError(AssertionError):
    """A model Z3 returned does not reproduce the mismatch in plain Python: an engine bug."""


def _vars(claim: Claim, case: Mapping[str, int]) -> Dict[str, Any]:
    v: Dict[str, Any] = {n: z3.Int(n, ctx=_CTX) for n in claim.variables if n not in case}
    v.update(case)
    return v


def _domain_constraints(claim: Claim, v: Dict[str, Any]):
    cs = []
    for n, d in claim.variables.items():
        x = v[n]
        if not is_sym(x):
            if not d.holds(x):
                raise ValueError(f"{claim.name}: case value {n}={x} outside its domain {d}")
            continue
        cs += [x >= d.lo, x <= d.hi]
        if d.step > 1:
            cs.append(x % d.step == 0)
    cs.append(_bool(claim.domain(v)))
    return cs


def replay(claim: Claim, model: Mapping[str, int]) -> Tuple[Any, Any, bool, bool]:
    """Evaluate the claim concretely on a model: (lhs, rhs, domain holds, precondition holds)."""
    env = dict(model)
    dom = all(d.holds(env[n]) for n, d in claim.variables.items()) and bool(claim.domain(env))
    return claim.lhs(env), claim.rhs(env), dom, bool(claim.precondition(env))


# Portfolio: Z3's nonlinear integer arithmetic is sensitive to the form of the query and to
# its random seed (a query it settles in 0.1 s one way can time out another way).  Every
# strategy is sound, so the first definite answer (sat or unsat) is the answer; "unknown" only
# when every strategy gives up.  Two rounds: short slices first, then the rest of the budget.
# The forms: the query as written, after Z3's rewriter, after the rewriter with polynomials
# as sums of monomials (so that i*hdim*seqlen and the expanded (b*h + hd)*hdim*seqlen meet).
STRATEGIES = (("som", 0), ("raw", 0), ("simplify", 0), ("simplify", 1))   # (form of the query, random_seed)


RU_PER_MS = 1000
"""A budget written in ms is nominal: it becomes ``ms * RU_PER_MS`` Z3 resource units (the
rate of :data:`addrsim.prove.options.MRU_PER_S`); no check reads the clock."""


class _Query:
    """The assertions of one case; ``solve(extra)`` runs the portfolio on them plus ``extra``."""

    def __init__(self, assertions, timeout_ms: int):
        raw = list(assertions)
        self.forms = {"raw": raw,
                      "simplify": [z3.simplify(a) for a in raw],            # e.g. (nhead_q*384)/384 -> nhead_q
                      "som": [z3.simplify(a, som=True) for a in raw]}       # and polynomials as sums of monomials
        self.timeout_ms = timeout_ms
        self.reasons: list = []

    def solve(self, extra=()):
        """(z3.sat/unsat/unknown, model or None)."""
        extra = list(extra)
        n = len(STRATEGIES)
        first = max(1, min(750, self.timeout_ms // (4 * n)))            # Z3 reads a timeout of 0 as none
        for slice_ms in (first, max(first, (self.timeout_ms - first * n) // n)):   # short slices, then the rest
            for form, seed in STRATEGIES:
                s = z3.Solver(ctx=_CTX)
                s.set(rlimit=slice_ms * RU_PER_MS)     # resource units: the same answer at any load
                s.set("random_seed", seed)
                s.add(*self.forms[form])
                s.add(*extra)
                r = s.check()
                if r == z3.sat:
                    return r, s.model()
                if r == z3.unsat:
                    return r, None
                self.reasons.append(s.reason_unknown())
        return z3.unknown, None


def check(claim: Claim, timeout_ms: int = 10_000, minimize: bool = True) -> Result:
    """Check ``claim``: "proved" only when Z3 answers unsat for every case and the precondition
    is satisfiable in every case.

    The claim's lemmas are proved first, in order, each under the domain, the precondition and
    the lemmas before it; a lemma that is not proved (refuted or unknown) is left out, and so
    are the lemmas after it.  The main query is the domain, the precondition, the proved
    lemmas and lhs != rhs.  Lemmas are facts implied by the rest, so they change no verdict:
    they only spare Z3 nonlinear reasoning."""
    global _CTX
    saved, _CTX = _CTX, z3.Context()
    try:
        return _check(claim, timeout_ms, minimize)
    finally:
        _CTX = saved


def _check(claim: Claim, timeout_ms: int, minimize: bool) -> Result:
    t0 = time.monotonic()
    unknown = ""
    witness: Dict[str, int] = {}
    lemmas_proved: Dict[str, int] = {}
    for case in claim.cases:
        v = _vars(claim, case)
        base = _domain_constraints(claim, v) + [_bool(claim.precondition(v))]
        for text, fn in claim.lemmas:
            lem = _bool(fn(v))
            r, _ = _Query(base, timeout_ms).solve([z3.Not(lem)])
            if r != z3.unsat:
                break
            base.append(lem)
            lemmas_proved[text] = lemmas_proved.get(text, 0) + 1
        q = _Query(base + [_bool(ne(claim.lhs(v), claim.rhs(v)))], timeout_ms)
        r, m = q.solve()
        if r == z3.unsat:
            # not vacuous: some point of the domain satisfies the precondition (a witness,
            # replayed: both sides must agree there)
            w = _Query(base, timeout_ms)
            rw, mw = w.solve()
            if rw == z3.unsat:
                return Result(claim, "vacuous", case=dict(case), seconds=time.monotonic() - t0,
                              reason=f"case {dict(case)}: no point of the domain satisfies the precondition")
            if rw != z3.sat:
                unknown = unknown or f"case {dict(case)}: precondition satisfiability unknown"
                continue
            if not witness:
                witness = _model(mw, v)
                lhs, rhs, dom, pre = replay(claim, witness)
                if not (dom and pre) or lhs != rhs:
                    raise ReplayError(f"{claim.name}: witness {witness} of a proved case does not replay "
                                      f"(domain {dom}, precondition {pre}, lhs {lhs}, rhs {rhs})")
            continue
        if r != z3.sat:
            unknown = unknown or f"case {dict(case)}: {', '.join(sorted(set(q.reasons)))}"
            continue
        model, minimal = _shrink(claim, q, v, _model(m, v)) if minimize else (_model(m, v), False)
        lhs, rhs, dom, pre = replay(claim, model)
        if not (dom and pre) or lhs == rhs:
            raise ReplayError(f"{claim.name}: model {model} does not replay "
                              f"(domain {dom}, precondition {pre}, lhs {lhs}, rhs {rhs})")
        return Result(claim, "counterexample", model, lhs, rhs, minimal, dict(case), time.monotonic() - t0,
                      lemmas=lemmas_proved)
    if unknown:
        return Result(claim, "unknown", seconds=time.monotonic() - t0, reason=unknown, lemmas=lemmas_proved)
    lhs, rhs, _, _ = replay(claim, witness)
    return Result(claim, "proved", witness, lhs, rhs, seconds=time.monotonic() - t0, lemmas=lemmas_proved)


def _model(m: z3.ModelRef, v: Dict[str, Any]) -> Dict[str, int]:
    return {n: (m.eval(x, model_completion=True).as_long() if is_sym(x) else x) for n, x in v.items()}


def _shrink(claim: Claim, q: _Query, v: Dict[str, Any], best: Dict[str, int]):
    """Lexicographically minimal model in claim.minimize order, by tightening upper bounds
    (galloping from the lower bound, then bisection); the remaining variables are shrunk after
    them, in declaration order, so that the report shows small values.  Returns (model,
    minimal): minimal is False when a shrinking query was not answered."""
    fixed = []
    order = list(claim.minimize) + [n for n in claim.variables if n not in claim.minimize]
    for n in order:
        if n not in v or not is_sym(v[n]):
            continue
        x = v[n]
        lo, cur, k = claim.variables[n].lo, best[n], 0
        while lo < cur:
            probe = min(lo + (1 << k) - 1, lo + (cur - lo - 1) // 2)
            r, m = q.solve(fixed + [x <= probe])
            if r == z3.sat:
                best = _model(m, v)
                cur = best[n]
            elif r == z3.unsat:
                lo, k = probe + 1, k + 1
            else:
                return best, False
        fixed.append(x == cur)
    return best, True


# --------------------------------------------------------------------------- output

def fmt(x) -> str:
    if isinstance(x, bool):
        return str(x).lower()
    if isinstance(x, int) and abs(x) >= 4096:
        return f"{x} (0x{x:x})"
    return str(x)


def describe(res: Result) -> str:
    """Alive2-style text of a counterexample: the assignment, then both sides."""
    c = res.claim
    lines = [f"  counterexample{'' if res.minimal else ' (not proven minimal)'}"
             f"{' for ' + ', '.join(f'{k}={v}' for k, v in res.case.items()) if res.case else ''}:"]
    for n, x in res.model.items():
        if n not in res.case:
            lines.append(f"    {n} = {fmt(x)}")
    lines.append(f"  kernel value   {c.lhs_text or 'lhs'} = {fmt(res.lhs)}")
    lines.append(f"  correct value  {c.rhs_text or 'rhs'} = {fmt(res.rhs)}")
    return "\n".join(lines)


# --------------------------------------------------------------------------- safe expressions

def parse_expr(text, names: Sequence[str]) -> Callable[[dict], Any]:
    """Compile a stride expression such as ``"nhead_q*(seqlen_q + 64)"`` into a function of an
    environment: addrsim's one model-expression parser under its stride profile
    (:func:`addrsim.model.parse.compile_stride`: non-negative integer constants, the given
    names, ``+ - * / //`` and parentheses; ``/`` is integer division).  Nothing is evaluated as
    Python.  Raises ValueError (ModelExprError) for anything else."""
    return compile_stride(text, names)


# --------------------------------------------------------------------------- shared facts

MEMORY_GIB = 288     # MI355X (gfx950), the largest device of models/fmha_bwd_v3.yaml `memory.devices`


def fits_memory(v, hdim, e=2):
    """A lower bound of the bytes a batch-mode backward call needs fits in the largest device
    (288 GiB, MI355X): Q, dO and dQ ([batch, nhead_q, seqlen_q, hdim], e bytes an element;
    hdim_v = hdim) plus LSE and D (fp32 [batch, nhead_q, seqlen_q]) -- tensors of
    models/fmha_bwd_v3.yaml `memory.tensors`, contiguous sizes (views only take more)."""
    rows = v["batch"] * v["nhead_q"] * v["seqlen_q"]
    return rows * (3 * hdim * e + 2 * 4) <= MEMORY_GIB * GiB


def ids_domain(v):
    """The workgroup's coordinates: 0 <= batch_id < batch, 0 <= head_id < nhead_q."""
    cs = []
    if "batch_id" in v:
        cs += [v["batch_id"] >= 0, v["batch_id"] < v["batch"]]
    if "head_id" in v:
        cs += [v["head_id"] >= 0, v["head_id"] < v["nhead_q"]]
    return all_(*cs) if cs else True


def shape_vars(**extra: Dom) -> Dict[str, Dom]:
    """batch, nhead_q, seqlen_q, batch_id, head_id with addrsim's bounds, plus ``extra``."""
    d = {"batch": Dom(*BATCH), "nhead_q": Dom(*NHEAD), "seqlen_q": Dom(*SEQLEN),
         "batch_id": Dom(0, BATCH[1] - 1), "head_id": Dom(0, NHEAD[1] - 1)}
    d.update(extra)
    return d


def hdim_cases(hdims=HDIMS, **fixed):
    """One parameter case per head dim (hdim_q = hdim_v = hdim), with e = 2 (bf16/fp16)."""
    return tuple(dict(hdim=h, e=2, **fixed) for h in hdims)


def case_product(**axes) -> Tuple[dict, ...]:
    keys = list(axes)
    return tuple(dict(zip(keys, vals)) for vals in itertools.product(*(axes[k] for k in keys)))
