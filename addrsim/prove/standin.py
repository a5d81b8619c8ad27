"""Wrong base pointers: a buffer the family declares that no access reaches through its own
pointer argument, while another argument stands where it should.

Owns :class:`StandIn` and :func:`stand_in`.  May import addrsim.ir, addrsim.model and the
lower prove modules (targets, differential, machines).

Two ways a kernel addresses buffer B through the wrong argument (issue 36: each was reported
"unsupported: no buffer access whose V# base is the B argument"):

- a *mixed* base: a V# whose 64-bit base combines B's pointer with another argument's (dO's
  low word with Q's high word): its base is not B's pointer for any pointer values;
- a *stand-in*: an access whose base is another argument P alone and whose byte offset from
  workgroup (0, 0) follows B's layout, not the layout of P's own buffers, at a small shape of
  the domain (Q read through K's pointer).  The offsets are evaluated on the explored address
  (the access's path conditions must hold there); B is never read or written through its
  own argument, so the kernel is wrong for every pointer values the host passes.

When neither is found, the check stays "unsupported" (no candidate at all).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional

from addrsim.ir import expr as X
from addrsim.model.models import SHAPE_VARS, Problem, buffer_pointer
from addrsim.prove.differential import environment, in_domain
from addrsim.engine.explore import PathSolver
from addrsim.prove.targets import CaseSplitCap, feasible_bv, leaves, opaque_in, pointers_in, replace

SAMPLES = ((2, 4, 2, 256), (2, 4, 2, 128), (2, 2, 1, 64), (2, 4, 4, 192), (2, 2, 2, 512))
"""(batch, nhead_q, nhead_k, seqlen) of the shapes a stand-in is evaluated at, the first two
in the domain (seqlen_q = seqlen_k; head dims the family's)."""


@dataclass(frozen=True)
class StandIn:
    """Buffer ``buffer`` addressed at ``pc`` through ``used`` (pointer arguments) instead of
    its own ``ptr``; ``mixed`` when the base also holds ``ptr``.  At ``shape``/``ids``/lane 0:
    ``extracted`` is the access's byte address minus ``ptr``'s value and ``expected`` the same
    address with every argument of ``used`` replaced by ``ptr`` (bytes, modulo 2**64), with
    the pointer values of :func:`addrsim.prove.differential.pointer_bases`."""

    buffer: str
    ptr: str
    pc: int
    used: List[str]
    mixed: bool
    shape: Dict[str, int]
    ids: Dict[str, int]
    extracted: int
    expected: int
    kernargs: Dict[str, int]

    def reason(self) -> str:
        used = ", ".join(self.used)
        if self.mixed:
            return (f"access at {self.pc:#x}: the V# base of {self.buffer} combines its {self.ptr} argument with "
                    f"{used} (a 64-bit base built from two pointers): {self.buffer} is not addressed at {self.ptr}")
        return (f"access at {self.pc:#x}: {self.buffer} is addressed through argument {used}, not {self.ptr}: its "
                f"offsets follow {self.buffer}'s layout; no access's V# base is {self.ptr}")


def _samples(prob: Problem):
    zero = {s.name: 0 for s in prob.grid.values()}
    found = 0
    for b, hq, hk, s in SAMPLES:
        shape = {"batch": b, "nhead_q": hq, "nhead_k": hk, "seqlen_q": s, "seqlen_k": s}
        shape.update({k: v for k, v in prob.fixed.items() if k in SHAPE_VARS})
        if not in_domain(prob, shape, zero, 0):
            continue
        ids = dict(zero, **{prob.grid["z"].name: b - 1, prob.grid["y"].name: hq - 1})
        if not in_domain(prob, shape, ids, 0):
            continue
        yield shape, ids
        found += 1
        if found == 2:
            return


def _value(e, env) -> Optional[int]:
    try:
        return X.evaluate(e, env)
    except (KeyError, ZeroDivisionError, TypeError):
        return None


def _offset(acc, address, env, env00) -> Optional[int]:
    """The access's byte offset from workgroup (0, 0) at ``env`` (None where a path
    condition fails or a value is missing)."""
    for e in (env, env00):
        if any(_value(c, e) != 1 for c in list(acc.path) + [acc.active]):
            return None
    a, a00 = _value(address, env), _value(address, env00)
    return None if a is None or a00 is None else (a - a00) & X.mask(64)


def stand_in(sub, ex, prob: Problem, buffer: str, ptr: str, stand_ins: bool = True) -> Optional[StandIn]:
    """The first mixed base or (with ``stand_ins``) stand-in access for ``buffer`` (see the
    module docstring), or None.  ``sub``: anything with the kernel's ``ms`` and ``kernel``;
    ``ex`` its exploration."""
    if buffer not in prob.expected or not {"z", "y"} <= set(prob.grid):
        return None
    own_of = {}
    for b in prob.expected:
        p = buffer_pointer(sub.ms, sub.kernel, b)
        if p is not None and b != buffer:
            own_of.setdefault(p, []).append(b)
    samples = None
    for mixed in (True, False) if stand_ins else (True,):
        for acc, base, address in _candidates(ex, ptr, mixed):
            samples = list(_samples(prob)) if samples is None else samples
            used = pointers_in(base)
            if (ptr in used) != mixed or not used or (mixed and len(used) < 2) or (not mixed and len(used) != 1):
                continue
            if opaque_in(address) and not mixed:
                continue
            found = _evaluate(sub, prob, acc, address, buffer, ptr, [p for p in used if p != ptr], mixed, samples,
                              own_of)
            if found is not None:
                return found
    return None


def _candidates(ex, ptr: str, mixed: bool):
    """:func:`_cases` of the accesses that may be mixed bases of ``ptr`` (their base holds
    ``ptr`` and another pointer) or stand-ins (their base does not hold ``ptr``), cached on the
    exploration (the feasibility of each select case is a solver call)."""
    cache = ex.derived.setdefault("standin", {})
    if (ptr, mixed) not in cache:
        def fits(acc):
            ps = pointers_in(acc.base)
            return (ptr in ps and len(ps) > 1) if mixed else (bool(ps) and ptr not in ps)
        cache[(ptr, mixed)] = list(_cases([a for a in ex.accesses if fits(a)], PathSolver(start=ex.seen)))
    return cache[(ptr, mixed)]


def _cases(accesses, paths):
    """(access, base, address) for each case of each access's selects between pointer
    arguments (:func:`addrsim.prove.targets.leaves`) that its path can take (asked of
    ``paths``, started from the exploration's satisfying assignments)."""
    for acc in accesses:
        try:
            cases = leaves(acc.address)
        except CaseSplitCap:
            continue
        for assign, repl in cases:
            memo = {}
            base, address = replace(acc.base, repl, memo), replace(acc.address, repl, memo)
            if len(cases) > 1 and not feasible_bv(list(acc.path) + [c if b else X.bnot(c) for c, b in assign]
                                                  + [acc.active], paths):
                continue
            yield acc, base, address


def _evaluate(sub, prob, acc, address, buffer, ptr, used, mixed, samples, own_of) -> Optional[StandIn]:
    """The StandIn of ``acc``, or None.  A mixed base qualifies where it is reached; a
    stand-in where its offset equals ``buffer``'s expected one at every sample and differs
    from every expected offset of the buffers ``used[0]`` owns at one of them."""
    at = None
    for shape, ids in samples:
        env = environment(sub, prob, shape, ids, 0)
        off = _offset(acc, address, env, environment(sub, prob, shape, {}, 0))
        if off is None:
            return None
        if not mixed:
            want = _value(prob.expected[buffer], env)
            if want is None or off != want & X.mask(64):
                return None
            theirs = [_value(prob.expected[b], env) for b in own_of.get(used[0], [])]
            if any(t is not None and off == t & X.mask(64) for t in theirs):
                continue
        at = at or (shape, ids, env)
    if at is None:
        return None
    shape, ids, env = at
    here = _value(address, env)
    meant = _value(address, dict(env, **{p: env[ptr] for p in used}))
    if here is None or meant is None or here == meant:
        return None
    return StandIn(buffer, ptr, acc.instr.addr, used, mixed, shape, ids, (here - env[ptr]) & X.mask(64),
                   (meant - env[ptr]) & X.mask(64), {k: env[k] for k in prob.kernargs if k in env})
