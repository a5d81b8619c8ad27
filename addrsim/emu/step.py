"""One instruction of one wave: the emulator's dispatch.

Owns :func:`step`, :class:`Access` and :func:`alu_template`.  May import addrsim.ir,
addrsim.backends, addrsim.isa, addrsim.loader and the other emu modules.

Semantics come from the instruction table the prover uses, never from a copy: an ALU row of
:data:`addrsim.isa.alu.TABLE` is applied once to symbols (one per operand token), and the
expressions it returns are evaluated over the 64 lanes by the numpy backend
(:func:`addrsim.backends.vector.vec`), so a wrong row shows in the emulator's results too.
VALU results are written to the lanes EXEC enables; a VOPC or carry-out mask gets 0 for the
others (MI300 ISA guide 6.3 "VOPC": inactive lanes write 0 to the destination mask).  SMEM
``s_load_dword*`` reads memory uniformly; MUBUF accesses follow :mod:`addrsim.emu.memory`;
``s_waitcnt`` and the other no-op rows do nothing (memory completes at once).  Anything else
raises EmuError naming the instruction: the emulator never guesses.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import List, Optional, Tuple

import numpy as np

from addrsim.backends.vector import NoVec, vec
from addrsim.emu.memory import Memory, buffer_addresses, vsharp
from addrsim.emu.wave import LANES, U64, EmuError, Wave, bits, to_mask
from addrsim.ir.expr import Sym
from addrsim.isa.control import CONDITIONS
from addrsim.isa.memory import global_offset
from addrsim.isa.operands import VCC_LO, parse_register
from addrsim.isa.table import Row, lookup
from addrsim.loader.disasm import Instr

_MODIFIERS = ("clamp", "omod", "mul:", "div:", "op_sel", "row_", "quad_perm", "dpp", "bank_mask", "sdwa")


@dataclass(frozen=True)
class Access:
    """One memory access of one wave: ``pc``, ``kind`` (load/store), byte ``address`` per lane
    (uint64), ``size`` in bytes, ``lanes`` (bool: EXEC and the range check both pass)."""

    pc: int
    kind: str
    address: np.ndarray
    size: int
    lanes: np.ndarray


def _width(tok: str) -> int:
    return 1 if tok in ("m", "scc") else int(tok[1:])


@lru_cache(maxsize=None)
def alu_template(mnemonic: str):
    """(row, input symbol names, output expressions) of an ALU row applied to symbols."""
    row = lookup(mnemonic)
    syms = [Sym(f"i{k}", _width(t)) for k, t in enumerate(row.sem.ins)]
    return row, [s.name for s in syms], tuple(row.sem.fn(*syms))


def _operands(ins: Instr, row: Row) -> Tuple[List[str], List[str]]:
    if any(o.startswith(("neg(", "abs(", "-v", "|", "-s")) for o in ins.operands) or \
            any(m.startswith(_MODIFIERS) for m in ins.modifiers):
        raise EmuError(f"{ins.mnemonic} with source or output modifiers is not emulated yet ({ins.text})")
    outs = [t for t in row.sem.outs if t != "scc"]
    ins_n = len([t for t in row.sem.ins if t != "scc"])
    ops = list(ins.operands)
    if len(ops) != len(outs) + ins_n:
        if row.reads_dst and len(ops) == 2:
            ops = [ops[0], ops[0], ops[1]]
        else:
            raise EmuError(f"{ins.text}: {len(ops)} operands, the row expects {len(outs) + ins_n}")
    return ops[:len(outs)], ops[len(outs):]


def _salu(w: Wave, ins: Instr, row: Row) -> None:
    _, names, exprs = alu_template(row.mnemonic)
    out_ops, in_ops = _operands(ins, row)
    env, k = {}, 0
    for name, t in zip(names, row.sem.ins):
        if t == "scc":
            env[name] = U64(w.scc)
        else:
            env[name] = U64(w.scalar(in_ops[k], _width(t)))
            k += 1
    res = [int(vec(e, env, {}, [0])) for e in exprs]
    outs = [t for t in row.sem.outs if t != "scc"]
    for t, o, r in zip(outs, out_ops, res):
        w.set_scalar(o, r, _width(t))
    if "scc" in row.sem.outs:
        w.scc = res[len(outs)]


def _valu(w: Wave, ins: Instr, row: Row) -> None:
    _, names, exprs = alu_template(row.mnemonic)
    out_ops, in_ops = _operands(ins, row)
    env = {}
    for name, t, op in zip(names, row.sem.ins, in_ops):
        env[name] = bits(w.scalar(op, 64)).astype(U64) if t == "m" else w.vector(op, _width(t))
    try:
        memo: dict = {}
        res = [np.broadcast_to(np.asarray(vec(e, env, memo, [0]), dtype=U64), (LANES,)) for e in exprs]
    except NoVec as e:
        raise EmuError(f"{ins.text}: {e}")
    lanes = w.active()
    for t, o, r in zip(row.sem.outs, out_ops, res):
        if t == "m":
            w.set_scalar(o, to_mask((r & U64(1)).astype(bool) & lanes), 64)
        else:
            w.set_vector(o, r, _width(t), lanes)


def _smem(w: Wave, ins: Instr, mem: Memory) -> None:
    dst, base_op = ins.operands[0], ins.operands[1]
    off = w.scalar(ins.operands[2], 32) if len(ins.operands) > 2 else 0
    r = parse_register(dst)
    n = r[2] if r else 1
    addr = (w.scalar(base_op, 64) + off) & ~3
    words = mem.load(np.full(LANES, addr, dtype=U64), 4 * n, np.eye(1, LANES, dtype=bool)[0])[0].view(np.uint32)
    for k in range(n):
        w.s[r[1] + k] = words[k]


def _vaddr(w: Wave, ins: Instr, vaddr: str):
    zero = np.zeros(LANES, dtype=U64)
    idxen, offen = ins.modifier("idxen") is not None, ins.modifier("offen") is not None
    if idxen and offen:
        i = w.vgpr_index(vaddr)
        return w.v[i].astype(U64), w.v[i + 1].astype(U64)
    if idxen:
        return w.vector(vaddr, 32), zero
    if offen:
        return zero, w.vector(vaddr, 32)
    return zero, zero


def _buffer(w: Wave, ins: Instr, row: Row, mem: Memory) -> Access:
    if ins.modifier("lds") is not None or row.mem not in ("load", "store"):
        raise EmuError(f"{ins.mnemonic}{' lds' if ins.modifier('lds') is not None else ''} is not emulated yet")
    vdata, vaddr, rsrc, soff = ins.operands[:4]
    r = parse_register(rsrc)
    if r is None or r[0] != "s" or r[2] != 4:
        raise EmuError(f"{ins.text}: resource {rsrc!r} is not an SGPR quad")
    buf = vsharp([int(w.s[r[1] + k]) for k in range(4)])
    index, voff = _vaddr(w, ins, vaddr)
    ioff = int(ins.modifier("offset") or 0)
    addr, ok = buffer_addresses(buf, index, voff, w.scalar(soff, 32), ioff, row.nbytes)
    return _transfer(w, ins, row, mem, vdata, addr, ok)


def _global(w: Wave, ins: Instr, row: Row, mem: Memory) -> Access:
    if row.mem not in ("load", "store"):
        raise EmuError(f"{ins.mnemonic} is not emulated yet")
    if row.mem == "load":
        vdst, vaddr, saddr = ins.operands[:3]
        vdata = vdst
    else:
        vaddr, vdata, saddr = ins.operands[:3]
    ioff = global_offset(int(ins.modifier("offset") or 0))
    if saddr == "off":
        addr = w.vector(vaddr, 64)
    else:
        addr = U64(w.scalar(saddr, 64)) + w.vector(vaddr, 32)
    addr = addr + U64(ioff & ((1 << 64) - 1))
    return _transfer(w, ins, row, mem, vdata, addr, np.ones(LANES, dtype=bool))


def _transfer(w: Wave, ins: Instr, row: Row, mem: Memory, vdata: str, addr, ok) -> Access:
    lanes = w.active() & ok
    size, n = row.nbytes, max(1, row.nbytes // 4)
    first = w.vgpr_index(vdata)
    if size % 4:
        raise EmuError(f"{ins.mnemonic}: sub-dword accesses are not emulated yet")
    if row.mem == "load":
        data = mem.load(addr, size, lanes).view(np.uint32)        # [64, n]; zeros where not in range
        act = w.active()
        for k in range(n):
            w.v[first + k][act] = data[act, k]
    else:
        data = np.stack([w.v[first + k] for k in range(n)], axis=1).copy().view(np.uint8)
        mem.store(addr, data, lanes)
    return Access(ins.addr, row.mem, addr, size, lanes)


def _branch(w: Wave, ins: Instr) -> bool:
    """Whether the branch is taken (the table's conditions on the whole wave's registers)."""
    cond = CONDITIONS.get(ins.mnemonic)
    if cond is None:
        raise EmuError(f"branch {ins.mnemonic} is not emulated")
    return {"always": True, "scc1": w.scc == 1, "scc0": w.scc == 0, "vccz": w.mask(VCC_LO) == 0,
            "vccnz": w.mask(VCC_LO) != 0, "execz": w.exec == 0, "execnz": w.exec != 0}[cond]


def step(w: Wave, ins: Instr, mem: Memory) -> Optional[Access]:
    """Execute ``ins`` on ``w`` (its pc moves to the next instruction or the branch target).
    Returns the memory access it made, or None.  Raises EmuError."""
    row = lookup(ins.mnemonic)
    w.pc = ins.addr + ins.size
    if row.kind == "salu":
        _salu(w, ins, row)
    elif row.kind == "valu":
        _valu(w, ins, row)
    elif row.kind == "smem":
        _smem(w, ins, mem)
    elif row.kind == "buffer":
        return _buffer(w, ins, row, mem)
    elif row.kind == "global":
        return _global(w, ins, row, mem)
    elif row.kind == "branch":
        if _branch(w, ins):
            w.pc = ins.target
    elif row.kind == "end":
        w.done = True
    elif row.kind == "nop":
        w.at_barrier = row.mnemonic == "s_barrier"
    else:
        raise EmuError(f"no emulated semantics for {ins.mnemonic} ({ins.text} at {ins.addr:#x})")
    return None
