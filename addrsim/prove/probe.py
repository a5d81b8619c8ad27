"""Concrete probing: look for a counterexample by evaluation before asking the solver.

Bugs of this class show up at a few kinds of shapes: tiny ones (a wrong stride shows at
batch 2, nhead 2) and shapes where a 32-bit byte offset wraps (tensors past 4 GiB).  The
probe evaluates the claim on a deterministic sample of such shapes (each point checked
against every domain constraint and path condition by evaluation, so a point it returns is a
real counterexample of the query); then it shrinks the point one variable at a time, in the
order of :data:`addrsim.prove.query.ORDER`, keeping it a counterexample.  A probe never proves
anything: when it finds nothing, the solver decides.
"""
from __future__ import annotations

import random
from typing import Dict, List, Optional, Sequence, Tuple

from addrsim.ir import expr as X
from addrsim.ir.expr import Expr

SMALL = (1, 2, 3, 4, 5, 8, 16, 17, 32, 64, 128, 192, 256)
LARGE = (1024, 4096, 65536, 1 << 19, 1 << 20)
SAMPLES = 400


def _holds(conds: Sequence[Expr], claim: Expr, env, keep=None) -> bool:
    """Do all ``conds`` hold and the claim fail at ``env``?  (``keep`` given: evaluated in
    int mode, :func:`addrsim.backends.ideal.ideal_evaluate`.)"""
    memo = {}
    if keep is not None:
        from addrsim.backends.ideal import ideal_evaluate
        ev = lambda e: ideal_evaluate(e, env, keep, memo)  # noqa: E731
    else:
        ev = lambda e: X.evaluate(e, env, memo)  # noqa: E731
    try:
        for c in conds:
            if ev(c) != 1:
                return False
        return ev(claim) == 0
    except (KeyError, ZeroDivisionError):
        return False


REPAIRS = 12


def _fits(conds, env, keep=None) -> bool:
    """Do all ``conds`` hold at ``env`` (shape domain, device memory, path)?"""
    memo = {}
    try:
        if keep is not None:
            from addrsim.backends.ideal import ideal_evaluate
            return all(ideal_evaluate(c, env, keep, memo) == 1 for c in conds)
        return all(X.evaluate(c, env, memo) == 1 for c in conds)
    except (KeyError, ZeroDivisionError):
        return False


def _repair(conds, env, keep, grid, rnd):
    """Shrink a sampled shape that breaks the domain (most often: it does not fit in device
    memory) by halving the largest of batch, nhead_q and the sequence lengths, the grid ids
    kept inside; None if it still does not fit after REPAIRS halvings."""
    env = dict(env)
    for _ in range(REPAIRS):
        cand = [n for n in ("batch", "nhead_q", "seqlen_q", "seqlen_k") if env.get(n, 1) > 1]
        if not cand:
            return None
        n = max(cand, key=lambda v: env[v] * (1 + rnd.random()))
        env[n] //= 2
        if n == "nhead_q":
            while env["nhead_q"] % max(env.get("nhead_k", 1), 1):
                env["nhead_k"] = max(1, env["nhead_k"] // 2)
        b, h = env["batch"], env["nhead_q"]
        env[grid["batch"]] = min(env[grid["batch"]], b - 1)
        env[grid["head"]] = min(env[grid["head"]], h - 1)
        if _fits(conds, env, keep):
            return env
    return None


def probe(conds: List[Expr], claim: Expr, ranges: Dict[str, Tuple[int, int]], order: Sequence[str],
          grid: Dict[str, str], seed: int = 0, keep=None) -> Optional[Dict[str, int]]:
    """A counterexample found by evaluation (symbol name -> value), shrunk; or None.
    ``grid`` maps "batch"/"head"/"tile"/"lane" to the grid and lane symbol names."""
    syms = {}
    for e in list(conds) + [claim]:
        for s in X.symbols(e).values():
            syms[s.name] = s
    if any(s.kind in ("array", "opaque") for s in syms.values()):
        return None
    rnd = random.Random(seed)

    def pick(name, lo, hi, pool):
        vals = [v for v in pool if lo <= v <= hi] + [lo, hi]
        return rnd.choice(vals)

    def rng(n):
        s = syms.get(n)
        return ranges.get(n, (0, X.mask(s.width) if s is not None else 0))

    found = None
    for _ in range(SAMPLES):
        env = {}
        for n in ("batch", "nhead_q", "seqlen_q", "hdim_q", "total_q", "total_k"):
            lo, hi = rng(n)
            env[n] = pick(n, lo, hi, SMALL + LARGE)
        nq = env["nhead_q"]
        divs = [d for d in (1, 2, nq // 2, nq) if d >= 1 and nq % d == 0]
        env["nhead_k"] = rnd.choice(divs)
        env["seqlen_k"] = env["seqlen_q"] if rnd.random() < 0.6 else pick("seqlen_k", *rng("seqlen_k"), SMALL + LARGE)
        env["hdim_v"] = env["hdim_q"] if rnd.random() < 0.8 else pick("hdim_v", *rng("hdim_v"), SMALL)
        for n in ("total_q", "total_k"):
            env[n] = max(env[n], env["seqlen_q" if n == "total_q" else "seqlen_k"])
        for n in ("batch", "nhead_q", "nhead_k", "seqlen_q", "seqlen_k", "hdim_q", "hdim_v"):
            lo, hi = rng(n)
            env[n] = min(max(env[n], lo), hi)
        b, h = env["batch"], env["nhead_q"]
        env[grid["batch"]] = rnd.choice([0, 1, b - 1]) % max(b, 1)
        env[grid["head"]] = rnd.choice([0, 1, h - 1]) % max(h, 1)
        env[grid["tile"]] = rnd.choice([0, 1, 2])
        env[grid["lane"]] = rnd.choice([0, 1, 63, 64, 255])
        for n, s in syms.items():
            if n not in env:
                lo, hi = rng(n)
                if s.kind == "ptr":
                    env[n] = 0x100000000000 + 0x1000000000 * rnd.randrange(16)
                else:
                    env[n] = rnd.choice([lo, hi, rnd.randint(lo, hi)])
        if not _fits(conds, env, keep):
            env = _repair(conds, env, keep, grid, rnd)
            if env is None:
                continue
        if _holds(conds, claim, env, keep):
            found = env
            break
    if found is None:
        return None
    return shrink(conds, claim, ranges, order, found, syms, keep)


def shrink(conds: List[Expr], claim: Expr, ranges: Dict[str, Tuple[int, int]], order: Sequence[str],
           found: Dict[str, int], syms=None, keep=None) -> Dict[str, int]:
    """Each variable of ``order`` in turn set to the smallest of a few tried values that keeps
    ``found`` a counterexample (checked by evaluation)."""
    if syms is None:
        syms = {}
        for e in list(conds) + [claim]:
            for s in X.symbols(e).values():
                syms[s.name] = s

    def rng(n):
        s = syms.get(n)
        return ranges.get(n, (0, X.mask(s.width) if s is not None else 0))

    for n in list(order):
        if n not in found:
            continue
        lo = rng(n)[0]
        cur = found[n]
        for cand in sorted({lo, lo + 1, 2, 4, 8, 16, cur // 2, cur // 4, cur - 1}):
            if lo <= cand < cur:
                trial = dict(found)
                trial[n] = cand
                if n == "nhead_q" and trial.get("nhead_k", 1) > cand:
                    trial["nhead_k"] = cand
                if n == "seqlen_q" and trial.get("seqlen_k") == cur:
                    trial["seqlen_k"] = cand
                if _holds(conds, claim, trial, keep):
                    found = trial
                    break
    return found
