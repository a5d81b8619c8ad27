"""Contracts between kernels of the backward pass: the slice a producer writes is the slice its
consumer reads.

Owns :class:`Side`, :class:`Contract`, :data:`LINKS`, :func:`side` and :func:`decide`.  May
import every lower layer and the other prove modules except domain.

aiter e4048607's host runs three kernels per backward pass (csrc/cpp_itfs/mha_bwd.cu 560-739):
the odo pre-kernel writes D, the main kernel reads D and accumulates dQ into dq_acc (its
``dq`` buffer: pointer ``ptr_dq``/``dQ``), and dq_convert or dq_shuffle reads dq_acc
(``dq_acc``: pointer ``dQ_acc``).  Each kernel's own check measures its accesses against the
host's layout; the contract compares the two kernels with each other, so that a producer and
a consumer that agree with each other but not with the model, or that both break the same way,
are told apart from a pair that disagrees.  For one layout the claim is

    for every shape both kernels are launched on (both kernels' domains), every (batch_id,
    head_id), every lane, tile and path of either kernel:
    producer(batch_id, head_id) - producer(0, 0) == consumer(batch_id, head_id) - consumer(0, 0)

in bytes, 64-bit hardware arithmetic, where producer(...) is the byte address of the
producer's access of its buffer in workgroup (batch_id, head_id), read with each kernel's
arguments as the host fills them (:mod:`addrsim.model.problem`).  The two kernels share the
shape variables, the workgroup ids batch_id/head_id and the sequence-start arrays; each
kernel's lane, tile id, pointers and other values are its own (renamed apart, so one kernel's
path conditions never constrain the other's lane).  What it does not cover: where inside the
(batch, head) slice each row and column lies (each kernel's store coverage against the model's
``tile``, :mod:`addrsim.prove.coverage`, and ``addrsim run`` check that).

A disagreement is attributed: the kernel whose offset differs from the host's expected offset
at the counterexample (both, or neither: the models disagree), and the term (batch: the
difference at (batch_id, 0); head: at (0, head_id)).  Each kernel's offset at the
counterexample is replayed on the concrete interpreter (:func:`addrsim.prove.replay.replay`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from addrsim.engine.explore import Exploration
from addrsim.backends.z3_run import RU
from addrsim.errors import InputError
from addrsim.ir import expr as X
from addrsim.ir.expr import Const, Expr, Sym
from addrsim.model.models import Problem, buffer_pointer
from addrsim.prove.check import address_setup, reference, symbols_read
from addrsim.prove.options import Options
from addrsim.prove.query import CLASSIFY_RU, array_facts, decide_query, env_of, ranges_of
from addrsim.prove.replay import Subject, replay
from addrsim.prove.targets import Target, targets_for
from addrsim.prove.verdict import ReplayFailure, Verdict, Witness

LINKS: Tuple[Tuple[str, str, str, str], ...] = (
    ("odo", "d", "main", "d"),           # D: odo writes it (mha_bwd.cu 560-569), the main kernel reads it
    ("main", "dq", "post", "dq_acc"),    # dq_acc: the main kernel accumulates it, dq_convert/dq_shuffle read it
)
"""(producer role, its buffer, consumer role, its buffer): the tensors two kernels of one pass share."""


@dataclass
class Side:
    """One kernel's accesses of the shared tensor in one layout: ``cases`` holds, per access,
    (its relative offset in bytes, 64-bit: address(batch_id, head_id) - address(0, 0), its
    conditions: path and domain), in names of its own (``tag`` appended to every name the
    other kernel does not share); ``expected`` the host's offset (bytes, shape terms)."""

    kernel: str
    buffer: str
    prob: Problem
    sub: Subject
    cases: List[Tuple[Expr, List[Expr], Target, Expr, Expr]]
    expected: Expr
    domain: List[Expr]             # the domain and the array facts alone (renamed), without any path
    names: Dict[str, str]          # own name -> renamed name


@dataclass
class Contract:
    """The verdict of one pair in one layout.  ``counterexample``: shape, coords, each side's
    offset (bytes from slice (0, 0)) and the host's; ``culprit``: the kernel(s) whose offset
    is not the host's; ``term``: "batch", "head" or "batch and head"; ``witness``: a shape
    both kernels run at, where a proof holds."""

    producer: Tuple[str, str]      # (kernel symbol, buffer)
    consumer: Tuple[str, str]
    layout: str
    verdict: Verdict
    reason: str = ""
    counterexample: Optional[dict] = None
    culprit: List[str] = field(default_factory=list)
    term: str = ""
    cause: str = ""                # "overflow" (the two agree over unbounded integers) or "formula"
    witness: Optional[dict] = None
    assumptions: List[str] = field(default_factory=list)


def side(sub: Subject, ex: Exploration, buffer: str, layout: str, opts: Options, tag: str, role: str = ""):
    """The :class:`Side` of kernel ``sub`` for ``buffer`` in ``layout``, or (verdict, reason):
    unsupported or unknown where the address check itself would not state its claim
    (:func:`addrsim.prove.check.address_setup`: an instruction, branch, division, case split,
    load or swizzle bit not understood; a wrong base pointer).
    ``role`` "writes" (a producer: some access stores or adds) or "reads" (a consumer: some
    access loads); raises InputError for a kernel that does not play it."""
    ptr = buffer_pointer(sub.ms, sub.kernel, buffer)
    kinds = {t.access.kind for t in targets_for(ex, ptr, True)} | {t.access.kind for t in targets_for(ex, ptr, False)}
    if role and kinds and ("store" if role == "writes" else "load") not in kinds:
        raise InputError(sub.kernel.symbol, f"is given as the kernel that {role} {buffer}, but it only "
                                            f"{'loads' if role == 'writes' else 'stores to'} it")
    setup = address_setup(sub, ex, buffer, layout, opts)
    if len(setup) == 2:          # refused as the address check refuses it: the same reason, never a proof
        verdict, why = setup
        word = verdict if verdict in (Verdict.UNKNOWN, Verdict.UNSUPPORTED) else Verdict.UNSUPPORTED
        return word, f"{sub.kernel.symbol}, {buffer}: {why or verdict}"
    prob, tg, env, zero_ids = setup
    prob.restrict_exact(symbols_read(tg))      # only the arguments these accesses read: fewer assumptions, sound
    shared = {prob.grid["z"].name, prob.grid["y"].name}
    expected = prob.expected[buffer]          # shape terms (the contract already substituted)
    cases, names = [], {}
    for t in tg:
        a = X.substitute(t.address, env)
        a00 = reference(a, zero_ids, prob)
        conds = [X.substitute(c, env) for c in t.conds] + list(prob.domain)
        conds += array_facts(conds + [a, expected], prob)
        cases.append((X.sub(a, a00), conds, t, a, a00))
    memo: dict = {}
    own = lambda s_: s_.kind not in ("shape", "array") and s_.name not in shared  # noqa: E731
    out = [(_renamed(o, tag, own, memo, names), [_renamed(c, tag, own, memo, names) for c in cs], t, a, a00)
           for o, cs, t, a, a00 in cases]
    dom = list(prob.domain)
    dom = [_renamed(c, tag, own, memo, names) for c in dom + array_facts(dom + [o for o, *_ in cases], prob)]
    return Side(sub.kernel.symbol, buffer, prob, sub, out, expected, dom, names)


def _renamed(e: Expr, tag: str, own, memo: dict, names: Dict[str, str]) -> Expr:
    """``e`` with every symbol ``own`` selects renamed ``name + tag`` (by the symbol itself, not
    its name alone: a kernel argument may share a shape variable's name, e.g. the odo's
    32-bit ``seqlen_q``); ``names`` collects old name -> new name."""
    if id(e) in memo:
        return memo[id(e)][1]
    r = e
    if isinstance(e, Sym):
        if own(e):
            names[e.name] = e.name + tag
            r = Sym(e.name + tag, e.width, e.kind)
    elif isinstance(e, X.Op):
        r = X.rebuild(e, tuple(_renamed(x, tag, own, memo, names) for x in e.args))
    memo[id(e)] = (e, r)
    return r


def _ranges(p: Side, c: Side) -> Dict[str, Tuple[int, int]]:
    """Each symbol's range: the shared ones in both kernels' ranges, the renamed ones in their own."""
    out: Dict[str, Tuple[int, int]] = {}
    for sd in (p, c):
        for n, (lo, hi) in ranges_of(sd.prob).items():
            n = sd.names.get(n, n)
            old = out.get(n)
            out[n] = (lo, hi) if old is None else (max(lo, old[0]), min(hi, old[1]))
    return out


def decide(p: Side, c: Side, layout: str, opts: Options) -> Contract:
    """The :class:`Contract` of producer ``p`` and consumer ``c`` in ``layout`` (the module
    docstring's claim): every access of each against the other's first access, one query
    each (budgets of ``opts``, in resource units; the check budget bounds them all), first on
    the two domains alone (then it holds on every path), else at the shapes where both
    accesses' paths run (a consumer access whose shapes the producer's first access never
    reaches is compared there only: each kernel's own check relates its accesses to each
    other); proved only with a shape both kernels run at (else unsupported)."""
    res = Contract((p.kernel, p.buffer), (c.kernel, c.buffer), layout, Verdict.UNKNOWN,
                   assumptions=_assumptions(p, c))
    ranges = _ranges(p, c)
    pairs = [(p.cases[0], x) for x in c.cases] + [(x, c.cases[0]) for x in p.cases[1:]]
    seen, on_domains, spent = set(), set(), 0
    for pc, cc in pairs:
        if spent >= opts.check_ru:
            res.verdict, res.reason = Verdict.UNKNOWN, (f"check budget of {opts.check_ru / RU:g} Mru spent before "
                                                        f"every pair of accesses was decided")
            return res
        claim, conds = X.eq(pc[0], cc[0]), pc[1] + cc[1]
        key = b"".join(X.digest(e) for e in [claim] + conds)
        if key in seen or X.digest(claim) in on_domains:
            continue
        seen.add(key)
        first = decide_query(p.domain + c.domain, claim, ranges, opts.query_ru, p.prob, 0, opts.arith)
        spent += first[5]
        if first[0] == "proved":
            on_domains.add(X.digest(claim))    # the same offsets on another path: proved already
            continue          # on the two domains alone: then on every path (group mode: path conditions weigh)
        v, model, why, minimal, _, used = decide_query(conds, claim, ranges, opts.query_ru, p.prob, opts.min_ru,
                                                    opts.arith)
        spent += used
        if v == "unknown":
            res.verdict, res.reason = Verdict.UNKNOWN, f"the contract query was not decided: {why}"
            return res
        if v != "proved":
            res.cause = _cause(conds, claim, ranges, p.prob) if opts.arith == "bv" else "formula"
            return _disagreement(res, p, c, pc, cc, model, minimal)
    model = _joint_witness(p, c, ranges, opts)
    if not isinstance(model, dict):
        res.verdict, res.reason = Verdict.UNSUPPORTED, model
        return res
    res.verdict, res.witness = Verdict.PROVED, _shape(p, model)
    res.reason = (f"{p.kernel} writes {p.buffer} and {c.kernel} reads {c.buffer} at the same offset from slice "
                  f"(0, 0) for every (batch_id, head_id) and shape both are launched on (an access in a loop: its first "
                  f"iteration; later ones are each kernel's own check, by induction)")
    return res


def _joint_witness(p: Side, c: Side, ranges, opts: Options):
    """A model of both kernels' first accesses' conditions (a shape both run at), or the
    reason (str) there is none: one kernel's shape found alone, then the other's locals with
    that shape fixed (the joint query at once is far harder for the solvers than the two)."""
    first_conds = [sd.cases[0][1] for sd in (p, c)]
    why = "no shape both kernels run at was found within the budget"
    for one, two in ((1, 0), (0, 1)):
        v, m1, _, _, _, _ = decide_query(first_conds[one], Const(0, 1), ranges, opts.query_ru, p.prob, 0, opts.arith)
        if v == "proved":
            return (f"no shape of {(p, c)[one].kernel}'s domain reaches its access of {(p, c)[one].buffer} in this "
                    f"layout (the domain or a --bound excludes every shape: verify names the assumptions)")
        if v != "refuted":
            continue
        syms = {s_.name: s_ for e in first_conds[one] for s_ in X.symbols(e).values()
                if s_.kind == "shape" or s_.name in (p.prob.grid["z"].name, p.prob.grid["y"].name)}
        fix = [X.eq(s_, Const(m1.get(n, 0), s_.width)) for n, s_ in sorted(syms.items())]
        v, m2, _, _, _, _ = decide_query(first_conds[one] + first_conds[two] + fix, Const(0, 1), ranges,
                                         opts.query_ru, p.prob, 0, opts.arith)
        if v == "refuted":
            return m2
        if v == "proved":
            why = "the two kernels share no shape (their domains and paths together are empty)"
    return why


def _cause(conds, claim, ranges, prob: Problem) -> str:
    """"overflow" when the two offsets agree over unbounded integers (a 32-bit wrap in one
    kernel's arithmetic or a host cast breaks the hardware claim), else "formula"."""
    v = decide_query(conds, claim, ranges, CLASSIFY_RU, prob, 0, "int")[0]
    return "overflow" if v == "proved" else "formula" if v == "refuted" else ""


def _assumptions(p: Side, c: Side) -> List[str]:
    return [f"{sd.kernel}: {a.text} ({a.layer})" for sd in (p, c) for a in sd.prob.assumptions if sd.prob.in_domain(a)]


def _shape(sd: Side, model: dict) -> dict:
    """The shape and the workgroup ids of ``model`` (shape variables by name)."""
    g = sd.prob.grid
    out = dict(sd.prob.shape_of(model))
    out.update(batch_id=model.get(g["z"].name, 0), head_id=model.get(g["y"].name, 0))
    return out


def _own_model(sd: Side, model: dict) -> dict:
    """``model`` in ``sd``'s own names (its renamed symbols back)."""
    back = {m: n for n, m in sd.names.items()}
    return {back.get(k, k): v for k, v in model.items() if k in back or k not in sd.names.values()}


def _offset_at(sd: Side, case, model: dict) -> Tuple[Optional[int], str]:
    """(the access's offset from slice (0, 0), in bytes, replayed on the concrete
    interpreter; how it was obtained): the extracted expression's value when the replay
    does not reach the access."""
    off, _, t, a, a00 = case
    own = _own_model(sd, model)
    w = replay(sd.sub, sd.prob, t, own, a, a00, None, sd.buffer, want_equal=True)
    if isinstance(w, Witness) and w.offset is not None:
        return w.offset, "replayed"
    why = str(w) if isinstance(w, ReplayFailure) else "no offset"
    try:
        return X.evaluate(off, env_of([off], model)), f"evaluated on the extracted address ({why})"
    except KeyError:
        return None, why


def _disagreement(res: Contract, p: Side, c: Side, pc, cc, model: dict, minimal: bool) -> Contract:
    """A counterexample of the contract, attributed (module docstring)."""
    vals = {}
    for role, sd, case in (("producer", p, pc), ("consumer", c, cc)):
        got, how = _offset_at(sd, case, model)
        exp = X.evaluate(sd.expected, env_of([sd.expected], _own_model(sd, model)))
        vals[role] = (got, exp, how)
    if vals["producer"][0] == vals["consumer"][0]:
        res.verdict = Verdict.UNKNOWN
        res.reason = (f"the solver's disagreement did not replay: both kernels give offset {vals['producer'][0]} at "
                      f"{_shape(p, model)}")
        return res
    res.verdict = Verdict.COUNTEREXAMPLE
    res.culprit = [sd.kernel for role, sd in (("producer", p), ("consumer", c)) if vals[role][0] != vals[role][1]]
    res.term = _term(p, c, pc, cc, model)
    res.counterexample = {"shape": _shape(p, model), "minimal": minimal,
                          **{f"{role}_offset": vals[role][0] for role in vals},
                          **{f"{role}_expected": vals[role][1] for role in vals},
                          "how": {role: vals[role][2] for role in vals}}
    who = ", ".join(res.culprit) if res.culprit else "neither kernel (the models' expected offsets disagree)"
    res.reason = (f"{p.kernel} writes {p.buffer} of (batch_id, head_id) at offset {vals['producer'][0]} from slice "
                  f"(0, 0), {c.kernel} reads {c.buffer} at {vals['consumer'][0]} (host: {vals['producer'][1]}); "
                  f"{_term_text(res.term)} ({res.cause or 'unclassified'}); off the host's layout: {who}")
    return res


def _term_text(term: str) -> str:
    return f"the {term} term differs" if term else "only the batch and head terms together differ"


def _term(p: Side, c: Side, pc, cc, model: dict) -> str:
    """Which term differs at the counterexample, by evaluation of the extracted offsets:
    "batch" when they differ at (batch_id, 0), "head" at (0, head_id), both, or "" (only
    the two together)."""
    g = p.prob.grid
    out = []
    for word, zero in (("batch", g["y"].name), ("head", g["z"].name)):
        m = dict(model, **{zero: 0})
        try:
            if X.evaluate(pc[0], env_of([pc[0]], m)) != X.evaluate(cc[0], env_of([cc[0]], m)):
                out.append(word)
        except KeyError:
            pass
    return " and ".join(out)
