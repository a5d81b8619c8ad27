"""`addrsim explain`: the backward slice of a buffer's address.

For the first access of a buffer on each explored path, the instructions whose results the
address is built from (found through the symbolic machine's record of which instruction
produced each expression node), in program order, each with the value it defines in terms of
the kernel arguments and workgroup ids; then the kernel arguments the address depends on and
the s_load that brought each in; then the offset formula.  An engineer auditing the shader
math reads these lines instead of the whole listing.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

from addrsim.ir import expr as X
from addrsim.errors import InputError, unknown_name
from addrsim.engine.explore import explore
from addrsim.loader.listing import load_source
from addrsim.model.models import ModelSet, buffer_pointer, load_models
from addrsim.prove.machines import initial_machine
from addrsim.prove.targets import pointers_in, targets_for

VALUE_CHARS = 160


@dataclass
class SliceLine:
    """One instruction of the slice: byte address, text, the value it defines (sympy
    text of the integer reading, cut to VALUE_CHARS characters) and, for a listing, its
    line number."""

    pc: int
    text: str
    value: str
    line: Optional[int] = None


@dataclass
class Explanation:
    """The slice of one access of ``buffer`` in ``kernel``: ``lines`` in program order,
    ``args`` kernel argument -> (pc, text) of the load that read it (pc None when the
    address reads it without a recorded load), ``offset`` the byte offset of every lane with
    the V# case of the buffer fixed and pointers read as 0 (sympy text, :func:`_lanes`)."""

    kernel: str
    buffer: str
    access_pc: int
    access_text: str
    lines: List[SliceLine] = field(default_factory=list)
    args: Dict[str, tuple] = field(default_factory=dict)
    offset: str = ""
    offset_nowrap: str = ""      # the offset of lane 0 where no 32-bit value wraps, pointers read as 0 (sympy text)
    also: List[int] = field(default_factory=list)   # other accesses with the same slice and offsets (pcs)


def _text(e, memo, limit: Optional[int] = VALUE_CHARS) -> str:
    from addrsim.backends.sympy_text import to_sympy
    try:
        t = str(to_sympy(e, memo))
    except Exception:          # display only
        t = repr(e)
    return t if limit is None or len(t) <= limit else t[:limit] + "..."


def _nowrap(address) -> str:
    """The byte offset of ``address`` for lane 0, where no 32-bit value wraps and every pointer
    argument is 0 (:func:`addrsim.backends.sympy_text.to_sympy_nowrap`, which reads a lane
    mask as the whole lane id: hence lane 0): the offset from the buffer's pointer whichever
    V# base a lane picks (LSE and D share one V# in the a16 kernels).  "" when it cannot be
    read (display only)."""
    try:
        from addrsim.backends.sympy_text import readable, to_sympy_nowrap
        zero = {n: X.Const(0, v.width) for n, v in X.symbols(address).items() if v.kind in ("ptr", "lane")}
        return str(readable(to_sympy_nowrap(X.substitute(address, zero))))
    except Exception:          # display only
        return ""


def _lanes(address) -> str:
    """The byte offset of every lane of ``address`` (the V# case of the buffer fixed), with
    every pointer argument read as 0, so that no pointer half, carry or V# word of the base
    is left in it: the integer reading of each instruction (:func:`to_sympy`; 32-bit wraps
    are verify's to decide, not shown here), the grid ids and lane (``tid_x``) terms kept.
    "" when it cannot be read (display only)."""
    try:
        zero = {n: X.Const(0, v.width) for n, v in X.symbols(address).items() if v.kind == "ptr"}
        return _text(X.substitute(address, zero), {}, limit=None)
    except Exception:          # display only
        return ""


def explain(path, buffer: str, models: Optional[ModelSet] = None, model_files: Sequence[str] = (),
            like=None) -> List[Explanation]:
    """Slices of every first access of ``buffer`` in every kernel of the code object or
    assembly listing at ``path`` (``like``: the code object a listing takes its metadata
    from, see :mod:`addrsim.loader.listing`); one Explanation per distinct access instruction.  Raises InputError (bad file,
    unknown buffer, a kernel without the buffer's pointer argument) and ToolError (no usable
    llvm-objdump)."""
    ms = models or load_models(model_files)
    if buffer not in ms.buffers:
        raise InputError(path, unknown_name("buffer", buffer, ms.buffers))
    src = load_source(path, like)
    co, listing = src.co, src.code
    out: List[Explanation] = []
    for k in co.kernels:
        ptr = buffer_pointer(ms, k, buffer)
        if ptr is None:
            raise InputError(path, f"kernel {k.symbol}: metadata has no argument for buffer {buffer!r}")
        code = listing.get(k.symbol)
        if not code:
            raise InputError(path, f"kernel {k.symbol}: no code found in the disassembly")
        m, _ = initial_machine(k, co.arch, ms)
        ex = explore(code, m, lambda a: pointers_in(a.base), {ptr})
        seen = set()
        for t in targets_for(ex, ptr):
            pc = t.access.instr.addr
            if pc in seen:
                continue
            seen.add(pc)
            e = Explanation(k.symbol, buffer, pc, t.access.instr.text)
            memo: dict = {}
            lines: Dict[int, SliceLine] = {}
            one_bit = set()          # pcs whose line shows a 1-bit result (a carry, SCC) for now
            for n in X.walk(t.access.address):
                o = ex.origin.get(id(n))
                if o is not None and o[0] is n and (o[1] not in lines or (o[1] in one_bit and n.width > 1)):
                    # an s_add_u32 makes its sum and its carry: the line shows the value it writes
                    lines[o[1]] = SliceLine(o[1], o[2], _text(n, memo), src.lines.get(o[1]))
                    (one_bit.add if n.width == 1 else one_bit.discard)(o[1])
            for name, s in sorted(X.symbols(t.access.address).items()):
                if s.kind in ("arg", "ptr"):
                    o = ex.origin.get(("arg", name))
                    e.args[name] = (o[1], o[2]) if o else (None, "")
                    if o and o[1] not in lines:
                        lines[o[1]] = SliceLine(o[1], o[2], name, src.lines.get(o[1]))
            e.lines = [lines[p] for p in sorted(lines)]
            e.offset = _lanes(t.address)
            e.offset_nowrap = _nowrap(t.access.address)
            twin = next((x for x in out if x.kernel == e.kernel and [ln.pc for ln in x.lines] == [ln.pc for ln in e.lines]
                         and (x.offset, x.offset_nowrap) == (e.offset, e.offset_nowrap)), None)
            if twin is not None:
                twin.also.append(pc)         # the same slice (a loop's later access of the same tile)
                continue
            out.append(e)
    return out


def format_explanations(exps: List[Explanation]) -> str:
    """The text report of :func:`explain`."""
    out = []
    for e in exps:
        same = f"; the same slice and offsets at {', '.join(f'{p:#x}' for p in e.also)}" if e.also else ""
        out.append(f"kernel {e.kernel}: {e.buffer} access at {e.access_pc:#x} ({e.access_text}{same})")
        out.append(f"  {len(e.lines)} instructions feed its address:")
        for ln in e.lines:
            where = f"line {ln.line:<6} " if ln.line is not None else ""
            out.append(f"    {where}{ln.pc:#07x}  {ln.text:<48}  = {ln.value}")
        out.append("  kernel arguments: " + ", ".join(
            f"{a} (loaded at {p:#x})" if p is not None else a for a, (p, _) in e.args.items()))
        if e.offset_nowrap:
            out.append(f"  byte offset from the {e.buffer} pointer (lane 0, no 32-bit wrap): {e.offset_nowrap}")
        if e.offset:
            every = e.offset if len(e.offset) <= 2 * VALUE_CHARS else e.offset[:2 * VALUE_CHARS] + \
                f"... ({len(e.offset)} characters)"
            out.append(f"  byte offset of every lane (tid_x), 32-bit wraps not shown: {every}")
        out.append("")
    return "\n".join(out)
