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
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np

from addrsim.emu.memory import Memory
from addrsim.emu.pipeline import STAGES, acc_layout, find_pipeline, odo_arguments, post_arguments, stage_grid
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
    stages: List[dict] = field(default_factory=list)   # per kernel run: stage, kernel, instructions, seconds
    not_compared: Dict[str, str] = field(default_factory=dict)     # output -> why it is not judged


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


def window_coordinates(left: int, right: int, seqlen_q: int, seqlen_k: int, top_left: bool = True) -> Tuple[int, int]:
    """(mask_y, mask_x) of a sliding window of ``left`` keys before and ``right`` after the
    diagonal (-1: unlimited), as the host passes them: CK's
    make_generic_attention_mask_coordinates_from_lr_window (ck_tile block_masking.hpp 608-628,
    called by the wheel's codegen.py G2:913 and mha_bwd.cu 670)."""
    left = (seqlen_q - 1 if top_left else seqlen_k - 1) if left < 0 else left
    right = (seqlen_k - 1 if top_left else seqlen_q - 1) if right < 0 else right
    return (1 + left + (0 if top_left else seqlen_q - seqlen_k), 1 + right + (0 if top_left else seqlen_k - seqlen_q))


def _allowed(mask, sq: int, sk: int) -> np.ndarray:
    """[sq, sk] keys each query row sees: "top_left" (j <= i), "bottom_right" (j <= i + sk -
    sq), or CK's (y, x) window: i - y + 1 <= j < i + x (block_masking.hpp IsOutOfBound)."""
    i, j = np.arange(sq)[:, None], np.arange(sk)[None, :]
    if mask == "top_left":
        return j <= i
    if mask == "bottom_right":
        return j <= i + sk - sq
    y, x = mask
    return (j >= i - y + 1) & (j < i + x)


def reference(q, k, v, do, scale: float, mask="", o=None):
    """float64 attention backward, GQA (query head h reads key head h // ratio): (lse, D, dQ,
    dK, dV, O), dK and dV per query head.  Arrays are [batch, head, row, column].  ``mask``: ""
    (none), "top_left" (query row i sees keys j <= i) or "bottom_right" (j <= i + seqlen_k -
    seqlen_q), aiter's causal masks, or a sliding window as CK's (mask_y, mask_x) coordinates
    (:func:`window_coordinates`); a row that sees no key has P = 0.  ``o``: the forward output as the host holds it (rounded to the element
    type): D = rowsum(dO * o), as the odo kernel computes it; default the exact O."""
    ratio = q.shape[1] // k.shape[1]
    K, V = np.repeat(k, ratio, axis=1), np.repeat(v, ratio, axis=1)
    s = np.einsum("bhqd,bhkd->bhqk", q, K) * scale
    if mask:
        s = np.where(_allowed(mask, q.shape[2], k.shape[2]), s, -np.inf)
    m = s.max(-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    p = np.exp(s - m)
    l_ = p.sum(-1, keepdims=True)
    P = p / np.where(l_ > 0, l_, 1.0)
    O = np.einsum("bhqk,bhkd->bhqd", P, V)
    D = (do * (O if o is None else o)).sum(-1)
    dP = np.einsum("bhqd,bhkd->bhqk", do, V)
    dS = P * (dP - D[..., None])
    return ((m + np.log(l_))[..., 0], D, np.einsum("bhqk,bhkd->bhqd", dS, K) * scale,
            np.einsum("bhqk,bhqd->bhkd", dS, q) * scale, np.einsum("bhqk,bhqd->bhkd", P, do), O)


def _strided(mem: Memory, name: str, lay, tensor: str, shape, dims, dtype, data=None, mode: str = "batch",
             at: Optional[int] = None):
    """Allocate ``name`` for logical [batch, heads, rows, cols] ``dims`` with the layout's
    element strides (``mode`` "group": the packed strides, dims [1, heads, total rows, cols],
    no batch stride); returns (base address, a strided numpy view in logical order)."""
    strides = [offset(lay, tensor, {d: 1}, shape, mode) for d in ("batch", "head", "seq")][:len(dims) - 1] + [1]
    if min(strides) < 0:
        raise InputError(lay.origin or "<layouts>", f"layout {lay.name}: {tensor} has a negative stride {strides}: "
                                                    f"not run (a GPU tensor view has none)")
    if len(dims) == 3 and "seq" in lay.mode(mode).get(tensor, {}):
        raise InputError(lay.origin or "<layouts>", f"layout {lay.name}: {tensor} rows are not contiguous")
    size = sum((n - 1) * st for n, st in zip(dims, strides)) + 1
    raw = np.zeros(size, dtype=dtype)
    base = mem.alloc(name, raw, at)
    flat = mem.view(name, dtype)
    view = np.lib.stride_tricks.as_strided(flat, shape=dims, strides=[st * flat.itemsize for st in strides])
    if data is not None:
        view[...] = data
    return base, view


def _float_args(names, scale: float) -> Dict[str, int]:
    """The two binary32 arguments the host contracts leave free, among ``names``: ``scalar``
    = the softmax scale, ``log2e`` (aiter mha_bwd.cu:613-614)."""
    return {n: v for n, v in (("scalar", _f32_bits(scale)), ("log2e", _f32_bits(float(np.log2(np.e)))))
            if n in names}


def _f32_bits(x: float) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


def run_kernel(path, layout: str, shape: Dict[str, int], ms: ModelSet, seed: int = 0, like=None,
               trace: Optional[str] = None, stage: Optional[str] = None,
               window: Optional[Tuple[int, int]] = None, pointers: Optional[Dict[str, int]] = None) -> RunResult:
    """Run the kernel of ``path`` (a code object, or a listing with ``like``) in ``layout`` at
    ``shape`` (shape variables; the family's fixed sizes fill the rest) on random inputs and
    compare its outputs with :func:`reference`.  Where the routing csvs beside the kernel name
    a pipeline (:func:`addrsim.emu.pipeline.find_pipeline`: aiter e4048607's corpus), the odo
    pre-kernel computes D and the post-kernel converts the dQ accumulator, and D and the final
    dQ are compared too; ``stage`` ("odo", "main", "post") runs one kernel of it on reference
    inputs instead.  ``window``: (left, right) of a sliding-window kernel (-1: unlimited; the
    host's window_size_left/right, top-left aligned).  ``pointers``: kernel pointer argument ->
    byte address to place that tensor at (a counterexample's kernargs; the others are placed
    2 MiB apart from 2**40).  ``trace``: a buffer whose every access
    of the main kernel is kept in
    ``RunResult.trace`` as (pc, workgroup ids, wave, lane, byte offset from the buffer's base,
    size, kind).  Raises InputError (a shape outside the kernel's domain, a layout the models
    lack), NotEmulatedError (group mode, sliding window, a stage the folder lacks, an
    instruction without emulated semantics)."""
    if trace is not None and trace not in TENSORS:
        raise InputError("--trace", f"unknown buffer {trace!r} (one of {', '.join(TENSORS)})")
    if stage is not None and stage not in STAGES:
        raise InputError("--stage", f"unknown stage {stage!r} (one of {', '.join(STAGES)})")
    src, k = _runnable_kernel(path, ms, like)
    pipe = find_pipeline(Path(like if like is not None else path), src.co.arch)
    _stage_available(path, pipe, stage)
    prob = build_problem(ms, k, layout, Sym("tid_x", 32, "lane"), None, src.co.arch, None)
    _shape_given(path, prob, shape)
    env = shape_env(prob, shape)
    mask, free = _mask(k.symbol, window, env)
    starts = None
    if prob.mode == "group":
        starts, env = group_starts(env)
    _in_domain(path, prob, env)
    consts = {n: e.value for n, e in prob.names.items() if isinstance(e, X.Const)}
    direct_dq = not consts.get("acc")          # no accumulator (acc 0): dQ written in place
    lay = layout_of(ms, layout)
    _small_enough(path, prob, env)
    at = {b: pointers[buffer_pointer(ms, k, b)] for b in TENSORS if buffer_pointer(ms, k, b) in (pointers or {})}
    run = _Run(Memory(), env, lay, element_type(k.symbol), np.random.default_rng(seed), starts, at)
    scale = 1.0 / np.sqrt(env["hdim_q"])
    ref = run.place_inputs(pipe is not None and pipe.pre is not None, lambda *t, o=None: reference(
        *t, scale, mask, o))
    if pipe is not None and pipe.pre is not None and stage in (None, "odo"):
        run.stage(pipe.pre, odo_arguments(run.bases, run.byte_strides(run.o_tensor()), run.byte_strides("do"),
                                          run.byte_strides("lse", 4), run.host_env()), "d")
        run.judge("d", run.views["d"].astype(np.float64), ref["d"])
        if stage == "odo":
            return run.result(k.symbol if pipe.pre is None else pipe.pre.symbol, layout)
    else:
        run.views["d"][...] = ref["d"].astype(np.float32)
    post = pipe.post if pipe is not None else None
    a32 = pipe.row.get("atomic32") == "1" if pipe is not None else consts.get("acc") == 4     # acc: bytes per element
    run.alloc_dq(direct_dq, post, a32)
    if stage == "post":
        run.views["dq_acc"][...] = ref["dq"].astype(np.float32)
        run.post(post, ref)
        return run.result(post.symbol, layout)
    kept = run.main(k, src, prob, ms, scale, trace, free)
    if run.fault == "" and post is not None and stage is None:
        run.post(post, ref)
    else:
        run.judge_dq(direct_dq, a32, post, ref["dq"])
    for b in ("dk", "dv"):
        run.judge(b, _f64(run.views[b], run.dtype), ref[b])
    run.trace = kept
    return run.result(k.symbol, layout)


def _mask(symbol: str, window, env) -> Tuple[object, Dict[str, int]]:
    """(the reference's mask, the arguments the host derives from it): causal top-left or
    bottom-right from the kernel's name; a sliding-window kernel's (mask_y, mask_x) from
    ``window``.  Raises InputError for a window missing or given to another kernel."""
    if ("swa" in symbol) != (window is not None):
        raise InputError("--window", f"kernel {symbol} " + ("is a sliding-window kernel: give --window LEFT,RIGHT"
                                                            if window is None else "has no sliding window"))
    if window is not None:
        yx = window_coordinates(*window, env["seqlen_q"], env["seqlen_k"])
        return yx, {"mask_y": yx[0], "mask_x": yx[1]}
    return ("bottom_right" if "causal_br" in symbol else "top_left" if "causal" in symbol else ""), {}


def _stage_available(path, pipe, stage) -> None:
    """Refuse a stage the kernel's folder does not have.  Raises NotEmulatedError."""
    if stage == "odo" and (pipe is None or pipe.pre is None):
        raise NotEmulatedError(f"{path}: no odo pre-kernel beside it (no fmha_bwd_odo.csv row): its host computes D")
    if stage == "post":
        if pipe is None or pipe.post is None:
            raise NotEmulatedError(f"{path}: no post-kernel beside it: its host writes dQ without one")
        if pipe.post.role == "dq_shuffle":
            raise NotEmulatedError(f"{path}: --stage post with dq_shuffle: its 16-bit accumulator is in the main "
                                   f"kernel's own order, which no reference gives; run the whole pipeline")


class _Run:
    """The state of one run: memory, the shape, the layout, the element type, the placed
    tensors (bases and strided views) and the outputs judged so far."""

    def __init__(self, mem: Memory, env, lay, dtype: str, rng, starts=None, at=None):
        self.mem, self.env, self.lay, self.dtype, self.rng = mem, env, lay, dtype, rng
        self.at = at or {}                         # buffer -> the byte address it must be placed at
        self.starts = starts                       # group mode: (seqstart_q, seqstart_k), else None
        self.mode = "group" if starts else "batch"
        self.bases: Dict[str, int] = {}
        self.views: Dict[str, np.ndarray] = {}
        self.outputs: Dict[str, Output] = {}
        self.stages: List[dict] = []
        self.instructions, self.seconds, self.fault = 0, 0.0, ""
        self.trace: List[tuple] = []
        self.not_compared: Dict[str, str] = {}
        rows = {"seqlen_q": "total_q", "seqlen_k": "total_k"} if starts else {}
        self.dims = {b: (1 if starts else env["batch"], env[h], env[rows.get(r, r)]) + ((env[c],) if c else ())
                     for b, (_, h, r, c) in TENSORS.items()}

    def byte_strides(self, tensor: str, size: int = 2) -> Tuple[int, int, int]:
        """(batch, head, row) strides in bytes of ``tensor``'s layout (group mode: the packed
        strides, batch stride 0)."""
        return tuple(size * offset(self.lay, tensor, {d: 1}, self.env, self.mode) for d in ("batch", "head", "seq"))

    def o_tensor(self) -> str:
        """The layout tensor O's strides come from: "o" where the layout gives O its own, else
        "do" (O has dO's shape)."""
        return "o" if "o" in self.lay.mode(self.mode) else "do"

    def host_env(self) -> Dict[str, int]:
        """The shape as the host passes it to the pre- and post-kernels: in group mode
        seqlen_q is the packed total (mha_bwd.cu 586), and the sequence-start pointers."""
        env = dict(self.env)
        if self.starts:
            env["seqlen_q"] = env["total_q"]
            env["seqstart_q"] = self.bases["seqstart_q"]
        return env

    def judge(self, name: str, got: np.ndarray, ref: np.ndarray) -> None:
        """Judge output ``name`` (group mode: each sequence unpacked to [batch, head, rows]
        so a wrong slice names its batch)."""
        if got.ndim == 3:
            got, ref = got[..., None], ref[..., None]
        if self.starts:
            st = self.starts[0] if TENSORS[name][2] == "seqlen_q" else self.starts[1]
            got, ref = _unpack(got, st), _unpack(ref, st)
        self.outputs[name] = _judge(got, ref)

    def _alloc(self, name: str, tensor: str, dims, dtype, data=None):
        try:
            return _strided(self.mem, name, self.lay, tensor, self.env, dims, dtype, data, self.mode,
                            self.at.get(name))
        except EmuError as e:
            raise InputError("pointers", str(e)) from None

    def _reference(self, ref, args, o):
        """The reference's outputs by name: batch mode at once; group mode per sequence, each
        with its own lengths (and mask), packed back into [1, heads, total, cols]."""
        names = ("lse", "d", "dq", "dk", "dv", "o")
        if not self.starts:
            return dict(zip(names, ref(*args, o=o)))
        q, k, v, do = args
        sq, sk = self.starts
        out = {"lse": np.zeros(q.shape[:3]), "d": np.zeros(q.shape[:3]), "dq": np.zeros(q.shape),
               "dk": np.zeros(k.shape[:1] + q.shape[1:2] + k.shape[2:]),
               "dv": np.zeros(v.shape[:1] + q.shape[1:2] + v.shape[2:]), "o": np.zeros(do.shape)}
        for b in range(len(sq) - 1):
            rq, rk = slice(sq[b], sq[b + 1]), slice(sk[b], sk[b + 1])
            part = ref(q[:, :, rq], k[:, :, rk], v[:, :, rk], do[:, :, rq], o=None if o is None else o[:, :, rq])
            for n, val in zip(names, part):
                out[n][:, :, rk if n in ("dk", "dv") else rq] = val
        return out

    def place_inputs(self, with_o: bool, ref):
        """Q, K, V, dO (and O, with dO's strides, for the odo kernel) on random values, LSE from
        the reference, D zeroed; returns the reference's outputs by name, from what memory
        holds (D from the O in memory when O is placed)."""
        ins = {b: _encode(self.rng.standard_normal(self.dims[b]), self.dtype) for b in ("q", "k", "v", "do")}
        for b in ("q", "k", "v", "do"):
            self.bases[b], self.views[b] = self._alloc(b, TENSORS[b][0], self.dims[b], np.uint16, ins[b])
        args = [_f64(np.array(self.views[b]), self.dtype) for b in ("q", "k", "v", "do")]
        o = None
        if with_o:
            exact = self._reference(ref, args, None)["o"]
            self.bases["o"], self.views["o"] = self._alloc("o", self.o_tensor(), self.dims["do"], np.uint16,
                                                           _encode(exact, self.dtype))
            o = _f64(np.array(self.views["o"]), self.dtype)
        out = self._reference(ref, args, o)
        for b, val in (("lse", out["lse"]), ("d", np.zeros_like(out["d"]))):
            self.bases[b], self.views[b] = self._alloc(b, "lse", self.dims[b], np.float32, val.astype(np.float32))
        for b in ("dk", "dv"):
            self.bases[b], self.views[b] = self._alloc(b, b, self.dims[b], np.uint16)
        if self.starts:
            for n, st in zip(("seqstart_q", "seqstart_k"), self.starts):
                self.bases[n] = self.mem.alloc(n, np.asarray(st, dtype=np.int32))
        return out

    def alloc_dq(self, direct: bool, post, a32: bool) -> None:
        """dQ in the layout (16-bit) where the main kernel or the post-kernel writes it, and the
        accumulator where the main kernel adds into one: the host's shape (pipeline.acc_layout)
        with a post-kernel, else fp32 [batch, nhead_q, seqlen_q, hdim_q] (the wheel's)."""
        if direct or post is not None:
            self.bases["dq_out"], self.views["dq"] = self._alloc("dq", "dq", self.dims["dq"], np.uint16)
        if direct:
            self.bases["dq"] = self.bases["dq_out"]
            return
        if post is not None:
            size, dims, strides = acc_layout(a32, self.env, bool(self.starts))
            self.acc_strides = strides
            raw = np.zeros(dims, dtype=np.float32 if size == 4 else np.uint16)
        else:
            raw = np.zeros(self.dims["dq"], dtype=np.float32)
        self.bases["dq"] = self.mem.alloc("dq_acc", raw)
        self.views["dq_acc"] = self.mem.view("dq_acc", raw.dtype).reshape(raw.shape)[tuple(
            slice(0, n) for n in self.dims["dq"])]

    def stage(self, st, args: Dict[str, int], label: str) -> None:
        """Run a pre- or post-kernel ``st`` with ``args`` (by metadata name).  Raises
        NotEmulatedError."""
        src = load_source(st.path)
        (k,) = src.co.kernels[:1]
        names = {a.name for a in k.args}
        missing = sorted(n for n in names if n != "pad" and n not in args)
        if missing:
            raise NotEmulatedError(f"{st.path}: arguments {', '.join(missing)} are not in the host contract "
                                   f"addrsim knows (mha_bwd.cu)")
        la = Launch(k, src.co.arch, src.code[k.symbol], pack_kernarg(k, {n: v for n, v in args.items() if n in names}),
                    stage_grid(st, self.env), (k.reqd_workgroup_size or (256, 1, 1))[0])
        self._launch(la, st.path, st.role, k.symbol)

    def _launch(self, la, path, role: str, symbol: str) -> None:
        t0 = time.time()
        try:
            run_grid(la, self.mem)
        except StrayStore as e:                 # the kernel writes past every tensor: a wrong result
            self.fault = str(e) if role == "main" else f"the {role} kernel: {e}"
        except EmuError as e:
            raise NotEmulatedError(f"{path}: {e}")
        dt = time.time() - t0
        self.instructions += la.instructions
        self.seconds += dt
        self.stages.append({"stage": role, "kernel": symbol, "instructions": la.instructions,
                            "seconds": round(dt, 2)})

    def judge_dq(self, direct: bool, a32: bool, post, ref: np.ndarray) -> None:
        """dQ where no post-kernel ran: in place (direct), the fp32 accumulator (the host's
        conversion is a cast, or --stage main), or not compared (a 16-bit accumulator)."""
        if direct:
            self.judge("dq", _f64(self.views["dq"], self.dtype), ref)
        elif a32:
            self.judge("dq", self.views["dq_acc"].astype(np.float64), ref)
        else:
            self.not_compared["dq"] = ("the 16-bit accumulator is in the main kernel's own order; dQ is compared "
                                       "after the dq_shuffle post-kernel" + (" (run the whole pipeline)" if post else
                                                                             " (none beside this kernel)"))

    def post(self, st, ref) -> None:
        """The post-kernel: the accumulator to dQ in the layout; judges dQ."""
        args = post_arguments(self.bases["dq"], self.bases["dq_out"], self.acc_strides,
                              self.byte_strides("dq"), self.host_env())
        self.stage(st, args, "dq")
        self.judge("dq", _f64(self.views["dq"], self.dtype), ref["dq"])

    def main(self, k, src, prob, ms, scale: float, trace: Optional[str], free=None) -> List[tuple]:
        """The dQ/dK/dV kernel with the host contract's arguments (``free``: the values of
        arguments the contract leaves to the caller, such as a window's mask_x/mask_y);
        returns the trace."""
        ptrs = {n: 0 for n, e in prob.kernargs.items() if any(x.kind == "ptr" for x in X.symbols(e).values())}
        ptrs.update({buffer_pointer(ms, k, b): self.bases[b] for b in TENSORS})
        ptrs.update({a: self.bases[s.name] for a, s in prob.arrays.items() if s.name in self.bases})   # group mode
        args = kernel_arguments(prob, self.env, ptrs, free)
        names = {a.name for a in k.args}
        args.update(_float_args(names, scale))
        grid = tuple(int(X.evaluate(prob.grid_count[prob.grid[ax].name], self.env)) for ax in "xyz")
        kept: List[tuple] = []
        tptr = self.bases.get(trace) if trace else None
        mem = self.mem
        home = mem_owner(mem, tptr) if tptr is not None else None      # dQ's pointer may be the accumulator

        def on_access(ids, wave, a):
            if tptr is not None and a.lanes.any():
                lo = int(a.address[a.lanes].min())
                if lo >= tptr and lo - tptr < 1 << 36 and mem_owner(mem, lo) == home:
                    for lane in np.nonzero(a.lanes)[0]:
                        kept.append((a.pc, ids, wave, int(lane), int(a.address[lane]) - tptr, a.size, a.kind))
        la = Launch(k, src.co.arch, src.code[k.symbol], pack_kernarg(k, {n: v for n, v in args.items() if n in names}),
                    grid, (k.reqd_workgroup_size or (256, 1, 1))[0], on_access=on_access)
        self._launch(la, k.symbol, "main", k.symbol)
        return kept

    def result(self, symbol: str, layout: str) -> RunResult:
        shown = {v: n for v, n in self.env.items() if not v.startswith("total_")}
        ok = all(o.ok for o in self.outputs.values()) and not self.fault
        return RunResult(ok, symbol, layout, shown, self.outputs, self.instructions, round(self.seconds, 2),
                         self.trace, self.fault, self.stages, self.not_compared)


GROUP_STEP = 24
"""Group mode: sequence b is GROUP_STEP rows shorter than sequence b - 1 (at least 1 row), so
the sequences differ in length and none but the first is a multiple of a tile."""


def group_starts(env: Dict[str, int]):
    """((seqstart_q, seqstart_k), env with total_q/total_k) for group mode: sequence b has
    max(1, seqlen - GROUP_STEP*b) query and key rows (seqlen_q/seqlen_k are the longest, as
    the host's max_seqlen)."""
    out, env = [], dict(env)
    for which in ("q", "k"):
        lens = [max(1, env[f"seqlen_{which}"] - GROUP_STEP * b) for b in range(env["batch"])]
        out.append([0] + np.cumsum(lens).tolist())
        env[f"total_{which}"] = out[-1][-1]
    return (out[0], out[1]), env


def _unpack(packed: np.ndarray, starts) -> np.ndarray:
    """[1, heads, total, cols] -> [batch, heads, longest, cols], zero past each sequence."""
    lens = np.diff(starts)
    out = np.zeros((len(lens), packed.shape[1], int(lens.max()), packed.shape[3]))
    for b in range(len(lens)):
        out[b, :, :lens[b]] = packed[0, :, starts[b]:starts[b + 1]]
    return out


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
                               f"dQ/dK/dV kernel (an odo, dq_convert or dq_shuffle kernel runs as a stage of its main "
                               f"kernel's pipeline, where the routing csvs beside it name it: run the main kernel, "
                               f"or --stage)")
    return src, k


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
            raise InputError("--shape", f"{n} is not given: " + (
                "in group mode the run picks each sequence's length from seqlen_q/seqlen_k (the longest) and "
                "packs them" if prob.mode == "group" else "it is a group-mode size; this run is batch mode"))


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


# ----------------------------------------------------------------------------- a direct launch

@dataclass
class DirectLaunch:
    """The kernel launched by hand as the host would at one shape (``repro --direct``): the
    kernarg segment's entries (offset and size in bytes, from the metadata; the value the host
    contract gives at this shape, or the tensor whose device address goes there), the grid in
    workgroups (the family's counts), the workgroup size in threads (metadata), and every
    tensor's logical dims ([batch, heads, rows(, cols)]) and element strides in the layout
    (models/layouts.yaml), with its element type.  ``dq``: where the kernel leaves dQ:
    "direct" (in the layout), "acc32" (the fp32 accumulator [batch, nhead_q, seqlen_q,
    hdim_q]) or "acc16" (a 16-bit accumulator only a post-kernel reads: dQ not compared)."""

    symbol: str
    arch: str
    kernarg_size: int
    kernargs: List[Tuple[str, int, int, object]]      # (name, offset, bytes, int value or tensor name)
    grid: Tuple[int, int, int]
    threads: int
    tensors: Dict[str, Tuple[Tuple[int, ...], Tuple[int, ...], str]]
    dq: str
    scale: float


def direct_launch(path, layout: str, shape: Dict[str, int], ms: ModelSet, like=None) -> DirectLaunch:
    """The :class:`DirectLaunch` of the kernel of ``path`` (a code object, or a listing with
    ``like``) in ``layout`` at ``shape``: the arguments of :func:`run_kernel`'s main launch
    (:func:`addrsim.model.problem.kernel_arguments`, ``scalar`` = 1/sqrt(hdim_q) and ``log2e``
    as binary32) with every pointer argument named by its tensor.  Batch mode, no sliding
    window.  Raises InputError (a shape outside the domain, a layout the models lack),
    NotEmulatedError (group mode, a sliding-window kernel, an argument that is a pointer plus
    an offset)."""
    src, k = _runnable_kernel(path, ms, like)
    prob = build_problem(ms, k, layout, Sym("tid_x", 32, "lane"), None, src.co.arch, None)
    _shape_given(path, prob, shape)
    env = shape_env(prob, shape)
    if prob.mode == "group":
        raise NotEmulatedError(f"{path}: a direct launch of a group-mode kernel needs the host's sequence-start "
                               "arrays; repro --direct writes batch-mode launches only")
    mask, free = _mask(k.symbol, None, env)
    _in_domain(path, prob, env)
    consts = {n: e.value for n, e in prob.names.items() if isinstance(e, X.Const)}
    dq = "direct" if not consts.get("acc") else "acc32" if consts.get("acc") == 4 else "acc16"
    lay = layout_of(ms, layout)
    tensor_of = {buffer_pointer(ms, k, b): b for b in TENSORS if buffer_pointer(ms, k, b)}
    if dq != "direct" and buffer_pointer(ms, k, "dq"):
        tensor_of[buffer_pointer(ms, k, "dq")] = "dq_acc"
    ptrs = {n: 0 for n, e in prob.kernargs.items() if any(x.kind == "ptr" for x in X.symbols(e).values())}
    for n in ptrs:
        e = prob.kernargs[n]
        if not isinstance(e.args[0] if isinstance(e, X.Op) and e.op == "zext" else e, Sym):
            raise NotEmulatedError(f"{path}: argument {n} is a pointer plus an offset in the host contract")
    values = kernel_arguments(prob, env, ptrs, free)
    scale = 1.0 / float(np.sqrt(env["hdim_q"]))
    names = {a.name: a for a in k.args}
    values.update(_float_args(names, scale))
    args = [(n, names[n].offset, names[n].size, tensor_of.get(n, v)) for n, v in sorted(
        values.items(), key=lambda nv: names[nv[0]].offset if nv[0] in names else -1) if n in names]
    grid = tuple(int(X.evaluate(prob.grid_count[prob.grid[ax].name], env)) for ax in "xyz")
    return DirectLaunch(k.symbol, src.co.arch, k.kernarg_segment_size, args, grid,
                        (k.reqd_workgroup_size or (256, 1, 1))[0], _direct_tensors(lay, env, element_type(k.symbol)),
                        dq, scale)


def _direct_tensors(lay, env: Dict[str, int], dtype: str) -> Dict[str, tuple]:
    """Each tensor's (dims, element strides, element type) in the layout (batch mode; the last
    dimension contiguous, as :func:`_strided` places it), and the fp32 dQ accumulator
    [batch, nhead_q, seqlen_q, hdim_q], contiguous.  Raises InputError for a negative stride."""
    out = {}
    for b, (tensor, h, r, c) in TENSORS.items():
        dims = (env["batch"], env[h], env[r]) + ((env[c],) if c else ())
        strides = [offset(lay, tensor, {d: 1}, env, "batch") for d in ("batch", "head", "seq")][:len(dims) - 1] + [1]
        if min(strides) < 0:
            raise InputError(lay.origin or "<layouts>", f"layout {lay.name}: {tensor} has a negative stride "
                                                        f"{strides}: a GPU tensor view has none")
        out[b] = (dims, tuple(strides), "f32" if c is None else dtype)
    B, H, S, hd = env["batch"], env["nhead_q"], env["seqlen_q"], env["hdim_q"]
    out["dq_acc"] = ((B, H, S, hd), (H * S * hd, S * hd, hd, 1), "f32")
    return out
