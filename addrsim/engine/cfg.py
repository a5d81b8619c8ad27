"""The control-flow graph of a kernel: basic blocks, back edges and natural loops.

Owns :class:`Cfg`, :class:`Loop` and :func:`cfg_of`.  May import addrsim.loader and
addrsim.isa only.

A branch is a loop back edge when its target dominates it (the textbook definition: Aho,
Lam, Sethi, Ullman, "Compilers", 9.6), not when it merely jumps backwards: hand-scheduled
kernels place a loop's exit block before a later loop and branch back to it
(``bwd_hd128_bf16_a16_rtne``: the second main loop 0x6048-0x7af0 leaves through
``s_cbranch_scc0`` at 0x6d98 and 0x7aec to the block at 0x603c that the first loop also
exits to).  Every edge out of a loop's body is an exit, wherever it sits (the first loop of
that kernel leaves from 0x52e0 and 0x6034 and branches back unconditionally at 0x6038).

Control flow: ``s_branch`` goes to its target; ``s_cbranch_*`` to its target or the next
instruction; ``s_endpgm`` nowhere; any other instruction to the next one (an indirect
branch, ``s_setpc_b64``, is stepped by the machine, which refuses it).  A graph with a cycle
that no dominating header closes (irreducible) has its retreating edges marked as back
edges all the same, so that exploration ends; such a loop is flagged ``irreducible``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, FrozenSet, List, Tuple

from addrsim.isa.control import is_branch
from addrsim.isa.table import lookup
from addrsim.loader.disasm import Instr


@dataclass(frozen=True)
class Loop:
    """One back edge ``latch`` -> ``head`` (instruction addresses) and its natural loop:
    ``body``, the addresses of the instructions that reach the latch without passing the
    header (the header included)."""

    head: int
    latch: int
    body: FrozenSet[int]
    irreducible: bool = False


@dataclass
class Cfg:
    """``rank``: instruction address -> its position in a reverse post-order of the graph
    without back edges (every other edge goes to a higher rank: exploration in rank order
    meets every join point once); ``back``: the (latch, head) back edges; ``loops`` one per
    back edge, innermost (smallest body) last among loops of one header; ``succ``: instruction
    address -> the addresses control may go to next (:func:`successors`, within the code)."""

    rank: Dict[int, int] = field(default_factory=dict)
    back: FrozenSet[Tuple[int, int]] = frozenset()
    loops: List[Loop] = field(default_factory=list)
    succ: Dict[int, List[int]] = field(default_factory=dict)

    def exits(self, src: int, dst: int) -> List[Loop]:
        """The loops that the edge ``src`` -> ``dst`` leaves, innermost first."""
        out = [lp for lp in self.loops if src in lp.body and dst not in lp.body]
        return sorted(out, key=lambda lp: len(lp.body))


def successors(ins: Instr, nxt: int) -> List[int]:
    """Addresses control may go to after ``ins`` (``nxt``: the next instruction's address)."""
    kind = lookup(ins.mnemonic).kind
    if kind == "end":
        return []
    if is_branch(ins.mnemonic) and ins.target is not None:
        if lookup(ins.mnemonic).branch == "always":
            return [ins.target]
        return [ins.target, nxt]
    return [nxt]


_CACHE: Dict[tuple, Cfg] = {}


def cfg_of(code: List[Instr]) -> Cfg:
    """The graph of ``code`` (a kernel's instructions in address order, entry first); cached
    by the instructions' (address, mnemonic, target), so sibling kernels never share one."""
    key = tuple((i.addr, i.mnemonic, i.target) for i in code)
    got = _CACHE.get(key)
    if got is None:
        got = _build(code)
        if len(_CACHE) >= 16:
            _CACHE.clear()
        _CACHE[key] = got
    return got


def _build(code: List[Instr]) -> Cfg:
    if not code:
        return Cfg()
    addrs = [i.addr for i in code]
    starts = set(addrs)
    succ: Dict[int, List[int]] = {}
    for n, ins in enumerate(code):
        nxt = addrs[n + 1] if n + 1 < len(code) else None
        succ[ins.addr] = [t for t in successors(ins, nxt) if t is not None and t in starts]
    order, back = _dfs(addrs[0], succ)
    rank = {a: k for k, a in enumerate(order)}
    for a in addrs:                       # unreachable code: after everything, in address order
        rank.setdefault(a, len(rank))
    preds: Dict[int, List[int]] = {a: [] for a in addrs}
    for a, ts in succ.items():
        for t in ts:
            preds[t].append(a)
    dom = _dominators(order, preds, rank)
    loops = []
    for latch, head in sorted(back):
        body, escaped = _natural_body(head, latch, preds, addrs[0])
        loops.append(Loop(head, latch, frozenset(body), escaped or not _dominates(dom, head, latch)))
    loops.sort(key=lambda lp: (lp.head, -len(lp.body)))
    return Cfg(rank, frozenset(back), loops, succ)


def _dfs(entry: int, succ: Dict[int, List[int]]):
    """(reverse post-order, retreating edges (src, dst)) of the graph from ``entry``; the
    successors are visited in order (the branch target before the fall-through)."""
    post, back = [], set()
    state: Dict[int, int] = {entry: 1}        # 1 on the stack, 2 done
    stack = [(entry, iter(succ[entry]))]
    while stack:
        a, it = stack[-1]
        for t in it:
            s = state.get(t)
            if s is None:
                state[t] = 1
                stack.append((t, iter(succ[t])))
                break
            if s == 1:
                back.add((a, t))
        else:
            stack.pop()
            state[a] = 2
            post.append(a)
    return post[::-1], back


def _dominators(order: List[int], preds, rank) -> Dict[int, int]:
    """Immediate dominators (Cooper, Harvey, Kennedy, "A simple, fast dominance algorithm")."""
    idom = {order[0]: order[0]}

    def intersect(a, b):
        while a != b:
            while rank[a] > rank[b]:
                a = idom[a]
            while rank[b] > rank[a]:
                b = idom[b]
        return a
    changed = True
    while changed:
        changed = False
        for a in order[1:]:
            ps = [p for p in preds[a] if p in idom]
            if not ps:
                continue
            new = ps[0]
            for p in ps[1:]:
                new = intersect(p, new)
            if idom.get(a) != new:
                idom[a] = new
                changed = True
    return idom


def _dominates(idom: Dict[int, int], a: int, b: int) -> bool:
    while b in idom:
        if b == a:
            return True
        if idom[b] == b:
            return False
        b = idom[b]
    return False


def _natural_body(head: int, latch: int, preds, entry: int):
    """(instructions that reach ``latch`` without passing ``head``, plus ``head``; whether
    the search reached the entry, i.e. the header does not dominate the latch)."""
    body, work, escaped = {head}, [latch], False
    while work:
        a = work.pop()
        if a in body:
            continue
        body.add(a)
        if a == entry:
            escaped = True
        work.extend(preds[a])
    return body, escaped
