"""Every iteration of a loop: an inductive invariant over its back edge.

The address check (addrsim.prove.check) proves the first access of a buffer on each path: inside a
loop, the first iteration.  For the others this module proves, by induction over the
iterations, that workgroup (batch_id, head_id) and workgroup (0, 0) keep the same distance in
every loop-carried register that an access of the buffer depends on:

    I:  r(batch_id, head_id) = r(0, 0) + D_r    for every register r in the cone,

where D_r is that difference on entering the loop.  One generic iteration is executed
symbolically from a state where every register the body writes is a fresh "carried" symbol
rho_r (the (batch_id, head_id) copy); the (0, 0) copy is the same body with the ids set to 0
and rho_r replaced by rho_r - D_r.  Then

    step:    for every pair of paths through the body, r' = r'_00 + D_r at the back edge
             (the per-iteration step of r is the same for every (batch_id, head_id)), and
    access:  every access of the buffer in the body is at address_00 + expected(batch_id, head_id),

both for every rho (all claims in bv, hardware arithmetic).  I holds on entry, so the two
together prove the access for every iteration.  The cone is closed under the body: a register
an access or a cone register's next value depends on is in the cone; registers outside it
are independent unknowns in the (0, 0) copy (sound: nothing is assumed about them).  A
64-bit register pair whose high half takes the low half's carry (a V# or global base
advanced by s_add_u32/s_addc_u32) is one 64-bit register of the invariant, and its low 48
bits are assumed to stay a canonical user address (below 2**47) in both copies: the one
assumption of the induction beyond the models, stated in every loop verdict.

A failed step is not yet a counterexample (rho ranges over values no iteration may reach):
two workgroups are run on the concrete interpreter for the first iterations, and only an
iteration whose offsets differ is reported; otherwise the verdict is "unknown" with the
register whose step differs.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import chain, product
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Tuple

from addrsim.ir import expr as X
from addrsim.loader.disasm import Instr
from addrsim.ir.expr import Const, Expr, Sym
from addrsim.engine.machine import SymbolicLane

MAX_PAIRS = 256
"""Back-edge path pairs (and access pairs) a loop's induction may build obligations for; past
it the loop is "unknown".  The check budget (resource units) bounds the solver work of what
is built; this bounds only the building.  At 64, pssk/psskddv kernels with 16 x 128 and
25 x 100 pairs were left unknown; at 256 gfx942 hd64 a32_rtna_pssk Q and dO SBHD are proved
in about 30 s each (2026-12-03: 16 at 48, 64 at 16 x 48)."""
CANONICAL = 1 << 47     # user-mode addresses lie below 2**47 (as in addrsim.prove.machines.PTR_LIMIT)
REPLAY_ITERATIONS = 4   # iterations the concrete interpreter runs to confirm a failed step


@dataclass
class Body:
    """One generic iteration of the loop [head, end] (addresses) from one entry state.

    ``carried``: register name -> (carried symbol, value on entry); ``backs``: states at
    the back edge; ``accesses``: the body's accesses; ``unsupported``: why the body could not
    be executed (empty when it was)."""

    head: int
    end: int
    carried: Dict[str, Tuple[Sym, Optional[Expr]]]
    backs: list
    accesses: list
    unsupported: str = ""


def loops_of(code: List[Instr]) -> List[Tuple[int, int]]:
    """(header, back-edge branch) addresses of every loop back edge (a branch to an
    instruction that dominates it: :mod:`addrsim.engine.cfg`; a backward branch that leaves a
    loop is an exit, not a loop), innermost last among loops of one header."""
    from addrsim.engine.cfg import cfg_of
    return [(lp.head, lp.latch) for lp in cfg_of(code).loops]


def generic_iteration(code: List[Instr], entry: SymbolicLane, head: int, end: int, goal, seen=None) -> Body:
    """Execute one iteration of [head, end] from ``entry`` with every register the body
    writes replaced by a carried symbol (named ``sN@head`` / ``vN@head``, 32 bits).
    ``seen``: the kernel exploration's satisfying assignments (:class:`addrsim.engine.explore.Witnesses`),
    which answer many of the body's branch questions (the same paths either way)."""
    from addrsim.engine.explore import explore
    idx = {i.addr: n for n, i in enumerate(code)}
    lo, hi = idx[head], idx[end]
    m = entry.clone()
    carried: Dict[str, Tuple[Sym, Optional[Expr]]] = {}
    for ins in code[lo:hi + 1]:
        for d in m.destinations(ins):
            if d == "scc":
                m.scc = m.opaque(1, f"SCC in the loop {head:#x}")
            elif d == "exec":
                m.exec = m.opaque(64, f"EXEC in the loop {head:#x}")
            else:
                f, base, n = d
                for k in range(n):
                    name = f"{f}{base + k}@{head:#x}"
                    if name in carried:
                        continue
                    sym = Sym(name, 32, "carried")
                    if f == "s":
                        old = entry.sgpr.get(base + k)
                        m.sgpr[base + k] = sym
                    else:
                        lanes = entry.vgpr.get((f, base + k))
                        old = lanes[0] if lanes else None
                        m.vgpr[(f, base + k)] = [sym] * m.nlanes
                    carried[name] = (sym, old if isinstance(old, Expr) else None)
    m.path = list(entry.path)
    ex = explore(code, m, goal, set(), start=lo, region=(head, end), body_of=head, seen=seen)
    bad = [e for e in ex.ends if e.reason in ("unsupported", "budget")]
    return Body(head, end, carried, ex.back_states, ex.accesses,
                "; ".join(sorted({e.detail for e in bad}))[:300])


@dataclass
class Induction:
    """Result of :func:`induction` for one buffer: ``verdict`` proved | refuted | unknown |
    unsupported; ``claims`` the (conditions, claim, what) obligations when built."""

    verdict: str
    reason: str = ""
    loop: Tuple[int, int] = (0, 0)
    obligations: Iterable[tuple] = ()


def obligations(body: Body, ptr: str, pointers_in, zero_ids: Dict[str, Expr], expected: Expr,
                env: Dict[str, Expr], first_pcs=frozenset(),
                ref: Optional[Callable[[Expr], Expr]] = None) -> Induction:
    """The step and access obligations of ``body`` for the buffer at pointer argument
    ``ptr``: (conditions, 1-bit claim, description, access pc, fallback obligation or None,
    tried when the first does not hold), built one by one as they are iterated, all over the
    kernel-argument-free symbols (``env`` substitutes the host contract).  ``ref`` reads an
    expression in the reference workgroup (default: ``zero_ids`` substituted; in group mode
    the caller also shifts the sequence-start arrays, addrsim.prove.check.reference).

    An access whose first iteration the address check already proved (its pc in
    ``first_pcs``) gets the cheaper translation obligation: its (batch_id, head_id) minus
    (0, 0) offset, for register differences D, is the same from every pair of loop-carried
    states, so it equals the first iteration's, which is the expected one."""
    loop = (body.head, body.end)
    if body.unsupported:
        return Induction("unsupported", f"loop {body.head:#x}-{body.end:#x}: {body.unsupported}", loop)
    at_entry = {sym.name: v for name, (sym, v) in body.carried.items() if v is not None}
    accs = [a for a in body.accesses if pointers_in(X.substitute(a.base, at_entry)) == [ptr]]
    if not accs or not body.backs:
        return Induction("proved", "", loop)       # the loop does not touch the buffer, or never comes back
    syms = {sym.name: name for name, (sym, v) in body.carried.items()}
    cone = _cone(body, accs, syms)
    if isinstance(cone, str):
        return Induction("unsupported", cone, loop)
    pairs = _pairs(body, cone, syms)
    ref = ref or (lambda e: X.substitute(e, zero_ids))
    delta, other, defs = _copies(body, cone, pairs, syms, env, zero_ids, ref)
    copies = _Copies(env, other, ref)
    canon = [X.ult(X.extract(e, 47, 0), Const(CANONICAL, 48)) for lo, hi in pairs
             for e in (_pair(lo, hi), X.substitute(_pair(lo, hi), other))]
    memo: dict = {}
    regs = [syms[r] for r in sorted(cone)]
    backs = _groups(body.backs, lambda b: tuple(X.digest(_value(b, r), memo) for r in regs))
    accs_pc = [_groups(g, lambda a: (X.digest(a.address, memo), X.digest(a.active, memo))) for g in _groups(accs, lambda a: a.instr.addr)]
    n_steps, n_accs = len(backs) ** 2, sum(len(g) ** 2 for g in accs_pc)
    if n_steps > MAX_PAIRS or n_accs > MAX_PAIRS:
        return Induction("capped", f"loop {body.head:#x}-{body.end:#x}: {n_steps} pairs of back-edge paths and "
                                   f"{n_accs} pairs of accesses (paths that compute the same values taken as "
                                   f"one), more than the {MAX_PAIRS} checked: obligations cut", loop)
    st = _State(body, cone, pairs, syms, delta, defs, canon, copies, env, zero_ids, ref, _reachable(copies))
    # built as they are asked: the first that does not hold ends the check
    obs = chain(_steps(st, backs), _accesses(st, accs_pc, expected, first_pcs))
    # None: a pair of groups none of whose paths may hold together (:func:`_merged`)
    return Induction("built", "", loop, (ob for ob in obs if ob is not None))


@dataclass
class _State:
    """What every obligation of one loop induction reads (:func:`obligations`)."""

    body: Body
    cone: set
    pairs: list
    syms: Dict[str, str]
    delta: dict
    defs: List[Expr]
    canon: List[Expr]
    copies: "_Copies"
    env: Dict[str, Expr]
    zero_ids: Dict[str, Expr]
    ref: Callable[[Expr], Expr]
    reach: Callable             # (p, q) -> may both paths hold together (:func:`_reachable`)


def _accesses(st: _State, accs_pc, expected: Expr, first_pcs) -> Iterator[tuple]:
    """The access obligations, for every pair of paths to each access of the buffer
    (``accs_pc``: per instruction, groups of paths with the same address and EXEC bit); None
    for a pair of groups that needs none (:func:`_merged`)."""
    cp = st.copies

    def one(a, b):
        direct = (st.defs + st.canon + cp.paths(a, b), X.eq(cp.p(a.address), X.add(cp.q(b.address), expected)),
                  f"access at {a.instr.addr:#x}", a.instr.addr, None)
        if a.instr.addr in first_pcs:
            # the cheap translation obligation first, the direct one if it does not hold
            return _translation(a, b, st.cone, st.pairs, st.syms, st.body, st.env, st.zero_ids, st.delta,
                                st.ref) + (direct,)
        return direct
    for groups in accs_pc:
        for ga, gb in _diagonal_first(groups):
            yield _merged(ga, gb, one, st.reach)


def _pair(lo: str, hi: str) -> Expr:
    return X.concat(Sym(hi, 32, "carried"), Sym(lo, 32, "carried"))


class _Copies:
    """The two copies of the loop state: ``p`` (this workgroup) substitutes the host contract,
    ``q`` (the reference workgroup) reads it at the reference (``ref``: the ids zeroed, in
    group mode the sequence-start arrays shifted, addrsim.prove.check.reference) and moves
    every carried register by its difference."""

    def __init__(self, env, other, ref):
        self.env, self.other, self.ref = env, other, ref
        # node id -> (node, its copy), per copy: a path condition is the same object in every
        # pair of paths it takes part in, so the feasibility test's Z3 terms (memoised by node
        # id) are built once (gfx950 causal a32_psskddv Q SBHD: 73694 conversions, 133 s of
        # 247, and 78 s of substitutions, with every query answer in the cache)
        self._pm: dict = {}
        self._qm: dict = {}

    def p(self, e: Expr) -> Expr:
        return X.substitute(e, self.env, self._pm)

    def q(self, e: Expr) -> Expr:
        got = self._qm.get(id(e))
        if got is None:
            got = self._qm[id(e)] = (e, X.substitute(self.ref(self.p(e)), self.other))
        return got[1]

    def paths(self, p, q) -> List[Expr]:
        """The path conditions of ``p`` in this copy and of ``q`` in the reference copy (two
        back-edge states, or two accesses, then with their EXEC bits)."""
        out = [self.p(c) for c in p.path] + ([self.p(p.active)] if hasattr(p, "active") else [])
        return out + [self.q(c) for c in q.path] + ([self.q(q.active)] if hasattr(q, "active") else [])


def _cone(body: Body, accs, syms):
    """The carried registers the accesses depend on, closed under the body; or the reason
    (a string) when one of them, or an access, depends on data."""
    def carried_in(e: Expr):
        return {n for n in X.symbols(e) if n in syms}

    cone = set()
    for a in accs:
        cone |= carried_in(a.address)
    work = list(cone)
    while work:
        reg = syms[work.pop()]
        for b in body.backs:
            v = _value(b, reg)
            if v is None:
                return f"loop {body.head:#x}: register {reg} has no value at the back edge"
            for n in carried_in(v) - cone:
                cone.add(n)
                work.append(n)
    for r in sorted(cone):
        sym, v = body.carried[syms[r]]
        if v is None or _opaque(v):
            return f"loop {body.head:#x}: the address depends on register {syms[r]}, which holds data on entry"
        if any(_opaque(_value(b, syms[r])) for b in body.backs):
            return f"loop {body.head:#x}: register {syms[r]} is loop-carried data"
    for a in accs:
        if _opaque(a.address):
            return f"loop {body.head:#x}: the access at {a.instr.addr:#x} depends on data"
    return cone


def _pairs(body: Body, cone, syms):
    """64-bit register pairs (s[2k:2k+1], v[2k:2k+1]) whose high half takes the carry of the
    low half: their invariant is on the 64-bit value, not on each half."""
    pairs = []
    for r in sorted(cone):
        reg = syms[r]
        f, n = reg.split("@")[0][0], int(reg.split("@")[0][1:])
        if n % 2:
            continue
        hi_reg = f"{f}{n + 1}@{reg.split('@')[1]}"
        hi = body.carried.get(hi_reg)
        if hi is None or hi[0].name not in cone:
            continue
        if any(r in X.symbols(_value(b, hi_reg)) for b in body.backs):
            pairs.append((r, hi[0].name))
    return pairs


def _copies(body: Body, cone, pairs, syms, env, zero_ids, ref):
    """(delta, other, defs): each carried register's difference D between the workgroup and
    (0, 0) as a fresh symbol defined by a hypothesis in ``defs`` (the step claims are then
    linear in it; only the access claims need its definition), 0 where the entry value does
    not depend on the workgroup; ``other`` maps each carried symbol to its value in the other
    copy (moved by D, or independent when outside the cone)."""
    paired = {x for pr in pairs for x in pr}
    ids = set(zero_ids)

    def entry_of(symname):
        return X.substitute(body.carried[syms[symname]][1], env)

    delta, other, defs = {}, dict(zero_ids), []
    for r in cone - paired:
        v = entry_of(r)
        if not ids & set(X.symbols(v)):
            delta[r] = Const(0, 32)    # the same in every workgroup (a counter, an LDS offset)
            continue
        d = Sym(f"D({r})", 32, "carried")
        defs.append(X.eq(d, X.sub(v, ref(v))))
        delta[r] = d
    for lo, hi in pairs:
        v = X.concat(entry_of(hi), entry_of(lo))
        if not ids & set(X.symbols(v)):
            delta[(lo, hi)] = Const(0, 64)
            continue
        d = Sym(f"D({lo}:{hi})", 64, "carried")
        defs.append(X.eq(d, X.sub(v, ref(v))))
        delta[(lo, hi)] = d
        moved = X.sub(_pair(lo, hi), d)
        other[lo] = X.extract(moved, 31, 0)
        other[hi] = X.extract(moved, 63, 32)
    for name, (sym, v) in body.carried.items():
        if sym.name in paired:
            continue
        if sym.name in cone:
            other[sym.name] = X.sub(sym, delta[sym.name])
        else:
            other[sym.name] = Sym(sym.name + "'", 32, "carried")   # independent in the other copy
    return delta, other, defs


def _steps(st: _State, backs) -> Iterator[tuple]:
    """The step claims, for every pair of back-edge paths (``backs``: groups of paths whose
    cone registers hold the same values, :func:`_groups`): each carried register (or 64-bit
    pair) moves by the same amount in both copies.  They hold for any difference D (no
    definition needed): linear, fast.  ``st.canon``: a 64-bit pair's low 48 bits (a V# or
    global base) stay in the canonical user address range [0, 2**47) in both copies.  None for
    a pair of groups that needs none (:func:`_merged`)."""
    cp, syms, delta = st.copies, st.syms, st.delta
    paired = {x for pr in st.pairs for x in pr}

    def reg(p, q, r):
        return (st.canon + cp.paths(p, q),
                X.eq(cp.p(_value(p, syms[r])), X.add(cp.q(_value(q, syms[r])), delta[r])), f"step of {syms[r]}", 0, None)

    def pair(p, q, lo, hi):
        vp = cp.p(X.concat(_value(p, syms[hi]), _value(p, syms[lo])))
        vq = cp.q(X.concat(_value(q, syms[hi]), _value(q, syms[lo])))
        # the carries of s_add_u32/s_addc_u32 folded: the step is then a 64-bit sum
        return (st.canon + cp.paths(p, q),
                X.fold_carries(X.eq(vp, X.add(vq, delta[(lo, hi)]))),
                f"step of the 64-bit pair {syms[lo]}:{syms[hi]}", 0, None)
    for gp, gq in _diagonal_first(backs):
        for r in sorted(st.cone - paired):
            yield _merged(gp, gq, lambda p, q, r=r: reg(p, q, r), st.reach)
        for lo, hi in st.pairs:
            yield _merged(gp, gq, lambda p, q, lo=lo, hi=hi: pair(p, q, lo, hi), st.reach)


def _diagonal_first(groups: list):
    """Every ordered pair of ``groups``, the pairs of a group with itself first: both
    workgroups take the same branches where the branches read only what they share (the
    loop counter, the shape), so a wrong step shows there, and a pair of two groups is
    often infeasible, proved only after its paths' pairs are."""
    return [(g, g) for g in groups] + [(g, h) for g, h in product(groups, groups) if g is not h]


def _groups(items, key) -> List[list]:
    """``items`` (back-edge states or accesses) grouped by ``key`` (an instruction address, or a
    digest of the values an obligation reads: Exprs compare by identity), first-seen order."""
    out: Dict[object, list] = {}
    for it in items:
        out.setdefault(key(it), []).append(it)
    return list(out.values())


def _merged(gp: list, gq: list, one, reach) -> Optional[tuple]:
    """The obligation for every pair (p, q) of ``gp`` x ``gq`` (``one(p, q)``: a pair's own,
    under both paths' conditions).  Where the groups hold more than one pair, their claims are
    the same (each group computes the same values) and differ only in the paths: the claim
    under no path condition is tried first (it holds for every pair when it holds), then, if
    it does not hold, the own obligation of each pair whose paths may hold together
    (``reach``), built only then (a callable that yields them: every one must hold,
    addrsim.prove.check).  None when no pair's paths may hold together (it holds vacuously:
    two groups of paths through different branches on what both workgroups share)."""
    if not any(reach(p, q) for p in gp for q in gq):
        return None           # no two of these paths hold together: it holds vacuously
    if len(gp) == 1 and len(gq) == 1:
        return one(gp[0], gq[0])
    pathless = one(_no_path(gp[0]), _no_path(gq[0]))
    return _then(pathless, lambda: (one(p, q) for p in gp for q in gq if reach(p, q)))


def _reachable(copies: "_Copies"):
    """(p, q) -> False only when the path conditions of ``p`` in this workgroup's copy and of
    ``q`` in the reference copy (back-edge states or accesses, with their EXEC bits) are shown
    unsatisfiable together (bit-vectors, addrsim.engine.explore.PathSolver: FEASIBLE_RU units,
    undecided counts as satisfiable).  The pairs of a group of paths with another are mostly
    such: both workgroups take the same branches where the branches read only what they
    share (the loop counter, the shape).  Memoised per pair."""
    from addrsim.engine.explore import PathSolver
    paths, seen = PathSolver(witnesses=False), {}

    def reach(p, q) -> bool:
        key = (id(p), id(q))
        if key not in seen:
            seen[key] = paths.feasible(copies.paths(p, q))
        return seen[key]
    return reach


def _no_path(m):
    """A back-edge state or an access (a frozen dataclass) with its path condition dropped."""
    from copy import copy
    from dataclasses import is_dataclass, replace
    if is_dataclass(m):
        return replace(m, path=())
    c = copy(m)          # shallow: only the path is replaced, nothing is written in place
    c.path = []
    return c


def _then(ob: tuple, fallback) -> tuple:
    """``ob`` with ``fallback`` tried after the last obligation of its chain."""
    if ob[4] is None:
        return ob[:4] + (fallback,)
    return ob[:4] + (_then(ob[4], fallback),)


def _value(m, reg: str) -> Optional[Expr]:
    f = reg.split("@")[0]
    kind, n = f[0], int(f[1:])
    if kind == "s":
        v = m.sgpr.get(n)
    else:
        lanes = m.vgpr.get((kind, n))
        v = lanes[0] if lanes else None
    return v if isinstance(v, Expr) else None


def _opaque(e: Optional[Expr]) -> bool:
    return e is None or any(s.kind == "opaque" for s in X.symbols(e).values())


def _translation(a, b, cone, pairs, syms, body, env, zero_ids, delta, ref):
    """Obligation: for free differences D and any two (0, 0)-copy states x and y (canonical
    pointer pairs), addr(x + D, ids) - addr(x, 0) == addr(y + D, ids) - addr(y, 0).  A
    pair's D moves its low 48 bits only (its high 16 bits are equal in both workgroups).
    A register whose entry value is the same in every workgroup (``delta`` 0: a loop
    counter, an LDS offset) has D = 0 by the invariant."""
    paired = {x for pr in pairs for x in pr}
    zero = lambda k: isinstance(delta.get(k), Const) and delta[k].value == 0     # noqa: E731
    d = {r: Const(0, 32) if zero(r) else Sym(f"T({r})", 32, "carried") for r in cone - paired}
    d.update({pr: Const(0, 48) if zero(pr) else Sym(f"T({pr[0]}:{pr[1]})", 48, "carried") for pr in pairs})
    conds: List[Expr] = []

    def instance(tag: str, shifted: bool) -> Dict[str, Expr]:
        sub: Dict[str, Expr] = {} if shifted else dict(zero_ids)
        for name, (sym, v) in body.carried.items():
            if sym.name not in cone:
                sub[sym.name] = Sym(f"{sym.name}{tag}{'+' if shifted else ''}", 32, "carried")
        for r in cone - paired:
            x = Sym(f"{r}{tag}", 32, "carried")
            sub[r] = X.add(x, d[r]) if shifted else x
        for lo, hi in pairs:
            # the 48-bit base moves by D; the high 16 bits (a V#'s stride) stay those of the
            # (0, 0) copy: both workgroups set them from the same arguments
            x = X.concat(Sym(f"{hi}{tag}", 32, "carried"), Sym(f"{lo}{tag}", 32, "carried"))
            b48 = X.extract(x, 47, 0)
            if shifted:        # a fresh 48-bit base, defined by a hypothesis: linear for the solver
                moved = Sym(f"{lo}:{hi}{tag}+", 48, "carried")
                conds.append(X.eq(moved, X.add(b48, d[(lo, hi)])))
                b48 = moved
            conds.append(X.ult(b48, Const(CANONICAL, 48)))
            v = X.concat(X.extract(x, 63, 48), b48)
            sub[lo], sub[hi] = X.extract(v, 31, 0), X.extract(v, 63, 32)
        return sub

    terms = []
    for tag in ("~x", "~y"):
        s1, s0 = instance(tag, True), instance(tag, False)
        mine = lambda e: X.substitute(X.substitute(e, env), s1)           # noqa: E731  # the workgroup
        theirs = lambda e: X.substitute(ref(X.substitute(e, env)), s0)    # noqa: E731  # the reference
        for acc, read in ((a, mine), (b, theirs)):
            conds.extend(read(c) for c in list(acc.path) + [acc.active])
        terms.append(X.sub(mine(a.address), theirs(b.address)))
    return conds, X.eq(terms[0], terms[1]), f"access at {a.instr.addr:#x}", a.instr.addr
