"""Device memory for the emulator: named allocations at fixed bases, read and written by
byte address, and the buffer resource (V#) of MUBUF instructions.

Owns :class:`Memory`, :class:`Buffer` and :func:`vsharp`.  May import addrsim.emu.wave only
(numpy aside).  Facts: MI300 ISA guide (CDNA3) chapter 9 "Buffer instructions": V# dwords
0-1 hold base[47:0] and stride[61:48] (dword1 bits 29:16), dword2 num_records, dword1 bit 31
swizzle_enable, dword3 bit 23 add_tid_enable; the address is ``base + soffset + inst_offset
+ (offen ? voffset : 0) + (idxen ? vindex * stride : 0)``; the range check (raw buffer, stride
0: ``voffset + inst_offset + size <= num_records``; structured: ``vindex < num_records``)
drops an out-of-range store and returns 0 for an out-of-range load.  The same facts as
:func:`addrsim.isa.memory.buffer_in_range`, which the prover uses.  An access outside every
allocation (what would be a page fault on the GPU) raises EmuError.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Tuple

import numpy as np

from addrsim.emu.wave import LANES, U64, EmuError

ALIGN = 1 << 21          # allocations 2 MiB apart, as a GPU allocator would place them
FIRST = 1 << 40


class Memory:
    """Allocations ``name -> (base, bytes)``; :meth:`alloc` places a new one above the last."""

    def __init__(self):
        self.blocks: Dict[str, Tuple[int, np.ndarray]] = {}
        self._next = FIRST

    def alloc(self, name: str, data: np.ndarray) -> int:
        """Place ``data`` (any dtype; copied as bytes) and return its base byte address."""
        raw = np.frombuffer(np.ascontiguousarray(data).tobytes(), dtype=np.uint8).copy()
        base = self._next
        self.blocks[name] = (base, raw)
        self._next = base + (len(raw) + 64 + ALIGN - 1) // ALIGN * ALIGN + ALIGN
        return base

    def view(self, name: str, dtype) -> np.ndarray:
        """The allocation's bytes as ``dtype`` (a view: later stores show in it)."""
        return self.blocks[name][1].view(dtype)

    def _locate(self, addr: np.ndarray, size: int):
        """(allocation bytes, byte offsets) for the lanes' addresses, every one inside a single
        allocation.  Raises EmuError."""
        hits = [(n, b, raw) for n, (b, raw) in self.blocks.items()
                if np.any((addr >= U64(b)) & (addr < U64(b + len(raw))))]
        if len(hits) != 1:
            what = "no allocation" if not hits else "several allocations: " + ", ".join(h[0] for h in hits)
            raise EmuError(f"address {int(addr.min()):#x}..{int(addr.max()):#x} ({size} bytes per lane) in {what}")
        n, b, raw = hits[0]
        off = (addr - U64(b)).astype(np.int64)
        if off.min() < 0 or off.max() + size > len(raw):
            raise EmuError(f"access {int(addr.min()):#x}..{int(addr.max()) + size:#x} runs outside allocation {n}")
        return raw, off

    def load(self, addr: np.ndarray, size: int, lanes: np.ndarray) -> np.ndarray:
        """The ``size`` bytes at each enabled lane's address as uint8 [64, size] (zeros for
        the other lanes)."""
        out = np.zeros((LANES, size), dtype=np.uint8)
        if lanes.any():
            raw, off = self._locate(addr[lanes], size)
            out[lanes] = raw[off[:, None] + np.arange(size)]
        return out

    def store(self, addr: np.ndarray, data: np.ndarray, lanes: np.ndarray) -> None:
        """Write ``data`` (uint8 [64, size]) at each enabled lane's address, lanes in order."""
        if lanes.any():
            size = data.shape[1]
            raw, off = self._locate(addr[lanes], size)
            raw[off[:, None] + np.arange(size)] = data[lanes]


@dataclass(frozen=True)
class Buffer:
    """The fields of a V#: ``base`` (48-bit byte address), ``stride`` (bytes), ``num_records``,
    ``swizzle`` and ``add_tid`` (enable bits)."""

    base: int
    stride: int
    num_records: int
    swizzle: bool
    add_tid: bool


def vsharp(words: List[int]) -> Buffer:
    """The V# of four SGPR dwords."""
    w0, w1, w2, w3 = words
    return Buffer(w0 | (w1 & 0xFFFF) << 32, w1 >> 16 & 0x3FFF, w2, bool(w1 >> 31 & 1), bool(w3 >> 23 & 1))


def buffer_addresses(buf: Buffer, vindex: np.ndarray, voffset: np.ndarray, soffset: int, ioff: int,
                     size: int) -> Tuple[np.ndarray, np.ndarray]:
    """(byte addresses, in range) per lane of a MUBUF access (uint64 and bool vectors)."""
    if buf.swizzle or buf.add_tid:
        raise EmuError("swizzled or add_tid buffer addressing is not emulated yet")
    addr = (U64(buf.base) + U64(soffset) + U64(ioff) + voffset + vindex * U64(buf.stride)) & U64((1 << 64) - 1)
    if buf.stride == 0:
        ok = voffset + U64(ioff) + U64(size) <= U64(buf.num_records)
    else:
        ok = vindex < U64(buf.num_records)
    return addr, ok
