"""Memory instructions: access sizes, the V# and the MUBUF range check.

Owns :func:`access_size`, :func:`vsharp_fields`, :func:`buffer_offset` and
:func:`buffer_in_range` (and :func:`linear_access`, their integer form).  May import addrsim.ir only.  Facts (AMD Instinct MI300 ISA Reference
Guide, CDNA3; the same in CDNA4):

* Buffer addressing (chapter 9, "Buffer Instructions"): V# dword0-1 hold base[47:0] and
  stride[61:48] (dword1 bits 29:16), swizzle_enable is dword1 bit 31, index_stride dword3 bits
  22:21 (8, 16, 32 or 64 indices), add_tid_enable dword3 bit 23, num_records dword2.
  ``index = (idxen ? vgpr_index : 0) + (add_tid_enable ? thread_id[5:0] : 0)``, ``offset =
  (offen ? vgpr_offset : 0) + inst_offset``; linear: ``buffer_offset = index * stride +
  offset``; swizzled: ``index_msb = index / index_stride``, ``index_lsb = index % index_stride``,
  ``offset_msb = offset / element_size``, ``offset_lsb = offset % element_size``,
  ``buffer_offset = (index_msb * stride + offset_msb * element_size) * index_stride + index_lsb
  * element_size + offset_lsb``; ``address = base + soffset + buffer_offset`` (the SGPR offset
  is not swizzled).  On gfx9 (gfx942, gfx950) the V# has no element_size field: swizzled
  buffers have 4-byte elements (Mesa radeonsi si_descriptors.c: "only 4 bytes on GFX9"), and
  with add_tid_enable a MUBUF access takes stride bits 17:14 from DATA_FORMAT (dword3 bits
  18:15; Mesa ac_nir_lower_abi: "If MUBUF && ADD_TID_ENABLE, DATA_FORMAT means STRIDE[14:17]
  on gfx8-9").
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


SWIZZLE_ELEMENT_BYTES = 4
"""Element size of a swizzled buffer on gfx9 (module docstring)."""


def buffer_offset(vindex: Expr, voff: Expr, ioff: int, lane_in_wave: Expr, words: Sequence[Expr]
                  ) -> Tuple[Expr, Expr]:
    """(64-bit byte offset from base + soffset, 32-bit index) of a MUBUF access, by the module
    docstring's formulas: ``vindex``/``voff`` the VGPR index and offset (Const 0 where idxen or
    offen is clear), ``ioff`` the instruction offset, ``lane_in_wave`` thread_id[5:0] (32-bit),
    ``words`` the four V# dwords.  The index is the one the range check compares with
    num_records."""
    _, stride, swz, tid = vsharp_fields(words)
    tid_on = X.eq(tid, Const(1, 1))
    index = X.add(vindex, X.ite(tid_on, lane_in_wave, Const(0, 32)))
    stride = X.zext(stride, 18)
    stride = X.ite(tid_on, X.or_(stride, X.shl(X.zext(X.extract(words[3], 18, 15), 18), Const(14, 18))), stride)
    stride = X.zext(stride, 64)
    offset = X.add(X.zext(voff, 64), Const(ioff, 64))
    index64 = X.zext(index, 64)
    linear = X.add(X.mul(index64, stride), offset)
    if isinstance(swz, Const) and swz.value == 0:
        return linear, index
    istride = X.shl(Const(8, 64), X.zext(X.extract(words[3], 22, 21), 64))
    esize = Const(SWIZZLE_ELEMENT_BYTES, 64)
    swizzled = X.add(X.add(X.mul(X.add(X.mul(X.udiv(index64, istride), stride), X.mul(X.udiv(offset, esize), esize)),
                                 istride), X.mul(X.urem(index64, istride), esize)), X.urem(offset, esize))
    return X.ite(X.eq(swz, Const(1, 1)), swizzled, linear), index


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


def linear_access(base: int, soffset: int, ioff: int, voff: int, index: int, stride: int, num_records: int,
                  size: int, idxen: bool) -> Tuple[int, int]:
    """(64-bit byte address, 1 when in range else 0) of a linear MUBUF access whose operands
    are all known integers: the linear formula of the module docstring (``base`` 48-bit,
    ``soffset``, ``voff``, ``index`` and ``num_records`` 32-bit, ``stride`` 14-bit, in bytes)
    and :func:`buffer_in_range`, computed on integers for the concrete interpreter's runs
    instead of building constant expressions (the same values: ``tests/test_semantics.py``)."""
    m64 = (1 << 64) - 1
    addr = (base + soffset + ioff + voff + index * stride) & m64
    raw = ((voff + ioff + size) & m64) <= num_records
    return addr, int(raw if not idxen or stride == 0 else index < num_records)
