"""ALU semantics for CDNA3 (gfx942) and CDNA4 (gfx950), one row per mnemonic.

Owns :data:`TABLE` (mnemonic -> :class:`Sem`) and :data:`FLOAT_ROWS`.  May import addrsim.ir
only.  Which other instructions exist (memory, lanes, control flow) and what each writes is
:mod:`addrsim.isa.table`.

Each row of :data:`TABLE` is a :class:`Sem`: the operand signature and a small pure function
from source values to destination values, written over the expression IR of
:mod:`addrsim.ir.expr`.  The same function serves the concrete interpreter (its arguments are
then :class:`~addrsim.ir.expr.Const` and fold to constants) and the symbolic executor.  Adding an
instruction is adding a row.

Signature tokens (operands in the order llvm-objdump prints them):

* ``s32``/``s64``: scalar operand (SGPR, SGPR pair, special register or constant), 32/64 bits
* ``v32``/``v64``: vector operand (VGPR/AGPR, or a uniform SGPR/constant), per lane
* ``m``: a lane mask (``vcc`` or an SGPR pair) read or written one bit per lane
* ``scc``: SCC, implicit (not printed); as an output it is the function's last result

Sources: AMD Instinct MI300 ISA Reference Guide (CDNA3), chapters 4 (SALU: SOP1, SOP2,
SOPC, SOPK), 6 (VALU: VOP1, VOP2, VOP3, VOPC), and the CDNA4 guide, same chapters.  SALU
and VALU integer results are truncated to the destination width; SCC of ``s_add_u32`` is the
carry out, of ``s_sub_u32`` the borrow, of logical ops "result != 0".
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

from addrsim.ir import expr as X
from addrsim.ir.expr import Const, Expr

C32 = lambda v: Const(v, 32)  # noqa: E731
C1 = lambda v: Const(v, 1)  # noqa: E731


@dataclass(frozen=True)
class Sem:
    """Semantics of one mnemonic: ``outs`` and ``ins`` are signature tokens, ``fn`` maps
    source values (Exprs of the token's width; 1-bit for ``m``/``scc``) to a tuple of
    destination values in the order of ``outs``."""

    outs: Tuple[str, ...]
    ins: Tuple[str, ...]
    fn: Callable[..., Tuple[Expr, ...]]


TABLE: Dict[str, Sem] = {}


def sem(name: str, sig: str):
    """Register ``fn`` for ``name`` with signature ``"outs:ins"``, e.g. ``"s32,scc:s32,s32"``."""
    outs, ins = sig.split(":")
    def deco(fn):
        TABLE[name] = Sem(tuple(t for t in outs.split(",") if t), tuple(t for t in ins.split(",") if t), fn)
        return fn
    return deco


def _nz(a: Expr) -> Expr:
    return X.bnot(X.eq(a, Const(0, a.width)))


def _sh(b: Expr, w: int) -> Expr:
    """Shift amount as the ALU takes it: the low log2(w) bits of the operand."""
    return X.and_(b, Const(w - 1, b.width)) if b.width == w else X.zext(X.extract(b, (w - 1).bit_length() - 1, 0), w)


def _bfe(a: Expr, off: Expr, width: Expr, signed: bool) -> Expr:
    """Bit-field extract with offset/width operands already isolated (each < 32)."""
    sh = X.lshr(a, off)
    m = X.sub(X.shl(C32(1), width), C32(1))
    m = X.ite(X.eq(width, C32(0)), C32(0), m)
    r = X.and_(sh, m)
    if not signed:
        return r
    sign = X.and_(X.lshr(r, X.sub(width, C32(1))), C32(1))
    ext = X.ite(X.band(_nz(sign), _nz(width)), X.not_(m), C32(0))
    return X.or_(r, ext)


# ------------------------------------------------------------------ SALU: moves, arithmetic
sem("s_mov_b32", "s32:s32")(lambda a: (a,))
sem("s_mov_b64", "s64:s64")(lambda a: (a,))
sem("s_movk_i32", "s32:s32")(lambda a: (X.sext(X.extract(a, 15, 0), 32),))
sem("s_cmov_b32", "s32:s32,s32,scc")(lambda old, a, c: (X.ite(c, a, old),))


@sem("s_add_u32", "s32,scc:s32,s32")
def _s_add_u32(a, b):
    r = X.add(a, b)
    return r, X.ult(r, a)


@sem("s_addc_u32", "s32,scc:s32,s32,scc")
def _s_addc_u32(a, b, c):
    wide = X.add(X.add(X.zext(a, 33), X.zext(b, 33)), X.zext(c, 33))
    return X.extract(wide, 31, 0), X.extract(wide, 32, 32)


@sem("s_sub_u32", "s32,scc:s32,s32")
def _s_sub_u32(a, b):
    return X.sub(a, b), X.ult(a, b)


@sem("s_subb_u32", "s32,scc:s32,s32,scc")
def _s_subb_u32(a, b, c):
    wide = X.sub(X.sub(X.zext(a, 33), X.zext(b, 33)), X.zext(c, 33))
    return X.extract(wide, 31, 0), X.extract(wide, 32, 32)


def _signed_overflow(a, b, r):
    sa, sb, sr = (X.extract(v, 31, 31) for v in (a, b, r))
    return X.band(X.eq(sa, sb), X.bnot(X.eq(sa, sr)))


@sem("s_add_i32", "s32,scc:s32,s32")
def _s_add_i32(a, b):
    r = X.add(a, b)
    return r, _signed_overflow(a, b, r)


@sem("s_sub_i32", "s32,scc:s32,s32")
def _s_sub_i32(a, b):
    r = X.sub(a, b)
    sa, sb, sr = (X.extract(v, 31, 31) for v in (a, b, r))
    return r, X.band(X.bnot(X.eq(sa, sb)), X.bnot(X.eq(sa, sr)))


sem("s_mul_i32", "s32:s32,s32")(lambda a, b: (X.mul(a, b),))
sem("s_mul_hi_u32", "s32:s32,s32")(lambda a, b: (X.mulhu(a, b),))
sem("s_mul_hi_i32", "s32:s32,s32")(lambda a, b: (X.mulhs(a, b),))
sem("s_mulk_i32", "s32:s32,s32")(lambda d, k: (X.mul(d, X.sext(X.extract(k, 15, 0), 32)),))
sem("s_addk_i32", "s32,scc:s32,s32")(lambda d, k: _s_add_i32(d, X.sext(X.extract(k, 15, 0), 32)))

for _n in (1, 2, 3, 4):
    sem(f"s_lshl{_n}_add_u32", "s32,scc:s32,s32")(
        (lambda n: lambda a, b: (X.add(X.shl(a, C32(n)), b),
                                 _nz(X.extract(X.add(X.shl(X.zext(a, 64), Const(n, 64)), X.zext(b, 64)), 63, 32))))(_n))

for _w in (32, 64):
    _t = f"s{_w}"
    sem(f"s_and_b{_w}", f"{_t},scc:{_t},{_t}")(lambda a, b: (X.and_(a, b), _nz(X.and_(a, b))))
    sem(f"s_or_b{_w}", f"{_t},scc:{_t},{_t}")(lambda a, b: (X.or_(a, b), _nz(X.or_(a, b))))
    sem(f"s_xor_b{_w}", f"{_t},scc:{_t},{_t}")(lambda a, b: (X.xor(a, b), _nz(X.xor(a, b))))
    sem(f"s_andn2_b{_w}", f"{_t},scc:{_t},{_t}")(lambda a, b: (X.and_(a, X.not_(b)), _nz(X.and_(a, X.not_(b)))))
    sem(f"s_orn2_b{_w}", f"{_t},scc:{_t},{_t}")(lambda a, b: (X.or_(a, X.not_(b)), _nz(X.or_(a, X.not_(b)))))
    sem(f"s_nand_b{_w}", f"{_t},scc:{_t},{_t}")(lambda a, b: (X.not_(X.and_(a, b)), _nz(X.not_(X.and_(a, b)))))
    sem(f"s_nor_b{_w}", f"{_t},scc:{_t},{_t}")(lambda a, b: (X.not_(X.or_(a, b)), _nz(X.not_(X.or_(a, b)))))
    sem(f"s_not_b{_w}", f"{_t},scc:{_t}")(lambda a: (X.not_(a), _nz(X.not_(a))))
    sem(f"s_cselect_b{_w}", f"{_t}:{_t},{_t},scc")(lambda a, b, c: (X.ite(c, a, b),))
    sem(f"s_lshl_b{_w}", f"{_t},scc:{_t},s32")((lambda w: lambda a, b: (X.shl(a, _sh(b, w)), _nz(X.shl(a, _sh(b, w)))))(_w))
    sem(f"s_lshr_b{_w}", f"{_t},scc:{_t},s32")((lambda w: lambda a, b: (X.lshr(a, _sh(b, w)), _nz(X.lshr(a, _sh(b, w)))))(_w))
    sem(f"s_ashr_i{_w}", f"{_t},scc:{_t},s32")((lambda w: lambda a, b: (X.ashr(a, _sh(b, w)), _nz(X.ashr(a, _sh(b, w)))))(_w))


@sem("s_bfe_u32", "s32,scc:s32,s32")
def _s_bfe_u32(a, b):
    r = _bfe(a, X.and_(b, C32(31)), X.and_(X.lshr(b, C32(16)), C32(0x7f)), False)
    return r, _nz(r)


@sem("s_bfe_i32", "s32,scc:s32,s32")
def _s_bfe_i32(a, b):
    r = _bfe(a, X.and_(b, C32(31)), X.and_(X.lshr(b, C32(16)), C32(0x7f)), True)
    return r, _nz(r)


sem("s_min_u32", "s32,scc:s32,s32")(lambda a, b: (X.ite(X.ult(a, b), a, b), X.ult(a, b)))
sem("s_max_u32", "s32,scc:s32,s32")(lambda a, b: (X.ite(X.ult(b, a), a, b), X.ult(b, a)))
sem("s_min_i32", "s32,scc:s32,s32")(lambda a, b: (X.ite(X.slt(a, b), a, b), X.slt(a, b)))
sem("s_max_i32", "s32,scc:s32,s32")(lambda a, b: (X.ite(X.slt(b, a), a, b), X.slt(b, a)))
sem("s_sext_i32_i8", "s32:s32")(lambda a: (X.sext(X.extract(a, 7, 0), 32),))
sem("s_sext_i32_i16", "s32:s32")(lambda a: (X.sext(X.extract(a, 15, 0), 32),))
sem("s_abs_i32", "s32,scc:s32")(lambda a: (X.ite(X.slt(a, C32(0)), X.sub(C32(0), a), a),
                                          _nz(X.ite(X.slt(a, C32(0)), X.sub(C32(0), a), a))))

# ------------------------------------------------------------------ SALU: compares (SOPC/SOPK)
_CMP = {
    "eq": lambda a, b, s: X.eq(a, b),
    "lg": lambda a, b, s: X.bnot(X.eq(a, b)),
    "lt": lambda a, b, s: X.slt(a, b) if s else X.ult(a, b),
    "le": lambda a, b, s: X.sle(a, b) if s else X.ule(a, b),
    "gt": lambda a, b, s: X.slt(b, a) if s else X.ult(b, a),
    "ge": lambda a, b, s: X.sle(b, a) if s else X.ule(b, a),
}
for _c, _f in _CMP.items():
    for _ty, _signed in (("u32", False), ("i32", True)):
        sem(f"s_cmp_{_c}_{_ty}", "scc:s32,s32")((lambda f, s: lambda a, b: (f(a, b, s),))(_f, _signed))
        # SOPK: the 16-bit constant is zero-extended for unsigned compares, sign-extended for signed
        sem(f"s_cmpk_{_c}_{_ty}", "scc:s32,s32")(
            (lambda f, s: lambda a, k: (f(a, (X.sext if s else X.zext)(X.extract(k, 15, 0), 32), s),))(_f, _signed))
sem("s_cmp_eq_u64", "scc:s64,s64")(lambda a, b: (X.eq(a, b),))
sem("s_cmp_lg_u64", "scc:s64,s64")(lambda a, b: (X.bnot(X.eq(a, b)),))
sem("s_bitcmp0_b32", "scc:s32,s32")(lambda a, b: (X.eq(X.and_(X.lshr(a, _sh(b, 32)), C32(1)), C32(0)),))
sem("s_bitcmp1_b32", "scc:s32,s32")(lambda a, b: (X.eq(X.and_(X.lshr(a, _sh(b, 32)), C32(1)), C32(1)),))

# ------------------------------------------------------------------ VALU (per lane)
sem("v_mov_b32", "v32:v32")(lambda a: (a,))
sem("v_accvgpr_write_b32", "v32:v32")(lambda a: (a,))
sem("v_accvgpr_read_b32", "v32:v32")(lambda a: (a,))
sem("v_accvgpr_mov_b32", "v32:v32")(lambda a: (a,))
sem("v_not_b32", "v32:v32")(lambda a: (X.not_(a),))
sem("v_add_u32", "v32:v32,v32")(lambda a, b: (X.add(a, b),))
# VOP3 signed add/sub (gfx9 v_add_i32/v_sub_i32): without clamp the same 32-bit wraparound
sem("v_add_i32", "v32:v32,v32")(lambda a, b: (X.add(a, b),))
sem("v_sub_i32", "v32:v32,v32")(lambda a, b: (X.sub(a, b),))
sem("v_sub_u32", "v32:v32,v32")(lambda a, b: (X.sub(a, b),))
sem("v_subrev_u32", "v32:v32,v32")(lambda a, b: (X.sub(b, a),))
sem("v_add3_u32", "v32:v32,v32,v32")(lambda a, b, c: (X.add(X.add(a, b), c),))
sem("v_mul_lo_u32", "v32:v32,v32")(lambda a, b: (X.mul(a, b),))
sem("v_mul_hi_u32", "v32:v32,v32")(lambda a, b: (X.mulhu(a, b),))
sem("v_mul_hi_i32", "v32:v32,v32")(lambda a, b: (X.mulhs(a, b),))


def _u24(a):
    return X.zext(X.extract(a, 23, 0), 32)


def _i24(a):
    return X.sext(X.extract(a, 23, 0), 32)


sem("v_mul_u32_u24", "v32:v32,v32")(lambda a, b: (X.mul(_u24(a), _u24(b)),))
sem("v_mul_i32_i24", "v32:v32,v32")(lambda a, b: (X.mul(_i24(a), _i24(b)),))
sem("v_mul_hi_u32_u24", "v32:v32,v32")(
    lambda a, b: (X.extract(X.mul(X.zext(X.extract(a, 23, 0), 64), X.zext(X.extract(b, 23, 0), 64)), 63, 32),))
sem("v_mad_u32_u24", "v32:v32,v32,v32")(lambda a, b, c: (X.add(X.mul(_u24(a), _u24(b)), c),))
sem("v_mad_i32_i24", "v32:v32,v32,v32")(lambda a, b, c: (X.add(X.mul(_i24(a), _i24(b)), c),))
sem("v_and_b32", "v32:v32,v32")(lambda a, b: (X.and_(a, b),))
sem("v_or_b32", "v32:v32,v32")(lambda a, b: (X.or_(a, b),))
sem("v_xor_b32", "v32:v32,v32")(lambda a, b: (X.xor(a, b),))
sem("v_or3_b32", "v32:v32,v32,v32")(lambda a, b, c: (X.or_(X.or_(a, b), c),))
sem("v_and_or_b32", "v32:v32,v32,v32")(lambda a, b, c: (X.or_(X.and_(a, b), c),))
sem("v_lshlrev_b32", "v32:v32,v32")(lambda s, a: (X.shl(a, _sh(s, 32)),))
sem("v_lshrrev_b32", "v32:v32,v32")(lambda s, a: (X.lshr(a, _sh(s, 32)),))
sem("v_ashrrev_i32", "v32:v32,v32")(lambda s, a: (X.ashr(a, _sh(s, 32)),))
sem("v_lshlrev_b64", "v64:v32,v64")(lambda s, a: (X.shl(a, _sh(s, 64)),))
sem("v_lshrrev_b64", "v64:v32,v64")(lambda s, a: (X.lshr(a, _sh(s, 64)),))
sem("v_lshl_add_u32", "v32:v32,v32,v32")(lambda a, s, c: (X.add(X.shl(a, _sh(s, 32)), c),))
sem("v_add_lshl_u32", "v32:v32,v32,v32")(lambda a, b, s: (X.shl(X.add(a, b), _sh(s, 32)),))
sem("v_lshl_or_b32", "v32:v32,v32,v32")(lambda a, s, c: (X.or_(X.shl(a, _sh(s, 32)), c),))
sem("v_bfe_u32", "v32:v32,v32,v32")(lambda a, o, w: (_bfe(a, X.and_(o, C32(31)), X.and_(w, C32(31)), False),))
sem("v_bfe_i32", "v32:v32,v32,v32")(lambda a, o, w: (_bfe(a, X.and_(o, C32(31)), X.and_(w, C32(31)), True),))
sem("v_bfi_b32", "v32:v32,v32,v32")(lambda m, a, b: (X.or_(X.and_(m, a), X.and_(X.not_(m), b)),))
sem("v_min_u32", "v32:v32,v32")(lambda a, b: (X.ite(X.ult(a, b), a, b),))
sem("v_max_u32", "v32:v32,v32")(lambda a, b: (X.ite(X.ult(b, a), a, b),))
sem("v_min_i32", "v32:v32,v32")(lambda a, b: (X.ite(X.slt(a, b), a, b),))
sem("v_max_i32", "v32:v32,v32")(lambda a, b: (X.ite(X.slt(b, a), a, b),))
sem("v_cndmask_b32", "v32:v32,v32,m")(lambda a, b, c: (X.ite(c, b, a),))


@sem("v_add_co_u32", "v32,m:v32,v32")
def _v_add_co(a, b):
    r = X.add(a, b)
    return r, X.ult(r, a)


@sem("v_addc_co_u32", "v32,m:v32,v32,m")
def _v_addc_co(a, b, c):
    return _s_addc_u32(a, b, c)


@sem("v_sub_co_u32", "v32,m:v32,v32")
def _v_sub_co(a, b):
    return X.sub(a, b), X.ult(a, b)


@sem("v_subrev_co_u32", "v32,m:v32,v32")
def _v_subrev_co(a, b):
    return X.sub(b, a), X.ult(b, a)


@sem("v_subb_co_u32", "v32,m:v32,v32,m")
def _v_subb_co(a, b, c):
    return _s_subb_u32(a, b, c)


@sem("v_mad_u64_u32", "v64,m:v32,v32,v64")
def _v_mad_u64_u32(a, b, c):
    wide = X.add(X.mul(X.zext(a, 65), X.zext(b, 65)), X.zext(c, 65))
    return X.extract(wide, 63, 0), X.extract(wide, 64, 64)


def _perm_byte(pair: Expr, sel: int, memo: Optional[dict] = None) -> Expr:
    """One result byte of v_perm_b32 (CDNA3 guide, V_PERM_B32): selectors 0-7 pick a byte
    of {src0, src1} (src1 in bytes 0-3), 8-11 replicate a sign bit, 12 gives 0x00, 13+ 0xff.
    ``memo``: :func:`addrsim.ir.expr.extract`'s, shared by the bytes of one instruction."""
    if sel < 8:
        return X.extract(pair, 8 * sel + 7, 8 * sel, memo)
    if sel < 12:
        bit = 16 * (sel - 8) + 15
        return X.ite(X.eq(X.extract(pair, bit, bit, memo), C1(1)), Const(0xFF, 8), Const(0, 8))
    return Const(0 if sel == 12 else 0xFF, 8)


_BYTE = tuple(Const(k, 8) for k in range(256))
_SELECTS: Dict[int, tuple] = {}
"""id(selector) -> (selector, for each of its 4 bytes the 13 nodes ``eq(byte, k)``): a
selector register is read by many v_perm_b32 (a bf16 packing loop); bounded, and it keeps
each selector alive so that its id names it."""


def _selects(s: Expr) -> tuple:
    hit = _SELECTS.get(id(s))
    if hit is None or hit[0] is not s:
        if len(_SELECTS) > 256:
            _SELECTS.clear()
        sel = [X.extract(s, 8 * i + 7, 8 * i) for i in range(4)]
        hit = _SELECTS[id(s)] = (s, tuple(tuple(X.eq(b, _BYTE[k]) for k in range(13)) for b in sel))
    return hit[1]


def _perm_byte_of(table: List[Expr], is_k) -> Expr:
    """One result byte of v_perm_b32 for a selector byte known only as an Expr: the
    ``table`` of :func:`_perm_byte` (selectors 0-12) as a chain of selections on ``is_k``
    (``is_k[k]``: the byte equals k; 13 and above give 0xff)."""
    out = _BYTE[0xFF]
    for k in range(12, -1, -1):
        out = X.ite(is_k[k], table[k], out)
    return out


@sem("v_perm_b32", "v32:v32,v32,v32")
def _v_perm(a, b, s):
    pair = X.concat(a, b)
    memo: dict = {}         # {a, b} taken apart once for every byte (their ite trees are shared)
    if isinstance(s, Const):
        out = [_perm_byte(pair, (s.value >> (8 * i)) & 0xFF, memo) for i in range(4)]
    else:                   # a per-lane selector (the README kernel's v17): every case stated
        table = [_perm_byte(pair, k, memo) for k in range(13)]
        out = [_perm_byte_of(table, is_k) for is_k in _selects(s)]
    return (X.concat(X.concat(out[3], out[2]), X.concat(out[1], out[0])),)


for _c, _f in _CMP.items():
    _vc = {"lg": "ne"}.get(_c, _c)
    for _ty, _signed in (("u32", False), ("i32", True)):
        sem(f"v_cmp_{_vc}_{_ty}", "m:v32,v32")((lambda f, s: lambda a, b: (f(a, b, s),))(_f, _signed))
sem("v_cmp_lg_u32", "m:v32,v32")(lambda a, b: (X.bnot(X.eq(a, b)),))


# ------------------------------------------------------------------ binary32
# Floating point used in address arithmetic (LLVM's 32-bit unsigned division expansion:
# cvt, rcp_iflag, mul by 0x4f7ffffe, cvt back, then integer refinement).  These rows build
# binary32 nodes; addrsim.prove.idioms proves the whole idiom exact before an address relies on it.
sem("v_cvt_f32_u32", "v32:v32")(lambda a: (X.fop("f32_from_u32", a),))
sem("v_rcp_iflag_f32", "v32:v32")(lambda a: (X.fop("f32_rcp", a),))
sem("v_rcp_f32", "v32:v32")(lambda a: (X.fop("f32_rcp", a),))
sem("v_mul_f32", "v32:v32,v32")(lambda a, b: (X.fop("f32_mul", a, b),))
sem("v_cvt_u32_f32", "v32:v32")(lambda a: (X.fop("u32_from_f32", a),))
FLOAT_ROWS = frozenset({"v_cvt_f32_u32", "v_rcp_iflag_f32", "v_rcp_f32", "v_mul_f32", "v_cvt_u32_f32"})
