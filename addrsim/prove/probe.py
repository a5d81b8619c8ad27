"""Concrete probing: look for a counterexample by evaluation before asking the solver.

Bugs of this class show up at a few kinds of shapes: tiny ones (a wrong stride shows at
batch 2, nhead 2) and shapes where a 32-bit byte offset wraps (tensors past 4 GiB).  The
probe evaluates the claim on a deterministic sample of such shapes (each point checked
against every domain constraint and path condition by evaluation, so a point it returns is a
real counterexample of the query); then it shrinks the point one variable at a time, in the
order of :data:`addrsim.prove.query.ORDER`, keeping it a counterexample.  A probe never proves
anything: when it finds nothing, the solver decides.

:func:`crossing` is the probe of one box of a wrap cover (addrsim.prove.cover): the tile
bisected to where a 32-bit site leaves its width, every lane tried there.
"""
from __future__ import annotations

import random
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from addrsim.backends.vector import IdCache, NoVec, Program, vec
from addrsim.ir import expr as X
from addrsim.ir.expr import Expr

U = np.uint64

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


PROGRAMS = IdCache(Program)    # compiled conditions and claims (a memo: deterministic, bounded)
_NAMES = IdCache(lambda es: frozenset(X.symbols(es[0])), size=4096)   # the symbols one expression reads


def names_read(e: Expr) -> frozenset:
    """The names of the symbols ``e`` reads (memoised by identity: a condition list is
    evaluated thousands of times by minimisation)."""
    return _NAMES((e,))


class _Batch:
    """Candidate points as arrays (symbol name -> uint64 array, one entry per point),
    evaluated by the numpy backend (:mod:`addrsim.backends.vector`) over all points at once.
    ``arrays`` (array name -> its model spec, :attr:`Problem.array_specs`): each point's
    array is the uniform one of :func:`uniform_array`, read in closed form."""

    def __init__(self, conds, claim, envs: List[Dict[str, int]], arrays=None):
        self.conds, self.claim, self.arrays = conds, claim, arrays or {}
        names = sorted({k for e in envs for k in e if not k.endswith("[]")})
        self.env = {n: np.array([e.get(n, 0) for e in envs], dtype=np.uint64) for n in names}
        self.n = len(envs)
        self.sync()

    @classmethod
    def of_arrays(cls, conds, claim, env: Dict[str, np.ndarray]) -> "_Batch":
        """Points given as arrays already (symbol name -> uint64 array, equal lengths)."""
        b = cls.__new__(cls)
        b.conds, b.claim, b.arrays, b.env, b.n = conds, claim, {}, env, len(next(iter(env.values())))
        return b

    @classmethod
    def repeated(cls, conds, claim, points: List[Dict[str, int]], reps: Sequence[int], arrays=None) -> "_Batch":
        """Each point of ``points`` ``reps[i]`` times in a row (its symbols' values; the
        caller then sets the ones that vary along each run), with the model's array specs."""
        keys = sorted({k for p in points for k in p if not k.endswith("[]")})
        env = {k: np.repeat(np.array([p.get(k, 0) for p in points], dtype=np.uint64), reps) for k in keys}
        b = cls.of_arrays(conds, claim, env)
        b.arrays = arrays or {}
        return b

    def sync(self, env=None) -> None:
        """Make each array's ``last`` symbol (total_q) agree with its uniform contents."""
        env = self.env if env is None else env
        for spec in self.arrays.values():
            last = spec.get("last")
            if isinstance(last, X.Sym) and last.name in env:
                first, n, step = self._shape(spec, env)
                env[last.name] = first + (np.maximum(n, U(1)) - U(1)) * step

    def _shape(self, spec, env):
        memo: dict = {}
        get = lambda k, d: np.broadcast_to(np.asarray(vec(spec[k], env, memo, [0]), dtype=np.uint64), (self.n,)) \
            if k in spec else np.full(self.n, d, dtype=np.uint64)   # noqa: E731
        return get("first", 0), get("count", 1), get("step_max", 1)

    def _with_arrays(self, env):
        env = dict(env)
        for name, spec in self.arrays.items():
            first, n, step = self._shape(spec, env)

            def read(off, first=first, n=n, step=step):
                idx = off // U(4)
                return np.where((off % U(4) == 0) & (idx < n), first + idx * step, U(0))
            env[name + "[]"] = read
        return env

    def _eval(self, env, claim: bool, reading: Optional[str] = None) -> np.ndarray:
        env = self._with_arrays(self.env if env is None else env)
        conds = self.conds if reading is None else [c for c in self.conds if reading in names_read(c)]
        vals = PROGRAMS(list(conds) + ([self.claim] if claim else [])).run(env)
        ok = np.ones(self.n, dtype=bool)
        for i, x in enumerate(vals):
            ok &= np.asarray(x) == (0 if claim and i == len(vals) - 1 else 1)
        return ok

    def fits(self, env=None, reading: Optional[str] = None) -> np.ndarray:
        """Boolean array: every condition holds at the point (``reading``: only the
        conditions that read that symbol, for points where the others are known to hold)."""
        return self._eval(env, False, reading)

    def fails(self, env=None) -> np.ndarray:
        """Boolean array: every condition holds and the claim fails."""
        return self._eval(env, True)

    def point(self, i: int) -> Dict[str, int]:
        p = {k: int(v[i]) for k, v in self.env.items()}
        return uniform_arrays(p, self.arrays)


def uniform_arrays(env: Dict[str, int], arrays) -> Dict[str, int]:
    """``env`` with each model array (sequence starts) filled uniformly: entry i is
    ``first + i*step_max`` for i < count, and the array's ``last`` symbol (total_q) set to
    the final entry, so the array facts hold (every sequence as long as the longest)."""
    if not arrays:
        return env
    env = dict(env)
    for name, spec in arrays.items():
        ev = lambda k, d: X.evaluate(spec[k], env) if k in spec else d   # noqa: E731
        first, n, step = ev("first", 0), min(ev("count", 1), 1 << 16), ev("step_max", 1)
        env[name + "[]"] = {4 * i: (first + i * step) & X.mask(32) for i in range(n)}
        last = spec.get("last")
        if isinstance(last, X.Sym):
            env[last.name] = first + max(n - 1, 0) * step
    return env


def _repair_all(b: _Batch, grid, ok: np.ndarray, rnd) -> np.ndarray:
    """:func:`_repair` over every point that breaks the domain at once: up to REPAIRS
    halvings of the largest of batch, nhead_q and the sequence lengths (grid ids kept
    inside); returns the points that fit now."""
    env = b.env
    keys = [k for k in ("batch", "nhead_q", "seqlen_q", "seqlen_k") if k in env]
    for _ in range(REPAIRS):
        todo = ~ok
        if not todo.any() or not keys:
            break
        vals = np.stack([env[k].astype(np.float64) for k in keys])
        weight = vals * (1 + rnd.random(vals.shape))
        weight[vals <= 1] = -1
        pick = np.argmax(weight, axis=0)
        alive = todo & (weight.max(axis=0) > 0)
        for j, k in enumerate(keys):
            sel = alive & (pick == j)
            env[k] = np.where(sel, env[k] // U(2), env[k])
        if "nhead_k" in env and "nhead_q" in env:
            for _ in range(32):
                bad = alive & (env["nhead_q"] % np.maximum(env["nhead_k"], U(1)) != 0)
                if not bad.any():
                    break
                env["nhead_k"] = np.where(bad, np.maximum(U(1), env["nhead_k"] // U(2)), env["nhead_k"])
        for gid, dim in ((grid["batch"], "batch"), (grid["head"], "nhead_q")):
            if gid in env and dim in env:
                env[gid] = np.where(alive, np.minimum(env[gid], np.maximum(env[dim], U(1)) - U(1)), env[gid])
        b.sync()
        ok = ok | (alive & b.fits())
    return ok


def _last_tiles(b: _Batch, sel: np.ndarray, tile: str, hi: int) -> None:
    """Raise the tile id of the points ``sel`` (which fit) to the last tile each shape
    launches, by bisection over the conditions (evaluated): 32-bit wraps of a tile offset
    show there first."""
    if tile not in b.env or not sel.any():
        return
    a = b.env[tile].copy()
    top = np.where(sel, U(hi), a)
    while True:
        live = sel & (a < top)
        if not live.any():
            break
        mid = np.where(live, a + (top - a + U(1)) // U(2), a)
        trial = dict(b.env, **{tile: mid})
        ok = b.fits(trial, reading=tile)        # the points fit: only what reads the tile can change
        a = np.where(live & ok, mid, a)
        top = np.where(live & ~ok, mid - U(1), top)
    b.env[tile] = a


def _probe_vector(conds, claim, envs, grid, tile_hi, seed, arrays=None):
    """The first sampled point that is a counterexample (index order), or None; raises NoVec."""
    b = _Batch(conds, claim, envs, arrays)
    rnd = np.random.default_rng(seed)
    ok = b.fits()
    ok = _repair_all(b, grid, ok, rnd)
    pick = rnd.random(len(envs))
    tile = grid["tile"]
    _last_tiles(b, ok & (pick < 0.5), tile, tile_hi)
    if tile in b.env:       # a third of those at a uniform tile below the last (a wrap between two tiles)
        frac = rnd.random(len(envs))
        inner = (pick < 0.5 / 3)
        b.env[tile] = np.where(inner, (b.env[tile].astype(np.float64) * frac).astype(np.uint64), b.env[tile])
    for gid, dim in ((grid["head"], "nhead_q"), (grid["batch"], "batch")):
        if gid in b.env and dim in b.env:     # and some ids uniform in their dimension
            u = rnd.random(len(envs))
            uniform = (u < 0.25)
            b.env[gid] = np.where(uniform, (b.env[dim].astype(np.float64) * rnd.random(len(envs))).astype(np.uint64),
                                  b.env[gid])
    ok = ok & b.fits()
    hit = np.flatnonzero(ok & b.fails())
    return b.point(int(hit[0])) if len(hit) else None


def probe(conds: List[Expr], claim: Expr, ranges: Dict[str, Tuple[int, int]], order: Sequence[str],
          grid: Dict[str, str], seed: int = 0, keep=None, arrays=None) -> Optional[Dict[str, int]]:
    """A counterexample found by evaluation (symbol name -> value), shrunk; or None.
    ``grid`` maps "batch"/"head"/"tile"/"lane" to the grid and lane symbol names; ``arrays``
    the model's array specs (group mode's sequence starts, filled by :func:`uniform_arrays`):
    without a spec for every array the kernel reads, nothing is probed."""
    syms = {}
    for e in list(conds) + [claim]:
        for s in X.symbols(e).values():
            syms[s.name] = s
    arrays = {n: (arrays or {}).get(n) for n, s in syms.items() if s.kind == "array"}
    if any(v is None for v in arrays.values()):
        return None
    if arrays and keep is not None:
        return None                      # int mode reads arrays point by point: not probed
    rnd = random.Random(seed)

    def rng(n):
        s = syms.get(n)
        return ranges.get(n, (0, X.mask(s.width) if s is not None else 0))

    envs = [_sample(rnd, rng, syms, grid) for _ in range(SAMPLES)]
    found = None
    if keep is None:
        try:
            found = _probe_vector(conds, claim, envs, grid, rng(grid["tile"])[1], seed, arrays)
        except NoVec:
            keep_scalar = True
        else:
            keep_scalar = False
    if (keep is not None or keep_scalar) and not arrays:
        found = _probe_scalar(conds, claim, envs, grid, keep, rnd, rng(grid["tile"])[1])
    if found is None:
        return None
    return shrink(conds, claim, ranges, order, found, syms, keep, arrays)


def _sample(rnd, rng, syms, grid) -> Dict[str, int]:
    """One candidate point: shape variables from SMALL and LARGE (nhead_k a divisor of
    nhead_q, seqlen_k mostly seqlen_q), grid ids at their first or last values, pointers
    at distinct 64-GiB-aligned bases (half of them with a low word just below 2**32, 4 KiB
    aligned or more), opaque values mostly all ones (EXEC: every lane active), other symbols
    at their bounds or uniformly.  A point the probe returns is still replayed before it is
    reported."""
    def pick(lo, hi, pool):
        vals = [v for v in pool if lo <= v <= hi] + [lo, hi]
        return rnd.choice(vals)

    env = {}
    for n in ("batch", "nhead_q", "seqlen_q", "hdim_q", "total_q", "total_k"):
        env[n] = pick(*rng(n), SMALL + LARGE)
    nq = env["nhead_q"]
    divs = [d for d in (1, 2, nq // 2, nq) if d >= 1 and nq % d == 0]
    env["nhead_k"] = rnd.choice(divs)
    env["seqlen_k"] = env["seqlen_q"] if rnd.random() < 0.6 else pick(*rng("seqlen_k"), SMALL + LARGE)
    env["hdim_v"] = env["hdim_q"] if rnd.random() < 0.8 else pick(*rng("hdim_v"), SMALL)
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
                if rnd.random() < 0.5:     # low word just below 2**32: a 32-bit add carries out
                    env[n] += (1 << 32) - (1 << rnd.randrange(12, 32))
            elif s.kind == "opaque":       # a value addrsim does not model (EXEC after a per-lane
                lo, hi = rng(n)            # write): mostly all ones, every lane active
                env[n] = hi if rnd.random() < 0.7 else rnd.choice([lo, rnd.randint(lo, hi)])
            else:
                env[n] = rnd.choice([lo, hi, rnd.randint(lo, hi)])
    return env


def _probe_scalar(conds, claim, envs, grid, keep, rnd, tile_hi):
    """The point-by-point probe (int mode, or an operator numpy does not evaluate)."""
    for env in envs:
        if not _fits(conds, env, keep):
            env = _repair(conds, env, keep, grid, rnd)
            if env is None:
                continue
        if rnd.random() < 0.5:
            env = _last_tile(conds, env, keep, grid["tile"], tile_hi)
        if _holds(conds, claim, env, keep):
            return env
    return None


def _last_tile(conds, env, keep, tile: str, hi: int):
    """Scalar :func:`_last_tiles` of one point."""
    a, b = env.get(tile, 0), hi
    best = env
    while a < b:
        mid = (a + b + 1) // 2
        t = dict(env, **{tile: mid})
        if _fits(conds, t, keep):
            best, a = t, mid
        else:
            b = mid - 1
    return best


def shrink(conds: List[Expr], claim: Expr, ranges: Dict[str, Tuple[int, int]], order: Sequence[str],
           found: Dict[str, int], syms=None, keep=None, arrays=None) -> Dict[str, int]:
    """Each variable of ``order`` in turn set to the smallest of a few tried values that keeps
    ``found`` a counterexample (checked by evaluation); with ``arrays``, each trial's arrays
    are filled again for its shape (:func:`uniform_arrays`)."""
    if syms is None:
        syms = {}
        for e in list(conds) + [claim]:
            for s in X.symbols(e).values():
                syms[s.name] = s

    def rng(n):
        s = syms.get(n)
        return ranges.get(n, (0, X.mask(s.width) if s is not None else 0))

    vector = keep is None
    for n in list(order):
        if n not in found:
            continue
        lo = rng(n)[0]
        cur = found[n]
        trials = []
        for cand in sorted({lo, lo + 1, 2, 4, 8, 16, cur // 2, cur // 4, cur - 1}):
            if lo <= cand < cur:
                trial = dict(found)
                trial[n] = cand
                if n == "nhead_q" and trial.get("nhead_k", 1) > cand:
                    trial["nhead_k"] = cand
                if n == "seqlen_q" and trial.get("seqlen_k") == cur:
                    trial["seqlen_k"] = cand
                trials.append(uniform_arrays(trial, arrays))
        if not trials:
            continue
        if vector:
            try:
                hit = np.flatnonzero(_Batch(conds, claim, trials, arrays).fails())
                found = trials[int(hit[0])] if len(hit) else found
                continue
            except NoVec:
                vector = False
        found = next((t for t in trials if _holds(conds, claim, t, keep)), found)
    return found


CROSS_POINTS = 48
"""Shapes the crossing probe (:func:`crossing`) starts from, per call."""


def exact_term(n: Expr) -> Optional[Expr]:
    """The exact (unwrapped) value of a 32-bit ``add``/``mul``/``shl`` node as a 64-bit
    expression over its operands' machine values, or None for another node."""
    if not isinstance(n, X.Op) or n.width != 32 or n.op not in ("add", "mul", "shl"):
        return None
    a, b = (X.zext(x, 64) for x in n.args)
    return {"add": X.add, "mul": X.mul, "shl": X.shl}[n.op](a, b)


def crossing(conds, claim, nodes: Sequence[Expr], ranges: Dict[str, Tuple[int, int]], grid: Dict[str, str],
             seed: int = 0, arrays=None) -> Optional[Dict[str, int]]:
    """A counterexample where one of the 32-bit ``nodes`` (the wrap sites of a query) first
    leaves its width as the tile grows, or None.  From shapes sampled in ``ranges`` (the
    box; the workgroup ids at their last values, so the batch and head offsets are largest),
    the tile is raised to the last one each shape launches, then bisected to the last tile
    at which the node's exact value is below 2**32; that tile and the next are tried with
    every lane.  This finds the thin bands a solver misses: a dK row offset ``R*row`` whose
    32-bit sum with a head offset crosses 2**32 only within one row of the tensor (gfx942
    a32_rtna_psskddv dV SBHD).  Every point is checked by evaluation, as the probe's are.
    Raises nothing: an expression numpy does not evaluate gives None."""
    terms = [t for t in (exact_term(n) for n in nodes) if t is not None]
    tile, lane = grid["tile"], grid["lane"]
    syms = {}
    for e in list(conds) + [claim]:
        syms.update({s.name: s for s in X.symbols(e).values()})
    if not terms or tile not in syms or lane not in syms or any(s.kind == "array" for s in syms.values()):
        return None
    rnd = random.Random(seed)

    def rng(n):
        s = syms.get(n)
        return ranges.get(n, (0, X.mask(s.width) if s is not None else 0))

    envs = []
    for i in range(CROSS_POINTS):
        env = _sample(rnd, rng, syms, grid)
        for n in ("batch", "nhead_q", "hdim_q"):    # the strides: many values (the band's
            if n in env:                            # place is a residue of the row stride)
                env[n] = rng(n)[1] if i == 0 else rnd.randint(*rng(n))
        env["hdim_q"] = max(env["hdim_q"] // 8 * 8, rng("hdim_q")[0])
        for n in ("seqlen_q", "seqlen_k"):          # the sequences long: the most rows
            if n in env and i % 4:
                env[n] = rng(n)[1]
        env["hdim_v"] = min(max(env["hdim_q"], rng("hdim_v")[0]), rng("hdim_v")[1])
        if env["nhead_q"] % max(env["nhead_k"], 1):
            env["nhead_k"] = env["nhead_q"] if i % 4 < 2 else 1
        env[grid["batch"]], env[grid["head"]] = max(env["batch"], 1) - 1, max(env["nhead_q"], 1) - 1
        for n, s in syms.items():
            if s.kind == "opaque":
                env[n] = rng(n)[1]                  # EXEC: every lane active
        envs.append(env)
    try:
        return _crossing_vector(conds, claim, terms, envs, grid, rng(tile)[1], rng(lane)[1], seed)
    except NoVec:
        return None


def crossing_at(conds, claim, nodes: Sequence[Expr], point: Dict[str, int], grid: Dict[str, str],
                tile_hi: int, lane_hi: int) -> Optional[Dict[str, int]]:
    """A counterexample at the shape of ``point`` (every variable but the tile and the lane
    kept) where one of the 32-bit ``nodes`` crosses 2**32 as the tile grows (see
    :func:`crossing`), or None.  For a relative claim the last tile is often no
    counterexample: there both workgroups' offsets have wrapped alike, and only the tile whose
    offset straddles 2**32 breaks the claim (tests/test_minimize.py, a tile offset of
    2**26 - 64 bytes: tile 64 of 101).  Where the straddling offsets are a thin band that no
    tile's start reaches (gfx942 bwd_hd128_bf16_a16_rtna_pddv dK BSHD at hdim 120), it finds
    nothing.  Raises nothing: an expression numpy does not evaluate gives None."""
    return crossings_at(conds, claim, nodes, [point], grid, [tile_hi], lane_hi)[0]


def crossings_at(conds, claim, nodes: Sequence[Expr], points: List[Dict[str, int]], grid: Dict[str, str],
                 tile_his: List[int], lane_hi: int) -> List[Optional[Dict[str, int]]]:
    """:func:`crossing_at` of each point of ``points`` (each with its own last tile), those
    that fit evaluated together: each result is the one the point gets alone (a point that
    does not fit is repaired with random draws, so it is evaluated alone)."""
    terms = [t for t in (exact_term(n) for n in nodes) if t is not None]
    if not points or not terms or grid["tile"] not in points[0] or grid["lane"] not in points[0]:
        return [None] * len(points)
    try:
        if not _Batch(conds, claim, points).fits().all():
            return [_crossing_vector(conds, claim, terms, [dict(p)], grid, hi, lane_hi, 0, True)[0]
                    for p, hi in zip(points, tile_his)]
        return _crossing_vector(conds, claim, terms, [dict(p) for p in points], grid,
                                np.array(tile_his, dtype=np.uint64), lane_hi, 0, True)
    except NoVec:
        return [None] * len(points)


def _crossing_vector(conds, claim, terms, envs, grid, tile_hi, lane_hi, seed, each: bool = False):
    """The first counterexample of :func:`crossing` among ``envs`` (index order), or None;
    with ``each``, a list: each point's first one (or None).  Raises NoVec."""
    tile, lane = grid["tile"], grid["lane"]
    b = _Batch(conds, claim, envs)
    ok = _repair_all(b, grid, b.fits(), np.random.default_rng(seed))
    if not ok.any():
        return [None] * len(envs) if each else None
    _last_tiles(b, ok, tile, tile_hi)
    rows = np.flatnonzero(ok)
    tiles = set()
    for t in terms:
        lo, hi = np.zeros(b.n, dtype=np.uint64), b.env[tile].copy()
        while True:                     # the last tile at which t is below 2**32
            live = ok & (lo < hi)
            if not live.any():
                break
            mid = np.where(live, lo + (hi - lo + U(1)) // U(2), lo)
            below = np.asarray(vec(t, dict(b.env, **{tile: mid}), {}, [0])) < U(1 << 32)
            lo = np.where(live & below, mid, lo)
            hi = np.where(live & ~below, mid - U(1), hi)
        tiles |= {(int(r), int(lo[r]) + d) for r in rows for d in (0, 1)}
    pairs = sorted(tiles)
    lanes = np.arange(min(lane_hi, 1023) + 1, dtype=np.uint64)
    k = len(lanes)
    idx = np.array([r for r, _ in pairs])
    env = {n: np.repeat(v[idx], k) for n, v in b.env.items()}
    env[tile] = np.repeat(np.array([t for _, t in pairs], dtype=np.uint64), k)
    env[lane] = np.tile(lanes, len(pairs))
    c = _Batch.of_arrays(conds, claim, env)
    out: List[Optional[Dict[str, int]]] = [None] * len(envs)
    hit = np.flatnonzero(c.fails())
    rows_hit, first = np.unique(idx[hit // k], return_index=True)     # each point's first hit
    for r, j in zip(rows_hit, first):
        out[int(r)] = c.point(int(hit[j]))
    # the pairs are in (point, tile) order: the first hit of all is the least point's first
    return out if each else next((m for m in out if m is not None), None)
