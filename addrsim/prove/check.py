"""Checks: does each access of a buffer land where the model says, for every shape?

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
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace as replace_dc
from itertools import product
from typing import Dict, List, Optional, Sequence, Tuple

import z3

from addrsim.ir import expr as X
from addrsim.loader.codeobj import CodeObject, Kernel
from addrsim.loader.disasm import Instr
from addrsim.errors import InputError
from addrsim.engine.explore import Exploration, ReplayBudget, explore, run_concrete
from addrsim.ir.expr import Const, Expr, Sym
from addrsim.engine.machine import Access, ConcreteLanes, SymbolicLane, Unsupported
from addrsim.model.models import SHAPE_VARS, ModelSet, Problem, arg_layout, build_problem, buffer_pointer, grid_symbols, pointer_args
from addrsim.prove.idioms import exact_divisions
from addrsim.prove.probe import probe, shrink
from addrsim.backends.z3_bv import holds_bv, to_bv
from addrsim.backends.z3_int import IntEncoder
from addrsim.backends.ideal import ideal_evaluate, kept_wraps
from addrsim.prove.wraps import wrap_sites

PTR_LIMIT = 1 << 47          # allocations lie below 2**47 (user-mode canonical addresses)
KERNARG_PTR = 0x7F0000000000
LANE = "tid_x"


@dataclass
class Counterexample:
    shape: Dict[str, int]
    coords: Dict[str, int]
    kernargs: Dict[str, int]
    extracted: int
    expected: int
    lane: int
    access: int
    minimal: bool = True
    arrays: Dict[str, Dict[int, int]] = field(default_factory=dict)   # array -> {index: value}
    replayed_on: str = ""            # "" for this kernel, else the sibling kernel whose replay is reused
    memory_bytes: int = 0            # device memory every tensor of the family needs at this shape (bytes)
    cause: str = ""                  # bounds: allocation | num_records
    iteration: int = 1               # the loop iteration whose access is wrong (loop counterexamples)


@dataclass
class Check:
    """Verdict for one (buffer, layout).  Offsets and addresses are bytes."""

    buffer: str
    layout: str
    verdict: str                      # proved | counterexample | unknown | unsupported
    extracted: str = ""
    expected: str = ""
    difference: str = ""
    reason: Optional[str] = None
    counterexample: Optional[Counterexample] = None
    time_s: float = 0.0
    accesses: List[int] = field(default_factory=list)
    division_proofs: list = field(default_factory=list)
    arith: str = "bv"
    prop: str = "address"             # address | bounds
    cause: str = ""                   # counterexample: overflow | formula | allocation | num_records | "" (unclassified)
    overflow: list = field(default_factory=list)   # addrsim.prove.wraps.WrapSite, first one first
    smt2: str = ""                    # path of the SMT-LIB2 file of an undecided obligation
    loops: bool = False               # proved for every iteration of the loops that access the buffer
    offset_sym: object = None         # sympy: extracted byte offset in kernel-argument terms (display, diff)
    shape_offset_sym: object = None   # sympy: the same in shape terms, the layout's contract substituted
    problem: object = None            # the models.Problem the check was decided over
    cases: list = field(default_factory=list)   # (Target, conds, claim, address, address at (0, 0)) per query
    failing: object = None            # the case whose query was refuted (counterexample)
    witness: object = None            # addrsim.prove.domain.Witness of a proved check
    routing: object = None            # addrsim.prove.domain.Routing: does the host reach a failing shape?
    unreachable: list = field(default_factory=list)   # the assumptions that exclude every shape


# ----------------------------------------------------------------------------- set-up

def initial_machine(kernel: Kernel, arch: str, ms: ModelSet) -> Tuple[SymbolicLane, Sym]:
    """The symbolic wave at kernel entry: kernarg pointer, workgroup ids and packed
    work-item ids where the kernel descriptor puts them."""
    st = kernel.initial_state(arch)
    lane = Sym(LANE, 32, "lane")
    args = {}
    ptrs = pointer_args(ms, kernel)
    for a in kernel.args:
        if a.name == "pad" or a.name in args:
            continue
        if a.name in ptrs:
            args[a.name] = X.zext(Sym(a.name, 48, "ptr"), 64)
        else:
            args[a.name] = Sym(a.name, 8 * a.size, "arg")
    kp = Sym("kernarg_ptr", 48, "ptr")
    layout = arg_layout(ms, kernel)
    m = SymbolicLane(layout, args, X.zext(kp, 64), kernel.kernarg_segment_size, lane_sym=lane)
    m.sgpr[st.kernarg_sgpr] = X.extract(kp, 31, 0)
    m.sgpr[st.kernarg_sgpr + 1] = X.zext(X.extract(kp, 47, 32), 32)
    grid = grid_symbols(ms)
    for ax, reg in st.workgroup_id_sgpr.items():
        m.sgpr[reg] = grid[ax]
    m.vgpr[("v", 0)] = [lane]   # x in bits 0-9; y, z are 0 (one work-item id enabled or size 1)
    return m, lane


def concrete_machine(kernel: Kernel, arch: str, ms: ModelSet, argvals: Dict[str, int],
                     ids: Dict[str, int], wave: int) -> ConcreteLanes:
    st = kernel.initial_state(arch)
    layout = arg_layout(ms, kernel)
    args = {}
    for name, _, size in layout:
        if name != "pad" and name in argvals:
            args[name] = Const(argvals[name], 8 * size)
    m = ConcreteLanes(layout, args, Const(KERNARG_PTR, 64), kernel.kernarg_segment_size)
    m.sgpr[st.kernarg_sgpr] = Const(KERNARG_PTR & 0xFFFFFFFF, 32)
    m.sgpr[st.kernarg_sgpr + 1] = Const(KERNARG_PTR >> 32, 32)
    grid = grid_symbols(ms)
    for ax, reg in st.workgroup_id_sgpr.items():
        m.sgpr[reg] = Const(ids.get(grid[ax].name, 0), 32)
    m.vgpr[("v", 0)] = [Const(wave * 64 + i, 32) for i in range(64)]
    return m


class CaseSplitCap(Exception):
    """More select conditions than :func:`leaves` splits: the check must be unknown."""


def leaves(e: Expr, limit: int = 4) -> List[Tuple[List[Tuple[Expr, int]], Dict[int, Expr]]]:
    """Case split of ``e`` on the conditions of its ``ite`` nodes that choose between
    different pointer arguments, or between a modelled value and data (where two paths
    merged): a list of (assignment, replacement map) pairs, at most
    2**limit of them."""
    conds, seen = [], set()
    for n in X.walk(e):
        if isinstance(n, X.Op) and n.op == "ite" and id(n.args[0]) not in seen \
                and (pointers_in(n.args[1]) != pointers_in(n.args[2])
                     or bool(opaque_in(n.args[1])) != bool(opaque_in(n.args[2]))):
            # only selects between buffers matter (a V# chosen among pointer arguments)
            seen.add(id(n.args[0]))
            conds.append(n.args[0])
    if len(conds) > limit:
        raise CaseSplitCap(f"the address selects among {len(conds)} conditions, more than the {limit} "
                           f"case splits addrsim checks")
    out = []
    for bits in product((1, 0), repeat=len(conds)):
        out.append(([(c, b) for c, b in zip(conds, bits)], {id(c): Const(b, 1) for c, b in zip(conds, bits)}))
    return out


def replace(e: Expr, repl: Dict[int, Expr], memo=None) -> Expr:
    memo = {} if memo is None else memo
    if id(e) in repl:
        return repl[id(e)]
    if id(e) in memo:
        return memo[id(e)]
    if isinstance(e, X.Op):
        r = X.rebuild(e, tuple(replace(a, repl, memo) for a in e.args))
    else:
        r = e
    memo[id(e)] = r
    return r


def pointers_in(e: Expr) -> List[str]:
    """Pointer arguments ``e`` is based on (names), not counting arrays it only reads values
    from (the first operand of a ``sel``)."""
    out, seen, stack = set(), set(), [e]
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        if isinstance(n, Sym):
            if n.kind == "ptr" and n.name != "kernarg_ptr":
                out.add(n.name)
        elif isinstance(n, X.Op):
            stack.extend(n.args[1:] if n.op == "sel" else n.args)
    return sorted(out)


def opaque_in(e: Expr) -> List[str]:
    return sorted({s.note for s in X.symbols(e).values() if s.kind == "opaque"})


# ----------------------------------------------------------------------------- per kernel

@dataclass
class Target:
    """One access of the buffer: the address with the V# case fixed to that buffer."""

    access: Access
    conds: List[Expr]
    address: Expr


def targets_for(ex: Exploration, ptr: str) -> List[Target]:
    """Accesses whose V# base is (on some case of its selects) the pointer argument ``ptr``;
    cached on the exploration."""
    cache = ex.__dict__.setdefault("_targets", {})
    if ptr not in cache:
        cache[ptr] = _targets_for(ex, ptr)
    return cache[ptr]


def _targets_for(ex: Exploration, ptr: str) -> List[Target]:
    out = []
    for acc in ex.accesses:
        if ptr not in acc.first or ptr not in X.symbols(acc.base):
            continue               # only the first access of the buffer on each path is checked
        try:
            cases = leaves(acc.address)
        except CaseSplitCap as e:  # not checked: check() makes the verdict unknown
            ex.__dict__.setdefault("_capped", {}).setdefault(ptr, f"access at {acc.instr.addr:#x}: {e}")
            continue
        for assign, repl in cases:
            memo = {}
            base = replace(acc.base, repl, memo)
            if pointers_in(base) != [ptr]:
                continue
            conds = [c if b else X.bnot(c) for c, b in assign]
            t = Target(acc, list(acc.path) + conds + [acc.active], replace(acc.address, repl, memo))
            if len(cases) > 1 and opaque_in(t.address) and not _feasible(t.conds):
                continue          # a case of a merged select that this path cannot take
            out.append(t)
    return out


def _feasible(conds: List[Expr]) -> bool:
    s = z3.Solver()
    s.set("timeout", 2000)
    memo, vs = {}, {}
    for c in conds:
        if isinstance(c, Const):
            if c.value == 0:
                return False
            continue
        s.add(holds_bv(c, memo, vs))
    return s.check() != z3.unsat


def check(kernel: Kernel, arch: str, code: List[Instr], ex: Exploration, ms: ModelSet, buffer: str, layout: str,
          bounds: Dict[str, Tuple[int, int]] = None, timeout_ms: int = 10000, cache: Optional[dict] = None,
          min_budget_s: float = None, check_budget_s: float = None, arith: str = "bv",
          smt_dir: Optional[str] = None, memory_gib: Optional[float] = None, prop: str = "address",
          routed: Optional[str] = None) -> Check:
    """Verdict for ``buffer`` in ``layout`` (see the module docstring for the claim).

    ``prop`` "address" (the module docstring's claim) or "bounds": every checked access of
    the buffer, for every shape, coordinate and lane, passes the V# range check (record
    index, or byte offset plus size, below num_records) and lies inside the tensor's
    allocation [pointer, pointer + extent) (extent in bytes from the model's ``extent``).

    ``arith`` "bv" (hardware arithmetic; a counterexample is then classified as an overflow
    when int mode proves the same claim) or "int" (unbounded integers, addrsim.backends.ideal).
    ``smt_dir``: where an undecided obligation is written as SMT-LIB2 (None: not written).
    ``memory_gib``: device memory (GiB) that bounds the shapes, default the architecture's.

    ``cache`` (optional, shared across calls) maps a structural hash of each query to its
    decision, so identical address computations in sibling kernels are decided once;
    ``min_budget_s`` bounds counterexample minimisation (default MIN_BUDGET_S) and
    ``check_budget_s`` the whole check (default CHECK_BUDGET_S; past it: "unknown").
    ``routed``: the host entry point whose routing joins the domain (None: the kernel's own
    domain, :data:`addrsim.model.models.KERNEL_LAYERS`).  A "proved" from here is not final: the
    caller (:func:`addrsim.prove.domain.settle`) asks for a witness, or makes it "unreachable"."""
    t0 = time.time()
    res = Check(buffer, layout, "unknown", arith=arith, prop=prop)
    ptr = buffer_pointer(ms, kernel, buffer)
    lane = Sym(LANE, 32, "lane")
    prob = build_problem(ms, kernel, layout, lane, bounds, arch, memory_gib, routed)
    res.problem = prob
    res.expected = prob.expected_text.get(buffer, "")
    tg = targets_for(ex, ptr)
    capped = ex.__dict__.get("_capped", {}).get(ptr)
    if capped:
        res.time_s = round(time.time() - t0, 3)
        res.verdict, res.reason = "unknown", capped
        return res
    bad_ends = [e for e in ex.ends if e.reason in ("unsupported", "budget") and ptr not in e.reached]
    back_ends = [e for e in ex.ends if e.reason == "backedge" and ptr not in e.reached]

    def done(verdict, reason=None):
        res.verdict, res.reason, res.time_s = verdict, reason, round(time.time() - t0, 3)
        return res

    if bad_ends:
        return done("unsupported", "; ".join(sorted({e.detail for e in bad_ends}))[:500])
    if getattr(ex, "bad_branches", None):
        # a branch into the middle of an instruction or out of the kernel: the loops and paths
        # addrsim sees are not the ones the hardware runs
        return done("unsupported", "branch target is not the start of an instruction of this kernel: "
                    + "; ".join(ex.bad_branches[:3]))
    # a path that loops back before touching the buffer is covered by the loop's exit (explored
    # with what the body writes forgotten) unless the buffer is accessed inside that loop,
    # where iterations after the first could touch it first
    in_loop = [e for e in back_ends if e.loop and any(e.loop[0] <= t.access.instr.addr <= e.loop[1] for t in tg)]
    if in_loop:
        return done("unsupported", f"{ptr} is first accessed inside the loop {in_loop[0].loop[0]:#x}-"
                                   f"{in_loop[0].loop[1]:#x} on a path whose first iteration skips it")
    if not tg:
        return done("unsupported", f"no buffer access whose V# base is the {ptr} argument was found")
    res.accesses = sorted({t.access.instr.addr for t in tg})
    notes = sorted({n for t in tg for n in t.access.notes})
    if notes:
        return done("unsupported", "; ".join(notes))
    tg, proofs, left = _prove_divisions(tg, prob, ex, ptr)
    if left:
        return done("unsupported", "; ".join(sorted(set(left)))[:500])
    res.division_proofs = proofs
    opq = sorted({n for t in tg for n in opaque_in(t.address)})
    if opq:
        return done("unsupported", "address depends on values addrsim does not model: " + "; ".join(opq)[:400])

    grid = prob.grid
    bid, hid = grid["z"].name, grid["y"].name
    zero_ids = {bid: Const(0, 32), hid: Const(0, 32)}
    if buffer not in prob.expected:
        return done("unsupported", f"layout {layout} defines no strides for the tensor of buffer {buffer}")
    expected = prob.expected[buffer]
    if prop == "bounds":
        if buffer not in prob.extent:
            return done("unsupported", f"the models give no allocation extent of {buffer} for family "
                                       f"{prob.family} in layout {layout}")
        expected = prob.extent[buffer]
        if any(opaque_in(t.access.in_range) for t in tg):
            return done("unsupported", "the V# range check depends on values addrsim does not model")
    if not _in_loop(code, ex, ptr):
        # exactness of the arguments this buffer's addresses and paths read, not of the others
        used = set()
        for t in tg:
            used |= set(X.symbols(t.address)) | set(X.symbols(t.access.in_range))
            for c in t.conds:
                used |= set(X.symbols(c))
        prob.restrict_exact(used)
    env = {k: v for k, v in prob.kernargs.items() if not any(s.kind == 'ptr' for s in X.symbols(v).values())}
    env.update(prob.arrays)      # pointer arguments that hold a sequence-start array
    undeclared = sorted({n.args[0].name for t in tg for n in X.walk(t.address)
                         if isinstance(n, X.Op) and n.op == "sel" and n.args[0].name not in prob.arrays})
    if undeclared:
        return done("unsupported", "address depends on memory the models do not describe: loads from "
                    + ", ".join(undeclared))
    res.extracted, res.difference, res.offset_sym, res.shape_offset_sym = formulas(tg[0].address, zero_ids, prob,
                                                                                 buffer, symbolic=True)
    ranges = _ranges(prob)
    seen_keys = set()
    budget_s = CHECK_BUDGET_S if check_budget_s is None else check_budget_s
    deadline = t0 + budget_s
    # one query per access target (each must hold)
    for t in tg:
        a = X.substitute(t.address, env)
        a00 = X.substitute(a, zero_ids)
        if prop == "bounds":
            sl = prob.slices.get(buffer)
            claim = _bounds_claim(t, a, env, ptr, expected, prob.expected[buffer] if sl is not None else None, sl)
        else:
            claim = X.eq(a, X.add(a00, expected))
        conds = [X.substitute(c, env) for c in t.conds] + list(prob.domain)
        conds += array_facts(conds + [claim, expected], prob)
        res.cases.append((t, conds, claim, a, a00))
        key = query_key((arith, prop), claim, conds)
        if key in seen_keys:
            continue
        seen_keys.add(key)
        hit = cache.get(key) if cache is not None else None
        if hit is None:
            left_ms = int((deadline - time.time()) * 1000)
            if left_ms < 200:
                why = (f"check budget of {budget_s:g} s spent before every access was decided "
                       f"({len(seen_keys) - 1} of {len(tg)} queries done)")
                return done("unknown", why + _dump(smt_dir, kernel, buffer, layout, res,
                                                  lambda: Query(conds, claim, ranges, timeout_ms, arith).smt2()))
            v, m_, w_, mini, q = _decide(conds, claim, ranges, min(timeout_ms, left_ms), prob, min_budget_s, arith)
            hit = (v, m_, w_, mini, q.smt2() if q is not None else None)
            if cache is not None:
                cache[key] = hit
        verdict, model, why, minimal, smt_text = hit
        if verdict == "proved":
            continue
        if verdict == "unknown":
            return done("unknown", why + _dump(smt_dir, kernel, buffer, layout, res, lambda: smt_text))
        rkey = ("replay", arith) + key
        cex = cache.get(rkey) if cache is not None else None
        if cex is None:
            if prop == "bounds":
                cex = _bounds_counterexample(kernel, arch, code, ms, prob, t, model, a, env, ptr, expected,
                                             conds + [claim], arith)
            elif arith == "int":
                cex = _ideal_counterexample(prob, model, t, a, a00, expected, conds + [claim])
            else:
                cex = replay(kernel, arch, code, ms, prob, t, model, a, a00, expected, buffer)
            if cache is not None:
                cache[rkey] = cex
        elif not isinstance(cex, str):
            # the same query (same extracted semantics and conditions) was replayed on a
            # sibling kernel; this kernel's access is at its own address
            cex = replace_dc(cex, access=t.access.instr.addr, replayed_on=cex.replayed_on or "a sibling kernel")
        if isinstance(cex, str):
            return done("unknown", cex)
        res.failing = res.cases[-1]
        res.counterexample = cex
        cex.minimal = minimal
        cex.memory_bytes = _memory_needed(prob, cex)
        why = f"access at {t.access.instr.addr:#x} ({t.access.instr.text})"
        if prop == "bounds":
            res.cause = cex.cause
            why += {"allocation": f": inside the V#'s num_records but outside the allocation of {buffer} "
                                  f"(offset {cex.extracted}, extent {cex.expected} bytes)",
                    "num_records": f": inside the allocation of {buffer} (offset {cex.extracted} of {cex.expected} "
                                   f"bytes) but past the V#'s num_records: reads return 0, writes are dropped"
                    }.get(cex.cause, "")
        elif arith == "bv":
            res.cause, res.overflow = _classify(conds, claim, ranges, timeout_ms, deadline, cache, key, t, prob,
                                                model, getattr(ex, "origin", None) or {})
            if res.cause == "overflow":
                first = res.overflow[0].describe() if res.overflow else "no single wrapping node found"
                why += f"; OVERFLOW: the check is proved in int mode, and fails in bv because of {first}"
            elif res.cause == "formula":
                why += "; the formula is wrong over the integers too (int mode refutes it)"
        else:
            res.cause = "formula"
        return done("counterexample", why)
    if prop == "address":
        lc = _loop_check(kernel, arch, code, ex, ms, prob, ptr, env, expected, zero_ids, ranges, timeout_ms,
                         deadline, cache, buffer, arith)
        if lc is not None:
            verdict, why, cex = lc
            if cex is not None:
                res.counterexample = cex
                cex.memory_bytes = _memory_needed(prob, cex)
                res.cause = "loop"
            return done(verdict, why + (_dump(smt_dir, kernel, buffer, layout, res, lambda: "")
                                        if verdict == "unknown" else ""))
        res.loops = True
    return done("proved")


def query_key(tag: tuple, claim: Expr, conds: List[Expr]) -> tuple:
    """Structural key of a query (``tag``, the claim, the conditions in any order): the key of
    the cache of decided queries, shared by sibling kernels."""
    hm: dict = {}
    return tag + (X.shash(claim, hm),) + tuple(sorted(X.shash(c, hm) for c in conds))


def _in_loop(code, ex, ptr) -> bool:
    """Whether some loop of the kernel accesses the buffer at ``ptr`` (its later iterations may
    read any argument: every exactness assumption is then kept)."""
    from addrsim.engine.loops import loops_of
    pcs = [a.instr.addr for a in ex.accesses if ptr in X.symbols(a.base)]
    return any(head <= pc <= end for head, end in loops_of(code) for pc in pcs)


def _loop_check(kernel, arch, code, ex, ms, prob, ptr, env, expected, zero_ids, ranges, timeout_ms, deadline,
                cache, buffer, arith):
    """Every iteration of each loop that accesses ``buffer`` (addrsim.engine.loops): None when the
    induction proves it, else (verdict, reason, Counterexample or None)."""
    from addrsim.engine.loops import generic_iteration, loops_of, obligations
    ptr_accs = [a.instr.addr for a in ex.accesses if ptr in X.symbols(a.base) and pointers_in(a.base) == [ptr]]
    first_pcs = frozenset(t.access.instr.addr for t in targets_for(ex, ptr))   # proved for iteration 1
    bodies = ex.__dict__.setdefault("_bodies", {})
    for head, end in loops_of(code):
        if not any(head <= pc <= end for pc in ptr_accs):
            continue
        if head in getattr(ex, "capped_heads", ()):
            return "unknown", (f"loop {head:#x}-{end:#x} is entered in more than {len(ex.heads.get(head, []))} "
                               f"states; only those were checked"), None
        for k, entry in enumerate(ex.heads.get(head, [])):
            if (head, end, k) not in bodies:
                bodies[(head, end, k)] = generic_iteration(code, entry, head, end, lambda a: pointers_in(a.base))
            ind = obligations(bodies[(head, end, k)], ptr, pointers_in, zero_ids, expected, env, first_pcs)
            if ind.verdict == "unsupported":
                return "unsupported", ind.reason, None
            if ind.verdict == "capped":
                return "unknown", ind.reason, None
            for ob in ind.obligations:
                v, model, why, what, pc = None, None, "", ob[2], ob[3]
                while ob is not None:
                    conds, claim, what, pc = ob[:4]
                    conds = conds + list(prob.domain)
                    conds += array_facts(conds + [claim], prob)
                    key = query_key(("loop", arith), claim, conds)
                    hit = cache.get(key) if cache is not None else None
                    if hit is None:
                        left_ms = int((deadline - time.time()) * 1000)
                        if left_ms < 200:
                            return "unknown", f"check budget spent before the loop {head:#x}-{end:#x} was proved", None
                        v_, model_, why_, _ = solve(conds, claim, ranges, min(timeout_ms, left_ms), arith)
                        hit = (v_, model_, why_)
                        if cache is not None:
                            cache[key] = hit
                    v, model, why = hit
                    ob = ob[4] if v != "proved" and len(ob) > 4 else None
                if v == "proved":
                    continue
                if v == "unknown":
                    return "unknown", f"loop {head:#x}-{end:#x}, {what}: {why}", None
                # refuted for some loop-carried values: confirm on the concrete interpreter
                target_pc = pc or next(p for p in ptr_accs if head <= p <= end)
                cex = _confirm_loop(kernel, arch, code, ms, prob, model, target_pc, expected, buffer, deadline)
                if cex is not None:
                    return "counterexample", (f"iteration {cex.iteration}: the {what} in the loop "
                                              f"{head:#x}-{end:#x} is not the same for every (batch_id, head_id)"), cex
                return "unknown", (f"loop {head:#x}-{end:#x}: the {what} is not provably the same for every "
                                   f"(batch_id, head_id) over all loop-carried values, and replaying the first "
                                   f"{REPLAY_ITERATIONS} iterations found no wrong address"), None
    return None


REPLAY_ITERATIONS = 4


def _confirm_loop(kernel, arch, code, ms, prob, model, pc, expected, buffer, deadline=None):
    """A concrete counterexample in a later iteration: the model's shape and ids, then the
    same with longer sequences (more iterations), each checked against the domain; stops at
    ``deadline`` (time.time() value)."""
    grid = prob.grid
    ids = {grid["z"].name, grid["y"].name, grid["x"].name, LANE}
    base = {k: v for k, v in model.items() if k in SHAPE_VARS or k in ids or k.endswith("[]")}
    bid, hid = base.get(grid["z"].name, 0), base.get(grid["y"].name, 0)
    small = dict(base, batch=bid + 1, nhead_q=hid + 1, nhead_k=1)
    tiny = dict(small, seqlen_k=small.get("seqlen_q", 1), **{grid["x"].name: 0})
    # the solver's ids need not show the fault (a step that depends on head_id only is the
    # same at head 0 as in workgroup (0, 0)): also workgroup (1, 1) of a 2 x 2 grid
    other = dict(tiny, batch=2, nhead_q=2, **{grid["z"].name: 1, grid["y"].name: 1})
    tries = []
    for t0 in (tiny, other, small, base):  # the smallest workgroup grids first, then the model's
        for n in (0, 256, 1024):          # then longer sequences (more iterations)
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
    fake = Target(Access(Instr(pc, "", (), (), f"access at {pc:#x}"), "load", (), (), Const(0, 64), Const(0, 14),
                         Const(0, 32), Const(0, 64), Const(1, 1), False), [], Const(0, 64))
    for m in tries:
        env = dict({v: prob.bounds[v][0] for v in SHAPE_VARS}, **m)
        env.update(prob.fixed)
        try:
            if not all(X.evaluate(c, env) == 1 for c in prob.domain):
                continue
        except KeyError:
            continue
        for n in range(2, REPLAY_ITERATIONS + 1):
            if deadline is not None and time.time() > deadline:
                return None
            r = replay(kernel, arch, code, ms, prob, fake, env, None, None, expected, buffer, occurrence=n)
            if isinstance(r, Counterexample):
                r.replayed_on = f"this kernel, iteration {n}"
                r.iteration = n
                r.minimal = False       # the first failing shape found, not minimised
                return r
            if "did not reach" in r or "not replayed" in r:
                break
    return None


def _dump(smt_dir, kernel, buffer, layout, res, text_fn) -> str:
    """Write an undecided obligation as SMT-LIB2 under ``smt_dir``; the reason's suffix."""
    if not smt_dir:
        return ""
    import re
    from pathlib import Path
    try:
        text = text_fn()
        if not text:
            return ""
        d = Path(smt_dir)
        d.mkdir(parents=True, exist_ok=True)
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{kernel.symbol}.{buffer}.{layout}.{res.arith}") + ".smt2"
        (d / name).write_text(text)
        res.smt2 = str(d / name)
        return f" (obligation written to {d / name})"
    except OSError as e:
        return f" (obligation not written: {e})"


def _classify(conds, claim, ranges, timeout_ms, deadline, cache, key, t, prob, model, origin):
    """Cause of a bv counterexample: ("overflow", wrap sites) when int mode proves the
    claim, ("formula", []) when int mode refutes it too, ("", []) when undecided."""
    ckey = ("int",) + key
    v = cache.get(ckey) if cache is not None else None
    if v is None and _violates(conds, claim, model, kept_wraps(conds + [claim])):
        v = "refuted"        # the counterexample itself breaks the claim over the integers: no solver needed
        if cache is not None:
            cache[ckey] = v
    if v is None:
        # its own budget: minimisation may have spent the check's, and the int query is
        # usually easy (no wraps)
        left_ms = int((deadline - time.time()) * 1000)
        v = Query(conds, claim, ranges, min(timeout_ms, max(left_ms, CLASSIFY_MS)), "int").solve()[0]
        if cache is not None:
            cache[ckey] = v
    if v == "refuted":
        return "formula", []
    if v != "proved":
        return "", []
    env = _env([t.address], model)
    env.update({k: v for k, v in model.items() if not k.endswith("[]")})
    env.update(prob.fixed)
    for parg, arr in prob.arrays.items():      # reads through a sequence-start pointer argument
        env[parg + "[]"] = model.get(arr.name + "[]", {})
    args = {k: e for k, e in prob.kernargs.items() if not any(s.kind == "ptr" for s in X.symbols(e).values())}
    try:
        sites = wrap_sites(t.address, args, env, origin)
    except Exception:   # the explanation must never hide the verdict
        sites = []
    return "overflow", sites


def _memory_needed(prob: Problem, cex) -> int:
    """Bytes of device memory the family's tensors take at the counterexample's shape (0 if
    the models give no sizes)."""
    if prob.memory is None:
        return 0
    env = dict({v: prob.bounds[v][0] for v in SHAPE_VARS}, **cex.shape)
    try:
        return X.evaluate(prob.memory, env)
    except KeyError:
        return 0


def _within(a: Expr, size: int, lo: Expr, n: Expr) -> Expr:
    """1-bit: [a, a + size) lies inside [lo, lo + n) (bytes, 64-bit)."""
    return X.band(X.ule(lo, a), X.ule(X.add(a, Const(size, 64)), X.add(lo, n)))


def _bounds_claim(t: Target, a: Expr, env, ptr: str, extent: Expr, slice_base=None, slice_n=None) -> Expr:
    """1-bit: an access that passes the V# range check lies inside the allocation
    [ptr, ptr + extent), and an access inside the workgroup's own (batch, head) slice
    [ptr + slice_base, + slice_n) passes the range check (bytes, 64-bit).  The first fails
    on a real out-of-allocation access; the second when tensor data the workgroup owns is
    silently read as 0 (or a write dropped).  An access outside the slice that the V#
    clamps (padding rows) is allowed."""
    p = X.zext(Sym(ptr, 48, "ptr"), 64)
    in_r = X.substitute(t.access.in_range, env)
    ok = X.bor(X.bnot(in_r), _within(a, t.access.size, p, extent))
    if slice_base is not None:
        own = _within(a, t.access.size, X.add(p, slice_base), slice_n)
        ok = X.band(ok, X.bor(X.bnot(own), in_r))
    return ok


def _bounds_counterexample(kernel, arch, code, ms, prob, t, model, a, env, ptr, extent, exprs, arith):
    """A bounds counterexample, replayed on the concrete interpreter (bv) or evaluated exactly
    (int): ``extracted`` is the access's byte offset from the buffer's pointer, ``expected``
    the allocation's extent in bytes."""
    grid = prob.grid
    menv = _env(exprs, model)
    keep = kept_wraps(exprs) if arith == "int" else None
    ev = (lambda e: ideal_evaluate(e, menv, keep, {})) if keep is not None else (lambda e: X.evaluate(e, menv))
    try:
        pval = menv.get(ptr, 0)
        off = ev(a) - pval if keep is not None else (ev(a) - pval) & X.mask(64)
        ext = ev(extent)
        in_r = ev(X.substitute(t.access.in_range, env))
    except KeyError as e:
        return f"counterexample could not be evaluated (no value for {e})"
    inside = int(0 <= off and off + t.access.size <= ext)
    if in_r and inside:
        return "solver model does not violate the bounds claim when evaluated (engine bug)"
    shape = prob.shape_of(model)
    ids = {s.name: model.get(s.name, 0) for s in grid.values()}
    args = {k: X.evaluate(e, menv) for k, e in prob.kernargs.items()
            if not any(s.kind == "ptr" for s in X.symbols(e).values()) and all(n in menv for n in X.symbols(e))}
    replayed = "exact evaluation (int mode)" if keep is not None else ""
    if keep is None:
        # concrete replay of the one workgroup: the same address, the same range check
        full = {v: model.get(v, prob.bounds[v][0]) for v in SHAPE_VARS}
        full.update(prob.fixed)
        argvals = dict(args)
        pargs = pointer_args(ms, kernel)
        for i, a_ in enumerate(kernel.args):
            if a_.name in pargs:
                argvals[a_.name] = model.get(a_.name, (0x100000000000 * (i + 1)) & (PTR_LIMIT - 1))
        argvals[ptr] = pval
        memory: Dict[int, int] = {}
        regions = []
        for arg, arr in prob.arrays.items():
            if arg in argvals:
                for o, val in (model.get(arr.name + "[]") or {}).items():
                    memory[(argvals[arg] + o) & X.mask(64)] = val
                regions.append((argvals[arg], argvals[arg] + 4 * (full.get("batch", 1) + 1)))
        lane = model.get(LANE, 0)
        try:
            m = concrete_machine(kernel, arch, ms, argvals, ids, lane // 64)
            m.memory, m.regions = memory, regions
            accs = run_concrete(code, m, t.access.instr.addr)
            if not accs:
                return f"concrete replay did not reach the access at {t.access.instr.addr:#x}"
            got = accs[lane % 64]
            if not isinstance(got.address, Const) or not isinstance(got.in_range, Const):
                return "concrete replay produced a non-constant address"
            if ((got.address.value - pval) & X.mask(64)) != off or got.in_range.value != in_r:
                return (f"bounds counterexample did not replay: offset {off} / in range {in_r} evaluated, "
                        f"{(got.address.value - pval) & X.mask(64)} / {got.in_range.value} concretely (engine bug)")
        except ReplayBudget as e:
            replayed = f"not replayed: {e}; evaluated on the extracted semantics"
        except Unsupported as e:
            return f"counterexample could not be replayed concretely: {e}"
    cex = Counterexample(shape, {"batch_id": ids[grid["z"].name], "head_id": ids[grid["y"].name],
                                 grid["x"].name: ids[grid["x"].name]}, args, off, ext, model.get(LANE, 0),
                         t.access.instr.addr, True, {}, replayed)
    cex.cause = "num_records" if not in_r else "allocation"
    return cex


def _ideal_counterexample(prob, model, t, a, a00, expected, exprs):
    """An int-mode counterexample, checked by exact evaluation (the hardware does not compute
    int mode, so there is nothing to replay on the concrete interpreter)."""
    grid = prob.grid
    keep = kept_wraps(exprs)
    menv = _env([a, a00, expected], model)
    try:
        memo: dict = {}
        got = ideal_evaluate(a, menv, keep, memo) - ideal_evaluate(a00, menv, keep, memo)
        exp = ideal_evaluate(expected, menv, keep, memo)
    except KeyError as e:
        return f"counterexample could not be evaluated (no value for {e})"
    if got == exp:
        return "int-mode solver model does not violate the claim when evaluated (engine bug)"
    shape = prob.shape_of(model)
    args = {k: X.evaluate(e, menv) for k, e in prob.kernargs.items()
            if not any(s.kind == "ptr" for s in X.symbols(e).values()) and all(n in menv for n in X.symbols(e))}
    arrays = {k[:-2]: {off // 4: v for off, v in sorted(d.items())} for k, d in model.items() if k.endswith("[]")}
    ids = {s.name: model.get(s.name, 0) for s in grid.values()}
    return Counterexample(shape, {"batch_id": ids[grid["z"].name], "head_id": ids[grid["y"].name],
                                  grid["x"].name: ids[grid["x"].name]}, args, got, exp, model.get(LANE, 0),
                          t.access.instr.addr, True, arrays, "exact evaluation (int mode)")


def _prove_divisions(tg: List[Target], prob: Problem, ex: Exploration, ptr: str):
    """Targets with their float-reciprocal divisions proved exact and replaced by udiv
    (addrsim.prove.idioms); cached on the exploration per pointer and ranges."""
    ranges = _ranges(prob)
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
    key = (ptr, tuple(sorted((k, v) for k, v in ranges.items() if k in used)))
    cache = ex.__dict__.setdefault("_divisions", {})
    if key in cache:
        return cache[key]
    out, proofs, left = [], [], []
    for t in tg:
        a, p1, l1 = exact_divisions(t.address, ranges)
        conds = []
        for c in t.conds:
            c2, p2, _ = exact_divisions(c, ranges)   # float left in a condition is abstracted
            conds.append(c2)
            p1 += p2
        out.append(Target(t.access, conds, a))
        proofs += p1
        left += l1
    uniq = {(p.dividend, p.divisor): p for p in proofs}
    cache[key] = (out, list(uniq.values()), left)
    return cache[key]


def _decide(conds, claim, ranges, timeout_ms, prob, min_budget_s, arith="bv"):
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


def _ranges(prob: Problem) -> Dict[str, Tuple[int, int]]:
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
            if mdl is not None and _violates(self.conds, self.claim, mdl, self.keep if self.arith == "int" else None):
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
            if _violates(self.conds, self.claim, mdl):
                return "refuted", mdl, None
            return "unknown", None, "solver model does not violate the claim when evaluated (engine bug)"
        return "unknown", None, f"solver gave up ({why}) after {tmo} ms"


def solve(conds: List[Expr], claim: Expr, ranges, timeout_ms: int, arith: str = "bv"):
    """Decide the negated claim once: (verdict, model, reason, Query)."""
    q = Query(conds, claim, ranges, timeout_ms, arith)
    v, m, why = q.solve()
    return v, m, why, q


def _violates(conds, claim, mdl, keep=None) -> bool:
    """Does the model satisfy the conditions and break the claim, by evaluation (``keep``
    given: in int mode, :func:`addrsim.backends.ideal.ideal_evaluate`)?"""
    env = _env(conds + [claim], mdl)
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


def _env(exprs, mdl):
    env = {k: v for k, v in mdl.items() if k.endswith("[]")}
    for e in exprs:
        for s in X.symbols(e).values():
            env.setdefault(s.name, mdl.get(s.name, 0))
    return env


ORDER = ("batch", "nhead_q", "seqlen_q", "nhead_k", "seqlen_k", "hdim_q", "hdim_v", "total_q", "total_k")


CLASSIFY_MS = 3000       # at least this for the int-mode query that classifies a counterexample
FIRST_TRY_MS = 1500      # integer query before range obligations are discharged (then the full timeout)
CHECK_BUDGET_S = 60.0    # wall-clock budget of one check (all its queries), then "unknown"
MIN_BUDGET_S = 4.0       # wall-clock budget of counterexample minimisation per check
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


def replay(kernel, arch, code, ms, prob: Problem, t: Target, model, a, a00, expected, buffer, occurrence: int = 1,
           want_equal: bool = False):
    """Concrete replay of a counterexample; returns a Counterexample or the reason it failed.
    ``occurrence``: compare the n-th execution of the access (a later loop iteration).
    ``want_equal``: replay a *witness* of a proof instead: an addrsim.prove.domain.Witness when the
    concrete offset equals ``expected`` (None: the access only has to be reached), else the
    reason (a string)."""
    grid = prob.grid
    shape = {v: model.get(v, prob.bounds[v][0]) for v in SHAPE_VARS}
    shape.update(prob.fixed)
    env = {k: v for k, v in shape.items()}
    for ax, s in grid.items():
        env[s.name] = model.get(s.name, 0)
    argvals = {}
    for name, e in prob.kernargs.items():
        try:
            argvals[name] = X.evaluate(e, env)
        except KeyError:
            argvals[name] = model.get(name, 0)
    ptrs = {}
    pargs = pointer_args(ms, kernel)
    for i, a_ in enumerate(kernel.args):
        if a_.name in pargs:
            ptrs[a_.name] = (0x100000000000 * (i + 1)) & (PTR_LIMIT - 1)
            argvals[a_.name] = ptrs[a_.name]
    memory: Dict[int, int] = {}
    regions = []
    for arg, arr in prob.arrays.items():
        if arg in ptrs:
            for off, val in (model.get(arr.name + "[]") or {}).items():
                memory[(ptrs[arg] + off) & X.mask(64)] = val
            regions.append((ptrs[arg], ptrs[arg] + 4 * (shape.get("batch", 1) + 1)))
    env.update({k: v for k, v in model.items() if k.endswith("[]")})
    lane = model.get(LANE, 0)
    ids = {s.name: env[s.name] for s in grid.values()}
    ids00 = dict(ids, **{grid["z"].name: 0, grid["y"].name: 0})
    addrs = []
    for idset in (ids, ids00):
        try:
            m = concrete_machine(kernel, arch, ms, argvals, idset, lane // 64)
            m.memory = memory
            m.regions = regions
            accs = run_concrete(code, m, t.access.instr.addr, occurrence=occurrence)
        except ReplayBudget as e:
            if a is None:
                return f"not replayed: {e}"
            if want_equal:      # a proof needs a replayed witness
                return f"witness not replayed: {e} (a loop runs before the access)"
            return _unreplayed(prob, model, shape, env, ids, argvals, ptrs, lane, t, a, a00, expected,
                               f"not replayed: {e} (a loop runs before the access); offsets evaluated "
                               f"on the extracted semantics")
        except Unsupported as e:
            return f"counterexample could not be replayed concretely: {e}"
        if not accs:
            return f"concrete replay did not reach the access at {t.access.instr.addr:#x}" + \
                (f" {occurrence} times" if occurrence > 1 else "")
        av = accs[lane % 64].address
        if not isinstance(av, Const):
            return f"concrete replay produced a non-constant address ({opaque_in(av)})"
        addrs.append(av.value)
    got = (addrs[0] - addrs[1]) & X.mask(64)
    exp = got if expected is None else X.evaluate(expected, dict(env, **{k: v for k, v in ids.items()}))
    if want_equal:
        if got != exp:
            return f"witness did not replay: concrete offset {got}, expected {exp} at {shape} (engine bug)"
        from addrsim.prove.domain import Witness
        return Witness(prob.shape_of(model), {"batch_id": ids[grid["z"].name], "head_id": ids[grid["y"].name],
                               grid["x"].name: ids[grid["x"].name]}, lane, got)
    if got == exp:
        return (f"solver counterexample did not replay: concrete offset {got} equals expected "
                f"at {shape} (engine bug)")
    shown = {k: v for k, v in argvals.items() if k not in ptrs}
    if prob.mode != "group":
        shape = {k: v for k, v in shape.items() if k not in ("total_q", "total_k")}
    arrays = {k[:-2]: {off // 4: v for off, v in sorted(d.items())} for k, d in model.items() if k.endswith("[]")}
    return Counterexample(shape, {"batch_id": ids[grid["z"].name], "head_id": ids[grid["y"].name],
                                  grid["x"].name: ids[grid["x"].name]}, shown, got, exp, lane,
                          t.access.instr.addr, True, arrays)


def witness_tools(kernel, arch, code, ms, res, timeout_ms: int, min_budget_s: Optional[float],
                  cache: Optional[dict] = None):
    """The (decide, replay) pair :func:`addrsim.prove.domain.settle` needs for check ``res``.
    ``cache`` (the check's query cache) keeps each decided model and replayed witness by
    the structural hash of its query, so sibling kernels with the same address computation
    (rtne/rtna/rtz) reuse them: the witness then says it was replayed on a sibling."""
    prob = res.problem
    ranges = _ranges(prob)
    expected = prob.expected.get(res.buffer) if res.prop == "address" else None

    def qkey(tag, conds, claim=None):
        return query_key((tag, arch, res.prop), claim if claim is not None else Const(1, 1), conds)

    def decide(conds):
        key = qkey("witness-model", conds)
        if cache is not None and key in cache:
            return cache[key]
        v, model, why, _, _ = _decide(conds, Const(0, 1), ranges, timeout_ms, prob,
                                      MIN_BUDGET_S if min_budget_s is None else min_budget_s, "bv")
        out = model if v == "refuted" else (None if v == "proved" else f"no witness found: {why}")
        if cache is not None:
            cache[key] = out
        return out

    def rep(case, model):
        t, conds, claim, a, a00 = case
        key = qkey("witness", conds, claim) + (tuple(sorted((k, v) for k, v in model.items()
                                                             if not k.endswith("[]"))),)
        if cache is not None and key in cache:
            w = cache[key]
            if isinstance(w, str) or w.replayed_on != "this kernel":
                return w
            return replace_dc(w, replayed_on="a sibling kernel with the same query (this kernel's access "
                                             f"at {t.access.instr.addr:#x})")
        if not _violates(conds, X.bnot(claim), model):
            w = "witness model breaks the proved claim when evaluated (engine bug)"
        else:
            w = replay(kernel, arch, code, ms, prob, t, model, a, a00, expected, res.buffer, want_equal=True)
        if cache is not None:
            cache[key] = w
        return w
    return decide, rep


def limit_tools(prob: Problem, timeout_ms: int, min_budget_s: Optional[float]):
    """The (decide, memory_of) pair :func:`addrsim.prove.domain.host_limits` needs."""
    ranges = _ranges(prob)

    def decide(conds, claim):
        v, model, why, _, _ = _decide(conds, claim, ranges, timeout_ms, prob,
                                      MIN_BUDGET_S if min_budget_s is None else min_budget_s, "bv")
        return model if v == "refuted" else (None if v == "proved" else f"undecided: {why}")

    def memory_of(shape):
        return _memory_needed(prob, Counterexample(shape, {}, {}, 0, 0, 0, 0))
    return decide, memory_of


def _unreplayed(prob, model, shape, env, ids, argvals, ptrs, lane, t, a, a00, expected, why):
    """A counterexample whose concrete replay is out of budget: the offsets come from
    evaluating the extracted address (the solver model was already checked to violate the
    claim by evaluation)."""
    grid = prob.grid
    menv = _env([a, a00, expected], model)
    try:
        got = (X.evaluate(a, menv) - X.evaluate(a00, menv)) & X.mask(64)
        exp = X.evaluate(expected, menv)
    except KeyError as e:
        return f"counterexample could not be evaluated (no value for {e})"
    shown = {k: v for k, v in argvals.items() if k not in ptrs}
    if prob.mode != "group":
        shape = {k: v for k, v in shape.items() if k not in ("total_q", "total_k")}
    arrays = {k[:-2]: {off // 4: v for off, v in sorted(d.items())} for k, d in model.items() if k.endswith("[]")}
    return Counterexample(shape, {"batch_id": ids[grid["z"].name], "head_id": ids[grid["y"].name],
                                  grid["x"].name: ids[grid["x"].name]}, shown, got, exp, lane,
                          t.access.instr.addr, True, arrays, why)


# ----------------------------------------------------------------------------- formulas

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
        off = sympy.expand(to_sympy(address) - to_sympy(X.substitute(address, zero_ids)))
        full = X.substitute(address, {k: v for k, v in prob.kernargs.items() if v.width != 64 or k not in X.symbols(v)})
        full_off = sympy.expand(to_sympy(full) - to_sympy(X.substitute(full, zero_ids)))
        diff = sympy.expand(full_off - to_sympy(prob.expected[buffer]))
        out = (str(off), str(diff), None, None)
        if symbolic:               # readings without wraps: multiword values whole (addrsim diff)
            from addrsim.backends.sympy_text import to_sympy_nowrap
            ptr0 = {n: X.Const(0, v.width) for n, v in X.symbols(full).items() if v.kind == "ptr"}
            ideal = lambda e: to_sympy_nowrap(X.substitute(e, ptr0))  # noqa: E731  # offsets: any base, 0
            out = (str(off), str(diff), sympy.expand(ideal(address) - ideal(X.substitute(address, zero_ids))),
                   sympy.expand(ideal(full) - ideal(X.substitute(full, zero_ids))))
    except Exception as e:  # formula display must never hide a verdict
        out = (f"<formula not shown: {type(e).__name__}>", "", None, None)
    return out if symbolic else out[:2]


FORMULA_NODES = 400
