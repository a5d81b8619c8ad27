"""Store coverage: what one workgroup writes into its (batch, head) slice of an output, from a
run of every wave of the workgroup on the concrete interpreter.

Owns :class:`Fault`, :func:`coverage` and :data:`SHAPES`.  May import addrsim.ir,
addrsim.engine, addrsim.model and the lower prove modules (machines, targets, differential).

The address claim of :mod:`addrsim.prove.check` is relative: each workgroup's access against
the same lane's access in workgroup (0, 0).  An error every workgroup makes alike cancels out
there (issue 36: dK's wave-row term dropped, so 3 of 4 waves store over wave 0's rows; a lane
term shifted one bit too far, so the last wave's dQ adds land in the next head).  This check is
absolute.  At two small shapes of the domain (the second not a multiple of the key tile where
the kernel allows it), the waves of workgroup (batch_id, head_id, kv_tile) are run to their
end, and every byte a lane stores (EXEC set, the V# range check passed) is placed in the slice
of the model's ``tile`` (:data:`addrsim.model.problem.TILE_KEYS`):

- ``outside``: a byte outside the workgroup's own slice (before its base, past its last row,
  or past a row's width into the next head's or batch's row);
- ``twice``: a byte stored twice by the workgroup (two lanes, or one lane twice); atomic adds
  are exempt (a key tile may add its dQ in parts, and the a16 kernels add the first q tile's
  rows once more than the others at seqlen 64: with zeros, or partial sums, the run cannot
  tell);
- ``unwritten``: a byte of the rows the workgroup owns (``first``, ``count``) never stored.
  Where the tile claims no rows (count 0: dQ, added into by every key tile) nothing is claimed:
  the wheel's a32 kernels at seqlen 64 add twice into some bytes and never into rows 32-47's
  second half (columns 64-127), with every lane active and in range; whether that is the
  kernel or the interpreter is not settled without hardware, so it is no finding.

It is a test at two shapes, not a proof over the domain; it needs nothing the models do not
state, and a violation is a real run of the real code.  The runs are cached on the exploration
per layout and shape (one run serves dK, dV and dQ).

Each shape's judgement is also kept in the query store, keyed by what the run computes from
rather than by the kernel: the sliced program of the stores
(:func:`addrsim.engine.slice.sliced_program`: the stepped instructions' text, not their
addresses), the waves' starting states, what the stretches of unstepped instructions do to
the registers the run read after them (recorded by :class:`addrsim.engine.slice.LiveTrace`),
the pointer's stores, the tile and the slice's address.  A rounding sibling (rtz after rtne:
612 instructions fewer, the bf16 conversions, which no store address reads) reads the
judgement instead of running its workgroup, with its own access addresses, unless its
stretches would take the run past :data:`RUN_STEPS` instructions.  Only a run that completed
sliced is kept (an unsliced rerun is the code's own).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from addrsim.engine.explore import ReplayBudget, run_to_end
from addrsim.engine.machine import Unsupported
from addrsim.engine.slice import LiveTrace, program_of
from addrsim.ir import expr as X
from addrsim.ir.expr import Const
from addrsim.model.models import SHAPE_VARS, Problem
from addrsim.prove.differential import environment, in_domain
from addrsim.prove.machines import concrete_machine
from addrsim.prove.runs import Run, recall, remember, run_of
from addrsim.prove.targets import pointers_in

SHAPES = (((2, 2, 2, 64), (2, 2, 1, 100), (2, 2, 2, 128)),                     # one tile: its tails
          ((2, 2, 2, 384), (2, 2, 2, 320), (2, 2, 2, 256)),                      # several key tiles
          ((2, 2, 1, 200), (2, 2, 2, 100), (2, 2, 2, 72)))                       # not a multiple of 64
"""(batch, nhead_q, nhead_k, seqlen_q = seqlen_k) in groups: the first shape of each group
that lies in the domain at workgroup (1, 1) is run (at key tile 1 where there is one, else 0;
the last group's at its last key tile)."""
MAX_WAVES = 16
RUN_STEPS = 200_000
"""Instructions one wave's run may take (:func:`addrsim.engine.explore.run_to_end`)."""


@dataclass(frozen=True)
class Fault:
    """A coverage violation of ``buffer`` at ``shape``, workgroup ``ids``: ``kind`` (outside,
    twice, unwritten), the byte offset in the slice (``offset``, bytes from the slice base),
    its row and byte in the row, the wave and lane that stored it (the first of two for
    twice; -1 for unwritten), the access's ``pc``, how many bytes are affected, and the
    other (wave, lane) of a twice."""

    buffer: str
    kind: str
    shape: Dict[str, int]
    ids: Dict[str, int]
    offset: int
    row: int
    column: int
    wave: int
    lane: int
    pc: int
    count: int
    other: Tuple[int, int] = (-1, -1)

    def reason(self) -> str:
        where = f"row {self.row}, byte {self.column} of the row"
        at = f"workgroup {self.ids} at " + " ".join(f"{k}={v}" for k, v in self.shape.items())
        if self.kind == "outside":
            return (f"access at {self.pc:#x}: wave {self.wave} lane {self.lane} stores outside the workgroup's own "
                    f"{self.buffer} slice ({where}; {self.count} byte(s) in all), {at}")
        if self.kind == "twice":
            return (f"access at {self.pc:#x}: wave {self.wave} lane {self.lane} and wave {self.other[0]} lane "
                    f"{self.other[1]} store the same {self.buffer} bytes ({where}; {self.count} byte(s) stored more "
                    f"than once), {at}")
        return (f"{self.count} byte(s) of the {self.buffer} rows the workgroup owns are never stored (first: "
                f"{where}), {at}")


def _shapes(prob: Problem, consts: Dict[str, int]):
    """The (shape, ids) the runs are made at: one per group of :data:`SHAPES`, at most."""
    found = []
    zero = {g.name: 0 for g in prob.grid.values()}
    least = {v: prob.bounds[v][0] for v in SHAPE_VARS if v in prob.bounds}
    for n, group in enumerate(SHAPES + ((least_shape(least),),)):
        for cand in group:
            hit = _fits(prob, cand, zero, consts, last_tile=n == len(SHAPES) - 1)
            if hit is not None:
                if all(hit[0] != f[0] for f in found):
                    found.append(hit)
                break
        if found and n >= len(SHAPES) - 1:
            break
    return found


def least_shape(least: Dict[str, int]) -> Tuple[int, int, int, int]:
    """The domain's least shape as a candidate (batch, nhead_q, nhead_k, seqlen): tried when no
    shape of :data:`SHAPES` lies in the domain (user bounds that exclude them)."""
    return (least.get("batch", 1), least.get("nhead_q", 1), least.get("nhead_k", 1),
            max(least.get("seqlen_q", 1), least.get("seqlen_k", 1)))


def _fits(prob: Problem, cand, zero, consts, last_tile: bool):
    """(shape, ids) for candidate ``cand`` in the domain: with its batch and heads, or with
    batch 1 (a routing that sends SBHD only with batch 1), then one head; the workgroup is
    the last batch and head (at most 1); None when none lies in the domain."""
    b, hq, hk, s = cand
    for bb, hh, kk in ((b, hq, hk), (1, hq, hk), (1, 1, 1)):
        shape = {"batch": bb, "nhead_q": hh, "nhead_k": kk, "seqlen_q": s, "seqlen_k": s}
        shape.update({k: v for k, v in prob.fixed.items() if k in SHAPE_VARS})
        ts = consts.get("ts_kv") or s
        last = max(0, (s + ts - 1) // ts - 1)
        x = last if last_tile else min(1, last)
        ids = dict(zero, **{prob.grid["z"].name: min(1, bb - 1), prob.grid["y"].name: min(1, hh - 1),
                            prob.grid["x"].name: x})
        if in_domain(prob, shape, zero, 0) and in_domain(prob, shape, ids, 0):
            return shape, ids
    return None


def _store_pcs(ex) -> Dict[int, str]:
    """Store instruction address -> the one pointer argument its V# base is built from.
    Cached on ``ex``."""
    memo = ex.derived.setdefault("coverage-stores", {})
    if "ptrs" not in memo:
        ptrs: Dict[int, str] = {}
        for acc in ex.accesses:
            if acc.kind == "store":
                ps = pointers_in(acc.base)
                if len(ps) == 1:
                    ptrs.setdefault(acc.instr.addr, ps[0])
        memo["ptrs"] = ptrs
    return memo["ptrs"]


def _waves(sub) -> int:
    size = sub.kernel.reqd_workgroup_size or (256, 1, 1)
    return max(1, (size[0] * size[1] * size[2] + 63) // 64)


def _machines(sub, prob: Problem, shape, ids):
    env = environment(sub, prob, shape, ids, 0)
    argvals = {a.name: env[a.name] for a in sub.kernel.args if a.name in env}
    return env, [concrete_machine(sub.kernel, sub.arch, sub.ms, argvals, ids, w) for w in range(_waves(sub))]


def _stores(sub, ex, env, machines, ids) -> object:
    """(pointer -> [(pc, wave, lane, address, size, atomic)] of every store the workgroup's
    waves make (``machines``, their starting states at ``env``: :func:`_machines`), visits,
    live) or a string saying why the run could not be made.
    ``visits``: per wave, how often the sliced run entered each instruction; ``live``: per
    entry of the sliced program (:func:`_program`), the registers some wave read after it
    (:class:`addrsim.engine.slice.LiveTrace`); both None when a wave's answer is the
    unsliced run's.  Cached on ``ex``."""
    key = ("coverage", tuple(sorted((a.name, env[a.name]) for a in sub.kernel.args if a.name in env)),
           tuple(sorted(ids.items())))
    cache = ex.derived.setdefault("coverage", {})
    if key in cache:
        return cache[key]
    ptrs = _store_pcs(ex)
    prog = _program(sub, ex)
    out: Dict[str, List[tuple]] = {}
    visits: Optional[List[List[int]]] = []
    live: Dict[int, set] = {}
    if len(machines) > MAX_WAVES:
        cache[key] = f"workgroup of {len(machines)} waves (more than {MAX_WAVES})"
        return cache[key]
    try:
        for w, m in enumerate(machines):
            counted: List[int] = []
            trace = LiveTrace(prog) if prog is not None else None
            for pc, lanes in run_to_end(sub.code, m, set(ptrs), RUN_STEPS, visits=counted, trace=trace):
                for lane, a in enumerate(lanes):
                    if not all(isinstance(v, Const) for v in (a.address, a.active, a.in_range)):
                        cache[key] = f"a store at {pc:#x} has no concrete address at this shape"
                        return cache[key]
                    if a.active.value and a.in_range.value:
                        out.setdefault(ptrs[pc], []).append((pc, w, lane, a.address.value, a.size,
                                                             "atomic" in a.instr.mnemonic))
            visits = visits + [counted] if visits is not None and counted else None
            for e, regs in (trace.live.items() if trace is not None else ()):
                live.setdefault(e, set()).update(regs)
    except (ReplayBudget, Unsupported) as e:
        cache[key] = f"the workgroup could not be run to its end ({e})"
        return cache[key]
    cache[key] = (out, visits, None if visits is None else live)
    return cache[key]


def coverage(sub, ex, prob: Problem, buffer: str, ptr: str, store: Optional[dict] = None) -> Optional[object]:
    """The first :class:`Fault` of ``buffer`` (pointer argument ``ptr``) at the shapes of
    :data:`SHAPES`, None when every run satisfies the tile, or a string saying why it was not
    decided (no shape of the domain, a run that could not be made).  ``store``: the query
    cache, where each shape's judgement is kept (:func:`keep_fault`); another kernel whose
    sliced run is the same (a rounding sibling) reads it there instead of running
    (:func:`stored_fault`).  Raises nothing else."""
    tile = prob.tiles.get(buffer)
    if tile is None or buffer not in prob.expected or prob.mode != "batch" or not {"x", "y", "z"} <= set(prob.grid):
        return None
    consts = {k: v.value for k, v in prob.names.items() if isinstance(v, Const)}
    shapes = _shapes(prob, consts)
    if not shapes:
        return "no small shape of the domain to run the workgroup at"
    for shape, ids in shapes:
        fault = _judged(sub, ex, prob, buffer, ptr, tile, shape, ids, store)
        if fault is not None:
            return fault
    return None


def _judged(sub, ex, prob: Problem, buffer, ptr, tile, shape, ids, store) -> Optional[object]:
    """The Fault (or None, or why not decided) of one shape: from the store when the same
    sliced run was judged against the same tile before, else by running it."""
    env, machines = _machines(sub, prob, shape, ids)
    t = {k: X.evaluate(e, env) for k, e in tile.items()}
    origin = env[ptr] + X.evaluate(prob.expected[buffer], env)
    run = run_of(_program(sub, ex), machines, RUN_STEPS, "coverage") if store is not None else None
    what = (buffer, ptr, t, origin, shape, ids)
    if run is not None:
        hit = stored_fault(store, run, _store_pcs(ex), what)
        if hit is not None:
            return hit[0]
    got = _stores(sub, ex, env, machines, ids)
    if isinstance(got, str):
        return got
    stores, visits, live = got
    fault = _judge(buffer, t, origin, stores.get(ptr, []), shape, ids)
    if run is not None and visits is not None:
        keep_fault(store, run, _store_pcs(ex), what, fault, visits, live)
    return fault


def _judge(buffer, t, origin, stores, shape, ids) -> Optional[Fault]:
    """The first fault of ``stores`` (pc, wave, lane, byte address, size, atomic) against the tile
    ``t`` (its values, bytes) of the slice that starts at byte address ``origin``; None when
    there is none."""
    owner: Dict[int, Tuple[int, int, int]] = {}
    bad = {"outside": [], "twice": []}
    for pc, w, lane, addr, size, atomic in stores:
        for byte in range(addr, addr + size):
            o = byte - origin
            row, col = (o // t["row_stride"], o % t["row_stride"]) if t["row_stride"] else (0, o)
            if o < 0 or row >= t["rows"] or col >= t["row_bytes"]:
                bad["outside"].append((o, row, col, w, lane, pc, None))
                continue
            if o in owner and not atomic:
                bad["twice"].append((o, row, col, w, lane, pc, owner[o]))
            owner.setdefault(o, (w, lane, pc))
    for kind in ("outside", "twice"):
        if bad[kind]:
            o, row, col, w, lane, pc, other = min(bad[kind], key=lambda b: b[:6])
            return Fault(buffer, kind, shape, ids, o, row, col, w, lane, pc, len(bad[kind]),
                         other[:2] if other else (-1, -1))
    first, count = t["first"], t["count"]
    rows = range(first, min(first + count, t["rows"]))
    missing = [(r, c) for r in rows for c in range(t["row_bytes"]) if r * t["row_stride"] + c not in owner]
    if missing:
        r, c = missing[0]
        return Fault(buffer, "unwritten", shape, ids, r * t["row_stride"] + c, r, c, -1, -1, 0, len(missing))
    return None



def _program(sub, ex):
    """The :class:`addrsim.engine.slice.SlicedProgram` of the code sliced for every store
    (the recorded accesses), None when there is no plan."""
    return program_of(sub.code, set(_store_pcs(ex)))


def _judgement(run: Run, ptrs, what) -> str:
    """What :func:`_judge` reads besides the run, as text: the entries of the pointer's stores,
    the tile's values (bytes) and the slice's byte address."""
    _, ptr, t, origin, _, _ = what
    mine = sorted(run.prog.entry[pc] for pc, p in ptrs.items() if p == ptr)
    return f"coverage {mine} {sorted(t.items())} {origin}"


def keep_fault(store, run: Run, ptrs, what, fault: Optional[Fault], visits: List[List[int]], live) -> None:
    """Store one shape's judgement (``fault``, None for none; its access as an entry number of
    the program) with the run's visits and live registers (:func:`addrsim.prove.runs.remember`)."""
    got = None
    if fault is not None:
        pc = run.prog.entry[fault.pc] if fault.pc in run.prog.entry and fault.lane >= 0 else -1
        got = [fault.kind, fault.offset, fault.row, fault.column, fault.wave, fault.lane, pc, fault.count,
               fault.other[0], fault.other[1]]
    remember(store, run, visits, live, _judgement(run, ptrs, what), got)


def stored_fault(store, run: Run, ptrs, what) -> Optional[Tuple[Optional[Fault]]]:
    """(the stored judgement,) of one shape, with this code's address of the access, or None
    (:func:`addrsim.prove.runs.recall`; a damaged judgement is None too)."""
    hit = recall(store, run, _judgement(run, ptrs, what))
    if hit is None:
        return None
    if hit[0] is None:
        return (None,)
    buffer, _, _, _, shape, ids = what
    try:
        kind, offset, row, column, wave, lane, entry, count, o0, o1 = hit[0]
    except (TypeError, ValueError):
        return None
    if not (isinstance(kind, str) and all(isinstance(x, int) for x in (offset, row, column, wave, lane, entry,
                                                                        count, o0, o1))):
        return None
    pc = run.prog.first[entry] if 0 <= entry < len(run.prog.first) else 0
    return (Fault(buffer, kind, dict(shape), dict(ids), offset, row, column, wave, lane, pc, count, (o0, o1)),)
