"""Pattern C (DOMAIN.md section 2; seed note "Pattern C: dQ Already Uses Hdim * s_LseD_base"):
"if the 32-bit dQ offset is derived as Hdim * s_LseD_base, fixing s_LseD_base is enough."

The dQ accumulator (dq_acc) is [batch, nhead_q, rows, pitch] in the accumulator's element
size ``acc`` (models/fmha_bwd_v3.yaml `memory`/`buffers`/families):

* 32-bit (fp32) accumulator, a32 families: rows = seqlen_q, pitch = hdim_q, acc = 4 bytes
  (aiter asm_mha_bwd.cu AB:308-309 ``zeros({1, batch, nhead_q, seqlen_q, hdim_q})``); byte
  offset of slice (batch_id, head_id) = ``(batch_id*nhead_q + head_id) * seqlen_q*hdim_q*4``;
* 16-bit accumulator, gfx950 a16 / dq_shuffle families: rows = seqlen_q16 = ceil16(seqlen_q)
  (codegen.py G5:1214), pitch = dpad (128, or 192 for hdim 192: AB:310-315), acc = 2 bytes;
  offset = ``(batch_id*nhead_q + head_id) * seqlen_q16*dpad*2``.

s_LseD_base is pattern A's value ``(batch_id*nhead_q + head_id) * Hs_lsed`` bytes, Hs_lsed =
nhead_stride_lsed*4.  "Hdim" is the multiplier the kernel uses: its compile-time head dim
(the family's hd: 64/128/192/256 for a32, dpad for a16) or the head_dim argument (hdim_q).
hdim_q ranges over the family's head dims (models: ``hd-63 <= hdim_q <= hd``, ``hdim_q % 8 ==
0``; fixed 192 for the hdim-192 a16 family).

Results (proved below, counterexamples when a precondition is dropped):

* 32-bit accumulator: ``Hdim*LseD_base == dq offset`` for every slice but (0, 0) iff
  ``Hs_lsed == 4*seqlen_q`` (LSE rows unpadded) and ``hdim_q == Hdim`` (with Hdim = the
  head_dim argument the second holds by construction); in 32-bit arithmetic also iff no wrap:
  ``(batch*nhead_q - 1)*seqlen_q*hdim_q*4 < 2^32`` -- reachable inside device memory.
* 16-bit accumulator: ``Hdim*LseD_base`` is twice the right offset (when right at all);
  ``Hdim*LseD_base / 2`` is right iff LSE rows are unpadded, ``seqlen_q % 16 == 0`` and
  ``Hdim == dpad`` (for Hdim = head_dim argument: ``hdim_q == dpad``); in 32-bit arithmetic the
  doubled intermediate wraps at half the accumulator size (2 GiB, not 4 GiB).

Units: offsets, LseD_base, Hs_lsed in bytes; nhead_stride_lsed in fp32 elements; seqlen,
hdim, dpad in elements.
"""
from __future__ import annotations

from ._claims import (GiB, MEMORY_GIB, U32, Claim, Dom, all_, eq, ids_domain, implies, shape_vars, shr, u32)
from .pattern_a_abi import abi_32, target as lsed_base

SRC = ("DOMAIN.md section 2; seed note (Pattern C; 'when dQ in 32bits, its offset is Hdim*s_LseD_base'); "
       "models/fmha_bwd_v3.yaml dq/dq_acc buffers and families; aiter asm_mha_bwd.cu AB:308-315, codegen.py G5:1214")

VARS = shape_vars(nhead_stride_lsed=Dom(1, 2 ** 30 - 1), hdim_q=Dom(1, 256))
VARS16 = dict(VARS, seqlen_q16=Dom(16, 2 ** 20, step=16))

A32_CASES = tuple({"Hdim": h} for h in (128, 64, 192, 256))      # kernel head dim (a32 families)
A16_CASES = tuple({"dpad": d} for d in (128, 192))               # accumulator pitch (a16 families)


def domain_a32(v):
    """hdim_q within the family of kernel head dim Hdim: Hdim-63 <= hdim_q <= Hdim, % 8."""
    return all_(ids_domain(v), v["nhead_stride_lsed"] >= v["seqlen_q"],
                v["hdim_q"] <= v["Hdim"], v["hdim_q"] >= v["Hdim"] - 63, v["hdim_q"] % 8 == 0)


def domain_a16(v):
    """hdim_q within the a16 family of pitch dpad: dpad-63..dpad, % 8 (dpad 128); 192 (dpad 192).
    seqlen_q16 is defined linearly: the multiple of 16 in [seqlen_q, seqlen_q + 15]."""
    lo = v["dpad"] if v["dpad"] == 192 else v["dpad"] - 63
    return all_(ids_domain(v), v["nhead_stride_lsed"] >= v["seqlen_q"],
                v["hdim_q"] <= v["dpad"], v["hdim_q"] >= lo, v["hdim_q"] % 8 == 0,
                v["seqlen_q16"] >= v["seqlen_q"], v["seqlen_q16"] <= v["seqlen_q"] + 15)


def slice_index(v):
    return v["batch_id"] * v["nhead_q"] + v["head_id"]


def seqlen_q16(v):
    """ceil16(seqlen_q) rows (G5:1214): a variable of the a16 claims (a multiple of 16, pinned
    to [seqlen_q, seqlen_q + 15] by domain_a16), so that Z3 sees it as an atom; the replay
    checks the definition on every model."""
    return v["seqlen_q16"]


def off_a32(v, acc=4):
    """fp32 accumulator offset, bytes: (batch_id*nhead_q + head_id)*seqlen_q*hdim_q*acc."""
    return slice_index(v) * v["seqlen_q"] * v["hdim_q"] * acc


def off_a16(v, acc=2):
    """16-bit accumulator offset, bytes: (batch_id*nhead_q + head_id)*seqlen_q16*dpad*acc."""
    return slice_index(v) * seqlen_q16(v) * v["dpad"] * acc


def hdim_times_base(v, mult="Hdim"):
    """Hdim * LseD_base, exact (bytes); mult names the multiplier: Hdim, dpad or hdim_q."""
    return v[mult] * lsed_base(v)


def hdim_times_base_32(v, mult="Hdim"):
    """Hdim * LseD_base in s_mul_i32, LseD_base itself from pattern A's 32-bit computation."""
    return u32(v[mult] * abi_32(v))


def p_unpadded(v):
    """LSE rows unpadded: nhead_stride_lsed == seqlen_q (Hs_lsed == 4*seqlen_q bytes)."""
    return v["nhead_stride_lsed"] == v["seqlen_q"]


def p_hdim(v):
    """The multiplier is the accumulator's pitch: hdim_q == Hdim."""
    return v["hdim_q"] == v["Hdim"]


def p_seq16(v):
    return v["seqlen_q"] % 16 == 0


def p_hdim_dpad(v):
    return v["hdim_q"] == v["dpad"]


def p_a32_no_wrap(v):
    """The last slice's offset fits 32 bits: (batch*nhead_q - 1)*seqlen_q*hdim_q*4 < 2^32."""
    return (v["batch"] * v["nhead_q"] - 1) * v["seqlen_q"] * v["hdim_q"] * 4 < U32


def p_a16_doubled_no_wrap(v):
    """The doubled intermediate of the last slice fits: 2*(batch*nhead_q - 1)*seqlen_q16*dpad*2 < 2^32."""
    return 2 * (v["batch"] * v["nhead_q"] - 1) * seqlen_q16(v) * v["dpad"] * 2 < U32


def p_a16_no_wrap(v):
    """The last slice's true offset fits: (batch*nhead_q - 1)*seqlen_q16*dpad*2 < 2^32."""
    return (v["batch"] * v["nhead_q"] - 1) * seqlen_q16(v) * v["dpad"] * 2 < U32


def in_memory_a32(v):
    """Q, dO, dQ (2 bytes), LSE, D and the fp32 accumulator fit in 288 GiB (contiguous sizes)."""
    rows = v["batch"] * v["nhead_q"] * v["seqlen_q"]
    return rows * (3 * v["hdim_q"] * 2 + 8 + v["hdim_q"] * 4) <= MEMORY_GIB * GiB


def in_memory_a16(v):
    """Q, dO, dQ (2 bytes), LSE, D and the 16-bit accumulator [b, h, seqlen_q16, dpad] fit in 288 GiB."""
    rows = v["batch"] * v["nhead_q"] * v["seqlen_q"]
    acc = v["batch"] * v["nhead_q"] * seqlen_q16(v) * v["dpad"] * 2
    return rows * (3 * v["hdim_q"] * 2 + 8) + acc <= MEMORY_GIB * GiB


def _a32(name, statement, lhs, pre, rhs=off_a32, **kw):
    return Claim(name=f"C.a32.{name}", pattern="C", statement=statement, variables=VARS, lhs=lhs, rhs=rhs,
                 precondition=pre, domain=domain_a32, cases=kw.pop("cases", A32_CASES), source=SRC,
                 lhs_text=kw.pop("lhs_text", "Hdim*LseD_base"),
                 rhs_text=kw.pop("rhs_text", "(batch_id*nhead_q+head_id)*seqlen_q*hdim_q*4"), **kw)


def _a16(name, statement, lhs, pre, rhs=off_a16, **kw):
    return Claim(name=f"C.a16.{name}", pattern="C", statement=statement, variables=VARS16, lhs=lhs, rhs=rhs,
                 precondition=pre, domain=domain_a16, cases=kw.pop("cases", A16_CASES), source=SRC,
                 lhs_text=kw.pop("lhs_text", "Hdim*LseD_base/2"),
                 rhs_text=kw.pop("rhs_text", "(batch_id*nhead_q+head_id)*seqlen_q16*dpad*2"), **kw)


def _s(b, h, s, **kw):
    return dict(batch=b, nhead_q=h, seqlen_q=s, **kw)


def half(mult):
    return lambda v: shr(hdim_times_base(v, mult), 1)


CLAIMS = [
    # ---- 32-bit (fp32) accumulator
    _a32("exact", "LSE rows unpadded and hdim_q == Hdim => Hdim*LseD_base == fp32 dq_acc offset (bytes)",
         hdim_times_base, lambda v: all_(p_unpadded(v), p_hdim(v))),
    _a32("iff", "for every slice but (0, 0): Hdim*LseD_base == fp32 dq_acc offset <=> "
                "(nhead_stride_lsed == seqlen_q and hdim_q == Hdim)",
         lambda v: eq(hdim_times_base(v), off_a32(v)), lambda v: slice_index(v) >= 1,
         rhs=lambda v: all_(p_unpadded(v), p_hdim(v)), lhs_text="Hdim*LseD_base == offset",
         rhs_text="unpadded and hdim_q == Hdim"),
    _a32("lse-padded", "without unpadded LSE rows (Hs_lsed > 4*seqlen_q) Hdim*LseD_base is wrong",
         hdim_times_base, p_hdim, expect="counterexample", dropped=p_unpadded, expect_shape=_s(1, 2, 1)),
    _a32("hdim-below-kernel", "without hdim_q == Hdim (a padded-head-dim family, hdim_q < Hdim, multiplier "
                              "the kernel's constant) Hdim*LseD_base is wrong",
         hdim_times_base, p_unpadded, expect="counterexample", dropped=p_hdim, expect_shape=_s(1, 2, 1, hdim_q=72)),
    _a32("head-dim-arg", "with the head_dim argument as multiplier (hdim_q*LseD_base) unpadded LSE rows suffice",
         lambda v: hdim_times_base(v, "hdim_q"), p_unpadded, lhs_text="hdim_q*LseD_base"),
    _a32("u32", "unpadded, hdim_q == Hdim, (batch*nhead_q - 1)*seqlen_q*hdim_q*4 < 2^32 => the 32-bit "
                "Hdim*LseD_base (s_mul_i32 on pattern A's 32-bit base) == offset",
         hdim_times_base_32, lambda v: all_(p_unpadded(v), p_hdim(v), p_a32_no_wrap(v))),
    _a32("u32.wraps", "without the no-wrap precondition the 32-bit Hdim*LseD_base wraps",
         hdim_times_base_32, lambda v: all_(p_unpadded(v), p_hdim(v)), expect="counterexample",
         dropped=p_a32_no_wrap, expect_shape=_s(1, 9, 2 ** 20)),
    _a32("u32.in-memory", "the 32-bit wrap happens inside 288 GiB (needs 64-bit arithmetic)",
         hdim_times_base_32, lambda v: all_(p_unpadded(v), p_hdim(v), in_memory_a32(v)), expect="counterexample",
         dropped=p_a32_no_wrap, expect_shape=_s(1, 9, 2 ** 20)),
    # ---- 16-bit accumulator
    _a16("naive", "Hdim*LseD_base (Hdim = dpad) is NOT the 16-bit dq_acc offset, even with unpadded LSE, "
                  "seqlen_q % 16 == 0 and hdim_q == dpad",
         lambda v: hdim_times_base(v, "dpad"), lambda v: all_(p_unpadded(v), p_seq16(v), p_hdim_dpad(v)),
         expect="counterexample", expect_shape=_s(1, 2, 16), lhs_text="Hdim*LseD_base"),
    _a16("twice", "unpadded LSE and seqlen_q % 16 == 0 => Hdim*LseD_base (Hdim = dpad) == 2 * the 16-bit offset",
         lambda v: hdim_times_base(v, "dpad"), lambda v: all_(p_unpadded(v), p_seq16(v)),
         rhs=lambda v: 2 * off_a16(v), lhs_text="Hdim*LseD_base", rhs_text="2*offset"),
    _a16("half", "unpadded LSE and seqlen_q % 16 == 0 => (Hdim*LseD_base) >> 1 (Hdim = dpad) == the 16-bit offset",
         half("dpad"), lambda v: all_(p_unpadded(v), p_seq16(v))),
    _a16("half.iff", "for every slice but (0, 0), unpadded LSE, multiplier the head_dim argument: "
                     "(hdim_q*LseD_base) >> 1 == offset <=> (seqlen_q % 16 == 0 and hdim_q == dpad)",
         lambda v: eq(half("hdim_q")(v), off_a16(v)), lambda v: all_(p_unpadded(v), slice_index(v) >= 1),
         rhs=lambda v: all_(p_seq16(v), p_hdim_dpad(v)), lhs_text="(hdim_q*LseD_base)>>1 == offset",
         rhs_text="seqlen_q % 16 == 0 and hdim_q == dpad", lemmas=(
             ("seqlen_q < seqlen_q16 => i*hdim_q*seqlen_q < i*hdim_q*seqlen_q16 (i = slice index >= 1)",
              lambda v: implies(v["seqlen_q"] < v["seqlen_q16"], slice_index(v) * v["hdim_q"] * v["seqlen_q"]
                                < slice_index(v) * v["hdim_q"] * v["seqlen_q16"])),
             ("i*hdim_q*seqlen_q <= i*hdim_q*seqlen_q16",
              lambda v: slice_index(v) * v["hdim_q"] * v["seqlen_q"] <= slice_index(v) * v["hdim_q"] * v["seqlen_q16"]),
             ("hdim_q < dpad => i*seqlen_q16*hdim_q < i*seqlen_q16*dpad",
              lambda v: implies(v["hdim_q"] < v["dpad"], slice_index(v) * v["seqlen_q16"] * v["hdim_q"]
                                < slice_index(v) * v["seqlen_q16"] * v["dpad"])),
         )),
    _a16("half.head-dim-arg", "unpadded LSE, seqlen_q % 16 == 0, hdim_q == dpad => (hdim_q*LseD_base) >> 1 == offset",
         half("hdim_q"), lambda v: all_(p_unpadded(v), p_seq16(v), p_hdim_dpad(v)), lhs_text="hdim_q*LseD_base/2"),
    _a16("half.head-dim-arg.hdim-below-dpad", "without hdim_q == dpad (hdim_q < 128, pitch 128) (hdim_q*LseD_base) >> 1 is wrong",
         half("hdim_q"), lambda v: all_(p_unpadded(v), p_seq16(v)), expect="counterexample", dropped=p_hdim_dpad,
         expect_shape=_s(1, 2, 16, hdim_q=72), lhs_text="hdim_q*LseD_base/2"),
    _a16("half.seqlen-unaligned", "without seqlen_q % 16 == 0 (rows padded to seqlen_q16) the halved value is wrong",
         half("dpad"), p_unpadded, expect="counterexample", dropped=p_seq16, expect_shape=_s(1, 2, 1)),
    _a16("half.lse-padded", "without unpadded LSE rows the halved value is wrong",
         half("dpad"), p_seq16, expect="counterexample", dropped=p_unpadded, expect_shape=_s(1, 2, 16)),
    _a16("u32", "unpadded, seqlen_q % 16 == 0, 2*(batch*nhead_q - 1)*seqlen_q16*dpad*2 < 2^32 => "
                "(32-bit Hdim*LseD_base) >> 1 == offset",
         lambda v: shr(hdim_times_base_32(v, "dpad"), 1),
         lambda v: all_(p_unpadded(v), p_seq16(v), p_a16_doubled_no_wrap(v)), lhs_text="u32(Hdim*LseD_base)>>1"),
    _a16("u32.doubled-wraps", "even when every true offset fits 32 bits and the call fits in 288 GiB, the doubled "
                              "32-bit intermediate wraps once the accumulator passes 2 GiB",
         lambda v: shr(hdim_times_base_32(v, "dpad"), 1),
         lambda v: all_(p_unpadded(v), p_seq16(v), p_a16_no_wrap(v), in_memory_a16(v)), expect="counterexample",
         dropped=p_a16_doubled_no_wrap, expect_shape=_s(1, 9, 2 ** 20), lhs_text="u32(Hdim*LseD_base)>>1"),
]
