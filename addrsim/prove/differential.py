"""Differential checking of the symbolic engine against the concrete interpreter.

The prover reasons about the address expressions that :func:`addrsim.engine.explore.explore`
extracts.  This module evaluates those expressions on concrete values (shape, kernel
arguments, workgroup ids, lane, pointer bases) and runs the concrete interpreter
(:func:`addrsim.prove.machines.concrete_machine` + :func:`addrsim.engine.explore.run_concrete`) on the same
values, so that a test can check that both give the same byte address for an access.

All addresses and offsets here are byte addresses (unsigned 64-bit integers).

>>> sub = load_subject("bwd_hd128_bf16_a16_rtne.co", buffers=["lse"])
>>> prob = sub.problem("bhsd")
>>> shape = {"batch": 2, "nhead_q": 4, "nhead_k": 4, "seqlen_q": 128, "seqlen_k": 128}
>>> ids = {"batch_id": 1, "head_id": 3, "kv_tile": 0}
>>> env = environment(sub, prob, shape, ids, lane=5)
>>> [(hex(s.target.access.instr.addr), s.address) for s in symbolic_addresses(sub.ex, "Lse", env)]
[('0x3eb0', 8796093025812)]
>>> concrete_address(sub.kernel, sub.arch, sub.code, sub.ms, env, ids, 5, 0x3eb0)
8796093025812
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from addrsim.ir import expr as X
from addrsim.loader.codeobj import Kernel
from addrsim.loader.disasm import Instr
from addrsim.loader.listing import load_source
from addrsim.engine.explore import Exploration, explore, run_concrete
from addrsim.ir.expr import Expr, Sym
from addrsim.prove.idioms import exact_divisions
from addrsim.engine.machine import WAVE
from addrsim.model.problem import kernel_arguments, shape_env as _shape_env  # noqa: F401  (re-exported)
from addrsim.model.models import SHAPE_VARS, ModelSet, Problem, buffer_pointer, build_problem, load_models, pointer_args
from addrsim.prove.machines import KERNARG_PTR, LANE, PTR_LIMIT, concrete_machine, initial_machine
from addrsim.prove.targets import Target, pointers_in, targets_for
from addrsim.backends.z3_int import IntEncoder

__all__ = ["DifferentialError", "NotEvaluable", "NotReached", "Subject", "load_subject", "pointer_bases",
           "kernel_arguments", "environment", "array_memory", "grid_counts", "in_domain", "SymbolicAddress",
           "symbolic_addresses", "integer_targets", "concrete_address", "slice_offset", "rows_read"]

#: the pointer bases of :func:`pointer_bases` are ``(k + 1) * POINTER_SPACING + low`` bytes
POINTER_SPACING = 1 << 40


class DifferentialError(Exception):
    """Base class of the errors of this module."""


class NotEvaluable(DifferentialError):
    """An expression (address or path condition) depends on a symbol the environment has no
    value for: typically data the engine does not model (an ``opaque`` symbol), or a value
    the concrete interpreter could not compute."""


class NotReached(DifferentialError):
    """The concrete run did not execute the access, or executed it with the lane inactive."""


# ----------------------------------------------------------------------------- set-up

@dataclass
class Subject:
    """One kernel of a code object, disassembled and explored for the pointer arguments of
    ``buffers`` (``pointers``: buffer -> pointer argument name)."""

    path: str
    kernel: Kernel
    arch: str
    code: List[Instr]
    ms: ModelSet
    ex: Exploration
    pointers: Dict[str, str]
    _problems: Dict[str, Problem] = field(default_factory=dict, repr=False)

    def __repr__(self):
        return f"Subject({self.path!r}, {self.kernel.symbol})"

    def problem(self, layout: str) -> Problem:
        """The models instantiated for this kernel in ``layout`` (cached).  Raises InputError
        for an unknown layout."""
        if layout not in self._problems:
            self._problems[layout] = build_problem(self.ms, self.kernel, layout, Sym(LANE, 32, "lane"),
                                                   None, self.arch)
        return self._problems[layout]


def load_subject(path, buffers: Sequence[str] = ("lse", "d", "q", "k"), ms: Optional[ModelSet] = None,
                 kernel_index: int = 0, like=None) -> Subject:
    """Load, disassemble and explore kernel ``kernel_index`` of the code object (or listing,
    with ``like``: :mod:`addrsim.loader.listing`) at ``path``,
    with the pointer arguments of those of ``buffers`` the kernel has as exploration targets.
    Raises InputError (bad file, malformed models) and ToolError (no llvm-objdump)."""
    ms = ms or load_models()
    src = load_source(path, like)
    co = src.co
    k = co.kernels[kernel_index]
    code = src.code[k.symbol]
    ptrs = {b: p for b in buffers if (p := buffer_pointer(ms, k, b)) is not None}
    m, _ = initial_machine(k, co.arch, ms)
    ex = explore(code, m, lambda a: pointers_in(a.base), set(ptrs.values()))
    return Subject(str(path), k, co.arch, code, ms, ex, ptrs)


def pointer_bases(ms: ModelSet, kernel: Kernel, low: int = 0) -> Dict[str, int]:
    """Distinct concrete byte addresses for the kernel's pointer arguments: the k-th pointer
    argument (in argument order) gets ``(k + 1) * 2**40 + low``.  ``low`` (``0 <= low <
    2**40``) moves every base off a round address (to exercise carries).  Raises ValueError
    when the bases would not lie below 2**47 (the prover's pointer domain) or overlap."""
    if not 0 <= low < POINTER_SPACING:
        raise ValueError(f"low must lie in [0, 2**40), got {low}")
    names = [a.name for a in kernel.args if a.name in pointer_args(ms, kernel)]
    names = list(dict.fromkeys(names))
    if (len(names) + 1) * POINTER_SPACING > PTR_LIMIT:
        raise ValueError(f"{len(names)} pointer arguments do not fit below 2**47 at 2**40 apart")
    return {n: (k + 1) * POINTER_SPACING + low for k, n in enumerate(names)}


def in_domain(prob: Problem, shape: Mapping[str, int], ids: Mapping[str, int], lane: int) -> bool:
    """Do ``shape`` (values of the shape variables; missing ones take their lower bound, fixed
    ones their fixed value), the workgroup ids and ``lane`` satisfy every constraint of
    ``prob.domain`` (bounds, grid ranges, traits, exact arguments, memory)?"""
    env = _shape_env(prob, shape)
    env.update(ids)
    env[LANE] = lane
    return all(X.evaluate(c, env) == 1 for c in prob.domain)


def environment(sub: Subject, prob: Problem, shape: Mapping[str, int], ids: Mapping[str, int], lane: int,
                low: int = 0, free: Optional[Mapping[str, int]] = None,
                arrays: Optional[Mapping[str, Sequence[int]]] = None) -> Dict[str, int]:
    """The evaluation environment of an explored expression: shape variables, every kernel
    argument (:func:`kernel_arguments`, pointers from :func:`pointer_bases` with ``low``),
    the workgroup ids (names of ``prob.grid``; missing ones are 0), ``tid_x`` = ``lane``
    and the kernarg segment pointer the concrete interpreter uses.

    ``arrays`` gives the contents of the model arrays (group mode: ``{"seqstart_q": [0, ...],
    "seqstart_k": [...]}``, 32-bit entries): every pointer argument the contract declares as
    holding that array reads it, as ``env[ptr + "[]"]`` = {byte offset: value} (the form
    :func:`addrsim.ir.expr.evaluate` reads; :func:`array_memory` turns it into memory for the
    concrete interpreter).  Raises ValueError for an array the models do not declare."""
    env: Dict[str, int] = _shape_env(prob, shape)
    env.update(kernel_arguments(prob, shape, pointer_bases(sub.ms, sub.kernel, low), free))
    for s in prob.grid.values():
        env[s.name] = ids.get(s.name, 0)
    env[LANE] = lane
    env["kernarg_ptr"] = KERNARG_PTR & X.mask(48)
    known = {a.name for a in prob.arrays.values()}
    for name in (arrays or {}):
        if name not in known:
            raise ValueError(f"array {name!r} is not read through any pointer argument of this kernel's contract "
                             f"(declared: {', '.join(sorted(known)) or 'none'})")
    for ptr, arr in prob.arrays.items():
        if arrays and arr.name in arrays:
            env[ptr + "[]"] = {4 * i: v & X.mask(32) for i, v in enumerate(arrays[arr.name])}
    return env


def array_memory(env: Mapping[str, object]) -> Dict[int, int]:
    """Global memory for :func:`concrete_address`: byte address -> 32-bit word of every array
    in ``env`` (``env[ptr + "[]"]`` at the base address ``env[ptr]``)."""
    mem: Dict[int, int] = {}
    for key, words in env.items():
        if key.endswith("[]"):
            base = env[key[:-2]]
            for off, v in words.items():
                mem[(base + off) & X.mask(64)] = v
    return mem


def grid_counts(prob: Problem, shape: Mapping[str, int]) -> Dict[str, int]:
    """Number of workgroups along each grid axis for ``shape`` (grid id name -> count), as
    the domain constraints of ``prob`` that mention only that id and the shape allow: the
    largest id they accept plus one (0 when they accept none).  Ids range over 32 bits."""
    env = _shape_env(prob, shape)
    out = {}
    for s in prob.grid.values():
        cs = [c for c in prob.domain if s.name in X.symbols(c)
              and all(n == s.name or n in env for n in X.symbols(c))]

        def ok(v):
            e = dict(env, **{s.name: v})
            return all(X.evaluate(c, e) == 1 for c in cs)

        if not ok(0):
            out[s.name] = 0
            continue
        lo, hi = 0, X.mask(32)          # ok(lo); the largest accepted id lies in [lo, hi]
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if ok(mid):
                lo = mid
            else:
                hi = mid - 1
        out[s.name] = lo + 1
    return out


# ----------------------------------------------------------------------------- symbolic side

class SymbolicAddress(NamedTuple):
    """An explored access that applies in an environment, with its byte address there.

    ``certain`` is False when some condition of the target could not be evaluated because it
    depends only on symbols without a value (data the engine does not model, e.g. a per-lane
    mask read as a scalar): the prover quantifies over those, so the target *may* apply."""

    target: Target
    address: int
    certain: bool


def symbolic_addresses(ex: Exploration, ptr: str, env: Mapping[str, int], access_pc: Optional[int] = None,
                       targets: Optional[Sequence[Target]] = None,
                       undecided: str = "raise") -> List[SymbolicAddress]:
    """The explored first accesses of pointer argument ``ptr`` (``prove.targets_for(ex,
    ptr)``, or ``targets``; only those at ``access_pc`` when given) that apply in ``env``,
    each with its byte address (unsigned 64-bit) evaluated in ``env`` with
    :func:`addrsim.ir.expr.evaluate`.

    A target applies when all its conditions (path condition, V# case, lane active) evaluate
    to 1; one with a condition that evaluates to 0 does not apply, whatever its other
    conditions.  When the remaining conditions cannot be evaluated (a symbol without a value
    in ``env``), ``undecided="raise"`` raises NotEvaluable and ``undecided="include"``
    returns the target with ``certain=False``.  Raises NotEvaluable when the address of a
    target that (may) apply cannot be evaluated (the message names the symbol), and
    ValueError for another ``undecided``."""
    if undecided not in ("raise", "include"):
        raise ValueError(f"undecided must be 'raise' or 'include', not {undecided!r}")
    tg = targets_for(ex, ptr) if targets is None else targets
    out = []
    for t in tg:
        if access_pc is not None and t.access.instr.addr != access_pc:
            continue
        memo: dict = {}
        missing = None
        applies = True
        for c in t.conds:
            try:
                if X.evaluate(c, env, memo) == 0:
                    applies = False
                    break
            except KeyError as e:
                missing = missing or _describe(c, e)
        if not applies:
            continue
        if missing is not None and undecided == "raise":
            raise NotEvaluable(f"condition of the access at {t.access.instr.addr:#x} depends on {missing}")
        try:
            out.append(SymbolicAddress(t, X.evaluate(t.address, env, memo), missing is None))
        except KeyError as e:
            raise NotEvaluable(f"address of the access at {t.access.instr.addr:#x} ({t.access.instr.text}) "
                               f"depends on {_describe(t.address, e)}") from None
    return out


def _describe(e: Expr, err: KeyError) -> str:
    name = err.args[0] if err.args else "?"
    name = name[:-2] if isinstance(name, str) and name.endswith("[]") else name
    s = X.symbols(e).get(name)
    if s is None:
        return f"{name!r} (no value)"
    return f"{name} ({s.kind}{': ' + s.note if s.note else ''})"


def integer_targets(ex: Exploration, ptr: str, prob: Problem) -> List[Target]:
    """``targets_for(ex, ptr)`` with the float-reciprocal divisions that
    :func:`addrsim.prove.idioms.exact_divisions` proves exact over the domain of ``prob`` replaced
    by integer divisions (what the prover decides claims on).  Divisions it cannot prove stay
    in floating point."""
    ranges = _ranges(prob)
    out = []
    for t in targets_for(ex, ptr):
        a, _, _ = exact_divisions(t.address, ranges)
        conds = [exact_divisions(c, ranges)[0] for c in t.conds]
        out.append(Target(t.access, conds, a))
    return out


def _ranges(prob: Problem) -> Dict[str, Tuple[int, int]]:
    """Inclusive integer ranges of shape variables, grid ids, lane and the non-pointer kernel
    arguments (interval of their contract expression) over the domain's bounds."""
    r = {v: prob.bounds[v] for v in SHAPE_VARS}
    g = prob.grid
    r[g["z"].name] = (0, prob.bounds["batch"][1] - 1)
    r[g["y"].name] = (0, prob.bounds["nhead_q"][1] - 1)
    r[g["x"].name] = (0, prob.bounds["seqlen_k"][1])
    r[LANE] = (0, 1023)
    enc = IntEncoder(dict(r))
    for name, e in prob.kernargs.items():
        if not any(s.kind == "ptr" for s in X.symbols(e).values()):
            try:
                r[name] = enc.interval(e)
            except Exception:      # no interval for this expression: the argument stays unbounded
                pass
    return r


# ----------------------------------------------------------------------------- slice offsets

def _first_address(sub, ex: Exploration, ptr: str, prob: Problem, shape, batch_id: int, head_id: int, lane: int):
    """(byte address, passes the V# range check) of the first explored access of pointer ``ptr`` by
    ``lane`` of workgroup (batch_id, head_id) (grid axes z and y), first key tile; None when
    no access applies or it cannot be evaluated."""
    g = prob.grid
    env = environment(sub, prob, shape, {g["z"].name: batch_id, g["y"].name: head_id}, lane)
    try:
        hits = symbolic_addresses(ex, ptr, env, undecided="include")
    except Exception:   # not evaluable here: no offset to show
        return None
    if not hits:
        return None
    h = next((x for x in hits if x.certain), hits[0])
    try:
        ok = X.evaluate(h.target.access.in_range, env) == 1
    except Exception:   # a range check that reads data: taken as passing
        ok = True
    return h.address, ok


def slice_offset(sub, ex: Exploration, ptr: str, prob: Problem, shape: Mapping[str, int], batch_id: int,
                 head_id: int) -> Tuple[Optional[int], bool]:
    """(byte offset of the (batch_id, head_id) slice from slice (0, 0), signed; whether the
    V# range check lets the access through), as the kernel computes it in hardware arithmetic:
    its address of the buffer's first access minus the same access's address in workgroup
    (0, 0), both for the first lane that makes the access (lanes 0, 64, 128, ...: in the a16
    kernels waves 0-1 read LSE and waves 2-3 read D through one V#), in the first key tile.
    (None, False) when no lane makes the access there (its reads are then zeros).  ``sub``:
    anything with the kernel's ``ms`` and ``kernel`` (:func:`environment`); ``ex`` its
    exploration; ``ptr`` the buffer's pointer argument."""
    for lane in range(0, 1024, WAVE):
        here = _first_address(sub, ex, ptr, prob, shape, batch_id, head_id, lane)
        base = _first_address(sub, ex, ptr, prob, shape, 0, 0, lane)
        if here is None or base is None:
            continue
        off = (here[0] - base[0]) & X.mask(64)
        return (off - (1 << 64) if off >= 1 << 63 else off), here[1]
    return None, False


ROWS_SHAPES = ((2, 2, 64), (2, 2, 128), (2, 2, 256), (2, 2, 192))
"""(batch, nhead_q, seqlen_q) of the LSE-rows picture, the first in the kernel's domain."""


def rows_read(sub, ex: Exploration, ptr: str, prob: Problem) -> Optional[dict]:
    """The byte offset each (batch_id, head_id) reads its slice at, as the kernel computes it
    (:func:`slice_offset`), at the first shape of ROWS_SHAPES in the domain (seqlen_k =
    seqlen_q, nhead_k = nhead_q, the family's head dims): ``{"shape", "slices": [[batch_id,
    head_id, offset or None, passes the range check], ...]}``.  None in group mode, or when
    no such shape is in the domain."""
    if prob.mode != "batch" or not {"z", "y"} <= set(prob.grid):
        return None
    zero = {s.name: 0 for s in prob.grid.values()}
    for b, h, s in ROWS_SHAPES:
        shape = {"batch": b, "nhead_q": h, "nhead_k": h, "seqlen_q": s, "seqlen_k": s}
        shape.update({k: v for k, v in prob.fixed.items() if k in SHAPE_VARS})
        if in_domain(prob, shape, zero, 0):
            slices = [[i, j, *slice_offset(sub, ex, ptr, prob, shape, i, j)] for i in range(b) for j in range(h)]
            return {"shape": {k: shape[k] for k in SHAPE_VARS if k in shape}, "slices": slices}
    return None


# ----------------------------------------------------------------------------- concrete side

def concrete_address(kernel: Kernel, arch: str, code: List[Instr], ms: ModelSet, argvals: Mapping[str, int],
                     ids: Mapping[str, int], lane: int, access_pc: int,
                     memory: Optional[Mapping[int, int]] = None, max_steps: int = 60_000) -> int:
    """Byte address (unsigned 64-bit) that work-item ``lane`` (x id in the workgroup; it runs
    in wave ``lane // 64``) accesses the first time its wave executes the instruction at
    ``access_pc``, on the concrete interpreter.

    ``argvals``: kernel argument values (pointers are byte addresses; extra keys are ignored);
    ``ids``: workgroup ids by grid name (missing: 0); ``memory``: 32-bit words of global
    memory by byte address (sequence-start arrays), if the kernel reads any.
    Raises NotReached (the wave never executes ``access_pc``, or the lane is inactive there),
    NotEvaluable (the address is not a constant: it depends on data the interpreter does not
    have), ``machine.Unsupported`` (an instruction without semantics or a branch on unknown
    data) and ``explore.ReplayBudget`` (more than ``max_steps`` instructions first)."""
    m = concrete_machine(kernel, arch, ms, dict(argvals), dict(ids), lane // WAVE)
    if memory:
        m.memory = dict(memory)
    accs = run_concrete(code, m, access_pc, max_steps)
    if not accs:
        raise NotReached(f"the wave of lane {lane} does not execute an access at {access_pc:#x}")
    acc = accs[lane % WAVE]
    if not (isinstance(acc.active, X.Const) and acc.active.value == 1):
        raise NotReached(f"lane {lane} is {'inactive' if isinstance(acc.active, X.Const) else 'not known active'}"
                         f" at the access at {access_pc:#x}")
    if not isinstance(acc.address, X.Const):
        raise NotEvaluable(f"concrete address at {access_pc:#x} is not a constant: it depends on "
                           + ", ".join(sorted(f"{s.name} ({s.note})" for s in X.symbols(acc.address).values())))
    return acc.address.value & X.mask(64)
