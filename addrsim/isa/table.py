"""The CDNA instruction table: what every instruction is and everything it writes.

Owns :class:`Row`, :func:`lookup` (mnemonic -> Row: where the engine learns what an
instruction is; the loader only asks :func:`addrsim.isa.control.is_branch` to resolve branch
targets) and :func:`effects` (the registers an instruction may write: havoc at loop exits,
the VGPRs a memory instruction returns into).  May
import addrsim.ir, addrsim.isa.alu, addrsim.isa.memory and addrsim.isa.control.  The engine
dispatches on ``Row.kind`` and reads the row's fields; it never tests a mnemonic.

Kinds:

* ``salu`` / ``valu``: a row of :data:`addrsim.isa.alu.TABLE` (SOP1/SOP2/SOPC/SOPK, VOP1/VOP2/
  VOP3/VOPC; MI300 ISA guide chapters 4 and 6), scalar or per lane.
* ``float``: a binary32 ALU row used by LLVM's 32-bit division expansion; with modifiers or
  data operands the result is data (``data``).
* ``smem``: ``s_load_dword*`` (chapter 5, scalar memory): the kernarg segment or memory.
* ``buffer``: MUBUF (chapter 9): V# addressing, ``mem`` load/store/atomic, ``nbytes`` per lane.
* ``global``: FLAT global segment (section 9.1 of the FLAT chapter).
* ``lane``: ``v_readfirstlane_b32`` (the lowest active lane's value, chapter 6).
* ``data``: the destination gets data addrsim does not model (LDS reads, floating point,
  matrix results, DPP/SDWA lane moves).
* ``store``: memory writes only (LDS and FLAT stores, LDS atomics without return).
* ``nop``: no effect on the registers the analysis tracks (waits, barriers, cache control).
* ``branch``: ``s_branch`` / ``s_cbranch_*`` (chapter 4.6 "Program flow"), ``branch`` the
  condition (:data:`addrsim.isa.control.CONDITIONS`); ``end``: ``s_endpgm``.
* ``unknown``: no semantics (the engine reports it unsupported); its register effects are
  still stated, conservatively, for havoc.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Optional

from addrsim.isa.alu import FLOAT_ROWS, TABLE, Sem
from addrsim.isa.control import CONDITIONS, is_branch
from addrsim.isa.memory import access_size

KINDS = ("salu", "valu", "float", "smem", "buffer", "global", "lane", "data", "store", "nop", "branch", "end",
         "unknown")

#: Instructions with no effect on the registers the address analysis tracks.
NO_EFFECT = {
    "s_waitcnt", "s_nop", "s_barrier", "s_setprio", "s_sleep", "s_dcache_wb", "s_dcache_inv",
    "s_icache_inv", "s_waitcnt_vscnt", "s_waitcnt_vmcnt", "s_waitcnt_lgkmcnt", "s_waitcnt_expcnt",
    "s_sched_barrier", "buffer_wbl2", "buffer_inv", "s_setreg_imm32_b32", "s_set_gpr_idx_off",
    "s_ttracedata", "s_sethalt", "s_denorm_mode", "s_round_mode",
}

#: Prefixes of instructions whose destination holds data addrsim does not model (memory
#: contents, floating point, matrix results): the destination becomes an opaque value.
DATA_PREFIXES = (
    "ds_read", "ds_load", "ds_bpermute", "ds_permute", "ds_swizzle", "v_mfma", "v_smfmac",
    "v_cvt_", "v_rcp", "v_rsq", "v_sqrt", "v_exp", "v_log", "v_sin", "v_cos", "v_fma", "v_mac",
    "v_pk_", "v_dot", "v_mul_f", "v_add_f", "v_sub_f", "v_subrev_f", "v_max_f", "v_min_f",
    "v_fract", "v_ldexp", "v_frexp", "v_div_", "v_med3_f", "v_mad_f", "v_cmp_class", "v_trunc_f",
    "v_floor_f", "v_ceil_f", "v_rndne_f", "v_exp_f", "v_max3_f", "v_min3_f", "v_madmk_f", "v_madak_f",
    "flat_load", "scratch_load", "flat_atomic", "v_mov_b64", "v_prng",
    "v_permlane", "v_swap",
)

#: Prefixes of instructions that only write memory (no register effect).
STORE_PREFIXES = ("ds_write", "ds_store", "global_store", "flat_store", "scratch_store", "ds_add",
                  "ds_max", "ds_min", "ds_or", "ds_and", "ds_xor", "ds_inc", "ds_dec", "ds_sub")



#: SOPK accumulate forms and s_cmov print "sdst, src" and read the destination as the first
#: source (MI300 ISA guide section 4.3 "SOPK", S_CMOV_B32 in SOP1).
READS_DST = frozenset({"s_cmov_b32", "s_addk_i32", "s_mulk_i32"})


@dataclass(frozen=True)
class Row:
    """One instruction of the table (module docstring).  ``sem`` is the ALU semantics
    (salu/valu/float); ``reads_dst``: the printed destination is also the first source;
    ``writes_scc`` / ``writes_vcc`` / ``writes_exec``: it may write SCC, VCC (implicitly: VOPC,
    carry-outs, v_div_scale) or EXEC; ``mem``: "load", "store" or "atomic" for buffer/global;
    ``nbytes``: bytes per lane of a memory access; ``branch``: the branch condition."""

    mnemonic: str
    kind: str
    sem: Optional[Sem] = None
    reads_dst: bool = False
    writes_scc: bool = False
    writes_vcc: bool = False
    writes_exec: bool = False
    mem: Optional[str] = None
    nbytes: int = 0
    branch: Optional[str] = None


def normalize(mnemonic: str) -> str:
    """Strip the encoding suffix llvm-objdump prints (``_e32``, ``_e64``, ``_vop3``)."""
    for suf in ("_e32", "_e64", "_vop3"):
        if mnemonic.endswith(suf):
            return mnemonic[: -len(suf)]
    return mnemonic


def _kind(mn: str) -> Optional[str]:
    if mn in NO_EFFECT:
        return "nop"
    if mn in FLOAT_ROWS:
        return "float"
    if mn in TABLE:
        return "salu" if mn.startswith("s_") else "valu"
    if mn == "s_endpgm":
        return "end"
    if is_branch(mn):
        return "branch"
    if mn.startswith(("s_load_dword", "s_load_b")):
        return "smem"
    if mn.startswith("buffer_"):
        return "buffer"
    if mn == "v_readfirstlane_b32":
        return "lane"
    if mn.startswith("global_"):
        return "global"
    if mn.startswith(STORE_PREFIXES):
        return "store"
    if mn.startswith(DATA_PREFIXES) or (mn.startswith("v_cmp_") and "_f" in mn[6:]) or mn.startswith("v_cmpx") \
            or (mn.startswith("v_") and mn.endswith(("_dpp", "_sdwa"))):
        return "data"          # DPP/SDWA forms move data across lanes or sub-dword: opaque
    return "unknown"


def _mem(mn: str) -> Optional[str]:
    if not mn.startswith(("buffer_", "global_")):
        return None
    op = mn.split("_")[1]
    return {"load": "load", "store": "store", "atomic": "atomic"}.get(op)


@lru_cache(maxsize=None)
def lookup(mnemonic: str) -> Row:
    """The table row of ``mnemonic`` (as llvm-objdump prints it, encoding suffix allowed);
    kind ``unknown`` when addrsim has no semantics for it."""
    mn = normalize(mnemonic)
    kind = _kind(mn)
    return Row(
        mnemonic=mn, kind=kind, sem=TABLE.get(mn) if kind in ("salu", "valu", "float") else None,
        reads_dst=mn in READS_DST,
        writes_scc=mn.startswith("s_"),
        writes_vcc=mn.startswith("v_cmp") or "_co_" in mn or mn.startswith(("v_addc", "v_subb", "v_div_scale")),
        writes_exec=mn.startswith("v_cmpx") or "saveexec" in mn,
        mem=_mem(mn), nbytes=access_size(mn) if kind in ("buffer", "global") else 0,
        branch=CONDITIONS.get(mn, "unknown") if kind == "branch" else None)


@dataclass(frozen=True)
class Effects:
    """What one instruction may write: ``n_dst`` leading register operands, and SCC/VCC/EXEC."""

    n_dst: int
    scc: bool
    vcc: bool
    exec: bool


def effects(row: Row, has_modifier: Callable[[str], bool] = lambda name: False) -> Effects:
    """The registers an instruction of ``row`` may write (conservative for an unknown one: one
    destination and the flags its name implies).  ``has_modifier(name)`` tells whether the
    instruction carries ``glc`` / ``lds``."""
    has = has_modifier
    if row.kind in ("nop", "branch", "end") or row.mnemonic.startswith("s_waitcnt"):
        return Effects(0, row.writes_scc, False, False)
    if row.sem is not None:
        n = len([t for t in row.sem.outs if t != "scc"])
    elif row.kind == "store" or row.mem == "store" or (row.mem == "atomic" and not has("glc")) \
            or (row.kind == "buffer" and row.mem == "load" and has("lds")):
        n = 0
    else:
        n = 1
    return Effects(n, row.writes_scc, row.writes_vcc, row.writes_exec)


def split_operands(ops, sem, reads_dst: bool = False):
    """(destination operands, source operands) of an ALU instruction's printed ``ops`` for its
    row ``sem`` (SCC is implicit, never printed), or None when the count does not match.  The
    SOPK accumulate forms and s_cmov_b32 (``reads_dst``: "sdst, simm16") read their destination
    as the first source (MI300 ISA guide section 4.3 SOPK)."""
    outs = [t for t in sem.outs if t != "scc"]
    n_in = len([t for t in sem.ins if t != "scc"])
    ops = list(ops)
    if len(ops) != len(outs) + n_in:
        if not (reads_dst and len(ops) == 2):
            return None
        ops = [ops[0], ops[0], ops[1]]
    return ops[:len(outs)], ops[len(outs):]
