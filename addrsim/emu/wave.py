"""One wave's state: SGPRs, VGPRs and AGPRs as numpy vectors over its 64 lanes, EXEC, VCC,
SCC, M0 and the program counter.

Owns :class:`Wave` and :class:`EmuError`.  May import addrsim.isa only.  Facts: MI300 ISA
guide (CDNA3) chapter 3 "Kernel state": 102 SGPRs plus VCC (s106:s107), M0 (s124) and EXEC
(s126:s127) in the operand encoding; 512 unified vector registers per lane on gfx90a/942/950
(v0-v255, then the AGPRs a0-a255).  Registers are uint32; a register read before any write
holds 0 (hardware leaves it undefined: kernels must not rely on it).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from addrsim.isa.operands import EXEC_LO, constant, parse_register

LANES = 64
LDS_BYTES = 64 * 1024      # per workgroup on gfx942 (MI300 ISA guide 11.1 "Local data share": 64 KiB)
LDS_BYTES_BY_ARCH = {"gfx942": 64 * 1024, "gfx950": 160 * 1024}
"""LDS a workgroup may address, bytes (CDNA4 ISA guide 11.1: 160 KiB on gfx950; AMDGPUUsage's
processor table gives the same).  An architecture not listed gets :data:`LDS_BYTES`."""


def lds_bytes(arch: str) -> int:
    """The LDS of a workgroup on ``arch``, in bytes."""
    return LDS_BYTES_BY_ARCH.get(arch, LDS_BYTES)
U32 = np.uint32
U64 = np.uint64


class EmuError(Exception):
    """The emulator cannot run an instruction (no semantics, an operand form it does not
    read, memory outside every allocation): the message names the instruction."""


class StrayStore(EmuError):
    """A store whose bytes lie in no allocation: the kernel writes past a tensor (a finding
    about the kernel, not a limit of the emulator)."""


@dataclass
class Wave:
    """Registers of one wave: ``s`` (128 uint32: s0-s105, VCC, M0, EXEC at their encoding
    numbers), ``v`` (512 x 64 uint32: VGPRs then AGPRs), ``scc`` (0/1), ``pc`` (byte
    address of the next instruction), ``done`` (s_endpgm reached), ``index`` (the wave's
    number in its workgroup)."""

    index: int = 0
    s: np.ndarray = field(default_factory=lambda: np.zeros(128, dtype=U32))
    v: np.ndarray = field(default_factory=lambda: np.zeros((512, LANES), dtype=U32))
    scc: int = 0
    pc: int = 0
    done: bool = False
    at_barrier: bool = False
    executed: int = 0        # instructions this wave has run
    denorm32: int = 3        # the descriptor's FLOAT_DENORM_MODE_32 (0 flush in and out, 3 keep)
    lds: np.ndarray = field(default_factory=lambda: np.zeros(LDS_BYTES, dtype=np.uint8))   # the workgroup's, shared

    # ------------------------------------------------------------------ masks
    def mask(self, first: int) -> int:
        """The 64-bit mask held in SGPR pair ``first`` (EXEC_LO, VCC_LO or any pair)."""
        return int(self.s[first]) | int(self.s[first + 1]) << 32

    def set_mask(self, first: int, value: int) -> None:
        self.s[first], self.s[first + 1] = value & 0xFFFFFFFF, value >> 32 & 0xFFFFFFFF

    @property
    def exec(self) -> int:
        return self.mask(EXEC_LO)

    def active(self) -> np.ndarray:
        """Bool vector: the lanes EXEC enables."""
        return bits(self.exec)

    # ------------------------------------------------------------------ operands
    def scalar(self, op: str, width: int) -> int:
        """The value of scalar operand ``op`` (an SGPR or pair, VCC, M0, EXEC, a constant) as
        an unsigned ``width``-bit integer.  Raises EmuError."""
        c = constant(op, width)
        if c is not None:
            return c
        r = parse_register(op)
        if r is None or r[0] in ("v", "a"):
            raise EmuError(f"scalar operand {op!r}")
        if r[0] == "exec":
            ex = self.exec
            return {"exec": ex, "exec_lo": ex & 0xFFFFFFFF, "exec_hi": ex >> 32}[r[1]] & ((1 << width) - 1)
        _, i, n = r
        lo = int(self.s[i])
        return lo if width == 32 else lo | int(self.s[i + 1]) << 32

    def set_scalar(self, op: str, value: int, width: int) -> None:
        if op == "null":
            return
        r = parse_register(op)
        if r is None or r[0] in ("v", "a"):
            raise EmuError(f"scalar destination {op!r}")
        if r[0] == "exec":
            first, width = (EXEC_LO, 64) if r[1] == "exec" else (EXEC_LO + (r[1] == "exec_hi"), 32)
            r = ("s", first, width // 32)
        _, i, _ = r
        self.s[i] = value & 0xFFFFFFFF
        if width == 64:
            self.s[i + 1] = value >> 32 & 0xFFFFFFFF

    def vector(self, op: str, width: int) -> np.ndarray:
        """Per-lane uint64 values of vector operand ``op`` (a VGPR/AGPR or pair, or a uniform
        scalar operand broadcast)."""
        r = parse_register(op)
        if r is None or r[0] in ("s", "exec"):
            return np.full(LANES, self.scalar(op, width), dtype=U64)
        f, i, _ = r
        i += 256 if f == "a" else 0
        lo = self.v[i].astype(U64)
        return lo if width <= 32 else lo | self.v[i + 1].astype(U64) << U64(32)

    def set_vector(self, op: str, value: np.ndarray, width: int, lanes: np.ndarray) -> None:
        """Write ``value`` (uint64 per lane) into the lanes ``lanes`` (bool) of ``op``."""
        f, i, n = _vreg(op)
        for k in range(max(1, width // 32)):
            part = (value >> U64(32 * k)) & U64(0xFFFFFFFF)
            row = self.v[i + k]
            row[lanes] = part[lanes].astype(U32)

    def vgpr_index(self, op: str) -> int:
        f, i, _ = _vreg(op)
        return i


def _vreg(op: str):
    r = parse_register(op)
    if r is None or r[0] not in ("v", "a"):
        raise EmuError(f"vector register {op!r}")
    f, i, n = r
    return f, i + (256 if f == "a" else 0), n


_LANE_BITS = np.arange(LANES, dtype=U64)


def bits(mask: int) -> np.ndarray:
    """Bool vector of the 64 bits of ``mask`` (bit i: lane i)."""
    return ((U64(mask) >> _LANE_BITS) & U64(1)).astype(bool)


def to_mask(lanes: np.ndarray) -> int:
    """The 64-bit mask of a bool vector."""
    return int(np.sum(lanes.astype(U64) << _LANE_BITS, dtype=U64))


