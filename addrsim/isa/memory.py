"""Memory instructions: access sizes, the V# and the MUBUF range check.

Owns :func:`access_size`, :func:`vsharp_fields` and :func:`buffer_in_range`.  May import
addrsim.ir only.  Facts (AMD Instinct MI300 ISA Reference Guide, CDNA3; the same in CDNA4):

* Buffer addressing (chapter 9, "Buffer Instructions"): V# dword0-1 hold base[47:0] and
  stride[61:48] (dword1 bits 29:16), swizzle_enable is dword1 bit 31, add_tid_enable dword3 bit
  23, num_records dword2; ``address = base + soffset + inst_offset + (offen ? voffset : 0) +
  (idxen ? vindex * stride : 0)``.
* FLAT global (section 9.1): the immediate offset is a signed 13-bit value.
"""
from __future__ import annotations

from typing import Sequence, Tuple

from addrsim.ir import expr as X
from addrsim.ir.expr import Const, Expr


def access_size(mnemonic: str) -> int:
    """Bytes per lane of a buffer/global access, from its mnemonic (``_dwordx4`` 16,
    ``_dwordx3`` 12, ``_dwordx2`` 8, 64-bit atomics (``_f64``, ``_x2``) 8, ``_dword`` and packed
    atomics 4, ``_short``/``_d16`` 2, ``_byte`` (``_byte_d16``, ``_sbyte_d16_hi``) 1)."""
    m = mnemonic
    for tag, n in (("dwordx4", 16), ("dwordx3", 12), ("dwordx2", 8), ("x4", 16), ("x3", 12), ("x2", 8),
                   ("f64", 8), ("dword", 4), ("pk_add", 4), ("byte", 1), ("short", 2), ("d16", 2)):
        if tag in m:
            return n
    return 4


def vsharp_fields(words: Sequence[Expr]) -> Tuple[Expr, Expr, Expr, Expr]:
    """(48-bit base, 14-bit stride in bytes, 1-bit swizzle_enable, 1-bit add_tid_enable) of the
    four V# dwords."""
    base = X.concat(X.extract(words[1], 15, 0), words[0])
    return base, X.extract(words[1], 29, 16), X.extract(words[1], 31, 31), X.extract(words[3], 23, 23)


def global_offset(imm: int) -> int:
    """The signed 13-bit immediate offset of a FLAT global instruction."""
    return imm - (1 << 13) if (1 << 12) <= imm < (1 << 13) else imm


def buffer_in_range(index: Expr, voff: Expr, ioff: int, stride: Expr, num_records: Expr, size: int,
                    idxen: bool = True) -> Expr:
    """The MUBUF range check (MI300 ISA guide, "Buffer addressing": out-of-range loads
    return 0 and stores are dropped).  A structured access (the instruction's ``idxen`` set and a
    V# stride other than 0) is in range when its record index is below num_records.  Otherwise
    the buffer is raw: the byte offset vgpr_offset + inst_offset (the SGPR soffset is not
    checked) plus the access size must not pass num_records.  On gfx9 and later (gfx942, gfx950)
    idxen, not the stride alone, selects the structured check: a stride-4 V# read with ``offen``
    only is checked in bytes (LLVM D50306, IntrinsicsAMDGPU.td: "the behavior of bound checking
    and swizzling changes depending on whether idxen is set in the instruction"; D44401: "On
    GFX9 IDXEN matters for interpretation of buffer sizes"; aiter's odo and dq kernels build such
    V#s with num_records in bytes).  A multi-dword access is counted in range only when all of
    it is."""
    off = X.add(X.add(X.zext(voff, 64), Const(ioff, 64)), Const(size, 64))
    raw = X.ule(off, X.zext(num_records, 64))
    if not idxen:
        return raw
    structured = X.ult(index, num_records)
    return X.ite(X.eq(stride, Const(0, stride.width)), raw, structured)
