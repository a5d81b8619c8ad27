"""Concrete confirmation: every counterexample and witness is replayed before it is believed.

Owns :func:`replay` (a solver model on the concrete interpreter, both workgroups), the
bounds and int-mode counterexamples, the later-iteration search of a loop counterexample,
and the (decide, replay) tools that :mod:`addrsim.prove.domain` uses for witnesses and host
limits.  Every failure is a :class:`addrsim.prove.verdict.ReplayFailure`, never a bare
string.  May import addrsim.ir, addrsim.backends, addrsim.loader, addrsim.engine,
addrsim.model and the lower prove modules (verdict, machines, targets, query, runs).

Byte addresses and offsets throughout; pointer arguments get distinct 2**44-aligned bases
below 2**47 (user-mode canonical addresses).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace as replace_dc
from typing import Callable, Dict, List, Optional, Tuple

from addrsim.backends.ideal import ideal_evaluate, kept_wraps
from addrsim.engine.explore import ReplayBudget, run_concrete
from addrsim.engine.machine import Access, Unsupported
from addrsim.engine.slice import LiveTrace, program_of
from addrsim.ir import expr as X
from addrsim.ir.expr import Const, Expr
from addrsim.loader.disasm import Instr
from addrsim.model.models import SHAPE_VARS, Problem, pointer_args
from addrsim.prove.machines import LANE, PTR_LIMIT, concrete_machine
from addrsim.prove.options import Options
from addrsim.prove.query import decide_query, env_of, meets, query_key, ranges_of, violates, weakened_query
from addrsim.prove.runs import recall, remember, run_of
from addrsim.prove.targets import Target, opaque_in
from addrsim.prove.verdict import Counterexample, ReplayFailure, Witness, counterexample

REPLAY_ITERATIONS = 4


@dataclass(frozen=True)
class Subject:
    """The kernel being checked: its metadata ``kernel`` (addrsim.loader.codeobj.Kernel), the
    code object's ``arch``, its instructions ``code`` and the model set ``ms``."""

    kernel: object
    arch: str
    code: List[Instr]
    ms: object


def replay_site(sub: Subject, pc: int) -> Tuple[str, int]:
    """What a cached replay is keyed by besides its query: a digest of the kernel's
    instructions (addresses and text) and the access's address.  A replay is reused only for
    the same access of the same code (another check with the same query, or an earlier run),
    so it always says it ran on "this kernel", whichever check ran it first."""
    h = hashlib.blake2b(digest_size=16)
    for i in sub.code:
        h.update(f"{i.addr:x} {i.text}\n".encode())
    return h.hexdigest(), pc


def _fail(kind: str, reason: str) -> ReplayFailure:
    return ReplayFailure(kind, reason)


def memory_needed(prob: Problem, cex) -> int:
    """Bytes of device memory the family's tensors take at the counterexample's shape (0 if
    the models give no sizes)."""
    if prob.memory is None:
        return 0
    env = dict({v: prob.bounds[v][0] for v in SHAPE_VARS}, **cex.shape)
    try:
        return X.evaluate(prob.memory, env)
    except KeyError:
        return 0


def _kernel_args(prob: Problem, menv) -> Dict[str, int]:
    """The host-computed (non-pointer) kernel arguments the model determines."""
    return {k: X.evaluate(e, menv) for k, e in prob.kernargs.items()
            if not any(s.kind == "ptr" for s in X.symbols(e).values()) and all(n in menv for n in X.symbols(e))}


# ----------------------------------------------------------------------------- inputs

@dataclass
class _Inputs:
    """What the concrete machine is started with: argument values, pointer bases, the
    sequence-start arrays written into memory (byte address -> int32) and their regions."""

    argvals: Dict[str, int]
    ptrs: Dict[str, int]
    memory: Dict[int, int]
    regions: List[Tuple[int, int]]


def _inputs(sub: Subject, prob: Problem, model, argvals: Dict[str, int], fixed_ptrs: Dict[str, int] = None) -> _Inputs:
    ptrs = {}
    pargs = pointer_args(sub.ms, sub.kernel)
    for i, a_ in enumerate(sub.kernel.args):
        if a_.name in pargs:
            ptrs[a_.name] = (fixed_ptrs or {}).get(a_.name, (0x100000000000 * (i + 1)) & (PTR_LIMIT - 1))
            argvals[a_.name] = ptrs[a_.name]
    memory: Dict[int, int] = {}
    regions = []
    batch = model.get("batch", prob.bounds["batch"][0])
    for arg, arr in prob.arrays.items():
        if arg in ptrs:
            for off, val in (model.get(arr.name + "[]") or {}).items():
                memory[(ptrs[arg] + off) & X.mask(64)] = val
            regions.append((ptrs[arg], ptrs[arg] + 4 * (batch + 1)))
    return _Inputs(argvals, ptrs, memory, regions)


def solver_pointers(sub: Subject, prob: Problem, model) -> Dict[str, int]:
    """The pointer bases the solver chose (byte addresses), for the replay to keep: a carry
    the solver found (a base near a 4 GiB boundary whose ``s_addc_u32`` was dropped) happens
    only at that base.  Sequence-start arrays keep their own aligned bases (the replay writes
    the arrays there)."""
    arrays = set(prob.arrays)
    return {a: model[a] for a in pointer_args(sub.ms, sub.kernel) if a in model and a not in arrays
            and isinstance(model[a], int) and 0 <= model[a] < PTR_LIMIT}


REPLAY_STEPS = 60_000
"""Instructions a replayed wave may take before the access (:func:`addrsim.engine.explore.run_concrete`)."""


def _run(sub: Subject, inp: _Inputs, ids: Dict[str, int], lane: int, pc: int, occurrence: int = 1,
         store: Optional[dict] = None) -> Optional[List[Tuple[Expr, Expr]]]:
    """(byte address, V# range check passed) of the access at ``pc`` for each lane of the wave
    holding ``lane``, in one workgroup's concrete run, or None when the run ends before
    reaching it.  ``store``: the query cache, where a run that completed sliced with constant
    addresses is kept by what it computes from (:mod:`addrsim.prove.runs`), so a rounding
    sibling reads it.  Raises ReplayBudget, Unsupported."""
    m = concrete_machine(sub.kernel, sub.arch, sub.ms, inp.argvals, ids, lane // 64)
    m.memory, m.regions = inp.memory, inp.regions
    run = run_of(program_of(sub.code, {pc}), [m], REPLAY_STEPS, f"replay {occurrence}") if store is not None else None
    if run is not None:
        hit = recall(store, run, "lanes")
        if hit is not None and _lanes_ok(hit[0]):
            return None if hit[0] is None else [(Const(a, 64), Const(r, 1)) for a, r in hit[0]]
    visits: List[int] = []
    trace = LiveTrace(run.prog) if run is not None else None
    accs = run_concrete(sub.code, m, pc, REPLAY_STEPS, occurrence, visits, trace)
    lanes = None if accs is None else [(a.address, a.in_range) for a in accs]
    if run is not None and visits and all(isinstance(x, Const) for ln in lanes or () for x in ln):
        remember(store, run, [visits], trace.live, "lanes", None if lanes is None else
                 [[a.value, r.value] for a, r in lanes])
    return lanes


def _lanes_ok(got) -> bool:
    return got is None or (isinstance(got, list) and len(got) <= 64 and all(
        isinstance(x, list) and len(x) == 2 and all(isinstance(v, int) and v >= 0 for v in x) for x in got))


# ----------------------------------------------------------------------------- address

def replay(sub: Subject, prob: Problem, t: Target, model, a, a00, expected, buffer, occurrence: int = 1,
           want_equal: bool = False, store: Optional[dict] = None):
    """Concrete replay of a counterexample: a Counterexample, or a ReplayFailure saying why
    not.  ``occurrence``: compare the n-th execution of the access (a later loop iteration).
    ``want_equal``: replay a *witness* of a proof instead: a Witness when the concrete offset
    equals ``expected`` (None: the access only has to be reached), else a ReplayFailure.
    ``store``: the query cache, for the workgroups' runs (:func:`_run`)."""
    grid = prob.grid
    shape = {v: model.get(v, prob.bounds[v][0]) for v in SHAPE_VARS}
    shape.update(prob.fixed)
    env = dict(shape, **{s.name: model.get(s.name, 0) for s in grid.values()})
    argvals = {}
    for name, e in prob.kernargs.items():
        try:
            argvals[name] = X.evaluate(e, env)
        except KeyError:
            argvals[name] = model.get(name, 0)
    inp = _inputs(sub, prob, model, argvals, solver_pointers(sub, prob, model))
    env.update({k: v for k, v in model.items() if k.endswith("[]")})
    lane = model.get(LANE, 0)
    ids = {s.name: env[s.name] for s in grid.values()}
    addrs = _both_workgroups(sub, inp, ids, dict(ids, **{grid["z"].name: 0, grid["y"].name: 0}), lane, t, occurrence,
                             _reference_inputs(prob, model, inp, ids[grid["z"].name]), store)
    if isinstance(addrs, ReplayBudget):
        if a is None:
            return _fail("budget", f"not replayed: {addrs}")
        if want_equal:      # a proof needs a replayed witness
            return _fail("budget", f"witness not replayed: {addrs} (a loop runs before the access)")
        return _unreplayed(prob, model, inp, t, a, a00, expected,
                           f"not replayed: {addrs} (a loop runs before the access); offsets evaluated "
                           f"on the extracted semantics")
    note = ""
    if isinstance(addrs, _RefNotReached) and not want_equal and a00 is not None:
        addrs, note = _reference_on_formula(addrs, a00, model, inp)
    if isinstance(addrs, (ReplayFailure, _RefNotReached)):
        return addrs if isinstance(addrs, ReplayFailure) else addrs.failure
    got = (addrs[0] - addrs[1]) & X.mask(64)
    exp = got if expected is None else X.evaluate(expected, env)
    if want_equal:
        if got != exp:
            return _fail("mismatch", f"witness did not replay: concrete offset {got}, expected {exp} at {shape} "
                                     f"(engine bug)")
        c = counterexample(prob, model, {}, got, exp, t.access.instr.addr)
        return Witness(c.shape, c.coords, c.lane, got)
    if got == exp:
        return _fail("mismatch", f"solver counterexample did not replay: concrete offset {got} equals expected "
                                 f"at {shape} (engine bug)")
    shown = {k: v for k, v in inp.argvals.items() if k not in inp.ptrs or k in solver_pointers(sub, prob, model)}
    return counterexample(prob, model, shown, got, exp, t.access.instr.addr, note)


@dataclass
class _RefNotReached:
    """The workgroup of the counterexample reached the access (at byte address ``address``),
    the reference workgroup (0, 0) did not: ``failure`` says so."""
    address: int
    failure: ReplayFailure


def _reference_on_formula(r: _RefNotReached, a00: Expr, model, inp: _Inputs):
    """(the pair of addresses, a note) when the reference workgroup (0, 0) does not reach the
    access at the counterexample's shape: in group mode its own sequence lengths
    (seqstart[1] - seqstart[0]) may be too short for the tile or the lane.  The claim compares
    the access with the *address expression* at (0, 0) (the slice base every workgroup's
    offset is measured from), so that side is the extracted expression evaluated at the
    model, with the pointer bases of the concrete run; the counterexample's own workgroup is
    replayed.  Returns ``r`` when the expression cannot be evaluated."""
    env = env_of([a00], model)
    env.update({k: v for k, v in inp.ptrs.items() if k in X.symbols(a00)})
    try:
        ref = X.evaluate(a00, env)
    except KeyError:
        return r, ""
    return [r.address, ref], ("this kernel (workgroup (batch_id, head_id) replayed; workgroup (0, 0) does not "
                              "reach the access at this shape, so its address is the extracted expression's)")


def _reference_inputs(prob: Problem, model, inp: _Inputs, batch_id: int) -> _Inputs:
    """``inp`` for the reference workgroup (0, 0): in group mode each sequence-start array
    shifted to the workgroup's batch (entry i is ``seqstart[batch_id + i] -
    seqstart[batch_id]``), so sequence 0 has the workgroup's own lengths
    (:func:`addrsim.prove.check.reference`, the same reference in the claim).  ``inp``
    itself in batch mode, at batch_id 0, or when the model lacks the batch's start."""
    if not prob.arrays or batch_id == 0:
        return inp
    memory = dict(inp.memory)
    at = 4 * batch_id
    for arg, arr in prob.arrays.items():
        vals = model.get(arr.name + "[]") or {}
        if arg not in inp.ptrs or at not in vals:
            return inp
        for off in vals:
            memory.pop((inp.ptrs[arg] + off) & X.mask(64), None)
        for off, v in vals.items():
            if off >= at:
                memory[(inp.ptrs[arg] + off - at) & X.mask(64)] = (v - vals[at]) & X.mask(32)
    return _Inputs(inp.argvals, inp.ptrs, memory, inp.regions)


def _both_workgroups(sub, inp, ids, ids00, lane, t, occurrence, inp00: Optional[_Inputs] = None, store=None):
    """The concrete addresses of ``lane``'s access in workgroup ``ids`` (inputs ``inp``) and
    in (0, 0) (inputs ``inp00``, default ``inp``): a pair, a ReplayBudget (past the step
    budget), a _RefNotReached (only the first reached it) or a ReplayFailure."""
    addrs = []
    for idset, inputs in ((ids, inp), (ids00, inp00 or inp)):
        try:
            accs = _run(sub, inputs, idset, lane, t.access.instr.addr, occurrence, store)
        except ReplayBudget as e:
            return e
        except Unsupported as e:
            return _fail("unsupported", f"counterexample could not be replayed concretely: {e}")
        if not accs:
            why = _fail("not-reached", f"concrete replay did not reach the access at {t.access.instr.addr:#x}"
                        + (f" {occurrence} times" if occurrence > 1 else "")
                        + (" in the reference workgroup (0, 0)" if addrs else ""))
            return _RefNotReached(addrs[0], why) if addrs else why
        av = accs[lane % 64][0]
        if not isinstance(av, Const):
            return _fail("mismatch", f"concrete replay produced a non-constant address ({opaque_in(av)})")
        addrs.append(av.value)
    return addrs


def _unreplayed(prob, model, inp: _Inputs, t, a, a00, expected, why):
    """A counterexample whose concrete replay is out of budget: the offsets come from
    evaluating the extracted address (the solver model was already checked to violate the
    claim by evaluation)."""
    menv = env_of([a, a00, expected], model)
    try:
        got = (X.evaluate(a, menv) - X.evaluate(a00, menv)) & X.mask(64)
        exp = X.evaluate(expected, menv)
    except KeyError as e:
        return _fail("evaluation", f"counterexample could not be evaluated (no value for {e})")
    shown = {k: v for k, v in inp.argvals.items() if k not in inp.ptrs}
    return counterexample(prob, model, shown, got, exp, t.access.instr.addr, why)


def ideal_counterexample(prob, model, t, a, a00, expected, exprs):
    """An int-mode counterexample, checked by exact evaluation (the hardware does not compute
    int mode, so there is nothing to replay on the concrete interpreter)."""
    keep = kept_wraps(exprs)
    menv = env_of([a, a00, expected], model)
    try:
        memo: dict = {}
        got = ideal_evaluate(a, menv, keep, memo) - ideal_evaluate(a00, menv, keep, memo)
        exp = ideal_evaluate(expected, menv, keep, memo)
    except KeyError as e:
        return _fail("evaluation", f"counterexample could not be evaluated (no value for {e})")
    if got == exp:
        return _fail("mismatch", "int-mode solver model does not violate the claim when evaluated (engine bug)")
    return counterexample(prob, model, _kernel_args(prob, menv), got, exp, t.access.instr.addr,
                          "exact evaluation (int mode)")


# ----------------------------------------------------------------------------- bounds

def bounds_counterexample(sub: Subject, prob, t, model, a, env, ptr, extent, exprs, arith, own=None, store=None):
    """A bounds counterexample, replayed on the concrete interpreter (bv) or evaluated exactly
    (int).  Its cause: "allocation" (in the V#'s range, outside the allocation: ``extracted``
    is the access's byte offset from the buffer's pointer, ``expected`` the extent in bytes),
    "layout" (in range and in the allocation, outside the workgroup's own slice's reach:
    ``extracted`` is the offset from the slice base, ``expected`` the reach, bytes) or
    "num_records" (inside the slice, clamped by the V#).  ``own``: (slice base offset, slice
    bytes, reach bytes) expressions, or None (no slice claim)."""
    menv = env_of(exprs, model)
    keep = kept_wraps(exprs) if arith == "int" else None
    ev = (lambda e: ideal_evaluate(e, menv, keep, {})) if keep is not None else (lambda e: X.evaluate(e, menv))
    size = t.access.size
    try:
        pval = menv.get(ptr, 0)
        off = ev(a) - pval if keep is not None else (ev(a) - pval) & X.mask(64)
        ext = ev(extent)
        in_r = ev(X.substitute(t.access.in_range, env))
        base, sn, reach = (ev(e) for e in own) if own is not None else (0, 0, 0)
    except KeyError as e:
        return _fail("evaluation", f"counterexample could not be evaluated (no value for {e})")
    inside = lambda lo, n: lo <= off and off + size <= lo + n      # noqa: E731
    if in_r and not inside(0, ext):
        cause, shown = "allocation", (off, ext)
    elif own is not None and in_r and not inside(base, reach):
        cause, shown = "layout", (off - base, reach)
    elif own is not None and not in_r and inside(base, sn):
        cause, shown = "num_records", (off, ext)
    else:
        return _fail("mismatch", "solver model does not violate the bounds claim when evaluated (engine bug)")
    args = _kernel_args(prob, menv)
    replayed = "exact evaluation (int mode)" if keep is not None else ""
    if keep is None:
        r = _replay_bounds(sub, prob, t, model, args, ptr, pval, off, in_r, store)
        if isinstance(r, ReplayFailure):
            return r
        replayed = r
    cex = counterexample(prob, model, args, shown[0], shown[1], t.access.instr.addr, replayed, arrays=False)
    cex.cause = cause
    return cex


def _replay_bounds(sub, prob, t, model, args, ptr, pval, off, in_r, store=None):
    """Concrete replay of the one workgroup of a bounds counterexample: the same address and
    the same range check.  "" when confirmed, a note when out of budget, else a ReplayFailure."""
    inp = _inputs(sub, prob, model, dict(args), dict(model, **{ptr: pval}))   # the model's pointer bases
    ids = {s.name: model.get(s.name, 0) for s in prob.grid.values()}
    lane = model.get(LANE, 0)
    try:
        accs = _run(sub, inp, ids, lane, t.access.instr.addr, store=store)
    except ReplayBudget as e:
        return f"not replayed: {e}; evaluated on the extracted semantics"
    except Unsupported as e:
        return _fail("unsupported", f"counterexample could not be replayed concretely: {e}")
    if not accs:
        return _fail("not-reached", f"concrete replay did not reach the access at {t.access.instr.addr:#x}")
    address, in_range = accs[lane % 64]
    if not isinstance(address, Const) or not isinstance(in_range, Const):
        return _fail("mismatch", "concrete replay produced a non-constant address")
    if ((address.value - pval) & X.mask(64)) != off or in_range.value != in_r:
        return _fail("mismatch", f"bounds counterexample did not replay: offset {off} / in range {in_r} evaluated, "
                                 f"{(address.value - pval) & X.mask(64)} / {in_range.value} concretely "
                                 f"(engine bug)")
    return ""


# ----------------------------------------------------------------------------- loops

def _loop_tries(prob, model) -> List[dict]:
    """Shapes to replay a refuted loop step at: the smallest workgroup grids first (the
    model's ids, then workgroup (1, 1) of a 2 x 2 grid: a step that depends on head_id only is
    the same at head 0 as in workgroup (0, 0)), then the model's, each with longer sequences."""
    grid = prob.grid
    ids = {grid["z"].name, grid["y"].name, grid["x"].name, LANE}
    base = {k: v for k, v in model.items() if k in SHAPE_VARS or k in ids or k.endswith("[]")}
    bid, hid = base.get(grid["z"].name, 0), base.get(grid["y"].name, 0)
    small = dict(base, batch=bid + 1, nhead_q=hid + 1, nhead_k=1)
    tiny = dict(small, seqlen_k=small.get("seqlen_q", 1), **{grid["x"].name: 0})
    other = dict(tiny, batch=2, nhead_q=2, **{grid["z"].name: 1, grid["y"].name: 1})
    tries = []
    for t0 in (tiny, other, small, base):
        for n in (0, 256, 1024):
            t = dict(t0)
            for v in ("seqlen_q", "seqlen_k") if t0 not in (tiny, other) else ("seqlen_q",):
                t[v] = max(t.get(v, 1), n)
            if t0 in (tiny, other):
                t["seqlen_k"] = t["seqlen_q"]
            if "total_q" in t:
                t["total_q"] = max(t["total_q"], t["seqlen_q"])
            if "total_k" in t:
                t["total_k"] = max(t["total_k"], t["seqlen_k"])
            tries.append(t)
    return tries


def confirm_loop(sub: Subject, prob, model, pc, expected, buffer) -> Optional[Counterexample]:
    """A concrete counterexample in a later iteration (2 to REPLAY_ITERATIONS) of the access at
    ``pc``, at the first shape of :func:`_loop_tries` inside the domain; None when none is
    found (the tries and iterations are a fixed list: the answer does not depend on time)."""
    fake = Target(Access(Instr(pc, "", (), (), f"access at {pc:#x}"), "load", (), (), Const(0, 64), Const(0, 14),
                         Const(0, 32), Const(0, 64), Const(1, 1), False), [], Const(0, 64))
    for m in _loop_tries(prob, model):
        env = dict({v: prob.bounds[v][0] for v in SHAPE_VARS}, **m)
        env.update(prob.fixed)
        try:
            if not all(X.evaluate(c, env) == 1 for c in prob.domain):
                continue
        except KeyError:
            continue
        for n in range(2, REPLAY_ITERATIONS + 1):
            r = replay(sub, prob, fake, env, None, None, expected, buffer, occurrence=n)
            if isinstance(r, Counterexample):
                r.replayed_on = f"this kernel, iteration {n}"
                r.iteration = n
                r.minimal = False       # the first failing shape found, not minimised
                return r
            if r.kind in ("not-reached", "budget"):
                break
    return None


# ----------------------------------------------------------------------------- tools for domain.py

def witness_tools(sub: Subject, res, opts: Options, cache: Optional[dict] = None):
    """The (decide, replay) pair :func:`addrsim.prove.domain.settle` needs for check ``res``.
    ``cache`` (the check's query cache) keeps each decided model by the structural hash of
    its query, so sibling kernels with the same address computation (rtne/rtna/rtz) reuse
    it, and each replayed witness by its query, model, kernel code and access
    (:func:`replay_site`): a witness read from an earlier run says so."""
    prob = res.problem
    ranges = ranges_of(prob)
    expected = prob.expected.get(res.buffer) if res.prop == "address" else None

    def qkey(tag, conds, claim=None):
        return query_key((tag, sub.arch, res.prop, opts.budgets()), claim if claim is not None else Const(1, 1), conds)

    def ask(conds, rng):
        key = qkey("witness-model lowered", conds)
        if cache is not None and key in cache:
            return cache[key]
        v, model, why, _, _, _ = decide_query(conds, Const(0, 1), rng, opts.query_ru, prob, opts.min_ru, "bv",
                                              shown_least=False)
        out = model if v == "refuted" else (None if v == "proved" else f"no witness found: {why}")
        if cache is not None:
            cache[key] = out
        return out

    def decide(conds):
        return weak_first(conds, Const(0, 1), prob, ranges, ask)

    def rep(case, model):
        t, conds, claim, a, a00 = case
        key = (qkey("witness", conds, claim), tuple(sorted((k, v) for k, v in model.items()
                                                            if not k.endswith("[]"))),
               replay_site(sub, t.access.instr.addr))
        if cache is not None and key in cache:
            w = cache[key]
            if isinstance(w, ReplayFailure) or w.replayed_on != "this kernel" \
                    or not getattr(cache, "earlier", lambda k: False)(key):
                return w
            return replace_dc(w, replayed_on=f"an earlier run with the same query (this kernel's access "
                                             f"at {t.access.instr.addr:#x})")
        if not violates(conds, X.bnot(claim), model):
            w = _fail("mismatch", "witness model breaks the proved claim when evaluated (engine bug)")
        else:
            w = replay(sub, prob, t, model, a, a00, expected, res.buffer, want_equal=True, store=cache)
        if cache is not None:
            cache[key] = w
        return w
    return decide, rep


def weak_first(conds, claim, prob, ranges, ask: Callable):
    """``ask(conds, ranges)`` (a model breaking ``claim`` under ``conds``, None when there is
    none, or why it is undecided) on the weakened domain first
    (:func:`addrsim.prove.query.weakened_query`): its None is the answer (fewer shapes have
    none), and so is its model when it :func:`addrsim.prove.query.meets` ``conds``; else
    ``ask`` on ``conds``.  A weak model whose minimisation completed is the least of
    ``conds`` too when it meets them; one cut by the minimisation budget is, like the real
    query's then, a small shape, not the least."""
    w = weakened_query(conds, prob)
    if w is not None:
        out = ask(*w)
        if out is None or (isinstance(out, dict) and meets(conds, claim, out)):
            return out
    return ask(conds, ranges)


def limit_tools(prob: Problem, opts: Options, cache: Optional[dict] = None):
    """The (decide, memory_of) pair :func:`addrsim.prove.domain.host_limits` needs; ``cache``
    (the query cache) keeps each answer by the structural key of its query and budgets."""
    ranges = ranges_of(prob)

    def decide(conds, claim):
        def ask(cs, rng):
            key = query_key(("host-limit", opts.budgets()), claim, cs)
            if cache is not None and key in cache:
                return cache[key]
            v, model, why, _, q, _ = decide_query(cs, claim, rng, opts.query_ru, prob, opts.min_ru, "bv")
            out = model if v == "refuted" else (None if v == "proved" else f"undecided: {why}")
            if cache is not None and not (q is not None and q.wallclock):
                cache[key] = out
            return out
        return weak_first(conds, claim, prob, ranges, ask)

    def memory_of(shape):
        return memory_needed(prob, Counterexample(shape, {}, {}, 0, 0, 0, 0))
    return decide, memory_of
