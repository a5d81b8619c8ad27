"""The kernel's starting states: the symbolic wave at entry and a concrete wave for replay.

Owns :func:`initial_machine`, :func:`concrete_machine` and the constants of the replay's
address space (PTR_LIMIT, KERNARG_PTR, LANE).  Facts: LLVM AMDGPUUsage "Initial Kernel
Execution State" (the kernarg SGPR pair, the enabled workgroup id SGPRs, work-item ids packed
in v0).  May import addrsim.ir, addrsim.loader, addrsim.engine and addrsim.model.
"""
from __future__ import annotations

from typing import Dict, Tuple


from addrsim.ir import expr as X
from addrsim.loader.codeobj import Kernel
from addrsim.ir.expr import Const, Sym
from addrsim.engine.machine import ConcreteLanes, SymbolicLane
from addrsim.model.models import ModelSet, arg_layout, grid_symbols, pointer_args




PTR_LIMIT = 1 << 47          # allocations lie below 2**47 (user-mode canonical addresses)


KERNARG_PTR = 0x7F0000000000


LANE = "tid_x"


def initial_machine(kernel: Kernel, arch: str, ms: ModelSet) -> Tuple[SymbolicLane, Sym]:
    """The symbolic wave at kernel entry: kernarg pointer, workgroup ids and packed
    work-item ids where the kernel descriptor puts them."""
    st = kernel.initial_state(arch)
    lane = Sym(LANE, 32, "lane")
    args = {}
    ptrs = pointer_args(ms, kernel)
    for a in kernel.args:
        if a.name == "pad" or a.name in args:
            continue
        if a.name in ptrs:
            args[a.name] = X.zext(Sym(a.name, 48, "ptr"), 64)
        else:
            args[a.name] = Sym(a.name, 8 * a.size, "arg")
    kp = Sym("kernarg_ptr", 48, "ptr")
    layout = arg_layout(ms, kernel)
    m = SymbolicLane(layout, args, X.zext(kp, 64), kernel.kernarg_segment_size, lane_sym=lane)
    m.sgpr[st.kernarg_sgpr] = X.extract(kp, 31, 0)
    m.sgpr[st.kernarg_sgpr + 1] = X.zext(X.extract(kp, 47, 32), 32)
    grid = grid_symbols(ms)
    for ax, reg in st.workgroup_id_sgpr.items():
        m.sgpr[reg] = grid[ax]
    m.vgpr[("v", 0)] = [lane]   # x in bits 0-9; y, z are 0 (one work-item id enabled or size 1)
    return m, lane


def concrete_machine(kernel: Kernel, arch: str, ms: ModelSet, argvals: Dict[str, int],
                     ids: Dict[str, int], wave: int) -> ConcreteLanes:
    st = kernel.initial_state(arch)
    layout = arg_layout(ms, kernel)
    args = {}
    for name, _, size in layout:
        if name != "pad" and name in argvals:
            args[name] = Const(argvals[name], 8 * size)
    m = ConcreteLanes(layout, args, Const(KERNARG_PTR, 64), kernel.kernarg_segment_size)
    m.sgpr[st.kernarg_sgpr] = Const(KERNARG_PTR & 0xFFFFFFFF, 32)
    m.sgpr[st.kernarg_sgpr + 1] = Const(KERNARG_PTR >> 32, 32)
    grid = grid_symbols(ms)
    for ax, reg in st.workgroup_id_sgpr.items():
        m.sgpr[reg] = Const(ids.get(grid[ax].name, 0), 32)
    m.vgpr[("v", 0)] = [Const(wave * 64 + i, 32) for i in range(64)]
    return m
