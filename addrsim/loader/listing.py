"""Kernel sources: a code object, or an assembly listing a user edited.

Three inputs give the same thing, a :class:`Source` (the code object's metadata and kernel
descriptors, and the instructions of each kernel):

- a code object (``.co``, an ELF): metadata from the ``NT_AMDGPU_METADATA`` note, the
  instructions from llvm-objdump (:mod:`addrsim.loader.disasm`);
- an llvm-objdump ``-d`` listing, edited or not, with ``like=KERNEL.co``: the metadata and
  kernel descriptors come from that code object, the instructions from the listing.  Each
  instruction line's trailing ``// ADDRESS: ENCODING`` comment is dropped, numeric branch
  offsets (``s_cbranch_scc1 65529``) are turned into labels at the instruction they reach
  *in the listing as printed*, so that lines inserted or removed by an edit keep every branch
  on its target, and lines without the comment (the edited ones) are taken as llvm-mc
  syntax.  The instructions of the first kernel keep the listing's addresses up to the first
  edit that changes a size;
- llvm-mc assembly (what ``llvm-mc -triple=amdgcn-amd-amdhsa`` accepts): with ``like``, as
  above; without it, the listing's own ``.amdgcn_target``, ``.amdhsa_kernel`` and
  ``.amdgpu_metadata`` directives give the target, descriptor and metadata (it is assembled
  and linked to a code object, LLVM AMDGPUUsage "Code Object V3+ Metadata" and "Kernel
  Descriptor").

Listings are assembled with llvm-mc (the same LLVM as llvm-objdump, ``$ADDRSIM_LLVM_MC`` to
override) so that every instruction's size and encoding, hence every address and branch
target, is the assembler's, never a guess; an instruction llvm-mc does not accept is an
InputError naming the listing's line.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Dict, List, Tuple

from addrsim.files import read_input
from addrsim.loader import codeobj
from addrsim.loader.codeobj import CodeObject
from addrsim.loader.disasm import _SYM, Instr, _match_line, disassemble, find_objdump, parse_listing
from addrsim.errors import InputError, ToolError
from addrsim.isa.control import is_branch

_TARGET = re.compile(r'^\s*\.amdgcn_target\s+"amdgcn-amd-amdhsa--(gfx[0-9a-f]+)')
_NUMERIC = re.compile(r"^-?[0-9]{1,6}$")
_MC_ERROR = re.compile(r"^<stdin>:(\d+):(\d+):\s*error:\s*(.*)$")
_HEADER = re.compile(r"^\S.*:\s+file format \S+$|^Disassembly of section \S+:$|^\.\.\.$")   # objdump's own lines
MAX_LINE = 4096                    # characters of code on one listing line (llvm-mc is slow on huge literals)
MC_TIMEOUT_S = 120
_LABEL_OPERAND = re.compile(r"^[A-Za-z_.$][\w.$@]*$")
_FUNC_DECL = re.compile(r"^\s*\.(?:globl|global|type)\s+([A-Za-z_.$][\w.$@]*)")
_DATA = re.compile(r"^\s*\.(?:long|word|short|hword|byte|quad|int|rept|irp|irpc|macro|fill|zero|space|skip|ascii|asciz|string)\b")


@dataclass
class Source:
    """A loaded kernel source.

    ``co``: the code object facts (architecture, kernels with metadata and descriptors; for
    a listing with ``like`` these are the like-file's, with ``co.path`` the listing).
    ``code``: instructions per kernel symbol (byte addresses).  ``kind``: "code object",
    "objdump listing" or "assembly".  ``lines``: instruction byte address -> line number in
    the listing (listings only).  ``edited``: the line numbers of an objdump listing's
    instruction lines that lack llvm-objdump's ``// ADDRESS: ENCODING`` comment, the lines a
    user wrote (README.md: edited lines are plain llvm-mc syntax)."""

    co: CodeObject
    code: Dict[str, List[Instr]]
    kind: str = "code object"
    lines: Dict[int, int] = field(default_factory=dict)
    edited: frozenset = frozenset()     # listing lines of instructions without objdump's address comment


def is_code_object(path) -> bool:
    """True when the file starts with the ELF magic (a missing file counts as a code object,
    so that its error comes from :func:`addrsim.loader.codeobj.load`)."""
    if not Path(path).is_file():
        return True          # its error (not a regular file, missing) comes from the loader
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == b"\x7fELF"
    except OSError:
        return True


def load_source(path, like=None) -> Source:
    """Load the kernels of ``path``: a code object, or an assembly listing (see the module
    docstring); ``like`` is the code object whose metadata and kernel descriptors a listing
    takes.  Raises InputError (bad file, a listing line llvm-mc rejects, a listing without
    metadata and no ``like``, a kernel of ``like`` missing from the listing) and ToolError
    (no llvm-objdump / llvm-mc)."""
    if not Path(path).is_file():
        raise InputError(path, "cannot read file (no such file)" if not Path(path).exists() else
                         "not a file" + (" (a folder: addrsim scan checks every code object below it)"
                                         if Path(path).is_dir() else ""))
    if is_code_object(path):
        if like is not None:
            raise InputError(path, "--like applies to assembly listings; this file is a code object")
        co = codeobj.load(path)
        return Source(co, disassemble(path))
    try:
        raw = read_input(path)
    except OSError as e:
        raise InputError(path, f"cannot read file ({e.strerror})") from None
    except ValueError as e:
        raise InputError(path, f"cannot read file ({e})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[:e.start].count(b"\n") + 1
        raise InputError(path, f"not an ELF file (expected an AMDGPU code object), nor an assembly listing: "
                               f"line {line} is not UTF-8 text") from None
    text = text.lstrip("\ufeff")          # a UTF-8 byte-order mark
    if "\0" in text:
        raise InputError(path, "not an ELF file (expected an AMDGPU code object), nor an assembly listing (binary data)")
    lines = text.splitlines()
    for no, l in enumerate(lines, 1):
        if len(_strip_comment(l)) > MAX_LINE:
            raise InputError(path, f"line {no}: {len(_strip_comment(l))} characters of code, more than {MAX_LINE}")
    objdump = any(_match_line(l) for l in lines[:20000] if "//" in l)
    like_co = codeobj.load(like) if like is not None else None
    if objdump:
        if like_co is None:
            raise InputError(path, "an llvm-objdump listing carries no metadata or kernel descriptor: "
                                   "give the code object it was disassembled from with --like KERNEL.co")
        mc, origin, heads = _from_objdump(path, lines)
        return _assemble_like(path, mc, origin, like_co, heads, "objdump listing")
    mc = [(l, i + 1) for i, l in enumerate(lines)]
    for l, no in mc:
        _check_branch(path, no, _strip_comment(l), "an assembly line")
    if like_co is not None:
        return _assemble_like(path, mc, {}, like_co, {}, "assembly")
    arch = next((m.group(1) for l in lines if (m := _TARGET.match(l))), None)
    if arch is None or not any(".amdhsa_kernel" in l for l in lines):
        raise InputError(path, "not an ELF code object, and as an assembly listing it needs --like KERNEL.co, "
                               "or its own .amdgcn_target, .amdhsa_kernel and .amdgpu_metadata directives")
    return _assemble_linked(path, mc, arch)


# ----------------------------------------------------------------------------- objdump text

def _from_objdump(path, lines: List[str]) -> Tuple[List[Tuple[str, int]], Dict[int, int], Dict[str, int]]:
    """llvm-mc source lines (text, listing line number) for an llvm-objdump listing, the
    listing's address of each instruction line (source index -> byte address) and of each
    function heading (symbol -> byte address)."""
    out: List[Tuple[str, int]] = [(".text", 0)]
    addr_at: Dict[int, int] = {}       # index in out -> listing address of that instruction
    heads: Dict[str, int] = {}
    branches: List[Tuple[int, int, int]] = []   # (index in out, listing line, target address)
    for no, line in enumerate(lines, 1):
        s = line.strip()
        if not s or _HEADER.match(s):
            continue
        m = _SYM.match(s)
        if m:
            addr, name = int(m.group(1), 16), m.group(2)
            if name.startswith("label_"):
                out.append((f"{name}:", no))
            else:
                heads[name] = addr
                out += [(f".globl {name}", no), (f".type {name},@function", no), (f"{name}:", no)]
            continue
        m2 = _match_line(line)
        if m2:
            mnem, rest, addr_s, _ = m2
            addr = int(addr_s, 16)
            ops = rest.split(",")
            if is_branch(mnem) and ops and _NUMERIC.match(ops[0].split()[0] if ops[0].split() else ""):
                v = int(ops[0].split()[0])
                v = v - 0x10000 if v >= 0x8000 else v          # simm16, printed unsigned by LLVM 22
                target = addr + 4 + 4 * v
                branches.append((len(out), no, target))
                rest = f".Laddrsim_{target:x}" + rest[len(ops[0]):]
            addr_at[len(out)] = addr
            out.append((f"{mnem} {rest}".strip(), no))
            continue
        code = _strip_comment(line)
        if not code.strip():
            continue
        _check_branch(path, no, code, "an edited line")
        out.append((code, no))
    by_addr: Dict[int, int] = {}
    for idx, a in addr_at.items():
        if a in by_addr:
            raise InputError(path, f"line {out[idx][1]}: address {a:#x} already appears on line {out[by_addr[a]][1]} "
                                   "(two listings in one file?); give one kernel's listing")
        by_addr[a] = idx
    labels: Dict[int, List[str]] = {}
    for idx, no, target in branches:
        if target not in by_addr:
            raise InputError(path, f"line {no}: branch target {target:#x} is not the address of an instruction "
                                   "in the listing")
        labels.setdefault(by_addr[target], []).append(f".Laddrsim_{target:x}:")
    final: List[Tuple[str, int]] = []
    origin: Dict[int, int] = {}
    for idx, (t, no) in enumerate(out):
        for lab in dict.fromkeys(labels.get(idx, ())):
            final.append((lab, no))
        if idx in addr_at:
            origin[len(final)] = addr_at[idx]
        final.append((t, no))
    return final, origin, heads


def _check_branch(path, no: int, code: str, where: str) -> None:
    """A branch written by hand must name a label: a numeric operand (in any notation) is an
    offset relative to wherever the line ends up, which an edit silently changes."""
    w = code.split(None, 1)
    if w and is_branch(w[0]) and len(w) > 1:
        op = w[1].split(",")[0].strip()
        if not _LABEL_OPERAND.match(op):
            raise InputError(path, f"line {no}: a branch on {where} must name a label, not {op!r} "
                                   f"(a numeric offset moves with the edit): {code.strip()[:80]}")


def _strip_comment(line: str) -> str:
    """The line without a ``//`` or ``;`` comment (llvm-mc's AMDGPU comment markers)."""
    for mark in ("//", ";"):
        i = line.find(mark)
        if i >= 0:
            line = line[:i]
    return line


# ----------------------------------------------------------------------------- llvm-mc / lld

def _find_tool(env: str, stem: str) -> str:
    """llvm-mc or ld.lld of the same LLVM as llvm-objdump (``$ENV`` overrides).  Raises
    ToolError when it is missing."""
    p = os.environ.get(env)
    if p:
        if shutil.which(p) or os.access(p, os.X_OK):
            return p
        raise ToolError(f"{env}={p} is not an executable")
    objdump, ver = find_objdump()
    d = os.path.dirname(objdump)
    for c in (os.path.join(d, f"{stem}-{ver}"), os.path.join(d, stem), f"{stem}-{ver}", stem):
        q = shutil.which(c) if os.sep not in c else (c if os.access(c, os.X_OK) else None)
        if q:
            return q
    pkg = "lld-" + str(ver) if stem == "ld.lld" else f"llvm-{ver}"
    raise ToolError(f"{stem} not found (LLVM {ver}); install Debian's {pkg} package or set {env}")


def _run_mc(path, mc: List[Tuple[str, int]], arch: str, obj: Path) -> None:
    """Assemble the source lines into the object file ``obj``; llvm-mc's first error becomes
    an InputError naming the listing's line."""
    exe = _find_tool("ADDRSIM_LLVM_MC", "llvm-mc")
    src = "\n".join(t for t, _ in mc) + "\n"
    try:
        proc = subprocess.run([exe, "-triple=amdgcn-amd-amdhsa", f"-mcpu={arch}", "-filetype=obj",
                               "-o", str(obj), "-"], input=src.encode(), capture_output=True,
                              timeout=MC_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise InputError(path, f"llvm-mc took more than {MC_TIMEOUT_S} s on the listing") from None
    if proc.returncode != 0:
        err = proc.stderr.decode("utf-8", "replace").splitlines()
        for e in err:
            m = _MC_ERROR.match(e)
            if m:
                idx = int(m.group(1)) - 1
                no = mc[idx][1] if 0 <= idx < len(mc) else 0
                text = mc[idx][0].strip() if 0 <= idx < len(mc) else ""
                where = f"line {no}: " if no else ""
                raise InputError(path, f"{where}{m.group(3)}: {text[:80]}")
        raise InputError(path, f"llvm-mc failed: {(err or ['no message'])[-1][:200]}")
    _no_undefined(path, mc, obj)


def _no_undefined(path, mc: List[Tuple[str, int]], obj: Path) -> None:
    """Refuse an operand llvm-mc took for an undefined symbol (``s50x``, a misspelt register,
    assembles as a relocation against a symbol the listing never defines: its value would be
    taken as 0).  Raises InputError naming the first line that uses it."""
    exe, _ = find_objdump()
    proc = subprocess.run([exe, "-t", str(obj)], capture_output=True, timeout=600)
    und = [ln.split()[-1] for ln in proc.stdout.decode("latin-1").splitlines() if "*UND*" in ln and ln.split()]
    for name in und:
        pat = re.compile(rf"(?<![\w.$]){re.escape(name)}(?![\w.$])")
        hit = next(((no, t) for t, no in mc if pat.search(_strip_comment(t))), (0, ""))
        where = f"line {hit[0]}: " if hit[0] else ""
        raise InputError(path, f"{where}{name!r} is not a register or a label of the listing (a misspelt "
                               f"operand?): {hit[1].strip()[:80]}")


def _objdump_text(obj: Path) -> str:
    exe, _ = find_objdump()
    proc = subprocess.run([exe, "-d", str(obj)], capture_output=True, timeout=600)
    if proc.returncode != 0:
        raise ToolError(f"llvm-objdump failed on the assembled listing: {proc.stderr.decode('utf-8', 'replace')[:200]}")
    return proc.stdout.decode("latin-1")


def _assemble_like(path, mc, origin: Dict[int, int], like: CodeObject, heads: Dict[str, int], kind: str) -> Source:
    """Assemble an objdump or llvm-mc listing and pair its code with ``like``'s kernels."""
    with tempfile.TemporaryDirectory(prefix="addrsim-asm-") as d:
        obj = Path(d) / "listing.o"
        _run_mc(path, mc, like.arch, obj)
        text = _objdump_text(obj)
    syms = {m.group(2): int(m.group(1), 16) for l in text.splitlines() if (m := _SYM.match(l.strip()))}
    instrs = sorted((i for v in parse_listing(text, path).values() for i in v), key=lambda i: i.addr)
    src_lines = [no for t, no in mc if _is_instruction(t)]
    src_index = [k for k, (t, _) in enumerate(mc) if _is_instruction(t)]
    line_of: Dict[int, int] = {}
    listing_addr: Dict[int, int] = {}
    data = any(_DATA.match(t) for t, _ in mc)
    if len(src_lines) == len(instrs) and not data:   # one instruction per source line: map addresses to lines
        for i, no, k in zip(instrs, src_lines, src_index):
            line_of[i.addr] = no
            if k in origin:
                listing_addr[i.addr] = origin[k]
    declared = {m.group(1) for t, _ in mc if (m := _FUNC_DECL.match(t))}
    kernels = {k.symbol for k in like.kernels}
    # a plain label (loop:) is local to its kernel; functions are the kernels, the listing's
    # headings and names declared with .globl/.type
    funcs = [n for n in syms if n in kernels or n in heads or n in declared]
    starts = sorted(set(syms[n] for n in funcs))
    code: Dict[str, List[Instr]] = {}
    lines: Dict[int, int] = {}
    for k in like.kernels:
        name = k.symbol
        if name not in syms:
            if kind == "objdump listing" and heads:
                raise InputError(path, f"the listing is llvm-objdump's text of {', '.join(sorted(heads))}, not of "
                                       f"{k.symbol} ({like.path}): give --like the code object it was "
                                       f"disassembled from")
            if len(like.kernels) == 1 and len(funcs) == 1:
                name = funcs[0]
            else:
                raise InputError(path, f"kernel {k.symbol} of {like.path} has no label in the listing")
        start = syms[name]
        end = min((s for s in starts if s > start), default=1 << 64)
        body = [i for i in instrs if start <= i.addr < end]
        delta = 0
        if body and body[0].addr in listing_addr:   # keep the listing's addresses
            delta = listing_addr[body[0].addr] - body[0].addr
        elif name in heads:
            delta = heads[name] - start
        code[k.symbol] = [_shift(i, delta) for i in body]
        for i in body:
            if i.addr in line_of:
                lines[i.addr + delta] = line_of[i.addr]
    co = replace(like, path=Path(path), kernels=[replace(k, path=str(path)) for k in like.kernels])
    edited = frozenset(no for k, (t, no) in enumerate(mc) if _is_instruction(t) and k not in origin) \
        if kind == "objdump listing" else frozenset()
    return Source(co, code, kind, lines, edited)


def _shift(i: Instr, delta: int) -> Instr:
    if not delta:
        return i
    return replace(i, addr=i.addr + delta, target=None if i.target is None else i.target + delta)


def _is_instruction(text: str) -> bool:
    t = _strip_comment(text).strip()
    return bool(t) and not t.startswith(".") and not t.endswith(":")


def _assemble_linked(path, mc, arch: str) -> Source:
    """Assemble and link a listing with its own directives into a code object."""
    lld = _find_tool("ADDRSIM_LD_LLD", "ld.lld")
    with tempfile.TemporaryDirectory(prefix="addrsim-asm-") as d:
        obj, co_path = Path(d) / "listing.o", Path(d) / "listing.co"
        _run_mc(path, mc, arch, obj)
        proc = subprocess.run([lld, "-shared", str(obj), "-o", str(co_path)], capture_output=True, timeout=600)
        if proc.returncode != 0:
            err = proc.stderr.decode("utf-8", "replace").strip().splitlines() or ["failed"]
            msg = next((e for e in err if "error:" in e), err[-1])
            raise InputError(path, f"ld.lld could not link the assembled listing: {msg[:200]}")
        try:
            co = codeobj.load(co_path)
        except InputError as e:
            raise InputError(path, f"the assembled listing is not a usable code object: {e.problem}") from None
        code = disassemble(co_path)
    co = replace(co, path=Path(path), kernels=[replace(k, path=str(path)) for k in co.kernels])
    return Source(co, code, "assembly")
