"""Operands as llvm-objdump prints them: register names and inline constants.

Owns :func:`parse_register`, :func:`constant` and the special SGPR numbers (VCC_LO, M0,
EXEC_LO).  May import nothing of addrsim.  Facts: MI300 ISA Reference Guide (CDNA3) section
3.6 "Scalar operands" (VCC is s106:s107, M0 s124, EXEC s126:s127 in the operand encoding) and
3.6.2 "Inline constants" (integers -16..64 and the float constants 0.5, 1.0, 2.0, 4.0, their
negatives and 1/(2*pi); a 32-bit literal is zero-extended for a 64-bit operand).  The same
in CDNA4.  Both the prover's machine (:mod:`addrsim.engine.machine`) and the emulator
(:mod:`addrsim.emu`) read operands through here.
"""
from __future__ import annotations

import re
from functools import lru_cache
from typing import Optional

VCC_LO = 106
M0 = 124
EXEC_LO = 126

FLOAT_INLINE = {"0.5": 0x3F000000, "-0.5": 0xBF000000, "1.0": 0x3F800000, "-1.0": 0xBF800000,
                "2.0": 0x40000000, "-2.0": 0xC0000000, "4.0": 0x40800000, "-4.0": 0xC0800000,
                "0.15915494": 0x3E22F983}
_REG = re.compile(r"^([sva])(\d+)$|^([sva])\[(\d+):(\d+)\]$")


@lru_cache(maxsize=4096)
def parse_register(op: str):
    """("s"|"v"|"a", first index, count) or ("exec", name) for a register operand (VCC as
    s106:s107, M0 as s124); None for anything else."""
    m = _REG.match(op)
    if m:
        if m.group(1):
            return m.group(1), int(m.group(2)), 1
        f, lo, hi = m.group(3), int(m.group(4)), int(m.group(5))
        return f, lo, hi - lo + 1
    if op in ("vcc", "vcc_lo"):
        return "s", VCC_LO, 2 if op == "vcc" else 1
    if op == "vcc_hi":
        return "s", VCC_LO + 1, 1
    if op == "m0":
        return "s", M0, 1
    if op in ("exec", "exec_lo", "exec_hi"):
        return "exec", op
    return None


@lru_cache(maxsize=4096)
def constant(op: str, width: int) -> Optional[int]:
    """The value of inline constant or literal ``op`` as a ``width``-bit unsigned integer, or
    None when ``op`` is not a constant.  Integer inline constants are sign-extended to the
    width; 32-bit literals are zero-extended."""
    s = op
    if s.startswith("lit(") and s.endswith(")"):
        s = s[4:-1]
    try:
        v = int(s, 0)
    except ValueError:
        v = None
    if v is not None:
        if v < 0 or -16 <= v <= 64:
            return v & ((1 << width) - 1)
        return v & 0xFFFFFFFF
    if s in FLOAT_INLINE:
        return FLOAT_INLINE[s]
    return None
