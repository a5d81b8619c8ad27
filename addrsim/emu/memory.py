"""Device memory for the emulator: named allocations at fixed bases, read and written by
byte address, and the buffer resource (V#) of MUBUF instructions.

Owns :class:`Memory`, :class:`Buffer` and :func:`vsharp`.  May import addrsim.ir,
addrsim.backends, addrsim.isa and addrsim.emu.wave.  Facts: MI300 ISA guide (CDNA3) chapter 9 "Buffer instructions": V# dwords
0-1 hold base[47:0] and stride[61:48] (dword1 bits 29:16), dword2 num_records, dword1 bit 31
swizzle_enable, dword3 bit 23 add_tid_enable; the address is ``base + soffset + inst_offset
+ (offen ? voffset : 0) + (idxen ? vindex * stride : 0)``, swizzled or with the lane added to
the index as the prover builds it (:func:`addrsim.isa.memory.buffer_offset`); the range check (raw buffer, stride
0: ``voffset + inst_offset + size <= num_records``; structured: ``vindex < num_records``)
drops an out-of-range store and returns 0 for an out-of-range load.  Both the V# fields and
the range check are the prover's own rows (:mod:`addrsim.isa.memory`), evaluated here.  An access outside every
allocation reads 0 and is counted (``Memory.stray_loads``); a store there raises EmuError.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Dict, List, Optional, Tuple

import numpy as np

from addrsim.backends.vector import vec
from addrsim.emu.wave import LANES, U64, EmuError, StrayStore
from addrsim.ir.expr import Const, Sym
from addrsim.isa.memory import buffer_in_range, buffer_offset, vsharp_fields

ALIGN = 1 << 21          # allocations 2 MiB apart, as a GPU allocator would place them
FIRST = 1 << 40


class Memory:
    """Allocations ``name -> (base, bytes)``; :meth:`alloc` places a new one above the last."""

    def __init__(self):
        self.blocks: Dict[str, Tuple[int, np.ndarray]] = {}
        self._next = FIRST
        self.stray_loads = 0           # lane loads that fell in no allocation (read as 0)
        self._last = None              # the allocation the last access fell in

    def alloc(self, name: str, data: np.ndarray, at: Optional[int] = None) -> int:
        """Place ``data`` (any dtype; copied as bytes) and return its base byte address: above
        the last allocation, or at byte address ``at`` (a counterexample's pointer: memory is
        sparse, so a tensor may sit just below a 4 GiB boundary).  Raises EmuError when ``at``
        overlaps an allocation or passes 2**64."""
        raw = np.frombuffer(np.ascontiguousarray(data).tobytes(), dtype=np.uint8).copy()
        if at is not None:
            if at < 0 or at + len(raw) > 1 << 64 or any(b < at + len(raw) and at < b + len(other)
                                                         for b, other in self.blocks.values()):
                raise EmuError(f"{name} cannot be placed at {at:#x}: it overlaps another allocation")
            self.blocks[name] = (at, raw)
            return at
        base = self._next
        self.blocks[name] = (base, raw)
        self._next = base + (len(raw) + 64 + ALIGN - 1) // ALIGN * ALIGN + ALIGN
        return base

    def view(self, name: str, dtype) -> np.ndarray:
        """The allocation's bytes as ``dtype`` (a view: later stores show in it)."""
        return self.blocks[name][1].view(dtype)

    def _split(self, addr: np.ndarray, size: int):
        """Per allocation: (its bytes, the lanes' indices inside it, their byte offsets); and
        the indices of lanes whose [address, + size) lies in no single allocation."""
        if self._last is not None:                       # the common case: one allocation, the last one hit
            b, raw = self.blocks[self._last]
            if len(addr) and int(addr.min()) >= b and int(addr.max()) + size <= b + len(raw):
                return [(raw, np.arange(len(addr)), (addr - U64(b)).astype(np.int64))], np.zeros(0, dtype=np.int64)
        out, left = [], np.ones(len(addr), dtype=bool)
        for n, (b, raw) in self.blocks.items():
            inside = left & (addr >= U64(b)) & (addr + U64(size) <= U64(b + len(raw)))
            if inside.any():
                idx = np.nonzero(inside)[0]
                out.append((raw, idx, (addr[idx] - U64(b)).astype(np.int64)))
                left &= ~inside
                self._last = n
        return out, np.nonzero(left)[0]

    def _near(self, addr: int) -> str:
        """", past the end of allocation NAME by N bytes" for the allocation just below ``addr``."""
        below = [(addr - b - len(raw), n) for n, (b, raw) in self.blocks.items() if b + len(raw) <= addr]
        return f", {min(below)[0]} bytes past the end of {min(below)[1]}" if below else ""

    def load(self, addr: np.ndarray, size: int, lanes: np.ndarray) -> np.ndarray:
        """The ``size`` bytes at each enabled lane's address as uint8 [64, size] (zeros for
        the other lanes).  A lane whose bytes lie in no allocation reads 0 and is counted in
        ``stray_loads`` (on the GPU: memory past the tensor, or a fault)."""
        out = np.zeros((LANES, size), dtype=np.uint8)
        if lanes.any():
            sel = np.nonzero(lanes)[0]
            parts, stray = self._split(addr[sel], size)
            for raw, idx, off in parts:
                out[sel[idx]] = raw[off[:, None] + np.arange(size)]
            self.stray_loads += len(stray)
        return out

    def store(self, addr: np.ndarray, data: np.ndarray, lanes: np.ndarray) -> None:
        """Write ``data`` (uint8 [64, size]) at each enabled lane's address, lanes in order.
        Raises EmuError for a lane whose bytes lie in no allocation (a write past a tensor)."""
        if lanes.any():
            size = data.shape[1]
            sel = np.nonzero(lanes)[0]
            parts, stray = self._split(addr[sel], size)
            if len(stray):
                a = int(addr[sel[stray[0]]])
                raise StrayStore(f"store of {size} bytes at {a:#x} (lane {int(sel[stray[0]])}) outside every allocation"
                                 f"{self._near(a)}")
            for raw, idx, off in parts:
                for i, o in zip(idx, off):          # lanes in order: a later lane's bytes win
                    raw[o:o + size] = data[sel[i]]


@dataclass(frozen=True)
class Buffer:
    """The fields of a V#: ``base`` (48-bit byte address), ``stride`` (bytes), ``num_records``,
    ``swizzle`` and ``add_tid`` (enable bits)."""

    base: int
    stride: int
    num_records: int
    swizzle: bool
    add_tid: bool
    words: Tuple[int, ...] = ()      # the four dwords (index_stride, DATA_FORMAT's stride bits)


def vsharp(words: List[int]) -> Buffer:
    """The V# of four SGPR dwords, read with the prover's field positions
    (:func:`addrsim.isa.memory.vsharp_fields`)."""
    base, stride, swz, tid = (f.value for f in vsharp_fields([Const(w, 32) for w in words]))
    return Buffer(base, stride, words[2], bool(swz), bool(tid), tuple(words))


@lru_cache(maxsize=None)
def _range_check(ioff: int, size: int, idxen: bool):
    """The prover's MUBUF range check (:func:`addrsim.isa.memory.buffer_in_range`) over symbols,
    for one instruction offset, access size and idxen bit."""
    return buffer_in_range(Sym("index", 32), Sym("voff", 32), ioff, Sym("stride", 14), Sym("records", 32), size,
                           idxen)


@lru_cache(maxsize=None)
def _offset_formula(ioff: int, words: Tuple[int, ...]):
    """(byte offset, index) of a swizzled or add_tid access as the prover builds them
    (:func:`addrsim.isa.memory.buffer_offset`) over the symbols index, voff and lane."""
    return buffer_offset(Sym("index", 32), Sym("voff", 32), ioff, Sym("lane", 32), [Const(w, 32) for w in words])


def buffer_addresses(buf: Buffer, vindex: np.ndarray, voffset: np.ndarray, soffset: int, ioff: int,
                     size: int, idxen: bool = True) -> Tuple[np.ndarray, np.ndarray]:
    """(byte addresses, in range) per lane of a MUBUF access (uint64 and bool vectors);
    ``idxen``: the instruction's bit (it selects the structured range check)."""
    if buf.swizzle or buf.add_tid:      # the prover's formula (isa/memory.buffer_offset), vectorised
        off, idx = _offset_formula(ioff, buf.words)
        env = {"index": vindex, "voff": voffset, "lane": np.arange(len(vindex), dtype=np.uint64) % U64(LANES)}
        memo: dict = {}
        offv = np.broadcast_to(np.asarray(vec(off, env, memo, [0]), dtype=np.uint64), (len(vindex),))
        addr = (U64(buf.base) + U64(soffset) + offv) & U64((1 << 64) - 1)
        vindex = np.broadcast_to(np.asarray(vec(idx, env, memo, [0]), dtype=np.uint64), (len(vindex),))
    else:
        addr = (U64(buf.base) + U64(soffset) + U64(ioff) + voffset + vindex * U64(buf.stride)) & U64((1 << 64) - 1)
    env = {"index": vindex, "voff": voffset, "stride": U64(buf.stride), "records": U64(buf.num_records)}
    ok = np.broadcast_to(np.asarray(vec(_range_check(ioff, size, idxen), env, {}, [0])),
                         (len(vindex),)).astype(bool)
    return addr, ok
