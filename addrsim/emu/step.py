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
from addrsim.ir.expr import Const, Sym, symbols
from addrsim.isa.control import CONDITIONS
from addrsim.isa.datapath import FLOAT, MFMA, dpp_source, f32_operands, flush_f32, permlane16_swap, pk_add_bf16, pk_add_f16, read_tr_b16
from addrsim.isa.memory import global_offset
from addrsim.isa.operands import VCC_LO, parse_register
from addrsim.isa.table import Row, lookup, normalize, split_operands
from addrsim.loader.disasm import Instr

_MODIFIERS = ("clamp", "omod", "mul:", "div:", "op_sel", "row_s", "row_r", "row_b", "row_h", "wave_", "sdwa")
_DPP = ("quad_perm", "row_mask", "bank_mask", "bound_ctrl")


def _source(op: str) -> Tuple[str, int, int]:
    """(register or constant, xor mask, and mask) of a source with its float modifiers:
    ``-v1``/``neg(v1)`` flips the sign bit, ``|v1|``/``abs(v1)`` clears it."""
    xor, and_ = 0, 0xFFFFFFFF
    if op.startswith("-") and not op[1:2].isdigit():
        op, xor = op[1:], 0x80000000
    if op.startswith("neg(") and op.endswith(")"):
        op, xor = op[4:-1], 0x80000000
    if (op.startswith("|") and op.endswith("|")) or (op.startswith("abs(") and op.endswith(")")):
        op, and_ = (op[1:-1] if op.startswith("|") else op[4:-1]), 0x7FFFFFFF
    return op, xor, and_


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


def _operands(ins: Instr, sem, reads_dst: bool = False) -> Tuple[List[str], List[str]]:
    if any(m.startswith(_MODIFIERS) for m in ins.modifiers):
        raise EmuError(f"{ins.mnemonic} with output modifiers is not emulated yet ({ins.text})")
    split = split_operands(ins.operands, sem, reads_dst)
    if split is None:
        raise EmuError(f"{ins.text}: {len(ins.operands)} operands, not what the row {ins.mnemonic} expects")
    return split


def _salu(w: Wave, ins: Instr, row: Row) -> None:
    _, names, exprs = alu_template(row.mnemonic)
    out_ops, in_ops = _operands(ins, row.sem, row.reads_dst)
    if any(_source(o)[1:] != (0, 0xFFFFFFFF) for o in in_ops):
        raise EmuError(f"{ins.text}: source modifiers on a scalar instruction")
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


def _inputs(w: Wave, sem, in_ops, ins: Instr):
    """Per-lane uint64 values of the sources (float modifiers applied; DPP on src0)."""
    vals = []
    for k, (t, op) in enumerate(zip([t for t in sem.ins if t != "scc"], in_ops)):
        reg, xor, and_ = _source(op)
        if t == "m":
            v = bits(w.scalar(reg, 64)).astype(U64)
        else:
            v = w.vector(reg, _width(t))
            if (xor, and_) != (0, 0xFFFFFFFF):
                v = (v & U64(and_)) ^ U64(xor)
        if k == 0 and ins.mnemonic.endswith("_dpp"):
            v = v[dpp_source(ins.modifiers)[0]]
        vals.append(v)
    return vals


def _write_lanes(w: Wave, ins: Instr) -> np.ndarray:
    lanes = w.active()
    if ins.mnemonic.endswith("_dpp"):
        lanes = lanes & dpp_source(ins.modifiers)[1]
    return lanes


def _valu(w: Wave, ins: Instr, row: Row) -> None:
    mn = normalize(ins.mnemonic[:-4] if ins.mnemonic.endswith("_dpp") else ins.mnemonic)
    data = FLOAT.get(mn)
    sem = data if data is not None else lookup(mn).sem
    if sem is None:
        raise EmuError(f"no emulated semantics for {ins.mnemonic} ({ins.text} at {ins.addr:#x})")
    out_ops, in_ops = _operands(ins, sem, lookup(mn).reads_dst)
    vals = _inputs(w, sem, in_ops, ins)
    if data is not None:
        src32, dst32 = f32_operands(mn)
        if src32 and w.denorm32 in (0, 2):               # FLOAT_DENORM_MODE_32: flush sources
            vals = [flush_f32(v) if t == "v32" else v for v, t in zip(vals, data.ins)]
        res = data.fn(*vals)
        if dst32 and w.denorm32 in (0, 1):               # flush results
            res = tuple(flush_f32(r) if t == "v32" else r for r, t in zip(res, data.outs))
    else:
        res = _alu_values(mn, sem, vals, ins)
    lanes = _write_lanes(w, ins)
    for t, o, r in zip(sem.outs, out_ops, res):
        r = np.broadcast_to(np.asarray(r, dtype=U64) if t != "m" else np.asarray(r), (LANES,))
        if t == "m":
            w.set_scalar(o, to_mask((r.astype(U64) & U64(1)).astype(bool) & lanes), 64)
        else:
            w.set_vector(o, r, _width(t), lanes)


def _alu_values(mn: str, sem, vals, ins: Instr):
    """The shared ALU row's results over the lanes (a row that needs a uniform operand as a
    constant, such as v_perm_b32's selector, is instantiated with it)."""
    _, names, exprs = alu_template(mn)
    if _opaque(mn):
        uniform = tuple(int(v[0]) if np.all(v == v[0]) else None for v in vals)
        names, exprs = _instantiated(mn, uniform)
    env = dict(zip(names, vals))
    try:
        memo: dict = {}
        return [vec(e, env, memo, [0]) for e in exprs]
    except NoVec as e:
        raise EmuError(f"{ins.text}: {e}")


def _syms(e):
    return symbols(e).values()


@lru_cache(maxsize=None)
def _opaque(mn: str) -> bool:
    """Whether the row applied to symbols leaves an opaque value (it needs a constant operand)."""
    return any(x.kind == "opaque" for e in alu_template(mn)[2] for x in _syms(e))


@lru_cache(maxsize=None)
def _instantiated(mn: str, uniform: tuple):
    row = lookup(mn)
    args = [Const(u, _width(t)) if u is not None else Sym(f"i{k}", _width(t))
            for k, (t, u) in enumerate(zip(row.sem.ins, uniform))]
    exprs = tuple(row.sem.fn(*args))
    if any(x.kind == "opaque" for e in exprs for x in _syms(e)):
        raise EmuError(f"{mn}: no lane-wise semantics for a per-lane operand it needs uniform ({uniform})")
    return [f"i{k}" for k in range(len(args))], exprs


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
    atomic = row.mem == "atomic"
    if atomic and (normalize(ins.mnemonic) not in _ATOMIC_ADD or ins.modifier("glc") is not None):
        raise EmuError(f"{ins.mnemonic} is not emulated yet")
    if not atomic and row.mem not in ("load", "store"):
        raise EmuError(f"{ins.mnemonic} is not emulated yet")
    vdata, vaddr, rsrc, soff = ins.operands[:4]
    r = parse_register(rsrc)
    if r is None or r[0] != "s" or r[2] != 4:
        raise EmuError(f"{ins.text}: resource {rsrc!r} is not an SGPR quad")
    buf = vsharp([int(w.s[r[1] + k]) for k in range(4)])
    index, voff = _vaddr(w, ins, vaddr)
    ioff = int(ins.modifier("offset") or 0)
    addr, ok = buffer_addresses(buf, index, voff, w.scalar(soff, 32), ioff, row.nbytes,
                                ins.modifier("idxen") is not None)
    if atomic:
        return _atomic_lanes(w, ins, mem, vdata, addr, w.active() & ok, _ATOMIC_ADD[normalize(ins.mnemonic)])
    return _transfer(w, ins, row, mem, vdata, addr, ok)


def _f32_add(old: np.ndarray, add: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return (old.view(np.float32) + add.view(np.float32)).view(np.uint32)


_ATOMIC_ADD = {"buffer_atomic_add_f32": _f32_add, "global_atomic_add_f32": _f32_add,
               "buffer_atomic_pk_add_bf16": pk_add_bf16, "global_atomic_pk_add_bf16": pk_add_bf16,
               "buffer_atomic_pk_add_f16": pk_add_f16, "global_atomic_pk_add_f16": pk_add_f16}
"""Atomic adds without return (glc off): each lane's dword combined with memory, lanes in
order (MI300 ISA guide 9.1.10 "Atomics"; the fp32 add rounds to nearest even, the packed bf16
add rounds each half)."""


def _atomic_lanes(w: Wave, ins: Instr, mem: Memory, vdata: str, addr: np.ndarray, lanes: np.ndarray, op) -> Access:
    add = w.v[w.vgpr_index(vdata)]
    live = np.nonzero(lanes)[0]
    if len(np.unique(addr[live])) == len(live):         # distinct words: one read-modify-write
        old = mem.load(addr, 4, lanes).view(np.uint32)[:, 0]
        data = np.zeros((LANES, 4), dtype=np.uint8)
        data[live] = op(old[live], add[live]).astype(np.uint32).view(np.uint8).reshape(-1, 4)
        mem.store(addr, data, lanes)
        return Access(ins.addr, "store", addr, 4, lanes)
    for lane in live:                                  # lanes that share a word add in lane order
        one = np.eye(1, LANES, int(lane), dtype=bool)[0]
        a = np.full(LANES, addr[lane], dtype=U64)
        old = mem.load(a, 4, one)[lane].view(np.uint32)
        data = np.zeros((LANES, 4), dtype=np.uint8)
        data[lane] = op(old, add[lane:lane + 1]).astype(np.uint32).view(np.uint8)
        mem.store(a, data, one)
    return Access(ins.addr, "store", addr, 4, lanes)


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


def _mfma(w: Wave, ins: Instr) -> None:
    na, nb, nc, fn = MFMA.get(normalize(ins.mnemonic), (0, 0, 0, None))
    if fn is None or ins.modifiers:
        raise EmuError(f"no emulated semantics for {ins.text}")
    dst, a, b, c = ins.operands
    regs = lambda op, n: np.stack([w.v[w.vgpr_index(op) + k] for k in range(n)])   # noqa: E731
    cv = np.zeros((nc, LANES), dtype=np.uint32) if parse_register(c) is None else regs(c, nc)
    if parse_register(c) is None and int(c, 0) != 0:
        raise EmuError(f"{ins.text}: a non-zero constant C operand")
    d = fn(regs(a, na), regs(b, nb), cv)
    first = w.vgpr_index(dst)
    for k in range(nc):
        w.v[first + k] = d[k]          # MFMA writes every lane (EXEC does not mask it)


def _lds_address(w: Wave, ins: Instr, vaddr: str) -> np.ndarray:
    return (w.vector(vaddr, 32) + U64(int(ins.modifier("offset") or 0))).astype(np.int64)


def _lds_bytes(ins: Instr) -> int:
    size = {"b32": 4, "b64": 8, "b128": 16, "b96": 12}.get(normalize(ins.mnemonic).rsplit("_", 1)[1])
    if size is None or normalize(ins.mnemonic).count("_") != 2:
        raise EmuError(f"no emulated semantics for {ins.mnemonic} ({ins.text} at {ins.addr:#x})")
    return size


def _ds_read(w: Wave, ins: Instr) -> None:
    """ds_read_bN vdst, vaddr offset:N: LDS bytes [addr, addr + N/8) per enabled lane; an
    address past the LDS reads 0 (MI300 ISA guide 11.2, LDS range clamping)."""
    size = _lds_bytes(ins)
    addr = _lds_address(w, ins, ins.operands[1])
    lanes = w.active()
    ok = lanes & (addr + size <= len(w.lds))
    data = np.zeros((LANES, size), dtype=np.uint8)
    data[ok] = w.lds[addr[ok, None] + np.arange(size)]
    words = data.view(np.uint32)
    first = w.vgpr_index(ins.operands[0])
    for k in range(size // 4):
        w.v[first + k][lanes] = words[lanes, k]


def _ds_read_tr(w: Wave, ins: Instr) -> None:
    """ds_read_b64_tr_b16 vdst[2], vaddr offset:N (gfx950): each lane's 8 bytes read as for
    ds_read_b64 (past the LDS: 0), then exchanged within blocks of 16 lanes
    (:func:`addrsim.isa.datapath.read_tr_b16`).  Every lane of a block takes part in the
    exchange; a lane EXEC disables neither reads nor is written."""
    if normalize(ins.mnemonic) != "ds_read_b64_tr_b16":
        raise EmuError(f"no emulated semantics for {ins.mnemonic} ({ins.text} at {ins.addr:#x})")
    addr = _lds_address(w, ins, ins.operands[1])
    lanes = w.active()
    ok = lanes & (addr + 8 <= len(w.lds))
    data = np.zeros((LANES, 8), dtype=np.uint8)
    data[ok] = w.lds[addr[ok, None] + np.arange(8)]
    words = read_tr_b16(data.view(np.uint16)).copy().view(np.uint32)
    first = w.vgpr_index(ins.operands[0])
    for k in range(2):
        w.v[first + k][lanes] = words[lanes, k]


def _permlane_swap(w: Wave, ins: Instr) -> None:
    """v_permlane16_swap_b32 vdst, vsrc (gfx950): both registers written
    (:func:`addrsim.isa.datapath.permlane16_swap`); EXEC must be full (the kernels run it so)."""
    if normalize(ins.mnemonic) != "v_permlane16_swap_b32" or ins.modifiers:
        raise EmuError(f"no emulated semantics for {ins.text}")
    if w.exec != (1 << LANES) - 1:
        raise EmuError(f"{ins.text} at {ins.addr:#x} with lanes disabled (EXEC {w.exec:#x}) is not emulated")
    d, s = w.vgpr_index(ins.operands[0]), w.vgpr_index(ins.operands[1])
    w.v[d], w.v[s] = permlane16_swap(w.v[d], w.v[s])


def _ds_write(w: Wave, ins: Instr) -> None:
    """ds_write_bN vaddr, vdata offset:N, lanes in order; writes past the LDS are dropped."""
    size = _lds_bytes(ins)
    addr = _lds_address(w, ins, ins.operands[0])
    first = w.vgpr_index(ins.operands[1])
    data = np.stack([w.v[first + k] for k in range(size // 4)], axis=1).copy().view(np.uint8)
    ok = w.active() & (addr + size <= len(w.lds))
    for lane in np.nonzero(ok)[0]:
        w.lds[addr[lane]:addr[lane] + size] = data[lane]


def _buffer_lds(w: Wave, ins: Instr, row: Row, mem: Memory) -> Access:
    """buffer_load_dword{,x3,x4} ... lds: each enabled lane's N bytes go to LDS at M0 +
    inst_offset + N*lane (MI300 ISA guide 9.1.9 "Buffer load to LDS"; gfx950 adds the x3/x4
    forms, CDNA4 guide, the same placement per lane); out of range: 0.  M0 supplies as many
    low bits as the LDS needs (16 for gfx942's 64 KiB, 18 for gfx950's 160 KiB)."""
    size = row.nbytes
    if size not in (4, 12, 16):
        raise EmuError(f"{ins.text}: loads to LDS of {size} bytes are not emulated")
    vaddr, rsrc, soff = ins.operands[:3]
    r = parse_register(rsrc)
    buf = vsharp([int(w.s[r[1] + k]) for k in range(4)])
    index, voff = _vaddr(w, ins, vaddr)
    ioff = int(ins.modifier("offset") or 0)
    addr, ok = buffer_addresses(buf, index, voff, w.scalar(soff, 32), ioff, size,
                                ins.modifier("idxen") is not None)
    lanes = w.active() & ok
    data = mem.load(addr, size, lanes)
    base = (int(w.s[124]) & ((1 << (len(w.lds) - 1).bit_length()) - 1)) + ioff    # M0's LDS address bits
    for lane in np.nonzero(w.active())[0]:
        at = base + size * int(lane)
        if at + size <= len(w.lds):
            w.lds[at:at + size] = data[lane]
    return Access(ins.addr, "load", addr, size, lanes)


def _atomic(w: Wave, ins: Instr, row: Row, mem: Memory) -> Access:
    """global_atomic_{add_f32, pk_add_bf16} vaddr, vdata, saddr (no return)."""
    if normalize(ins.mnemonic) not in _ATOMIC_ADD or ins.modifier("glc") is not None:
        raise EmuError(f"{ins.text}: atomic not emulated yet")
    vaddr, vdata, saddr = ins.operands[:3]
    ioff = global_offset(int(ins.modifier("offset") or 0))
    addr = (w.vector(vaddr, 64) if saddr == "off" else U64(w.scalar(saddr, 64)) + w.vector(vaddr, 32)) + U64(ioff)
    return _atomic_lanes(w, ins, mem, vdata, addr, w.active(), _ATOMIC_ADD[normalize(ins.mnemonic)])


def _readfirstlane(w: Wave, ins: Instr) -> None:
    act = np.nonzero(w.active())[0]
    v = w.vector(ins.operands[1], 32)
    w.set_scalar(ins.operands[0], int(v[act[0] if len(act) else 0]), 32)


def _handler(ins: Instr, row: Row):
    """The function that executes ``ins`` (its row already looked up), or None: the one
    dispatch :func:`step` and :func:`unsupported` share."""
    mn, kind = row.mnemonic, row.kind
    if kind == "salu":
        return _salu
    if kind in ("valu", "float") or (kind == "data" and (mn in FLOAT or mn.endswith("_dpp") or mn.startswith("v_cmp"))):
        return _valu
    if mn.startswith("v_mfma"):
        return _mfma
    if mn.startswith("ds_read_b64_tr"):
        return _ds_read_tr
    if mn.startswith("v_permlane16_swap"):
        return _permlane_swap
    if mn.startswith("ds_read_b"):
        return _ds_read
    if mn.startswith("ds_write_b"):
        return _ds_write
    if kind == "lane":
        return _readfirstlane
    if kind == "buffer" and ins.modifier("lds") is not None:
        return _buffer_lds
    return {"smem": _smem, "buffer": _buffer, "global": _atomic if row.mem == "atomic" else _global,
            "branch": _branch, "end": _end, "nop": _nop}.get(kind)


def _end(w: Wave, ins: Instr) -> None:
    w.done = True


def _nop(w: Wave, ins: Instr) -> None:
    w.at_barrier = normalize(ins.mnemonic) == "s_barrier"


def unsupported(ins: Instr) -> Optional[str]:
    """Why the emulator cannot run ``ins`` (a short reason), or None when it can: the static
    side of :func:`step`'s dispatch, for the per-kernel list of instructions still without
    semantics (``addrsim run --coverage``).  Checks the row tables each handler reads; a
    handler may still refuse an operand form at run time (EmuError)."""
    row = lookup(ins.mnemonic)
    fn = _handler(ins, row)
    mn = normalize(ins.mnemonic[:-4] if ins.mnemonic.endswith("_dpp") else ins.mnemonic)
    if fn is None:
        return f"no semantics ({row.kind} row)"
    if fn is _valu and FLOAT.get(mn) is None and lookup(mn).sem is None:
        return "no float or ALU row"
    if fn in (_valu, _salu) and any(m.startswith(_MODIFIERS) for m in ins.modifiers):
        return "output modifiers"
    if fn is _mfma and (MFMA.get(mn, (0, 0, 0, None))[3] is None or ins.modifiers):
        return "no MFMA row"
    if fn in (_ds_read, _ds_write):
        try:
            _lds_bytes(ins)
        except EmuError:
            return "no LDS access row"
    if fn is _branch and ins.mnemonic not in CONDITIONS:
        return "no branch condition"
    if (fn is _atomic or (fn is _buffer and row.mem == "atomic")) and mn not in _ATOMIC_ADD:
        return "atomic without a row"
    return None


def step(w: Wave, ins: Instr, mem: Memory) -> Optional[Access]:
    """Execute ``ins`` on ``w`` (its pc moves to the next instruction or the branch target).
    Returns the memory access it made, or None.  Raises EmuError."""
    row = lookup(ins.mnemonic)
    w.pc = ins.addr + ins.size
    fn = _handler(ins, row)
    if fn is None:
        raise EmuError(f"no emulated semantics for {ins.mnemonic} ({ins.text} at {ins.addr:#x})")
    if fn is _branch:
        if _branch(w, ins):
            w.pc = ins.target
        return None
    if fn in (_smem, _buffer, _buffer_lds, _global, _atomic):
        return fn(w, ins, row, mem) if fn is not _smem else fn(w, ins, mem)
    if fn in (_salu, _valu):
        fn(w, ins, row)
    else:
        fn(w, ins)
    return None
