"""Execution of a kernel's instructions over the expression IR: operands, register file,
scalar memory (the kernarg segment), buffer addressing, lanes and EXEC.

One :class:`Machine` runs one wavefront.  :class:`SymbolicLane` models a generic lane (its
work-item id is a symbol); :class:`ConcreteLanes` models the 64 real lanes of a wave with
concrete ids.  Both apply the same rows of :data:`addrsim.isa.alu.TABLE` through :func:`addrsim.isa.table.lookup`.

Facts used (AMD Instinct MI300 ISA Reference Guide, CDNA3; same in the CDNA4 guide):

* VCC is SGPR pair 106/107 in the GFX9 numbering, M0 is a separate register, EXEC is 64 bits.
* VALU writes only lanes whose EXEC bit is set; VOPC writes 0 for inactive lanes.
* ``v_readfirstlane_b32`` returns the value of the lowest active lane.
* Buffer addressing (chapter 9, "Buffer Instructions"): V# dword0-1 hold base[47:0] and
  stride[61:48]; ``address = base + soffset + inst_offset + (offen ? voffset : 0) +
  (idxen ? vindex * stride : 0)``; with ``offen`` and ``idxen`` together the VGPR pair holds
  (index, offset).  addrsim sums these in 64 bits.
"""
from __future__ import annotations

import hashlib
import re
from functools import lru_cache
from dataclasses import dataclass
from typing import Iterable, Dict, List, Optional, Sequence, Tuple

from addrsim.ir import expr as X
from addrsim.loader.disasm import Instr
from addrsim.ir.expr import Const, Expr, Sym
from addrsim.backends.z3_bv import offset_from
from addrsim.isa.memory import buffer_in_range, buffer_offset, global_offset, linear_access, vsharp_fields
from addrsim.isa.operands import EXEC_LO, M0, VCC_LO, constant, parse_register  # noqa: F401  (EXEC_LO, M0: re-exported)
from addrsim.isa.table import Row, effects, lookup, split_operands

WAVE = 64


class Unsupported(Exception):
    """An instruction or operand form without semantics on a path that needs it."""


class SliceMiss(Exception):
    """A sliced concrete replay read a register that an instruction it skipped may have
    written (:mod:`addrsim.engine.slice`): the replay must run again unsliced."""


class _Skipped:
    """The value of a register last written by an instruction a sliced replay skipped."""

    def __repr__(self):
        return "SKIPPED"


#: Marks a register a sliced replay did not compute; reading it raises SliceMiss.
SKIPPED = _Skipped()


@dataclass
class LaneMask:
    """A 64-bit lane mask written per lane (by VOPC or carry-out), held for a generic lane
    as that lane's bit (a 1-bit Expr).  Only the symbolic machine creates these."""

    bit: Expr


@dataclass
class Access:
    """One memory access reached on a path.  Addresses are byte addresses (64-bit Exprs).

    For a MUBUF (``buffer_*``) access, ``base`` is the V# base; for a global access it is
    the 64-bit scalar base ``saddr`` (or the lane's 64-bit VGPR address when saddr is off),
    and ``vsharp`` is empty, ``stride`` and ``num_records`` are 0."""

    instr: Instr
    kind: str                 # "load" or "store"
    path: Tuple[Expr, ...]    # path condition (1-bit Exprs, all must hold)
    vsharp: Tuple[Expr, ...]  # the four V# dwords
    base: Expr                # 48-bit base address from the V# (64-bit saddr for global_*)
    stride: Expr              # 14-bit stride, bytes
    num_records: Expr         # V# dword 2
    address: Expr             # 64-bit byte address of the access for this lane
    active: Expr              # 1-bit: is the lane active (EXEC)
    lds: bool
    notes: Tuple[str, ...] = ()
    first: frozenset = frozenset()   # pointer arguments this is the first access of, on its path
    size: int = 4                    # bytes the access reads or writes per lane
    in_range: Expr = Const(1, 1)     # 1-bit: the V# range check passes (always 1 for global_*)
    linear: Expr = Const(1, 1)       # 1-bit: V# swizzle_enable and add_tid_enable are 0; where not a constant,
                                     # ``address`` is the linear one, valid only where this holds


@dataclass
class PathEnd:
    """How a path ended: ``reason`` is one of "endpgm", "goal", "backedge", "unsupported",
    "budget"; ``detail`` says where and why."""

    reason: str
    detail: str
    path: Tuple[Expr, ...]
    reached: frozenset
    loop: Optional[Tuple[int, int]] = None    # (header, back-edge branch) for "backedge"



@lru_cache(maxsize=4096)
def _const_operand(op: str, width: int) -> Optional[Expr]:
    v = constant(op, width)
    return None if v is None else Const(v, width)


class Machine:
    """Register file and one-instruction step shared by both lane models.

    ``kernargs`` maps each kernel argument to its value (Expr of ``8*size`` bits);
    ``arg_layout`` gives (name, offset, size) in bytes; ``kernarg_ptr`` is the 48-bit value
    in the kernarg SGPR pair."""

    nlanes = 1
    #: A :class:`addrsim.engine.slice.LiveTrace` told of register reads and whole scalar
    #: writes (the concrete run of a keyed store coverage), or None.
    trace = None

    def __init__(self, arg_layout: Sequence[Tuple[str, int, int]], kernargs: Dict[str, Expr],
                 kernarg_ptr: Expr, kernarg_size: int):
        self.sgpr: Dict[int, object] = {}
        self.vgpr: Dict[Tuple[str, int], List[Expr]] = {}
        self.scc: Expr = self.opaque(1, "SCC before its first write")
        self.exec: object = Const(X.mask(64), 64)
        self.arg_layout = list(arg_layout)
        self.kernargs = kernargs
        self.kernarg_ptr = kernarg_ptr
        self.kernarg_size = kernarg_size
        self.path: List[Expr] = []
        self.notes: List[str] = []
        self._opaque_n = 0
        # id(node) -> (node, pc, text) of the instruction that produced it, shared by every
        # clone (addrsim.prove.wraps.wrap_sites names the instruction that wraps)
        self.origin: Dict[int, tuple] = {}

    # ------------------------------------------------------------------ values
    def opaque(self, width: int, why: str) -> Expr:
        """A value addrsim does not model (fresh symbol; ``why`` says what it is)."""
        self._opaque_n = getattr(self, "_opaque_n", 0) + 1
        return Sym(f"opaque{self._opaque_n}", width, "opaque", why)

    def clone(self):
        c = object.__new__(type(self))
        c.__dict__.update(self.__dict__)
        c.sgpr = dict(self.sgpr)
        c.vgpr = dict(self.vgpr)
        c.path = list(self.path)
        c.notes = list(self.notes)
        return c

    # ------------------------------------------------------------------ operands
    def parse_reg(self, op: str):
        """:func:`parse_register`."""
        return parse_register(op)

    def const_operand(self, op: str, width: int) -> Optional[Expr]:
        """The inline constant or literal ``op`` as a ``width``-bit Const, or None."""
        return _const_operand(op, width)

    def read_scalar(self, op: str, width: int) -> Expr:
        c = self.const_operand(op, width)
        if c is not None:
            return c
        r = self.parse_reg(op)
        if r is None:
            raise Unsupported(f"operand {op!r}")
        if r[0] == "exec":
            ex = self.exec_scalar()
            if r[1] == "exec_lo":
                return X.extract(ex, 31, 0)
            if r[1] == "exec_hi":
                return X.extract(ex, 63, 32)
            return ex
        f, idx, n = r
        if f != "s":
            raise Unsupported(f"vector operand {op!r} where a scalar is required")
        words = [self._sword(idx + i) for i in range(max(n, width // 32))]
        if width == 32:
            return words[0]
        return X.concat(words[1], words[0])

    def _sword(self, i: int) -> Expr:
        v = self.sgpr.get(i)
        if v is SKIPPED:
            raise SliceMiss(f"s{i}")
        if self.trace is not None:
            self.trace.read(f"s{i}")
        if v is None:
            v = self.opaque(32, f"s{i} read before any write")
            self.sgpr[i] = v
        if isinstance(v, LaneMask):
            return self.mask_word(v, 0)
        if isinstance(v, tuple):  # ("maskhi", LaneMask)
            return self.mask_word(v[1], 1)
        return v

    def write_scalar(self, op: str, value: Expr):
        r = self.parse_reg(op)
        if r is None:
            if op == "null":
                return
            raise Unsupported(f"destination {op!r}")
        if r[0] == "exec":
            if r[1] == "exec":
                self.exec = value
            else:
                ex = self.exec_scalar()
                lo, hi = X.extract(ex, 31, 0), X.extract(ex, 63, 32)
                self.exec = X.concat(hi, value) if r[1] == "exec_lo" else X.concat(value, lo)
            return
        f, idx, n = r
        if f != "s":
            raise Unsupported(f"vector destination {op!r} for a scalar result")
        if value.width == 32:
            self.sgpr[idx] = value
        else:
            self.sgpr[idx] = X.extract(value, 31, 0)
            self.sgpr[idx + 1] = X.extract(value, 63, 32)
        if self.trace is not None:
            for k in range(value.width // 32):
                self.trace.wrote(f"s{idx + k}")

    # ------------------------------------------------------------------ lane hooks
    def exec_scalar(self) -> Expr:
        return self.exec if isinstance(self.exec, Expr) else self.opaque(64, "EXEC as a scalar after a per-lane write")

    def read_vector(self, op: str, width: int, lane: int) -> Expr:
        c = self.const_operand(op, width)
        if c is not None:
            return c
        r = self.parse_reg(op)
        if r is None:
            raise Unsupported(f"operand {op!r}")
        if r[0] == "exec" or r[0] == "s":
            return self.read_scalar(op, width)
        f, idx, n = r
        words = [self._vword(f, idx + i, lane) for i in range(max(n, width // 32))]
        return words[0] if width == 32 else X.concat(words[1], words[0])

    def _vword(self, f, i, lane) -> Expr:
        v = self.vgpr.get((f, i))
        if v is None:
            v = [self.opaque(32, f"{f}{i} read before any write")] * self.nlanes
            self.vgpr[(f, i)] = v
        x = v[lane]
        if x is SKIPPED:
            raise SliceMiss(f"{f}{i}")
        if self.trace is not None:
            self.trace.read(f"{f}{i}")
        return x

    def write_vector(self, op: str, value: Expr, lane: int, active: Expr):
        r = self.parse_reg(op)
        if r is None or r[0] not in ("v", "a"):
            raise Unsupported(f"vector destination {op!r}")
        f, idx, n = r
        parts = [value] if value.width == 32 else [X.extract(value, 32 * k + 31, 32 * k) for k in range(value.width // 32)]
        for k, p in enumerate(parts):
            old = self.vgpr.get((f, idx + k))
            if old is None:
                old = [self.opaque(32, f"{f}{idx + k} read before any write")] * self.nlanes
            new = list(old)
            if old[lane] is SKIPPED and not _is_true(active):
                if not isinstance(active, Const):
                    raise SliceMiss(f"{f}{idx + k} (lane {lane}, EXEC not concrete)")
                continue                       # an inactive lane keeps its (skipped) value
            new[lane] = p if _is_true(active) else X.ite(active, p, old[lane])
            self.vgpr[(f, idx + k)] = new

    # the subclasses define: lane_active, read_mask_bit, write_mask, first_lane, mask_word

    # ------------------------------------------------------------------ stepping
    def step(self, ins: Instr) -> Optional[str]:
        """Execute one non-branch instruction.  Returns None, or "access" when it recorded a
        buffer access in ``self.last_access``.  Raises Unsupported."""
        row = lookup(ins.mnemonic)
        self.last_access = None
        handler = _HANDLERS.get(row.kind)
        if handler is None:
            raise Unsupported(f"no semantics for {ins.mnemonic}")
        return handler(self, ins, row)

    def _float(self, ins: Instr, row: Row):
        # binary32 rows matter only on address paths; with modifiers or data operands
        # (anything opaque) the result is data
        try:
            self._apply(ins, row, floating=True)
        except Unsupported:
            self._data(ins, row)

    def _lane(self, ins: Instr, row: Row):
        self.write_scalar(ins.operands[0], self.first_lane(ins.operands[1]))

    def _data(self, ins: Instr, row: Row):
        """Destination gets data addrsim does not model (memory contents, floating point)."""
        if row.writes_exec or ("exec" in ins.operands[:1]):
            self.exec = self.opaque(64, f"EXEC written by {ins.mnemonic} at {ins.addr:#x}")
        if not ins.operands:
            return
        r = self.parse_reg(ins.operands[0])
        if r is None or r[0] == "exec":
            return
        f, idx, n = r
        why = f"{ins.mnemonic} at {ins.addr:#x} (data, not modelled)"
        if f == "s":
            for k in range(n):
                self.sgpr[idx + k] = self.opaque(32, why)
        else:
            for k in range(n):
                self.vgpr[(f, idx + k)] = [self.opaque(32, why)] * self.nlanes
        if row.writes_vcc:
            self.sgpr[VCC_LO] = self.opaque(32, why)
            self.sgpr[VCC_LO + 1] = self.opaque(32, why)

    def _apply(self, ins: Instr, row: Row, floating: bool = False):
        s = row.sem
        ops = list(ins.operands)
        if any(t.startswith(("neg(", "abs(", "-v", "|", "-s")) for t in ops) or any(
                m.startswith(("clamp", "omod", "mul:", "div:", "op_sel", "row_", "quad_perm", "dpp", "bank_mask"))
                for m in ins.modifiers):
            raise Unsupported(f"{ins.mnemonic} with source/output modifiers ({ins.text})")
        outs = [t for t in s.outs if t != "scc"]
        ins_tokens = list(s.ins)
        split = split_operands(ops, s, row.reads_dst)     # VOPC e32 and carry forms print vcc explicitly
        if split is None:
            raise Unsupported(f"{ins.mnemonic}: {len(ops)} operands, expected "
                              f"{len(outs) + len([t for t in ins_tokens if t != 'scc'])}")
        out_ops, in_ops = split
        if row.kind == "salu":
            vals, k = [], 0
            for t in ins_tokens:
                if t == "scc":
                    if self.scc is SKIPPED:
                        raise SliceMiss("scc")
                    if self.trace is not None:
                        self.trace.read("scc")
                    vals.append(self.scc)
                else:
                    vals.append(self.read_scalar(in_ops[k], int(t[1:])))
                    k += 1
            res = s.fn(*vals)
            if self.track_origin:
                self._record(ins, res)
            ri = 0
            for t, o in zip(outs, out_ops):
                self.write_scalar(o, res[ri])
                ri += 1
            if "scc" in s.outs:
                self.scc = res[ri]
                if self.trace is not None:
                    self.trace.wrote("scc")
            return
        # VALU: per lane
        mask_outs: Dict[str, List[Expr]] = {}
        for lane in range(self.nlanes):
            active = self.lane_active(lane)
            vals, k = [], 0
            for t in ins_tokens:
                if t == "m":
                    vals.append(self.read_mask_bit(in_ops[k], lane))
                else:
                    vals.append(self.read_vector(in_ops[k], int(t[1:]), lane))
                k += 1
            res = s.fn(*vals)
            if self.track_origin and lane == 0:
                self._record(ins, res)
            if floating and any(x.kind == "opaque" for r in res for x in X.symbols(r).values()):
                res = tuple(self.opaque(32, f"{ins.mnemonic} at {ins.addr:#x} (floating-point data)") for _ in res)
            for t, o, r in zip(outs, out_ops, res):
                if t == "m":
                    mask_outs.setdefault(o, []).append(X.band(r, active) if not _is_true(active) else r)
                else:
                    self.write_vector(o, r, lane, active)
        for o, bits in mask_outs.items():
            self.write_mask(o, bits)

    track_origin = False

    def _record(self, ins: Instr, res):
        for r in res:
            if isinstance(r, X.Op) and id(r) not in self.origin:
                self.origin[id(r)] = (r, ins.addr, ins.text)

    def _smem(self, ins: Instr, row: Row):
        dst, base_op = ins.operands[0], ins.operands[1]
        off_op = ins.operands[2] if len(ins.operands) > 2 else "0"
        r = self.parse_reg(dst)
        n = r[2] if r and r[0] == "s" else 1
        base = self.read_scalar(base_op, 64)
        off = self.read_scalar(off_op, 32)
        imm = ins.modifier("offset")
        if imm:
            off = X.add(off, Const(int(imm, 0), 32))
        rel = _const_offset(base, self.kernarg_ptr)
        why = f"{ins.mnemonic} at {ins.addr:#x} from memory other than the kernarg segment"
        if rel is not None and isinstance(off, Const) and not (0 <= rel + off.value < max(self.kernarg_size, 1) + 256):
            rel = None        # a concrete address outside the kernarg segment (replay memory)
        if rel is None or not isinstance(off, Const):
            vals = self._memory_words(base, off, n, why)
        else:
            start = rel + off.value
            vals = [self.kernarg_word(start + 4 * k) for k in range(n)]
        for k, v in enumerate(vals):
            self.sgpr[r[1] + k] = v
        if self.track_origin:         # which s_load brought each kernel argument in (addrsim.report.explain)
            for v in vals:
                for sym in X.symbols(v).values():
                    if sym.kind in ("arg", "ptr"):
                        self.origin.setdefault(("arg", sym.name), (None, ins.addr, ins.text))
            self._record(ins, vals)

    def destinations(self, ins: Instr) -> List[object]:
        """Registers ``ins`` may write: parse_reg tuples of its destination operands, plus
        "scc" and "exec" where it may write them (conservative for unknown instructions:
        :func:`addrsim.isa.table.effects`)."""
        eff = effects(lookup(ins.mnemonic), lambda name: ins.modifier(name) is not None)
        out: List[object] = ["scc"] if eff.scc else []
        for op in ins.operands[:eff.n_dst]:
            r = self.parse_reg(op)
            if r is not None:
                out.append(r if r[0] != "exec" else "exec")
        if eff.exec:
            out.append("exec")
        if eff.vcc:
            out.append(("s", VCC_LO, 2))
        return out

    def havoc(self, dests: Iterable[object], why: str):
        """Forget the registers in ``dests`` (from :meth:`destinations`): fresh opaque values."""
        for d in dests:
            if d == "scc":
                self.scc = self.opaque(1, why)
            elif d == "exec":
                self.exec = self.opaque(64, why)
            else:
                f, idx, n = d
                for k in range(n):
                    if f == "s":
                        self.sgpr[idx + k] = self.opaque(32, why)
                    else:
                        self.vgpr[(f, idx + k)] = [self.opaque(32, why)] * self.nlanes

    def _memory_words(self, base: Expr, off: Expr, n: int, why: str) -> List[Expr]:
        """Words an s_load reads from a buffer that is not the kernarg segment: when the address
        is a pointer argument plus an offset, symbolic ``select(ptr, offset)`` words (the
        prover gives them meaning only for pointers a contract declares as arrays); else
        opaque.  The concrete machine overrides this with its memory."""
        ptrs = [s for s in X.symbols(base).values() if s.kind == "ptr" and s.name != "kernarg_ptr"]
        if len(ptrs) == 1:
            p = ptrs[0]
            zp = X.zext(p, 64)
            hz = X.shash(zp)
            rest = None
            if X.shash(base) == hz:
                rest = Const(0, 64)
            elif isinstance(base, X.Op) and base.op == "add":
                for a, b in ((base.args[0], base.args[1]), (base.args[1], base.args[0])):
                    if X.shash(a) == hz:
                        rest = b
            if rest is None:
                rest = offset_from(base, p)
            if rest is not None and p.name not in X.symbols(rest):
                start = X.add(rest, X.zext(off, 64))
                return [X.select(p, X.add(start, Const(4 * k, 64))) for k in range(n)]
        return [self.opaque(32, why) for _ in range(n)]

    def kernarg_word(self, off: int) -> Expr:
        """The 32-bit little-endian word at byte ``off`` of the kernarg segment."""
        pieces = []
        for b in range(off, off + 4):
            pieces.append(self._kernarg_byte(b))
        out = pieces[0]
        for p in pieces[1:]:
            out = X.concat(p, out)
        return _merge_bytes(out)

    def _kernarg_byte(self, b: int) -> Expr:
        for name, off, size in self.arg_layout:
            if off <= b < off + size:
                v = self.kernargs.get(name)
                if v is None:
                    return X.extract(self._unnamed(name, off, size), 8 * (b - off) + 7, 8 * (b - off))
                return X.extract(v, 8 * (b - off) + 7, 8 * (b - off))
        return self._unnamed_byte(b)

    def _unnamed(self, name, off, size):
        key = f"{name}@{off}"
        if key not in self.kernargs:
            self.kernargs[key] = Sym(key, 8 * size, "arg", f"kernel argument {name} at byte {off}")
        return self.kernargs[key]

    def _unnamed_byte(self, b):
        key = f"kernarg_byte@{b}"
        if key not in self.kernargs:
            self.kernargs[key] = self.opaque(8, f"kernarg byte {b} outside every listed argument")
        return self.kernargs[key]

    def _global(self, ins: Instr, row: Row) -> str:
        """GLOBAL segment access (MI300 ISA guide section 9.1 "FLAT, global and scratch"):
        address = saddr + zext(vaddr[31:0]) + offset when saddr is an SGPR pair, else
        vaddr[63:0] + offset; offset is a signed 13-bit immediate."""
        ops = ins.operands
        is_load = row.mem == "load"
        returns = is_load or (row.mem == "atomic" and ins.modifier("glc") is not None)
        if returns:
            vdst, vaddr, rest = ops[0], ops[1], ops[2:]
        else:
            vdst, vaddr, rest = None, ops[0], ops[1:]
        saddr = rest[-1] if rest else "off"
        if len(rest) not in (1, 2):
            raise Unsupported(f"{ins.mnemonic}: operands {ops}")
        ioff = global_offset(int(ins.modifier("offset") or "0", 0))
        self.last_access = []
        sbase = None if saddr == "off" else self.read_scalar(saddr, 64)
        for lane in range(self.nlanes):
            if sbase is not None:
                base = sbase
                addr = X.add(X.add(sbase, X.zext(self.read_vector(vaddr, 32, lane), 64)), Const(ioff & X.mask(64), 64))
            else:
                base = self.read_vector(vaddr, 64, lane)
                addr = X.add(base, Const(ioff & X.mask(64), 64))
            self.last_access.append(Access(ins, "load" if is_load else "store", tuple(self.path), (), base,
                                           Const(0, 14), Const(0, 32), addr, self.lane_active(lane), False, (),
                                           size=row.nbytes))
        self._returned(ins, row, vdst)
        return "access"

    def _buffer(self, ins: Instr, row: Row) -> str:
        ops = ins.operands
        lds = ins.modifier("lds") is not None
        is_load = row.mem == "load"
        if lds and is_load:
            vdata, vaddr, rsrc, soff = None, ops[0], ops[1], ops[2]
        else:
            vdata, vaddr, rsrc, soff = ops[0], ops[1], ops[2], ops[3]
        offen = ins.modifier("offen") is not None
        idxen = ins.modifier("idxen") is not None
        ioff = int(ins.modifier("offset") or "0", 0)
        r = self.parse_reg(rsrc)
        if r is None or r[0] != "s" or r[2] != 4:
            raise Unsupported(f"{ins.mnemonic}: resource {rsrc!r} is not an SGPR quad")
        words = tuple(self._sword(r[1] + k) for k in range(4))
        base, stride, swz, addtid = vsharp_fields(words)
        notes = []
        linear = X.and_(X.eq(swz, Const(0, 1)), X.eq(addtid, Const(0, 1)))     # 1-bit: linear addressing applies
        modes = words if isinstance(linear, Const) else None
        # where the swizzle/add_tid bits are not constants the address is built linear, and
        # prove.check uses it only where it proves both bits 0 (Access.linear)
        soffset = self.read_scalar(soff, 32)
        known = (modes is not None and linear.value == 1
                 and all(isinstance(e, Const) for e in (base, stride, words[2], soffset)))
        self.last_access = []
        for lane in range(self.nlanes):
            index = voff = Const(0, 32)
            if idxen and offen:
                index = self.read_vector(_first_of_pair(vaddr, 0), 32, lane)
                voff = self.read_vector(_first_of_pair(vaddr, 1), 32, lane)
            elif idxen:
                index = self.read_vector(vaddr, 32, lane)
            elif offen:
                voff = self.read_vector(vaddr, 32, lane)
            if known and isinstance(index, Const) and isinstance(voff, Const):     # a concrete run: integers
                addr, inr = linear_access(base.value, soffset.value, ioff, voff.value, index.value, stride.value,
                                          words[2].value, row.nbytes, bool(idxen))
                self.last_access.append(Access(ins, "load" if is_load else "store", tuple(self.path), words, base,
                                               stride, words[2], Const(addr, 64), self.lane_active(lane), lds, (),
                                               size=row.nbytes, in_range=Const(inr, 1), linear=linear))
                continue
            if modes is None or linear.value == 1:
                addr = X.add(X.add(X.add(X.add(X.zext(base, 64), X.zext(soffset, 64)), Const(ioff, 64)),
                                   X.zext(voff, 64)), X.mul(X.zext(index, 64), X.zext(stride, 64)))
            else:            # swizzle_enable or add_tid_enable set: the ISA guide's formula
                off, index = buffer_offset(index, voff, ioff, self.lane_in_wave_of(lane), modes)
                addr = X.add(X.add(X.zext(base, 64), X.zext(soffset, 64)), off)
            size = row.nbytes
            self.last_access.append(Access(ins, "load" if is_load else "store", tuple(self.path), words, base,
                                           stride, words[2], addr, self.lane_active(lane), lds, tuple(notes),
                                           size=size, in_range=buffer_in_range(index, voff, ioff, stride,
                                                                               words[2], size, bool(idxen)),
                                           linear=linear))
        self._returned(ins, row, vdata)
        return "access"

    def _returned(self, ins: Instr, row: Row, vreg: Optional[str]) -> None:
        """The data a memory instruction returns into VGPRs (a load, an atomic with glc: the
        row's effects, :func:`addrsim.isa.table.effects`) is opaque."""
        if not vreg or not effects(row, lambda name: ins.modifier(name) is not None).n_dst:
            return
        rr = self.parse_reg(vreg)
        if rr and rr[0] in ("v", "a"):
            what = "returned data" if row.mem == "atomic" else "memory data"
            for k in range(rr[2]):
                self.vgpr[(rr[0], rr[1] + k)] = [self.opaque(32, f"{ins.mnemonic} at {ins.addr:#x} ({what})")] * self.nlanes


def _first_of_pair(op: str, k: int) -> str:
    m = re.match(r"^v\[(\d+):(\d+)\]$", op)
    if not m:
        raise Unsupported(f"idxen+offen needs a VGPR pair, got {op!r}")
    return f"v{int(m.group(1)) + k}"


def _is_true(e) -> bool:
    return isinstance(e, Const) and e.value == 1


def _merge_bytes(e: Expr) -> Expr:
    """Re-fuse concat(extract(x, 15, 8), extract(x, 7, 0)) chains (done by X.concat)."""
    return e


def _const_offset(base: Expr, ptr: Expr) -> Optional[int]:
    """``base - ptr`` when it is a constant (both 64-bit), else None."""
    if isinstance(base, Const) and isinstance(ptr, Const):
        return (base.value - ptr.value) & X.mask(64)
    if base is ptr or _same_expr(base, ptr):
        return 0
    if isinstance(base, X.Op) and base.op == "add" and isinstance(base.args[1], Const) and _same_expr(base.args[0], ptr):
        return base.args[1].value
    return None


def _same_expr(a: Expr, b: Expr) -> bool:
    if a is b:
        return True
    if type(a) is not type(b) or a.width != b.width:
        return False
    if isinstance(a, Const):
        return a.value == b.value
    if isinstance(a, Sym):
        return a.name == b.name
    return a.op == b.op and a.params == b.params and len(a.args) == len(b.args) and all(
        _same_expr(x, y) for x, y in zip(a.args, b.args))


class SymbolicLane(Machine):
    """One generic lane of a wave: ``lane_sym`` is its work-item id x (32 bits, packed ids
    in v0 as the hardware delivers them)."""

    track_origin = True

    nlanes = 1

    def __init__(self, *a, lane_sym: Sym, **k):
        super().__init__(*a, **k)
        self.lane_sym = lane_sym
        self.lane_in_wave = X.and_(lane_sym, Const(WAVE - 1, 32))

    def lane_in_wave_of(self, lane: int) -> Expr:
        """thread_id[5:0] of ``lane`` (32-bit): the generic lane's position in its wave."""
        return self.lane_in_wave

    def lane_active(self, lane: int) -> Expr:
        ex = self.exec
        if isinstance(ex, LaneMask):
            return ex.bit
        if isinstance(ex, Const) and ex.value == X.mask(64):
            return Const(1, 1)
        return X.extract(X.lshr(ex, X.zext(self.lane_in_wave, 64)), 0, 0)

    def read_mask_bit(self, op: str, lane: int) -> Expr:
        r = self.parse_reg(op)
        if r and r[0] == "s":
            v = self.sgpr.get(r[1])
            if isinstance(v, LaneMask):
                return v.bit
        if r and r[0] == "exec" and isinstance(self.exec, LaneMask):
            return self.exec.bit
        val = self.read_scalar(op, 64)
        return X.extract(X.lshr(val, X.zext(self.lane_in_wave, 64)), 0, 0)

    def write_mask(self, op: str, bits: List[Expr]):
        bit = bits[0]
        r = self.parse_reg(op)
        if r is None:
            raise Unsupported(f"lane-mask destination {op!r}")
        if r[0] == "exec":
            self.exec = LaneMask(bit)
            return
        if not any(s.kind == "lane" or s.kind == "opaque" for s in X.symbols(bit).values()) and \
                isinstance(self.exec, Const) and self.exec.value == X.mask(64):
            # the same bit in every lane of a full wave: the mask is all ones or all zeros
            self.write_scalar(op, X.ite(bit, Const(X.mask(64), 64), Const(0, 64)))
            return
        m = LaneMask(bit)
        self.sgpr[r[1]] = m
        self.sgpr[r[1] + 1] = ("maskhi", m)

    def mask_word(self, m: LaneMask, k: int) -> Expr:
        return self.opaque(32, "a per-lane mask read as a scalar")

    def first_lane(self, op: str) -> Expr:
        v = self.read_vector(op, 32, 0)
        if not (isinstance(self.exec, Const) and self.exec.value == X.mask(64)):
            return self.opaque(32, "v_readfirstlane_b32 with a partial EXEC")
        lane0 = X.and_(self.lane_sym, Const(~(WAVE - 1) & X.mask(32), 32))
        return X.substitute(v, {self.lane_sym.name: lane0})


class ConcreteLanes(Machine):
    """The 64 lanes of one wave with concrete work-item ids ``tids`` (packed v0 values)."""

    nlanes = WAVE
    #: byte address -> 32-bit word of global memory the replay provides (sequence starts)
    memory: Dict[int, int] = {}

    def _memory_words(self, base: Expr, off: Expr, n: int, why: str) -> List[Expr]:
        if isinstance(base, Const) and isinstance(off, Const):
            a = (base.value + off.value) & X.mask(64)
            vals = [self.memory_at(a + 4 * k) for k in range(n)]
            if all(v is not None for v in vals):
                return [Const(v, 32) for v in vals]
        return [self.opaque(32, why) for _ in range(n)]

    def memory_at(self, addr: int) -> Optional[int]:
        """The 32-bit word at ``addr``: from ``memory``, else from an array region
        (``regions``: (start, end) byte ranges) completed from the nearest lower known word,
        which keeps a non-decreasing array non-decreasing."""
        if addr in self.memory:
            return self.memory[addr]
        for lo, hi in getattr(self, "regions", ()):
            if lo <= addr < hi:
                below = [a for a in self.memory if lo <= a < addr]
                return self.memory[max(below)] if below else 0
        return None

    def lane_in_wave_of(self, lane: int) -> Expr:
        """thread_id[5:0] of ``lane`` (32-bit): its index in the wave."""
        return Const(lane, 32)

    def state_digest(self) -> Optional[str]:
        """A digest of everything a run from this state reads besides the code: registers,
        EXEC, SCC, the path condition, the kernel arguments and their kernarg layout, the kernarg pointer and
        size, the memory words and array regions the replay provides.  Constants count by
        value and width, an opaque value by its width alone (a fresh symbol: runs from two
        states that differ only in opaque names compute the same constants).  None when a
        value is neither (nothing to key a stored run by)."""
        def word(v) -> Optional[str]:
            if v is SKIPPED:
                return "k"
            if isinstance(v, Const):
                return f"{v.value}:{v.width}"
            if isinstance(v, Sym) and v.kind == "opaque":
                return f"o{v.width}"
            return None
        values = [("ptr", self.kernarg_ptr), ("exec", self.exec), ("scc", self.scc)]
        values += [(f"path{n}", v) for n, v in enumerate(self.path)]
        values += [(f"arg {k}", v) for k, v in sorted(self.kernargs.items())]
        values += [(f"s{k}", v) for k, v in sorted(self.sgpr.items())]
        values += [(f"{k[0]}{k[1]}.{n}", v) for k, vs in sorted(self.vgpr.items()) for n, v in enumerate(vs)]
        words = [(name, word(v)) for name, v in values]
        if any(w is None for _, w in words):
            return None
        parts = [repr(self.arg_layout), str(self.kernarg_size), repr(sorted(self.memory.items())),
                 repr(getattr(self, "regions", ()))] + [f"{name}={w}" for name, w in words]
        return hashlib.blake2b("\n".join(parts).encode(), digest_size=20).hexdigest()

    def lane_active(self, lane: int) -> Expr:
        ex = self.exec
        if isinstance(ex, Const):
            return Const((ex.value >> lane) & 1, 1)
        return X.extract(X.lshr(ex, Const(lane, 64)), 0, 0)

    def read_mask_bit(self, op: str, lane: int) -> Expr:
        val = self.read_scalar(op, 64)
        return X.extract(X.lshr(val, Const(lane, 64)), 0, 0)

    def write_mask(self, op: str, bits: List[Expr]):
        val = Const(0, 64)
        for i, b in enumerate(bits):
            val = X.or_(val, X.shl(X.zext(b, 64), Const(i, 64)))
        r = self.parse_reg(op)
        if r is not None and r[0] == "exec":
            self.exec = val
        else:
            self.write_scalar(op, val)

    def mask_word(self, m, k):  # never created in the concrete machine
        raise AssertionError("lane mask object in the concrete machine")

    def write_vector(self, op: str, value: Expr, lane: int, active: Expr):
        """As :meth:`Machine.write_vector`, but a value that is not a constant (it is computed
        from memory data: every input the replay gives is concrete) is written as one fresh
        opaque value instead of its expression tree: the attention arithmetic on loaded data
        is what made a replay through a kernel's main loop cost minutes, and a tree of data
        is no more concrete than one fresh symbol (sound: nothing is assumed about it)."""
        if not isinstance(value, Const):
            value = self.opaque(value.width, "a value computed from memory data (concrete replay)")
        super().write_vector(op, value, lane, active)

    def first_lane(self, op: str) -> Expr:
        ex = self.exec_scalar()
        if not isinstance(ex, Const) or ex.value == 0:
            return self.opaque(32, "v_readfirstlane_b32 with an unknown or empty EXEC")
        first = (ex.value & -ex.value).bit_length() - 1
        return self.read_vector(op, 32, first)


def _nothing(m: Machine, ins: Instr, row: Row):
    return None


def _run(method):
    def handler(m: Machine, ins: Instr, row: Row):
        method(m, ins, row)
        return None
    return handler


#: The machine's handler of each kind of :mod:`addrsim.isa.table` row ("unknown" has none).
_HANDLERS = {
    "nop": _nothing, "store": _nothing,
    "salu": _run(Machine._apply), "valu": _run(Machine._apply), "float": _run(Machine._float),
    "smem": _run(Machine._smem), "lane": _run(Machine._lane), "data": _run(Machine._data),
    "buffer": Machine._buffer, "global": Machine._global,
}
