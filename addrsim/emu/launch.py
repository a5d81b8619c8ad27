"""The launch as the host does it, and the reference it is judged against.

Owns :func:`run_kernel`, :class:`RunResult`, :data:`TOLERANCE` and :func:`reference`.  May
import addrsim.ir, addrsim.loader, addrsim.model and the other emu modules (never the prover).

One run, batch mode: random bf16 inputs (Q, K, V, dO: standard normal, rounded to bf16) laid
out in memory by the layout's element strides (``models/layouts.yaml``: built-in or user
views), LSE and D from the float64 forward pass (D = rowsum(dO * O): what the wheel's host and
the 2026 host's odo pre-kernel compute, aiter ``csrc/cpp_itfs/mha_bwd.cu`` pre_kernel_launch),
the outputs zeroed (the host's ``zero_init``, mha_bwd.cu:596), the kernel arguments from the
host contract (:func:`addrsim.model.problem.kernel_arguments`) plus the two float arguments the
contracts leave free (``scalar`` = 1/sqrt(hdim_q), ``log2e``: mha_bwd.cu:613-614), the grid
from the family's ``grid`` counts and the workgroup size from the metadata.  dQ is compared
where the kernel leaves it: bf16 in the layout for the direct-dQ families, the fp32
accumulator [batch, nhead_q, seqlen_q, hdim_q] for the a32 families (the host's conversion
is a cast).  dK and dV are compared per query head (expanded, before the host's GQA sum).
"""
from __future__ import annotations

import re
import struct
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import numpy as np

from addrsim.emu.memory import Memory
from addrsim.emu.run import Launch, pack_kernarg, run_grid
from addrsim.emu.wave import EmuError, StrayStore
from addrsim.errors import InputError, NotEmulatedError, UnmodelledError
from addrsim.ir import expr as X
from addrsim.ir.expr import Sym
from addrsim.isa.datapath import bf16_round, bf16_to_f32, f16_round, f16_to_f32
from addrsim.loader.listing import load_source
from addrsim.model.layout import offset
from addrsim.model.models import ModelSet, build_problem, buffer_pointer, choose_family, layout_of
from addrsim.model.problem import kernel_arguments, shape_env

TOLERANCE = 2.0 ** -6
"""Largest error allowed, relative to the output's largest reference magnitude: bf16 inputs
exact, the kernel rounds P and dS to bf16 before its MFMAs and its outputs to bf16 (2**-9
relative each), fp32 accumulation.  Measured on the README kernel (batch 2, nhead 2, seqlen
128): 0.33% to 0.42%; the LSE/D shortcut in SBHD: 36% to 59%."""

# buffer -> (layout tensor, heads, rows, columns); LSE and D: fp32 [batch, nhead_q, seqlen_q]
TENSORS = {"q": ("q", "nhead_q", "seqlen_q", "hdim_q"), "k": ("k", "nhead_k", "seqlen_k", "hdim_q"),
           "v": ("v", "nhead_k", "seqlen_k", "hdim_v"), "do": ("do", "nhead_q", "seqlen_q", "hdim_v"),
           "dq": ("dq", "nhead_q", "seqlen_q", "hdim_q"), "dk": ("dk", "nhead_q", "seqlen_k", "hdim_q"),
           "dv": ("dv", "nhead_q", "seqlen_k", "hdim_v"), "lse": ("lse", "nhead_q", "seqlen_q", None),
           "d": ("lse", "nhead_q", "seqlen_q", None)}
OUTPUTS = ("dq", "dk", "dv")


@dataclass
class Output:
    """One output against the reference: the largest absolute error, the largest error
    relative to the reference's largest magnitude, the (batch, head) slices with an error past
    the tolerance and, per slice, its first wrong row."""

    ok: bool
    max_abs_err: float
    max_rel_err: float
    wrong_slices: List[Tuple[int, int]] = field(default_factory=list)
    first_rows: Dict[str, int] = field(default_factory=dict)


@dataclass
class RunResult:
    ok: bool
    kernel: str
    layout: str
    shape: Dict[str, int]
    outputs: Dict[str, Output]
    instructions: int
    seconds: float
    trace: List[tuple] = field(default_factory=list)
    fault: str = ""          # the run stopped at a store outside every tensor (the instruction named)


def _encode(x: np.ndarray, dtype: str) -> np.ndarray:
    """float values as 16-bit patterns of ``dtype`` ("bf16" or "fp16"), round to nearest even."""
    f = x.astype(np.float32)
    return (bf16_round(f) if dtype == "bf16" else f16_round(f)).astype(np.uint16)


def _f64(h: np.ndarray, dtype: str = "bf16") -> np.ndarray:
    h = np.asarray(h).astype(np.uint32)
    return (bf16_to_f32(h) if dtype == "bf16" else f16_to_f32(h)).astype(np.float64)


def element_type(symbol: str) -> str:
    """"bf16" or "fp16": the inputs' element type, from the kernel's name (aiter names each
    fmha_v3_bwd kernel ``..._hd<D>_<bf16|fp16>_...``, hsa/*/fmha_v3_bwd/*.co and the csv
    routing tables).  Raises NotEmulatedError for a name with neither."""
    m = re.search(r"_(bf16|fp16)_", symbol)
    if m is None:
        raise NotEmulatedError(f"kernel {symbol}: no element type (bf16 or fp16) in its name")
    return m.group(1)


def reference(q, k, v, do, scale: float, mask: str = ""):
    """float64 attention backward, GQA (query head h reads key head h // ratio): (lse, D, dQ,
    dK, dV), dK and dV per query head.  Arrays are [batch, head, row, column].  ``mask``: ""
    (none), "top_left" (query row i sees keys j <= i) or "bottom_right" (j <= i + seqlen_k -
    seqlen_q), aiter's causal masks (mha_bwd.cu compute_mask_coordinates); a row that sees no
    key has P = 0."""
    ratio = q.shape[1] // k.shape[1]
    K, V = np.repeat(k, ratio, axis=1), np.repeat(v, ratio, axis=1)
    s = np.einsum("bhqd,bhkd->bhqk", q, K) * scale
    if mask:
        sq, sk = q.shape[2], k.shape[2]
        shift = 0 if mask == "top_left" else sk - sq
        allowed = np.arange(sk)[None, :] <= np.arange(sq)[:, None] + shift
        s = np.where(allowed, s, -np.inf)
    m = s.max(-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    p = np.exp(s - m)
    l_ = p.sum(-1, keepdims=True)
    P = p / np.where(l_ > 0, l_, 1.0)
    o = np.einsum("bhqk,bhkd->bhqd", P, V)
    D = (do * o).sum(-1)
    dP = np.einsum("bhqd,bhkd->bhqk", do, V)
    dS = P * (dP - D[..., None])
    return ((m + np.log(l_))[..., 0], D, np.einsum("bhqk,bhkd->bhqd", dS, K) * scale,
            np.einsum("bhqk,bhqd->bhkd", dS, q) * scale, np.einsum("bhqk,bhqd->bhkd", P, do))


def _strided(mem: Memory, name: str, lay, tensor: str, shape, dims, dtype, data=None):
    """Allocate ``name`` for logical [batch, heads, rows, cols] ``dims`` with the layout's
    element strides; returns (base address, a strided numpy view in logical order)."""
    strides = [offset(lay, tensor, {d: 1}, shape) for d in ("batch", "head", "seq")][:len(dims) - 1] + [1]
    if min(strides) < 0:
        raise InputError(lay.origin or "<layouts>", f"layout {lay.name}: {tensor} has a negative stride {strides}: "
                                                    f"not run (a GPU tensor view has none)")
    if len(dims) == 3 and "seq" in lay.mode("batch").get(tensor, {}):
        raise InputError(lay.origin or "<layouts>", f"layout {lay.name}: {tensor} rows are not contiguous")
    size = sum((n - 1) * st for n, st in zip(dims, strides)) + 1
    raw = np.zeros(size, dtype=dtype)
    base = mem.alloc(name, raw)
    flat = mem.view(name, dtype)
    view = np.lib.stride_tricks.as_strided(flat, shape=dims, strides=[st * flat.itemsize for st in strides])
    if data is not None:
        view[...] = data
    return base, view


def _f32_bits(x: float) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


def run_kernel(path, layout: str, shape: Dict[str, int], ms: ModelSet, seed: int = 0, like=None,
               trace: Optional[str] = None) -> RunResult:
    """Run the kernel of ``path`` (a code object, or a listing with ``like``) in ``layout`` at
    ``shape`` (shape variables; the family's fixed sizes fill the rest) on random inputs and
    compare dQ, dK, dV with :func:`reference`.  ``trace``: a buffer whose every access is kept
    in ``RunResult.trace`` as (pc, workgroup ids, wave, lane, byte offset from the buffer's
    base, size, kind).  Raises InputError (a shape outside the kernel's domain, a layout the
    models lack), NotEmulatedError (causal masks, group mode, an instruction without
    emulated semantics) and EmuError's message as NotEmulatedError."""
    if trace is not None and trace not in TENSORS:
        raise InputError("--trace", f"unknown buffer {trace!r} (one of {', '.join(TENSORS)})")
    src, k = _runnable_kernel(path, ms, like)
    mask = "bottom_right" if "causal_br" in k.symbol else "top_left" if "causal" in k.symbol else ""
    prob = build_problem(ms, k, layout, Sym("tid_x", 32, "lane"), None, src.co.arch, None)
    _shape_given(path, prob, shape)
    env = shape_env(prob, shape)
    _in_domain(path, prob, env)
    consts = {n: e.value for n, e in prob.names.items() if isinstance(e, X.Const)}
    direct_dq = not consts.get("acc")          # no accumulator (acc 0): dQ written in place, bf16
    dq_acc16 = consts.get("acc") == 2          # a 16-bit accumulator the dq_shuffle post-kernel reorders
    lay = layout_of(ms, layout)
    _small_enough(path, prob, env)
    rng = np.random.default_rng(seed)
    mem = Memory()
    B, S_q, S_k = env["batch"], env["seqlen_q"], env["seqlen_k"]
    dims = {b: (B, env[h], env[r]) + ((env[c],) if c else ()) for b, (_, h, r, c) in TENSORS.items()}
    dtype = element_type(k.symbol)
    ins = {b: _encode(rng.standard_normal(dims[b]), dtype) for b in ("q", "k", "v", "do")}
    scale = 1.0 / np.sqrt(env["hdim_q"])
    bases, views, (lse, D, dq, dk, dv) = _place(mem, lay, env, dims, ins, direct_dq, lambda *t: reference(
        *t, scale, mask), dtype)
    ptrs = {n: 0 for n, e in prob.kernargs.items() if any(x.kind == "ptr" for x in X.symbols(e).values())}
    ptrs.update({buffer_pointer(ms, k, b): bases[b] for b in TENSORS})     # (sequence starts, mha_bwd.cu:641-659)
    args = kernel_arguments(prob, env, ptrs)
    names = {a.name for a in k.args}
    args.update({n: v for n, v in (("scalar", _f32_bits(scale)), ("log2e", _f32_bits(float(np.log2(np.e)))))
                 if n in names})
    grid = tuple(int(X.evaluate(prob.grid_count[prob.grid[ax].name], env)) for ax in "xyz")
    kept: List[tuple] = []
    tptr = bases.get(trace) if trace else None

    def on_access(ids, wave, a):
        if tptr is not None and a.lanes.any():
            lo = int(a.address[a.lanes].min())
            if lo >= tptr and lo - tptr < 1 << 36 and mem_owner(mem, lo) == trace:
                for lane in np.nonzero(a.lanes)[0]:
                    kept.append((a.pc, ids, wave, int(lane), int(a.address[lane]) - tptr, a.size, a.kind))
    la = Launch(k, src.co.arch, src.code[k.symbol], pack_kernarg(k, {n: v for n, v in args.items() if n in names}),
                grid, (k.reqd_workgroup_size or (256, 1, 1))[0], on_access=on_access)
    t0 = time.time()
    fault = ""
    try:
        run_grid(la, mem)
    except StrayStore as e:                 # the kernel writes past every tensor: a wrong result
        fault = str(e)
    except EmuError as e:
        raise NotEmulatedError(f"{path}: {e}")
    seconds = time.time() - t0
    got = {"dq": _f64(views["dq"], dtype) if direct_dq else views["dq"].astype(np.float64),
           "dk": _f64(views["dk"], dtype), "dv": _f64(views["dv"], dtype)}
    outs = {b: _judge(got[b], ref) for b, ref in (("dq", dq), ("dk", dk), ("dv", dv)) if b != "dq" or not dq_acc16}
    shown = {v: n for v, n in env.items() if not v.startswith("total_")}
    return RunResult(all(o.ok for o in outs.values()) and not fault, k.symbol, layout, shown, outs, la.instructions,
                     round(seconds, 2), kept, fault)


def _runnable_kernel(path, ms: ModelSet, like):
    """(source, kernel) of a dQ/dK/dV kernel the emulator runs.  Raises InputError (no kernel),
    UnmodelledError (no family), NotEmulatedError (a pipeline stage, sliding-window or group
    mode)."""
    src = load_source(path, like)
    (k,) = src.co.kernels[:1] or [None]
    if k is None:
        raise InputError(path, "no kernel in the file")
    if choose_family(ms, k, src.co.arch) is None:
        raise UnmodelledError(path, k.symbol)
    missing = [b for b in TENSORS if buffer_pointer(ms, k, b) is None]
    if missing:
        raise NotEmulatedError(f"{path}: kernel {k.symbol} has no pointer argument for {', '.join(missing)}: not a "
                               f"dQ/dK/dV kernel (a pipeline stage such as odo or dq_shuffle runs with --stage, "
                               f"not yet: issue 37)")
    if "swa" in k.symbol or "group" in k.symbol:
        raise NotEmulatedError(f"{path}: kernel {k.symbol}: sliding-window and group-mode kernels are not run yet "
                               f"(their reference needs the window and sequence starts: issue 37, a later step)")
    return src, k


def _place(mem: Memory, lay, env, dims, ins, direct_dq: bool, ref, dtype: str = "bf16"):
    """(bases, strided views, the reference's outputs): the inputs written through the layout's
    strides, the reference ``ref(q, k, v, do)`` computed from what memory then holds (a view
    whose heads share storage holds one of them), LSE and D from it, the outputs zeroed."""
    bases, views = {}, {}
    for b in ("q", "k", "v", "do"):
        bases[b], views[b] = _strided(mem, b, lay, TENSORS[b][0], env, dims[b], np.uint16, ins[b])
    out = ref(*(_f64(np.array(views[b]), dtype) for b in ("q", "k", "v", "do")))
    for b, val in (("lse", out[0]), ("d", out[1])):
        bases[b], views[b] = _strided(mem, b, lay, "lse", env, dims[b], np.float32, val.astype(np.float32))
    for b in ("dk", "dv"):
        bases[b], views[b] = _strided(mem, b, lay, b, env, dims[b], np.uint16)
    if direct_dq:
        bases["dq"], views["dq"] = _strided(mem, "dq", lay, "dq", env, dims["dq"], np.uint16)
    else:
        bases["dq"] = mem.alloc("dq", np.zeros(dims["dq"], dtype=np.float32))
        views["dq"] = mem.view("dq", np.float32).reshape(dims["dq"])
    return bases, views, out


def mem_owner(mem: Memory, addr: int) -> Optional[str]:
    """The allocation that holds byte ``addr``, or None."""
    for n, (b, raw) in mem.blocks.items():
        if b <= addr < b + len(raw):
            return n
    return None


MAX_ELEMENTS = 1 << 26
"""Elements of one tensor the emulator allocates at most (Q at 128 columns: 512k rows, 128 MiB
of bf16); larger shapes are refused, not attempted (memory and hours of emulation)."""
MAX_WORKGROUPS = 4096


def _shape_given(path, prob, shape) -> None:
    """The shape names the run needs, and none it contradicts: nhead_q and seqlen_q always,
    hdim_q and hdim_v unless the family fixes them; a fixed size given otherwise, or a
    group-mode total in batch mode, is bad input.  Raises InputError."""
    need = ["nhead_q", "seqlen_q"] + [h for h in ("hdim_q", "hdim_v") if h not in prob.fixed]
    lacking = [n for n in need if n not in shape]
    if lacking:
        raise InputError("--shape", f"give {', '.join(lacking)} (family {prob.family} does not fix "
                                    f"{'it' if len(lacking) == 1 else 'them'})")
    for n, v in shape.items():
        if n in prob.fixed and prob.fixed[n] != v:
            raise InputError("--shape", f"{n}={v}, but family {prob.family} fixes {n} = {prob.fixed[n]}")
        if n.startswith("total_"):
            raise InputError("--shape", f"{n} is a group-mode size; this run is batch mode")


def _small_enough(path, prob, env) -> None:
    """Refuse a shape the emulator cannot hold or finish.  Raises NotEmulatedError."""
    rows = max(env["seqlen_q"], env["seqlen_k"]) * max(env["hdim_q"], env["hdim_v"])
    elems = env["batch"] * max(env["nhead_q"], env["nhead_k"]) * rows
    grid = 1
    for ax in "xyz":
        grid *= int(X.evaluate(prob.grid_count[prob.grid[ax].name], env))
    scores = env["batch"] * env["nhead_q"] * env["seqlen_q"] * env["seqlen_k"]    # the reference's P, dP, dS
    if elems > MAX_ELEMENTS or grid > MAX_WORKGROUPS or scores > MAX_ELEMENTS:
        raise NotEmulatedError(f"{path}: shape too large to emulate ({elems} elements per tensor, {grid} workgroups; "
                               f"at most {MAX_ELEMENTS} and {MAX_WORKGROUPS})")


def _in_domain(path, prob, env) -> None:
    """Refuse a shape outside the kernel's domain (its bounds and traits: what the kernel is
    built for), naming the assumption it breaks.  Raises InputError."""
    shape_vars = set(env)
    for a in prob.assumptions:
        if a.layer not in ("bounds", "traits") or not set(X.symbols(a.expr)) <= shape_vars:
            continue
        if X.evaluate(a.expr, env) != 1:
            raise InputError(path, f"shape outside the kernel's domain: {a.text} ({a.layer}, {a.source})")


def _judge(got: np.ndarray, ref: np.ndarray) -> Output:
    err = np.abs(got - ref)
    top = float(np.abs(ref).max()) or 1.0
    bad = err > TOLERANCE * top
    slices = sorted({(int(b), int(h)) for b, h in zip(*np.nonzero(bad.any(axis=(2, 3))))})
    rows = {f"{b},{h}": int(np.nonzero(bad[b, h].any(axis=1))[0][0]) for b, h in slices}
    return Output(not slices, float(err.max()), float(err.max() / top), slices, rows)
