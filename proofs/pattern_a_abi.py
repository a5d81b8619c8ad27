"""Pattern A, ABI-based LSE/D base (DOMAIN.md section 2; seed note "Pattern A: ABI-Based Lse/D
Base Fix"):

    LseD_base = batch_id * nhead_q * Hs_lsed + head_id * Hs_lsed          (bytes)

computed from the kernel arguments nhead_q and Hs_lsed, where Hs_lsed = nhead_stride_lsed * 4
bytes (aiter codegen.py G2:832 ``args.Hs_lsed = a.nhead_stride_lsed * 4``; a 32-bit unsigned
field of the argument struct, mha_bwd.h H:66-373).  LSE and D are fp32 [batch, nhead_q,
seqlen_q] (DOMAIN.md section 1), so the true byte offset of the (batch_id, head_id) row is
``(batch_id * batch_stride_lsed + head_id * nhead_stride_lsed) * 4`` with element strides.

Preconditions made explicit:

* P1 (layout of LSE): ``batch_stride_lsed == nhead_q * nhead_stride_lsed`` (the rows of one
  batch are contiguous); ``nhead_stride_lsed >= seqlen_q`` (rows do not overlap) is part of
  the domain.  No condition on Q's layout: the pattern is layout-independent.
* P2 (argument width): ``nhead_stride_lsed * 4 < 2**32``: the host's cast of Hs_lsed to the
  32-bit argument keeps it.
* P3 (32-bit arithmetic only): with ``s_mul_i32``/``s_add_u32`` (low 32 bits kept) the formula
  is right iff no intermediate wraps; sufficient and tight: ``(batch*nhead_q - 1) * Hs_lsed <
  2**32`` (the last row's base fits), implied by ``batch*nhead_q*Hs_lsed <= 2**32``.  In 64-bit
  arithmetic (s_mul_hi_u32 + s_mul_i32) nothing wraps in the domain.

Units: Hs_lsed, LseD_base and offsets in bytes; nhead_stride_lsed and batch_stride_lsed in
fp32 elements.
"""
from __future__ import annotations

from ._claims import (GiB, MEMORY_GIB, U32, Claim, Dom, all_, ids_domain, shape_vars, u32)

SRC = "DOMAIN.md sections 1-2; aiter codegen.py G2:832 (Hs_lsed = nhead_stride_lsed*4), mha_bwd.h H:66-373 (u32 fields)"

VARS = shape_vars(nhead_stride_lsed=Dom(1, 2 ** 31), batch_stride_lsed=Dom(0, 2 ** 40))


def domain(v):
    """Rows do not overlap: nhead_stride_lsed >= seqlen_q (elements)."""
    return all_(ids_domain(v), v["nhead_stride_lsed"] >= v["seqlen_q"])


def hs_lsed(v):
    """Hs_lsed in bytes, exact (before the host's u32 cast)."""
    return v["nhead_stride_lsed"] * 4


def true_offset(v):
    """Byte offset of LSE row (batch_id, head_id) from the tensor's strides."""
    return (v["batch_id"] * v["batch_stride_lsed"] + v["head_id"] * v["nhead_stride_lsed"]) * 4


def target(v):
    """The pattern's formula over the integers (bytes)."""
    hs = hs_lsed(v)
    return v["batch_id"] * v["nhead_q"] * hs + v["head_id"] * hs


def abi_64(v):
    """The pattern in 64-bit scalar arithmetic on the 32-bit argument u32(Hs_lsed)."""
    hs = u32(hs_lsed(v))
    return (v["batch_id"] * v["nhead_q"] * hs + v["head_id"] * hs) % 2 ** 64


def abi_32(v):
    """The pattern in 32-bit scalar arithmetic: s_mul_i32 (batch_id*nhead_q), s_mul_i32 (*Hs_lsed),
    s_mul_i32 (head_id*Hs_lsed), s_add_u32; every step keeps the low 32 bits."""
    hs = u32(hs_lsed(v))
    return u32(u32(u32(v["batch_id"] * v["nhead_q"]) * hs) + u32(v["head_id"] * hs))


def p_contiguous(v):
    """P1: batch_stride_lsed == nhead_q * nhead_stride_lsed (elements)."""
    return v["batch_stride_lsed"] == v["nhead_q"] * v["nhead_stride_lsed"]


def p_arg_fits(v):
    """P2: Hs_lsed = nhead_stride_lsed*4 bytes fits the 32-bit argument."""
    return hs_lsed(v) < U32


def p_no_wrap(v):
    """P3: the last row's base (batch*nhead_q - 1)*Hs_lsed < 2**32 (bytes)."""
    return (v["batch"] * v["nhead_q"] - 1) * hs_lsed(v) < U32


def p_lse_under_4gib(v):
    """The brief's form of P3: batch*nhead_q*Hs_lsed < 2**32 (bytes)."""
    return v["batch"] * v["nhead_q"] * hs_lsed(v) < U32


def p_unpadded(v):
    """LSE rows unpadded: nhead_stride_lsed == seqlen_q (elements), i.e. Hs_lsed == 4*seqlen_q."""
    return v["nhead_stride_lsed"] == v["seqlen_q"]


def in_memory(v):
    """Q, dO, dQ (contiguous, hdim from the case, 2 bytes) plus LSE and D at their padded extent
    ((batch-1)*batch_stride + (nhead_q-1)*nhead_stride + seqlen_q)*4 bytes each, fit in 288 GiB."""
    lse_extent = ((v["batch"] - 1) * v["batch_stride_lsed"] + (v["nhead_q"] - 1) * v["nhead_stride_lsed"]
                  + v["seqlen_q"]) * 4
    rows = v["batch"] * v["nhead_q"] * v["seqlen_q"]
    return rows * 3 * v["hdim"] * 2 + 2 * lse_extent <= MEMORY_GIB * GiB


def _claim(name, statement, lhs, pre, expect="proved", **kw):
    return Claim(name=f"A.{name}", pattern="A", statement=statement, variables=VARS, lhs=lhs,
                 rhs=kw.pop("rhs", target), precondition=pre, domain=domain, expect=expect, source=SRC,
                 lhs_text=kw.pop("lhs_text", lhs.__name__), rhs_text=kw.pop("rhs_text", "batch_id*nhead_q*Hs_lsed + head_id*Hs_lsed"),
                 **kw)


CLAIMS = [
    _claim("formula.exact",
           "P1 => batch_id*nhead_q*Hs_lsed + head_id*Hs_lsed == (batch_id*batch_stride_lsed + "
           "head_id*nhead_stride_lsed)*4 (bytes), for every layout of Q",
           target, p_contiguous, rhs=true_offset, lhs_text="LseD_base", rhs_text="true LSE row offset"),
    _claim("formula.batch-stride-not-contiguous",
           "without P1 (an LSE view whose batch stride is not nhead_q*nhead_stride_lsed) the formula is wrong",
           target, lambda v: True, expect="counterexample", rhs=true_offset, dropped=p_contiguous,
           expect_shape={"batch": 2, "nhead_q": 1, "seqlen_q": 1},
           lhs_text="LseD_base", rhs_text="true LSE row offset"),
    _claim("64bit",
           "P2 => the 64-bit computation on u32(Hs_lsed) equals the formula (no 64-bit wrap in the domain)",
           abi_64, p_arg_fits),
    _claim("64bit.hs-arg-truncated",
           "without P2 the host's u32 cast of Hs_lsed breaks it (a padded LSE row stride >= 2^30 elements)",
           abi_64, lambda v: True, expect="counterexample", dropped=p_arg_fits,
           expect_shape={"batch": 1, "nhead_q": 2, "seqlen_q": 1}),
    _claim("32bit",
           "P2 and P3 ((batch*nhead_q - 1)*Hs_lsed < 2^32) => the 32-bit (s_mul_i32) computation equals the formula",
           abi_32, lambda v: all_(p_arg_fits(v), p_no_wrap(v))),
    _claim("32bit.lse-under-4gib",
           "P2 and batch*nhead_q*Hs_lsed < 2^32 => the 32-bit computation equals the formula",
           abi_32, lambda v: all_(p_arg_fits(v), p_lse_under_4gib(v))),
    _claim("32bit.wraps",
           "without P3 the 32-bit computation wraps (smallest shape: padded LSE rows, head_id*Hs_lsed >= 2^32)",
           abi_32, p_arg_fits, expect="counterexample", dropped=p_no_wrap,
           expect_shape={"batch": 1, "nhead_q": 3, "seqlen_q": 1}),
    _claim("32bit.wraps-unpadded",
           "without P3, with unpadded LSE rows (Hs_lsed = 4*seqlen_q), the 32-bit computation wraps",
           abi_32, lambda v: all_(p_contiguous(v), p_unpadded(v)), expect="counterexample", dropped=p_no_wrap,
           expect_shape={"batch": 5, "nhead_q": 205, "seqlen_q": 2 ** 20}),
    _claim("32bit.unpadded-in-memory",
           "unpadded contiguous LSE, hdim >= 64 and the call fits in 288 GiB => the 32-bit computation "
           "never wraps (the wrap needs LSE >= 4 GiB, hence Q+dO+dQ >= 384 GiB)",
           abi_32, lambda v: all_(p_contiguous(v), p_unpadded(v), in_memory(v)),
           cases=tuple({"hdim": h} for h in (64, 128, 192, 256))),
    _claim("32bit.padded-in-memory",
           "with padded LSE rows the 32-bit wrap is reachable inside 288 GiB",
           abi_32, lambda v: all_(p_arg_fits(v), p_contiguous(v), in_memory(v)), expect="counterexample",
           dropped=p_no_wrap, cases=({"hdim": 64},),
           expect_shape={"batch": 1, "nhead_q": 3, "seqlen_q": 1}),
]
