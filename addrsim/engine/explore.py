"""Path exploration: symbolic execution from the kernel entry to the buffer accesses, and
the concrete interpreter used to replay counterexamples.

The symbolic explorer follows every path (both sides of a scalar branch whose condition
is not decided), pruning paths whose condition Z3 finds unsatisfiable.  A path ends at
``s_endpgm``, at a loop back edge (a branch to an instruction that dominates it,
:mod:`addrsim.engine.cfg`: only the first iteration is covered, and that is reported; every
edge out of a loop's body continues with what the body writes forgotten), at an instruction without semantics that it cannot step over
(control flow it does not understand), or when every buffer of interest has been accessed
on it.  Nothing is skipped silently: every early end is returned with its reason.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, List, Optional, Set, Tuple

import z3

from addrsim.ir import expr as X
from addrsim.loader.disasm import Instr
from addrsim.ir.expr import Const, Expr, Sym
from addrsim.isa.control import BranchUnsupported, condition, is_branch
from addrsim.isa.table import lookup
from addrsim.engine.cfg import cfg_of
from addrsim.engine.machine import (SKIPPED, Access, ConcreteLanes, LaneMask, Machine, PathEnd, SliceMiss,
                                    SymbolicLane, Unsupported)
from addrsim.engine.slice import OPAQUE, RUN, ReplayPlan, replay_plan
from addrsim.backends.z3_bv import holds_bv
from addrsim.backends.z3_run import RU, Isolated

MAX_PATHS = 512
MAX_STEPS = 400_000


@dataclass
class Exploration:
    """Result of :func:`explore`: accesses found and how each path ended."""

    accesses: List[Access] = field(default_factory=list)
    ends: List[PathEnd] = field(default_factory=list)
    steps: int = 0
    paths: int = 0
    merges: int = 0
    loop_exits: int = 0
    origin: dict = field(default_factory=dict)   # id(node) -> (node, pc, text) of its instruction
    heads: dict = field(default_factory=dict)    # loop header address -> states on first arrival
    capped_heads: set = field(default_factory=set)   # loop headers reached in more than MAX_HEAD_STATES states
    back_states: list = field(default_factory=list)   # states at the back edge (one-iteration runs)
    bad_branches: list = field(default_factory=list)  # "text at pc": direct branches to no instruction start
    # what the prover derives from this exploration, per pointer argument, so that the checks
    # of one kernel share it: "targets" ((ptr, every) -> Targets), "capped" ((ptr, every) -> why a case split
    # was capped), "bodies" ((head, end, k) -> one loop iteration), "divisions" (division proofs)
    derived: dict = field(default_factory=dict)
    seen: Optional["Witnesses"] = None     # the branch questions' satisfying assignments (a loop body's run starts from them)


def branch_condition(m: Machine, ins: Instr) -> Optional[Expr]:
    """1-bit condition under which a conditional branch is taken (None: unconditional), from
    its row's condition (:func:`addrsim.isa.control.condition`).  Raises Unsupported for a
    per-lane VCC/EXEC or an unknown branch."""
    def vcc():
        return None if isinstance(m.sgpr.get(106), LaneMask) else m.read_scalar("vcc", 64)

    def exec_():
        return None if isinstance(m.exec, LaneMask) else m.exec_scalar()

    def scc():
        if m.scc is SKIPPED:
            raise SliceMiss("scc")
        if m.trace is not None:
            m.trace.read("scc")
        return m.scc
    cond = lookup(ins.mnemonic).branch
    if cond == "unknown":
        raise Unsupported(f"branch {ins.mnemonic}")
    try:
        return condition(cond, scc, vcc, exec_)
    except BranchUnsupported as e:
        raise Unsupported(str(e)) from None


MAX_HEAD_STATES = 4


class _Code:
    def __init__(self, code: List[Instr]):
        self.code = code
        self.index = {i.addr: n for n, i in enumerate(code)}


def explore(code: List[Instr], m0: SymbolicLane, goal: Callable[[Access], Iterable[str]],
            targets: Set[str], max_paths: int = MAX_PATHS, max_steps: int = MAX_STEPS,
            start: int = 0, region: Optional[Tuple[int, int]] = None, body_of: Optional[int] = None,
            seen: Optional["Witnesses"] = None) -> Exploration:
    """Symbolically execute ``code`` from instruction index ``start`` (default its first).

    ``goal(access)`` names the buffers an access may touch; a path stops once all of
    ``targets`` have been touched on it.  The state on first arriving at each loop header is
    kept in ``heads`` (header address -> states).  One loop iteration (addrsim.engine.loops): with
    ``region`` (lo, hi) addresses, a path that leaves it ends ("exit"), and with ``body_of``
    a header address, a back edge to it ends the path keeping its state in ``back_states``.
    ``seen``: satisfying assignments to start from (a copy is taken; :class:`Witnesses`); the
    run's own, at its end, are the result's ``seen``."""
    return _Explorer(code, m0, goal, targets, max_paths, max_steps, region, body_of, seen).run(start)


class _Explorer:
    """The worklist of :func:`explore`.  States are processed in the graph's reverse
    post-order (``Cfg.rank``: every explored edge goes to a later rank, a back edge ends its
    path, and a branch backwards that leaves a loop is an ordinary edge), so all states that
    reach a join point meet there and are merged into one (veritesting): data-only diamonds
    no longer multiply the paths."""

    def __init__(self, code, m0, goal, targets, max_paths, max_steps, region, body_of, seen=None):
        self.code, self.c, self.m0 = code, _Code(code), m0
        self.goal, self.targets = goal, targets
        self.max_paths, self.max_steps, self.region, self.body_of = max_paths, max_steps, region, body_of
        self.out = Exploration()
        self.out.origin = m0.origin     # which instruction produced each node (addrsim.prove.wraps.wrap_sites)
        self.heap: List[Tuple[int, int, Machine, frozenset]] = []
        self.waiting: Dict[int, int] = {}
        self.seq = 0
        self.paths = PathSolver(start=seen)     # a context of its own: the same paths in every process
        self.out.seen = self.paths.seen         # models of its branch questions (answer many without Z3)
        self.loop_writes: Dict[Tuple[int, int], list] = {}
        self.cfg = cfg_of(code)
        self.headers = {lp.head for lp in self.cfg.loops}
        starts = {i.addr for i in code}
        self.out.bad_branches = [f"{i.text} at {i.addr:#x} (target {i.target:#x})" for i in code
                                 if is_branch(i.mnemonic) and i.target is not None and i.target not in starts]
        m0.loop_entry = {}

    def push(self, mm, i, rr):
        rank = self.cfg.rank.get(self.code[i].addr, i) if i < len(self.code) else len(self.code) + i
        heapq.heappush(self.heap, (rank, i, self.seq, mm, rr))
        self.waiting[i] = self.waiting.get(i, 0) + 1
        self.seq += 1

    def pop(self):
        _, i, _, mm, rr = heapq.heappop(self.heap)
        self.waiting[i] -= 1
        return i, mm, rr

    def end(self, reason, detail, m, reached, loop=None):
        self.out.ends.append(PathEnd(reason, detail, tuple(m.path), reached, loop) if loop is not None
                             else PathEnd(reason, detail, tuple(m.path), reached))

    def run(self, start: int) -> Exploration:
        out = self.out
        self.push(self.m0, start, frozenset())
        while self.heap:
            idx, m, reached = self.pop()
            while self.heap and self.heap[0][1] == idx:
                _, m2, r2 = self.pop()
                merged = merge_states(m, m2)
                if merged is None:
                    self.push(m2, idx, r2)      # incompatible: it runs on its own after this one
                    break
                m, reached = merged, reached & r2
                out.merges += 1
            out.paths += 1
            if out.paths > self.max_paths:
                self.end("budget", f"more than {self.max_paths} paths", m, reached)
                break
            self.path(idx, m, reached)
        return out

    def path(self, idx, m, reached) -> None:
        """Run one state forward until its path ends, branches or meets another state."""
        out, code = self.out, self.code
        first = True
        while True:
            if not first and self.waiting.get(idx):
                self.push(m, idx, reached)   # another state waits here: merge with it first
                return
            first = False
            if idx >= len(code):
                return self.end("unsupported", "fell off the end of the code", m, reached)
            ins = code[idx]
            out.steps += 1
            if self.region is not None and not (self.region[0] <= ins.addr <= self.region[1]):
                return self.end("exit", f"leaves the loop at {ins.addr:#x}", m, reached)
            if ins.addr in self.headers and ins.addr not in m.loop_entry:
                self.loop_head(m, ins)
            if out.steps > self.max_steps:
                self.end("budget", f"more than {self.max_steps} instructions", m, reached)
                self.heap = []
                return
            kind = lookup(ins.mnemonic).kind
            if kind == "end":
                return self.end("endpgm", f"s_endpgm at {ins.addr:#x}", m, reached)
            if kind == "branch":
                return self.branch(m, ins, reached)
            try:
                r = m.step(ins)
            except Unsupported as e:
                return self.end("unsupported", f"{e} at {ins.addr:#x}: {ins.text}", m, reached)
            if r == "access":
                reached = self.accessed(m, reached)
                if self.targets and self.targets <= reached:
                    return self.end("goal", f"all buffers reached at {ins.addr:#x}", m, reached)
            idx += 1

    def loop_head(self, m, ins) -> None:
        """First arrival of a path at a loop header: keep its state (at most MAX_HEAD_STATES)."""
        m.loop_entry = dict(m.loop_entry)
        m.loop_entry[ins.addr] = len(m.path)
        hs = self.out.heads.setdefault(ins.addr, [])
        if self.body_of is not None:
            return
        if len(hs) < MAX_HEAD_STATES:
            hs.append(m.clone())
        else:
            self.out.capped_heads.add(ins.addr)     # an entry state not checked: no proof of this loop

    def accessed(self, m, reached) -> frozenset:
        touched = frozenset()
        for acc in m.last_access:
            g = frozenset(self.goal(acc))
            acc.first = g - reached
            self.out.accesses.append(acc)
            touched |= g
        return reached | touched

    def successors(self, m, ins, cond):
        """(condition or None, target address) of each feasible successor of a branch."""
        if cond is None or (isinstance(cond, Const) and cond.value == 1):
            return [(None, ins.target)]
        if isinstance(cond, Const):
            return [(None, ins.addr + ins.size)]
        return [(cnd, tgt) for cnd, tgt in ((cond, ins.target), (X.bnot(cond), ins.addr + ins.size))
                if self.paths.feasible(m.path + [cnd])]

    def branch(self, m, ins, reached) -> None:
        try:
            cond = branch_condition(m, ins)
        except Unsupported as e:
            return self.end("unsupported", f"{e} at {ins.addr:#x}", m, reached)
        if ins.target is None or ins.target not in self.c.index:
            return self.end("unsupported", f"branch target of {ins.text} at {ins.addr:#x} unknown", m, reached)
        succ = self.successors(m, ins, cond)
        if not succ:
            return self.end("infeasible", f"no feasible successor at {ins.addr:#x}", m, reached)
        for k, (cnd, tgt) in enumerate(succ):
            mm = m if k == len(succ) - 1 else m.clone()
            if cnd is not None:
                mm.path.append(cnd)
            is_back = (ins.addr, tgt) in self.cfg.back
            if is_back and self.body_of is not None and tgt == self.body_of:
                self.out.back_states.append(mm)
                self.end("iteration", f"back edge {ins.addr:#x} -> {tgt:#x}", mm, reached, (tgt, ins.addr))
                continue
            if is_back:
                self.end("backedge", f"loop back edge {ins.addr:#x} -> {tgt:#x} (first iteration only)", mm, reached,
                         (tgt, ins.addr))
                continue
            for lp in self.cfg.exits(ins.addr, tgt):
                self.leave_loop(mm, lp.head, lp.latch)
            if tgt not in self.c.index:
                self.end("unsupported", f"branch into the middle of an instruction at {tgt:#x}", mm, reached)
                continue
            self.push(mm, self.c.index[tgt], reached)

    def leave_loop(self, mm, head, latch) -> None:
        """Leaving the loop [head, latch] (by any of its exit edges) after any number of
        iterations: what the body writes is unknown, and the conditions met inside iteration
        1 no longer hold (the path keeps the conditions from before the loop)."""
        key = (head, latch)
        if key not in self.loop_writes:
            lo, hi = self.c.index[head], self.c.index[latch]
            self.loop_writes[key] = [d for i in self.code[lo:hi + 1] for d in mm.destinations(i)]
        mm.havoc(self.loop_writes[key], f"value after the loop {head:#x}-{latch:#x}")
        entry = mm.loop_entry.get(head)
        mm.path = list(mm.path[:entry]) if entry is not None else mm.path[:-1]
        self.out.loop_exits += 1


def _conj(cs: List[Expr]) -> Expr:
    out = Const(1, 1)
    for x in cs:
        out = X.band(out, x)
    return out


def _has_opaque(e: Expr) -> bool:
    if isinstance(e, Sym):
        return e.kind == "opaque"
    if isinstance(e, Const):
        return False
    return any(s.kind == "opaque" for s in X.symbols(e).values())


class _NoMerge(Exception):
    pass


def merge_states(a: Machine, b: Machine) -> Optional[Machine]:
    """One state standing for both ``a`` and ``b`` at the same instruction: path condition
    ``prefix and (rest_a or rest_b)``, each differing register ``ite(rest_a, va, vb)``, or a
    fresh opaque value where either side is data (opaque).  None when the two cannot be
    merged (a lane mask against a scalar value).  Data (opaque) on both sides becomes a
    fresh opaque value; anything else becomes a select, which keeps addresses exact."""
    pa, pb = a.path, b.path
    k = 0
    while k < min(len(pa), len(pb)) and pa[k] is pb[k]:
        k += 1
    ca, cb = _conj(pa[k:]), _conj(pb[k:])
    m = a.clone()
    m._opaque_n = max(getattr(a, "_opaque_n", 0), getattr(b, "_opaque_n", 0))

    def mv(x, y):
        if x is y:
            return x
        if isinstance(x, LaneMask) and isinstance(y, LaneMask):
            return LaneMask(mv(x.bit, y.bit))
        if isinstance(x, Expr) and isinstance(y, Expr) and x.width == y.width:
            if isinstance(x, Sym) and x.kind == "opaque" and isinstance(y, Sym) and y.kind == "opaque":
                return m.opaque(x.width, "data merged where two paths join")
            return X.ite(ca, x, y)     # the prover splits selects that differ in what they depend on
        raise _NoMerge()

    try:
        for key in set(a.sgpr) | set(b.sgpr):
            if key in a.sgpr and key in b.sgpr:
                m.sgpr[key] = mv(a.sgpr[key], b.sgpr[key])
            else:
                m.sgpr.pop(key, None)        # written on one side only: unknown, read as opaque
        for key in set(a.vgpr) | set(b.vgpr):
            if key in a.vgpr and key in b.vgpr:
                la, lb = a.vgpr[key], b.vgpr[key]
                m.vgpr[key] = la if la is lb else [mv(x, y) for x, y in zip(la, lb)]
            else:
                m.vgpr.pop(key, None)
        m.exec = mv(a.exec, b.exec)
        m.scc = mv(a.scc, b.scc)
    except _NoMerge:
        return None
    m.path = list(pa[:k]) + ([X.bor(ca, cb)] if (pa[k:] or pb[k:]) else [])
    la, lb = getattr(a, "loop_entry", {}), getattr(b, "loop_entry", {})
    m.loop_entry = {h: min(la.get(h, k), lb.get(h, k), k) for h in set(la) | set(lb)}
    m.notes = list(dict.fromkeys(a.notes + b.notes))
    return m


FEASIBLE_RU = 2 * RU
"""Resource units of one branch-feasibility check (undecided: the branch is explored)."""


def feasible(solver: Isolated, conds: List[Expr], memo=None, vs=None) -> bool:
    """Is the conjunction of ``conds`` satisfiable (or undecided within FEASIBLE_RU resource
    units)?  ``memo``/``vs`` carry Z3 translations across calls.  One question in a solver
    level of its own; :class:`PathSolver` asks a run of them."""
    if any(isinstance(c, Const) and c.value == 0 for c in conds):
        return False
    memo = {} if memo is None else memo
    vs = {} if vs is None else vs
    solver.push()
    solver.add(*[holds_bv(c, memo, vs) for c in conds if not isinstance(c, Const)])
    r, _ = solver.check(FEASIBLE_RU)
    solver.pop()
    return r != z3.unsat


class _Array(dict):
    """An array's contents: offset -> value, ``other`` at every offset not listed."""

    def __init__(self, rows, other: int):
        super().__init__(rows)
        self.other = other

    def get(self, off, default=None):
        return dict.get(self, off, self.other)


class PathSolver:
    """Feasibility of one exploration's paths (:func:`feasible`'s answers, the same ones),
    with each condition of the last path asked kept asserted at a solver level of its own:
    a path is its parent's plus a condition, so most questions only pop to where the paths
    part and push what is new (gfx950 causal_br_a16_psskddv_group's loop bodies: 14.3 s ->
    8.3 s, the same paths).  ``seen``: :class:`Witnesses`, asked before the solver: a copy
    of ``start`` when given (every run from it starts from the same ones), none at all
    without ``witnesses``."""

    def __init__(self, witnesses: bool = True, start: Optional["Witnesses"] = None):
        self.solver, self.memo, self.vars = Isolated(), {}, {}
        self.asserted: List[Expr] = []       # one solver level each, in order
        self.seen = start.copy() if start is not None else Witnesses(8 if witnesses else 0)

    def feasible(self, conds: List[Expr]) -> bool:
        if any(isinstance(c, Const) and c.value == 0 for c in conds):
            return False
        if self.seen.size and self.seen.satisfy(conds):
            return True
        conds = [c for c in conds if not isinstance(c, Const)]
        if not conds:
            return True
        s, st, k = self.solver, self.asserted, 0
        while k < len(st) and k < len(conds) - 1 and st[k] is conds[k]:
            k += 1
        while len(st) > k:
            s.pop()
            st.pop()
        for c in conds[k:-1]:
            s.push()
            s.add(holds_bv(c, self.memo, self.vars))
            st.append(c)
        s.push()
        s.add(holds_bv(conds[-1], self.memo, self.vars))
        r, _ = s.check(FEASIBLE_RU)
        if r == z3.sat and self.seen.size:
            self.seen.add(s.constants())
        s.pop()
        return r != z3.unsat


class _Assignment(dict):
    """A total assignment: a symbol it does not name is 0, an array (``name[]``) it does
    not name reads 0 everywhere.  Built from :meth:`Isolated.constants`: the model's
    ``sel_NAME`` function (:mod:`addrsim.backends.z3_bv`) is array ``NAME[]``."""

    def __init__(self, values: Dict[str, object]):
        super().__init__()
        for k, v in values.items():
            if isinstance(v, tuple):
                if k.startswith("sel_"):
                    self[k[4:] + "[]"] = _Array(*v)
            else:
                self[k] = v

    def __missing__(self, key):
        return {} if key.endswith("[]") else 0


class Witnesses:
    """The last ``size`` satisfying assignments of a run of feasibility questions, most
    recent first (a branch's path is its parent's plus one condition, so the parent's model
    most often satisfies one of its two sides).  Sound as a witness: an assignment under
    which :func:`addrsim.ir.expr.evaluate` gives 1 for each condition satisfies their Z3
    encoding (:mod:`addrsim.backends.z3_bv`: symbols, ``sel`` and binary32 operators are free
    there, so evaluation's meaning is one of their interpretations).  ``asked``/``answered``:
    questions tried and answered here."""

    def __init__(self, size: int = 8):
        self.size, self.envs, self.asked, self.answered = size, [], 0, 0

    def copy(self) -> "Witnesses":
        out = Witnesses(self.size)
        out.envs = list(self.envs)
        return out

    def add(self, values: Dict[str, object]) -> None:
        self.envs.insert(0, _Assignment(values))
        del self.envs[self.size:]

    def satisfy(self, conds: List[Expr]) -> bool:
        self.asked += 1
        order = [c for c in reversed(conds) if not isinstance(c, Const)]    # the newest condition first
        for k, env in enumerate(self.envs):
            memo: dict = {}
            try:
                if all(X.evaluate(c, env, memo) == 1 for c in order):
                    self.envs.insert(0, self.envs.pop(k))
                    self.answered += 1
                    return True
            except (ArithmeticError, ValueError, TypeError, RecursionError):
                continue
        return False


class ReplayBudget(Exception):
    """The concrete run needed more than its instruction budget (a long loop)."""


def run_concrete(code: List[Instr], m: ConcreteLanes, stop_addr: int, max_steps: int = 60_000,
                 occurrence: int = 1, visits: Optional[List[int]] = None, trace=None) -> Optional[List[Access]]:
    """Run one wave concretely until the instruction at ``stop_addr`` executes for the
    ``occurrence``-th time (default the first: later ones are later loop iterations); return
    its per-lane accesses (None if it is never reached that often).  Raises Unsupported, and
    ReplayBudget past ``max_steps`` instructions (every instruction on the path counts, run
    or skipped, so the budget is the same sliced or not).

    It executes only the instructions the access and the path to it can depend on
    (:func:`addrsim.engine.slice.replay_plan`); when that run reads a register it skipped,
    or refuses an instruction, it is run again unsliced from the same start, so the answer
    is always the unsliced run's.  ``visits`` and ``trace``: as :func:`run_to_end`'s."""
    plan = replay_plan(code, stop_addr)
    return _sliced_first(m, plan, visits, trace, len(code),
                         lambda mm, pl, count: _run_concrete(code, mm, stop_addr, max_steps, occurrence, pl, count))


def run_to_end(code: List[Instr], m: ConcreteLanes, pcs, max_steps: int = 200_000,
               visits: Optional[List[int]] = None, trace=None) -> List[Tuple[int, List[Access]]]:
    """Run one wave concretely to ``s_endpgm`` and return (pc, per-lane accesses) of every
    execution of an instruction at ``pcs``, in order.  Runs the slice of those accesses
    (:func:`addrsim.engine.slice.accesses_plan`), and unsliced again when that run reads a
    register it skipped or refuses an instruction, so the answer is the unsliced run's.
    ``visits``: a list that receives, when the sliced run is the answer, how often it
    entered each instruction (by index into ``code``); it stays empty when the answer is the
    unsliced run's.  ``trace``: a :class:`addrsim.engine.slice.LiveTrace` of the sliced run
    (of the plan of ``pcs``).  Raises Unsupported (a branch on a value the machine does not know),
    ReplayBudget past ``max_steps`` instructions."""
    from addrsim.engine.slice import accesses_plan
    pcs = frozenset(pcs)
    plan = accesses_plan(code, pcs)
    return _sliced_first(m, plan, visits, trace, len(code),
                         lambda mm, pl, count: _run_all(code, mm, pcs, max_steps, pl, count))


def _sliced_first(m: ConcreteLanes, plan: Optional[ReplayPlan], visits, trace, n: int, run):
    """``run(machine, plan, counts)`` sliced under ``plan`` (``trace`` told of it), and again
    unsliced from the same start when the sliced run reads a register it skipped or refuses
    an instruction; without a plan, unsliced only.  ``visits`` receives the sliced run's
    per-instruction counts (``n`` instructions) only when its answer is the one returned."""
    if plan is None:
        return run(m, None, None)
    start = m.clone()
    count = [0] * n if visits is not None else None
    m.trace = trace
    try:
        out = run(m, plan, count)
    except (SliceMiss, Unsupported):
        return run(start, None, None)
    finally:
        m.trace = None
    if count is not None:
        visits[:] = count
    return out


def _run_all(code, m, pcs, max_steps, plan: Optional[ReplayPlan], visits=None):
    out = []
    for ins, r in _concrete_steps(code, m, max_steps, plan, "in one wave's run to its end", visits):
        if r == "access" and ins.addr in pcs:
            out.append((ins.addr, list(m.last_access)))
    return out


def _run_concrete(code, m, stop_addr, max_steps, occurrence, plan: Optional[ReplayPlan], visits=None):
    for ins, r in _concrete_steps(code, m, max_steps, plan, f"before {stop_addr:#x}", visits):
        if ins.addr == stop_addr:
            occurrence -= 1
            if occurrence <= 0:
                return m.last_access if r == "access" else None
    return None


def _concrete_steps(code, m, max_steps, plan: Optional[ReplayPlan], where: str, visits=None):
    """Run ``m`` over ``code`` from its entry to ``s_endpgm``: yields (instruction, what
    ``m.step`` returned) for every instruction the plan runs (all without a plan); the
    instructions it skips are marked (:func:`_not_run`) and branches taken on concrete
    conditions.  Raises ReplayBudget past ``max_steps`` instructions (every one counts, run or
    skipped), Unsupported for a branch on an unknown value or to no instruction.  ``visits``
    (a list as long as ``code``), when given, counts each instruction's executions."""
    c = _Code(code)
    idx, steps = 0, 0
    mode = plan.mode if plan is not None else None
    while idx < len(code):
        ins = code[idx]
        steps += 1
        if visits is not None:
            visits[idx] += 1
        if steps > max_steps:
            raise ReplayBudget(f"more than {max_steps} instructions {where}")
        kind = lookup(ins.mnemonic).kind
        if kind == "end":
            return
        if kind == "branch":
            cond = branch_condition(m, ins)
            if cond is not None and not isinstance(cond, Const):
                raise Unsupported(f"branch condition at {ins.addr:#x} not concrete ({cond!r})")
            if cond is None or cond.value == 1:
                if ins.target not in c.index:
                    raise Unsupported(f"branch target {ins.target} not an instruction")
                idx = c.index[ins.target]
            else:
                idx += 1
            continue
        if mode is not None and mode[idx] != RUN:
            _not_run(m, plan.regs[idx], mode[idx] == OPAQUE, ins)
            if m.trace is not None:
                m.trace.skipped(idx, plan.regs[idx])
            idx += 1
            continue
        yield ins, m.step(ins)
        idx += 1


def _not_run(m: ConcreteLanes, regs, opaque: bool, ins: Instr):
    """An instruction a replay plan does not step: its registers get fresh opaque values (its
    result is data, as the machine would give it) or are marked SKIPPED."""
    if opaque:
        m.havoc([r if isinstance(r, str) else (r[0], r[1], 1) for r in regs], f"{ins.mnemonic} at {ins.addr:#x} (data)")
        return
    for r in regs:
        if r == "scc":
            m.scc = SKIPPED
        elif r[0] == "s":
            m.sgpr[r[1]] = SKIPPED
        else:
            m.vgpr[r] = [SKIPPED] * m.nlanes
