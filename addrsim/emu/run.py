"""Running a kernel: every workgroup of a grid, the waves of a workgroup in turn up to each
``s_barrier`` and ``s_endpgm``.

Owns :class:`Launch`, :func:`run_grid` and :func:`initial_wave`.  May import addrsim.loader and
the other emu modules.  The initial state follows LLVM AMDGPUUsage "Initial Kernel Execution
State", read from the kernel descriptor (:meth:`addrsim.loader.codeobj.Kernel.initial_state`):
the kernarg segment pointer in its user SGPR pair, each enabled workgroup id in the SGPR after
the user SGPRs, the work-item ids packed in v0 (x in bits 0-9; the fmha kernels enable x only).
Waves run one at a time, each until it reaches a barrier or its end; a barrier releases when
every wave not yet ended has reached it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

from addrsim.emu.memory import Memory
from addrsim.emu.step import Access, step
from addrsim.emu.wave import LANES, EmuError, Wave, lds_bytes, to_mask
from addrsim.isa.operands import EXEC_LO
from addrsim.loader.codeobj import Kernel
from addrsim.loader.disasm import Instr

MAX_INSTRUCTIONS = 50_000_000      # per workgroup: a kernel that loops forever is an error, not a hang


@dataclass
class Launch:
    """What a dispatch needs: the kernel (descriptor and metadata), its architecture, its
    instructions, the kernarg bytes, the grid in workgroups (x, y, z) and the workgroup size
    in work-items (x only)."""

    kernel: Kernel
    arch: str
    code: List[Instr]
    kernarg: bytes
    grid: Tuple[int, int, int]
    workgroup_size: int = 256
    instructions: int = 0
    on_access: Optional[Callable[[Tuple[int, int, int], int, Access], None]] = None
    keep_waves: bool = False         # keep each workgroup's waves at their end in ``waves``
    waves: Dict[Tuple[int, int, int], List[Wave]] = field(default_factory=dict)
    _by_pc: Dict[int, Instr] = field(default_factory=dict)


def initial_wave(launch: Launch, kernarg_ptr: int, ids: Tuple[int, int, int], index: int) -> Wave:
    """Wave ``index`` of workgroup ``ids`` at the kernel's entry."""
    st = launch.kernel.initial_state(launch.arch)
    w = Wave(index=index, denorm32=launch.kernel.descriptor.float_denorm_mode_32)
    w.s[st.kernarg_sgpr], w.s[st.kernarg_sgpr + 1] = kernarg_ptr & 0xFFFFFFFF, kernarg_ptr >> 32
    for axis, reg in st.workgroup_id_sgpr.items():
        w.s[reg] = ids["xyz".index(axis)]
    tid = index * LANES + np.arange(LANES)
    w.v[0] = tid.astype(np.uint32)
    w.set_mask(EXEC_LO, to_mask(tid < launch.workgroup_size))
    w.pc = launch.code[0].addr
    return w


def run_workgroup(launch: Launch, mem: Memory, kernarg_ptr: int, ids: Tuple[int, int, int]) -> None:
    """Run every wave of workgroup ``ids`` to its end.  Raises EmuError."""
    if not launch._by_pc:
        launch._by_pc.update({i.addr: i for i in launch.code})
    waves = [initial_wave(launch, kernarg_ptr, ids, k) for k in range(-(-launch.workgroup_size // LANES))]
    lds = np.zeros(lds_bytes(launch.arch), dtype=np.uint8)
    for w in waves:
        w.lds = lds                     # one LDS per workgroup, its size the architecture's
    try:
        _run_waves(launch, mem, waves, ids)
    finally:
        launch.instructions += sum(w.executed for w in waves)
    if launch.keep_waves:
        launch.waves[ids] = waves


def _run_waves(launch: Launch, mem: Memory, waves: List[Wave], ids) -> None:
    """The waves in turn, each until its end or the barrier; a barrier releases when every
    live wave has reached it.  Raises EmuError naming the instruction and the wave."""
    count = 0
    while not all(w.done for w in waves):
        for w in waves:
            while not w.done and not w.at_barrier:
                ins = launch._by_pc.get(w.pc)
                if ins is None:
                    raise EmuError(f"wave {w.index} of workgroup {ids}: pc {w.pc:#x} is not an instruction of the kernel")
                try:
                    acc = step(w, ins, mem)
                except EmuError as e:      # name the instruction and the wave
                    raise type(e)(f"{ins.text} at {ins.addr:#x}, wave {w.index} of workgroup {ids}: {e}") from None
                count += 1
                w.executed += 1
                if acc is not None and launch.on_access is not None:
                    launch.on_access(ids, w.index, acc)
                if count > MAX_INSTRUCTIONS:
                    raise EmuError(f"workgroup {ids} ran more than {MAX_INSTRUCTIONS} instructions")
        for w in waves:            # every live wave is at the barrier (or all ended): release it
            w.at_barrier = False


def run_grid(launch: Launch, mem: Memory) -> int:
    """Place the kernarg segment and run every workgroup of the grid (z, then y, then x);
    returns the instructions executed."""
    name = "kernarg" if "kernarg" not in mem.blocks else f"kernarg.{len(mem.blocks)}"    # one per launch
    ptr = mem.alloc(name, np.frombuffer(launch.kernarg, dtype=np.uint8))
    nx, ny, nz = launch.grid
    for z in range(nz):
        for y in range(ny):
            for x in range(nx):
                run_workgroup(launch, mem, ptr, (x, y, z))
    return launch.instructions


def pack_kernarg(kernel: Kernel, values: Dict[str, int]) -> bytes:
    """The kernarg segment of ``kernel`` with each named argument's value at its metadata
    offset and size (little-endian; unnamed bytes 0).  A value wider than its metadata size
    (a 64-bit sequence-start pointer that the 2026 metadata lists as 4 bytes, followed by
    padding: the host's struct holds an 8-byte ``const void*`` there, aiter mha_bwd.h 250-258,
    308-311) takes the padding bytes that follow, up to 8.  Raises EmuError for a value that
    names no argument or does not fit."""
    out = bytearray(kernel.kernarg_segment_size)
    byname = {a.name: a for a in kernel.args}
    named = sorted(a.offset for a in kernel.args if a.name != "pad")
    for name, v in values.items():
        if name not in byname:
            raise EmuError(f"kernel {kernel.symbol} has no argument {name!r}")
        a = byname[name]
        size = a.size
        if v >> (8 * size) and v >= 0:
            room = min([o for o in named if o > a.offset] + [len(out)]) - a.offset
            size = min(8, room)
            if v >> (8 * size):
                raise EmuError(f"kernel {kernel.symbol}: argument {name} = {v:#x} does not fit its {a.size} bytes")
        out[a.offset:a.offset + size] = (v & ((1 << (8 * size)) - 1)).to_bytes(size, "little")
    return bytes(out)
