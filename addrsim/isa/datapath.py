"""The data path the prover does not model and the emulator runs: binary32 rows, bf16
conversions, DPP lane selection, the MFMA matrix layouts and products, LDS and atomics.

Owns :data:`FLOAT` (mnemonic -> :class:`Row`), :func:`dpp_source`, :func:`mfma`,
:data:`MFMA`, :func:`bf16_round` and :func:`pk_add_bf16`.  May import nothing of addrsim
(numpy only): to the prover these instructions are data (:data:`addrsim.isa.table.DATA_PREFIXES`),
so this table does not repeat :mod:`addrsim.isa.alu`; the emulator reads both.

Each row works on whole waves: uint32 bit patterns per lane in, uint32 (or a lane mask as
a bool vector) out.  Sources: AMD Instinct MI300 ISA Reference Guide (CDNA3), VOP2/VOP3
opcode tables (V_FMA_F32, V_EXP_F32: 2**x to 1 ULP, V_CMP_U_F32: unordered), section 6.8
"DPP" (quad_perm: lane i reads lane 4*(i//4) + sel[i%4]; row_mask: rows of 16 lanes written;
bank_mask: groups of 4 lanes within a row written), chapter 7 "Matrix arithmetic" and AMD's
matrix instruction calculator (``--detail-instruction`` for v_mfma_f32_16x16x16bf16_1k on
CDNA3: A[i][k] in lane i + 16*(k//4), element k%4; B[k][j] in lane j + 16*(k//4), element
k%4; D[i][j] in lane j + 16*(i//4), register i%4; CDNA4's 16x16x32 the same with 8 K
elements per lane).  Float rows compute in numpy float32
(round to nearest even, the MODE register's reset value); V_FMA_F32 is computed as a float64
product and sum rounded once to float32 (the product of two float32 is exact in float64, the
sum rounds twice in rare ties: documented, the tolerance of `addrsim run` covers it);
denormals are kept (the fmha kernels' descriptors set FP32 denormal mode to "keep": the
emulator reads the descriptor).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, Tuple

import numpy as np

F32, U32 = np.float32, np.uint32


def _f(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.uint64).astype(U32).view(F32)


def _u(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=F32).view(U32).astype(np.uint64)


@dataclass(frozen=True)
class Row:
    """A data-path row: ``outs``/``ins`` as in :class:`addrsim.isa.alu.Sem` (``v32``, ``m`` a
    lane mask), ``fn`` from uint64 lane vectors to a tuple of outputs."""

    outs: Tuple[str, ...]
    ins: Tuple[str, ...]
    fn: Callable[..., tuple]


FLOAT: Dict[str, Row] = {}


def row(name: str, sig: str):
    outs, ins = sig.split(":")

    def deco(fn):
        FLOAT[name] = Row(tuple(outs.split(",")), tuple(ins.split(",")), fn)
        return fn
    return deco


def _ieee(fn):
    def run(*a):
        with np.errstate(all="ignore"):
            return fn(*a)
    return run


row("v_add_f32", "v32:v32,v32")(_ieee(lambda a, b: (_u(_f(a) + _f(b)),)))
row("v_sub_f32", "v32:v32,v32")(_ieee(lambda a, b: (_u(_f(a) - _f(b)),)))
row("v_subrev_f32", "v32:v32,v32")(_ieee(lambda a, b: (_u(_f(b) - _f(a)),)))
row("v_max_f32", "v32:v32,v32")(_ieee(lambda a, b: (_u(np.fmax(_f(a), _f(b))),)))
row("v_min_f32", "v32:v32,v32")(_ieee(lambda a, b: (_u(np.fmin(_f(a), _f(b))),)))
row("v_fma_f32", "v32:v32,v32,v32")(_ieee(lambda a, b, c: (_u((_f(a).astype(np.float64) * _f(b).astype(np.float64)
                                                             + _f(c).astype(np.float64)).astype(F32)),)))
row("v_exp_f32", "v32:v32")(_ieee(lambda a: (_u(np.exp2(_f(a))),)))
row("v_mov_b32", "v32:v32")(lambda a: (a,))
row("v_cvt_pk_bf16_f32", "v32:v32,v32")(lambda a, b: ((bf16_round(_f(a)) | bf16_round(_f(b)) << U32(16))
                                                     .astype(np.uint64),))
row("v_cmp_u_f32", "m:v32,v32")(lambda a, b: (np.isnan(_f(a)) | np.isnan(_f(b)),))
row("v_cmp_o_f32", "m:v32,v32")(lambda a, b: (~(np.isnan(_f(a)) | np.isnan(_f(b))),))


def dpp_source(modifiers) -> Tuple[np.ndarray, np.ndarray]:
    """(source lane per lane, lanes written) of a DPP ``quad_perm`` with its ``row_mask`` and
    ``bank_mask`` (other DPP controls raise ValueError)."""
    mods = {m.split(":", 1)[0]: m.split(":", 1)[1] if ":" in m else "" for m in modifiers}
    lane = np.arange(64)
    if "quad_perm" not in mods:
        raise ValueError("DPP control other than quad_perm")
    sel = [int(x) for x in mods["quad_perm"].strip("[]").split(",")]
    src = 4 * (lane // 4) + np.array(sel)[lane % 4]
    rows, banks = int(mods.get("row_mask", "0xf"), 0), int(mods.get("bank_mask", "0xf"), 0)
    write = ((rows >> (lane // 16)) & 1).astype(bool) & ((banks >> ((lane % 16) // 4)) & 1).astype(bool)
    return src, write


def bf16_to_f32(h: np.ndarray) -> np.ndarray:
    """bf16 bit patterns (uint16 in the low half) as float32."""
    return (np.asarray(h, dtype=np.uint64).astype(U32) << U32(16)).view(F32)


def bf16_round(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to nearest even bf16 bit patterns (uint32 < 2**16; NaN kept
    quiet)."""
    b = np.asarray(x, dtype=F32).view(U32).astype(np.uint64)
    r = (b + np.uint64(0x7FFF) + ((b >> np.uint64(16)) & np.uint64(1))) >> np.uint64(16)
    nan = np.isnan(np.asarray(x, dtype=F32))
    return np.where(nan, (b >> np.uint64(16)) | np.uint64(0x40), r & np.uint64(0xFFFF)).astype(U32)


def pk_add_bf16(old: np.ndarray, add: np.ndarray) -> np.ndarray:
    """Packed bf16 add of two uint32 words (two bf16 each), each half rounded to nearest even
    (GLOBAL_ATOMIC_PK_ADD_BF16)."""
    out = np.zeros_like(np.asarray(old, dtype=U32))
    for k in (0, 16):
        a = bf16_to_f32((np.asarray(old, dtype=U32) >> U32(k)) & U32(0xFFFF))
        b = bf16_to_f32((np.asarray(add, dtype=U32) >> U32(k)) & U32(0xFFFF))
        with np.errstate(all="ignore"):
            out |= bf16_round(a + b) << U32(k)
    return out


def _bf16_elems(regs: np.ndarray) -> np.ndarray:
    """[n registers, 64 lanes] of packed bf16 -> float64 [64 lanes, 2n elements]."""
    r = np.asarray(regs, dtype=U32)
    parts = [(r[k // 2] >> U32(16 * (k % 2))) & U32(0xFFFF) for k in range(2 * len(r))]
    return np.stack([bf16_to_f32(p).astype(np.float64) for p in parts], axis=1)


def _mfma_16x16_bf16(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """D = A*B + C of a 16x16xK bf16 MFMA, K = 4 * (bf16 per lane): ``a``, ``b`` [K/8, 64]...
    uint32 registers of packed bf16 (lane i + 16*g holds row/column i, K elements g*K/4 ..
    (g+1)*K/4 - 1), ``c`` [4, 64] uint32 float32 registers; returns D [4, 64] uint32, the
    products summed in float64 and rounded once to float32."""
    lane = np.arange(64)
    ea, eb = _bf16_elems(a), _bf16_elems(b)
    per = ea.shape[1]
    K = 4 * per
    A, B, C = np.zeros((16, K)), np.zeros((K, 16)), np.zeros((16, 16))
    for item in range(per):
        A[lane % 16, per * (lane // 16) + item] = ea[:, item]
        B[per * (lane // 16) + item, lane % 16] = eb[:, item]
    cf = np.asarray(c, dtype=U32).view(F32).astype(np.float64)
    for item in range(4):
        C[4 * (lane // 16) + item, lane % 16] = cf[item]
    D = (A @ B + C).astype(F32)
    return np.stack([D[4 * (lane // 16) + item, lane % 16] for item in range(4)]).view(U32)


mfma_16x16x16_bf16 = _mfma_16x16_bf16

MFMA = {"v_mfma_f32_16x16x16_bf16": (2, 2, 4, _mfma_16x16_bf16),
        "v_mfma_f32_16x16x16bf16_1k": (2, 2, 4, _mfma_16x16_bf16),
        "v_mfma_f32_16x16x32_bf16": (4, 4, 4, _mfma_16x16_bf16)}
"""MFMA mnemonic -> (A registers, B registers, C/D registers, function).  gfx950's 16x16x32
bf16 (CDNA4 guide, matrix calculator for CDNA4): each lane holds 8 consecutive K elements,
lane group g = lane // 16 holds K elements 8g .. 8g + 7."""
