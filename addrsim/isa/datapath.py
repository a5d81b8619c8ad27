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
binary32 denormals are flushed as the kernel descriptor's FLOAT_DENORM_MODE_32 says (every
fmha_v3_bwd kernel: flush sources and results; :func:`flush_f32`, applied by the emulator;
MFMA accumulation is not flushed).
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


def f16_to_f32(h: np.ndarray) -> np.ndarray:
    """IEEE binary16 bit patterns (uint16 in the low half) as float32 (exact)."""
    return np.asarray(h, dtype=np.uint64).astype(np.uint16).view(np.float16).astype(F32)


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
row("v_cmp_eq_f32", "m:v32,v32")(lambda a, b: (_f(a) == _f(b),))
row("v_cvt_pk_f16_f32", "v32:v32,v32")(_ieee(lambda a, b: ((f16_round(_f(a)) | f16_round(_f(b)) << U32(16))
                                                          .astype(np.uint64),)))
row("v_cvt_pkrtz_f16_f32", "v32:v32,v32")(_ieee(lambda a, b: ((f16_round(_f(a), True) | f16_round(_f(b), True)
                                                             << U32(16)).astype(np.uint64),)))
row("v_cvt_f32_f16", "v32:v32")(lambda a: (_u(f16_to_f32(a & np.uint64(0xFFFF))),))
row("v_cvt_f32_bf16", "v32:v32")(lambda a: (_u(bf16_to_f32(a & np.uint64(0xFFFF))),))
row("v_cmp_u_f32", "m:v32,v32")(lambda a, b: (np.isnan(_f(a)) | np.isnan(_f(b)),))
row("v_cmp_o_f32", "m:v32,v32")(lambda a, b: (~(np.isnan(_f(a)) | np.isnan(_f(b))),))


def flush_f32(x: np.ndarray) -> np.ndarray:
    """binary32 bit patterns (uint64 lanes) with denormals replaced by a zero of their sign (the
    MODE register's FP32 denormal flush)."""
    x = np.asarray(x, dtype=np.uint64)
    denorm = ((x & np.uint64(0x7F800000)) == 0) & ((x & np.uint64(0x007FFFFF)) != 0)
    return np.where(denorm, x & np.uint64(0x80000000), x)


def f32_operands(mn: str) -> Tuple[bool, bool]:
    """(sources are binary32, result is binary32) of a float row: conversions from f16/bf16
    read 16-bit sources; compares and packs to f16/bf16 write no binary32 result."""
    src = "_f32" in mn and not mn.startswith(("v_cvt_f32_", "v_mov"))
    dst = mn.startswith("v_cvt_f32_") or ("_f32" in mn and not mn.startswith(("v_cmp", "v_cvt_pk")))
    return src, dst


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


def permlane16_swap(vdst: np.ndarray, src: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """(new vdst, new src0) of V_PERMLANE16_SWAP_B32 (gfx950): the odd rows (16 lanes each) of
    vdst are swapped with the even rows of src0, lane for lane: vdst lane 16+i <-> src0 lane i,
    vdst lane 48+i <-> src0 lane 32+i (CDNA4 ISA guide, VOP1; LLVM's llvm.amdgcn.permlane16.swap:
    "odd rows of the first operand are swapped with even rows of the second operand")."""
    d, s = np.array(vdst, copy=True), np.array(src, copy=True)
    for odd in (16, 48):
        d[odd:odd + 16], s[odd - 16:odd] = src[odd - 16:odd], vdst[odd:odd + 16]
    return d, s


def read_tr_b16(raw: np.ndarray) -> np.ndarray:
    """DS_READ_B64_TR_B16 (gfx950): ``raw`` [64 lanes, 4] the 16-bit elements each lane's
    address reads (64 bits); returns [64, 4] what each lane receives.  In each block of 16
    lanes the 64 elements are a 16x4 (MN x K) tile read MN-contiguous: lane j of the block
    reads MN 4*(j % 4) .. +3 at K = j // 4; lane i receives MN = i, K = 0..3, so element e of
    lane i is element i % 4 of lane 4*e + i // 4 (CDNA4 ISA guide 11.4 "MFMA transpose load
    from LDS": each lane holds 4 consecutive M or N values; the block diagram of Triton's
    chooseLLDsReadB64TrLayout, LinearLayoutConversions.cpp)."""
    lane = np.arange(64)
    block, i = 16 * (lane // 16), lane % 16
    out = np.empty_like(raw)
    for e in range(4):
        out[:, e] = raw[block + 4 * e + i // 4, i % 4]
    return out


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


def f16_round(x: np.ndarray, toward_zero: bool = False) -> np.ndarray:
    """float32 values as IEEE binary16 bit patterns (uint32 < 2**16): round to nearest even
    (V_CVT_PK_F16_F32 under the MODE register's reset rounding), or toward zero
    (V_CVT_PKRTZ_F16_F32: a finite value past 65504 gives 65504, not infinity)."""
    x = np.asarray(x, dtype=F32)
    with np.errstate(all="ignore"):
        h = x.astype(np.float16)
    bits = h.view(np.uint16).astype(U32)
    if toward_zero:
        past = np.isfinite(x) & (np.abs(h.astype(F32)) > np.abs(x))
        bits = np.where(past, bits - U32(1), bits)
    return bits


def _pk_add(old: np.ndarray, add: np.ndarray, decode, encode) -> np.ndarray:
    """Packed add of two uint32 words of two 16-bit values each (``decode`` to float32, the
    sum ``encode``d back to 16-bit patterns, each half on its own)."""
    out = np.zeros_like(np.asarray(old, dtype=U32))
    for k in (0, 16):
        a = decode((np.asarray(old, dtype=U32) >> U32(k)) & U32(0xFFFF))
        b = decode((np.asarray(add, dtype=U32) >> U32(k)) & U32(0xFFFF))
        with np.errstate(all="ignore"):
            out |= encode(a + b) << U32(k)
    return out


def pk_add_f16(old: np.ndarray, add: np.ndarray) -> np.ndarray:
    """Packed binary16 add, each half rounded to nearest even (BUFFER_ATOMIC_PK_ADD_F16)."""
    return _pk_add(old, add, f16_to_f32, f16_round)


def pk_add_bf16(old: np.ndarray, add: np.ndarray) -> np.ndarray:
    """Packed bf16 add, each half rounded to nearest even (GLOBAL_ATOMIC_PK_ADD_BF16)."""
    return _pk_add(old, add, bf16_to_f32, bf16_round)


def _elems(regs: np.ndarray, decode) -> np.ndarray:
    """[n registers, 64 lanes] of packed 16-bit values -> float64 [64 lanes, 2n elements],
    element k in register k // 2, half k % 2 (low half first)."""
    r = np.asarray(regs, dtype=U32)
    parts = [(r[k // 2] >> U32(16 * (k % 2))) & U32(0xFFFF) for k in range(2 * len(r))]
    return np.stack([decode(p).astype(np.float64) for p in parts], axis=1)


def _mfma(mn: int, decode):
    """D = A*B + C of an MNxMN xK MFMA of 16-bit inputs (MN 16 or 32), the layouts of AMD's
    matrix instruction calculator (CDNA3 ``v_mfma_f32_16x16x16bf16_1k``/``_f16``,
    ``v_mfma_f32_32x32x8bf16_1k``/``_f16``; CDNA4 ``16x16x32`` and ``32x32x16``, the same with
    8 K elements per lane): lane l holds row (A) or column (B) l % MN, K elements
    g*per .. g*per + per - 1 with g = l // MN; D[i][j] is in lane j + MN*((i // 4) % (64 // MN)),
    register 4*(i // (256 // MN)) + i % 4 (16x16: lane j + 16*(i//4), register i%4; 32x32: lane
    j + 32*((i//4)%2), register 4*(i//8) + i%4).  The products are summed in float64 and
    rounded once to float32 (not bit-exact: see tests/test_datapath.py)."""
    if mn not in (16, 32):
        raise ValueError(f"MFMA of {mn}x{mn} blocks")
    groups = 64 // mn
    lane = np.arange(64)
    nregs = mn * mn // 64
    i_of = np.array([[4 * (r // 4) * groups + 4 * (l // mn) + r % 4 for l in range(64)] for r in range(nregs)])
    j_of = np.array([[l % mn for l in range(64)] for _ in range(nregs)])

    def run(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
        ea, eb = _elems(a, decode), _elems(b, decode)
        per = ea.shape[1]
        K = groups * per
        A, B = np.zeros((mn, K)), np.zeros((K, mn))
        for item in range(per):
            A[lane % mn, per * (lane // mn) + item] = ea[:, item]
            B[per * (lane // mn) + item, lane % mn] = eb[:, item]
        C = np.zeros((mn, mn))
        C[i_of, j_of] = np.asarray(c, dtype=U32).view(F32).astype(np.float64)
        D = (A @ B + C).astype(F32)
        return D[i_of, j_of].view(U32)
    return run


_mfma_16x16_bf16 = _mfma(16, bf16_to_f32)
mfma_16x16x16_bf16 = _mfma_16x16_bf16

MFMA = {"v_mfma_f32_16x16x16_bf16": (2, 2, 4, _mfma_16x16_bf16),
        "v_mfma_f32_16x16x16bf16_1k": (2, 2, 4, _mfma_16x16_bf16),
        "v_mfma_f32_16x16x32_bf16": (4, 4, 4, _mfma_16x16_bf16),
        "v_mfma_f32_32x32x16_bf16": (4, 4, 16, _mfma(32, bf16_to_f32)),
        "v_mfma_f32_16x16x16_f16": (2, 2, 4, _mfma(16, f16_to_f32)),
        "v_mfma_f32_16x16x32_f16": (4, 4, 4, _mfma(16, f16_to_f32)),
        "v_mfma_f32_32x32x16_f16": (4, 4, 16, _mfma(32, f16_to_f32))}
"""MFMA mnemonic -> (A registers, B registers, C/D registers, function), gfx942's 16x16x16
and gfx950's 16x16x32 and 32x32x16 (CDNA4 guide, matrix calculator for CDNA4: each lane holds
8 consecutive K elements)."""
