"""Control flow: the branch conditions of SOPP (MI300 ISA guide section 4.6 "Program flow").

Owns :data:`CONDITIONS` (mnemonic -> condition) and :func:`condition` (the 1-bit IR
expression under which a branch is taken).  May import addrsim.ir only; the machine state is
passed in through three readers, so this module knows no register file.

Conditions: ``always`` (s_branch), ``scc1`` / ``scc0`` (SCC), ``vccz`` / ``vccnz`` (the 64-bit
VCC is zero / not zero), ``execz`` / ``execnz`` (EXEC), ``unknown`` (an s_cbranch form addrsim
does not model: s_cbranch_cdbgsys and friends).
"""
from __future__ import annotations

from typing import Callable, Optional

from addrsim.ir import expr as X
from addrsim.ir.expr import Const, Expr

CONDITIONS = {
    "s_branch": "always",
    "s_cbranch_scc1": "scc1", "s_cbranch_scc0": "scc0",
    "s_cbranch_vccz": "vccz", "s_cbranch_vccnz": "vccnz",
    "s_cbranch_execz": "execz", "s_cbranch_execnz": "execnz",
}


def is_branch(mnemonic: str) -> bool:
    """Whether ``mnemonic`` is a SOPP branch (taken or not, to ``Instr.target``)."""
    return mnemonic.startswith(("s_branch", "s_cbranch"))


class BranchUnsupported(Exception):
    """The branch condition cannot be stated (per-lane VCC/EXEC, an unknown s_cbranch form)."""


def condition(cond: str, scc: Callable[[], Expr], vcc: Callable[[], Optional[Expr]],
              exec_: Callable[[], Optional[Expr]]) -> Optional[Expr]:
    """The 1-bit condition under which a branch with condition ``cond`` is taken; None for an
    unconditional one.  ``vcc()`` / ``exec_()`` return the 64-bit register, or None when it is
    per lane (then BranchUnsupported)."""
    if cond == "always":
        return None
    if cond in ("scc1", "scc0"):
        return scc() if cond == "scc1" else X.bnot(scc())
    if cond in ("vccz", "vccnz", "execz", "execnz"):
        v = vcc() if cond.startswith("vcc") else exec_()
        if v is None:
            raise BranchUnsupported(f"s_cbranch_{cond} on a per-lane {'VCC' if cond.startswith('vcc') else 'EXEC'}")
        z = X.eq(v, Const(0, 64))
        return z if cond.endswith("z") and not cond.endswith("nz") else X.bnot(z)
    raise BranchUnsupported(f"branch condition {cond}")
