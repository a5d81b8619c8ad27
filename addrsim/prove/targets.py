"""The accesses of a buffer: which instructions' V# base is the buffer's pointer argument.

Owns :class:`Target` (one access with its path conditions and address, the select case
fixed), :func:`targets_for` (cached in ``Exploration.derived``), :func:`leaves` (the case split
on selects between buffers, at most 2**4 cases, else :class:`CaseSplitCap`),
:func:`pointers_in` and :func:`opaque_in`.  May import addrsim.ir, addrsim.backends and
addrsim.engine.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import product
from typing import Dict, List, Optional, Tuple


from addrsim.ir import expr as X
from addrsim.engine.explore import Exploration, PathSolver, feasible
from addrsim.ir.expr import Const, Expr, Sym
from addrsim.engine.machine import Access
from addrsim.backends.z3_run import Isolated



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


@dataclass
class Target:
    """One access of the buffer: the address with the V# case fixed to that buffer."""

    access: Access
    conds: List[Expr]
    address: Expr
    in_range: Optional[Expr] = None    # the V# range check with its divisions proved exact (None: the access's)

    @property
    def range_check(self) -> Expr:
        """1-bit: the access passes the V# range check (num_records)."""
        return self.access.in_range if self.in_range is None else self.in_range


def targets_for(ex: Exploration, ptr: str, every: bool = False) -> List[Target]:
    """Accesses whose V# base is (on some case of its selects) the pointer argument ``ptr``
    (:func:`_targets_for` says which); cached on the exploration."""
    cache = ex.derived.setdefault("targets", {})
    if (ptr, every) not in cache:
        cache[(ptr, every)] = _targets_for(ex, ptr, every)
    return cache[(ptr, every)]


def _targets_for(ex: Exploration, ptr: str, every: bool = False) -> List[Target]:
    """The accesses of the buffer a check decides one by one.

    The address property (``every`` False) takes the first access of the buffer on each path,
    and every access inside a loop whose address holds no data (their first iteration: the
    loop induction, addrsim.engine.loops, proves the later ones from it by the translation
    obligation).  The bounds property (``every`` True) takes every access outside loops (each
    reads its own offset from the V#) and the same in-loop accesses (their first iteration:
    :func:`addrsim.prove.check.check` says that the later ones are not checked)."""
    out, paths = [], PathSolver(start=ex.seen)
    loops = {e.loop for e in ex.ends if e.loop is not None}
    for acc in ex.accesses:
        if ptr not in X.symbols(acc.base):
            continue
        in_loop = any(h <= acc.instr.addr <= b for h, b in loops)
        if in_loop and opaque_in(acc.address) and ptr not in acc.first:
            continue      # its address holds data (values after an inner loop): left to the loop stage
        if not in_loop and not every and ptr not in acc.first:
            continue      # the address property: the first access of the buffer on the path
        try:
            cases = leaves(acc.address)
        except CaseSplitCap as e:  # not checked: check() makes the verdict unknown
            ex.derived.setdefault("capped", {}).setdefault((ptr, every), f"access at {acc.instr.addr:#x}: {e}")
            continue
        for assign, repl in cases:
            memo = {}
            base = replace(acc.base, repl, memo)
            if pointers_in(base) != [ptr]:
                continue
            conds = [c if b else X.bnot(c) for c, b in assign]
            t = Target(acc, list(acc.path) + conds + [acc.active], replace(acc.address, repl, memo))
            if len(cases) > 1 and opaque_in(t.address) and not feasible_bv(t.conds, paths):
                continue          # a case of a merged select that this path cannot take
            out.append(t)
    return out


def feasible_bv(conds: List[Expr], paths: Optional[PathSolver] = None) -> bool:
    """Are ``conds`` (1-bit IR) satisfiable, or undecided within the explorer's FEASIBLE_RU
    resource units?  (:func:`addrsim.engine.explore.feasible`, in a solver of its own, or
    ``paths``'s: the questions of one pass over an exploration's accesses share their paths.)"""
    return paths.feasible(conds) if paths is not None else feasible(Isolated(), conds)
