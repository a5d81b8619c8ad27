"""Disassembly through LLVM's llvm-objdump, parsed into instruction records.

llvm-objdump (LLVM 20 or later; Debian package ``llvm-22``) is looked up in this order: the
path in ``$ADDRSIM_OBJDUMP``, ``llvm-objdump-22`` .. ``llvm-objdump-20`` and ``llvm-objdump`` on
``$PATH``, then ``/opt/rocm/llvm/bin/llvm-objdump``.  LLVM 19 and older cannot decode gfx950.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from functools import lru_cache
from typing import Dict, List, Optional, Tuple

from addrsim.isa.control import is_branch
from addrsim.errors import InputError, ToolError

MIN_LLVM = 20
INSTALL_HINT = "install Debian's llvm-22 package (apt-get install llvm-22) or set ADDRSIM_OBJDUMP"


@dataclass(frozen=True)
class Instr:
    """One decoded instruction: ``addr`` is its byte address, ``operands`` the comma-separated
    operands as printed, ``modifiers`` the trailing words (``idxen``, ``offset:16``, ...),
    ``target`` the branch target address for direct branches."""

    addr: int
    mnemonic: str
    operands: Tuple[str, ...]
    modifiers: Tuple[str, ...]
    text: str
    target: Optional[int] = None
    size: int = 4

    def modifier(self, name: str) -> Optional[str]:
        """Value of ``name:value`` (``""`` for a bare flag such as ``idxen``), or None."""
        for m in self.modifiers:
            if m == name:
                return ""
            if m.startswith(name + ":"):
                return m[len(name) + 1:]
        return None


@lru_cache(maxsize=1)
def find_objdump() -> Tuple[str, int]:
    """Path and major version of a usable llvm-objdump.  Raises ToolError if none is found
    or the one found is older than LLVM 20."""
    cands = []
    env = os.environ.get("ADDRSIM_OBJDUMP")
    if env:
        cands.append(env)
    for v in range(30, MIN_LLVM - 1, -1):
        cands.append(f"llvm-objdump-{v}")
    cands += ["llvm-objdump", "/opt/rocm/llvm/bin/llvm-objdump"]
    seen_old = None
    for c in cands:
        p = shutil.which(c) if os.sep not in c else (c if os.access(c, os.X_OK) else None)
        if not p:
            if c == env:
                raise ToolError(f"ADDRSIM_OBJDUMP={env} is not an executable; {INSTALL_HINT}")
            continue
        try:
            out = subprocess.run([p, "--version"], capture_output=True, text=True, timeout=30).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        m = re.search(r"LLVM version (\d+)", out)
        ver = int(m.group(1)) if m else 0
        if ver >= MIN_LLVM:
            return p, ver
        seen_old = seen_old or (p, ver)
    if seen_old:
        raise ToolError(f"{seen_old[0]} is LLVM {seen_old[1]}; addrsim needs LLVM {MIN_LLVM} or later "
                        f"(gfx950 decoding); {INSTALL_HINT}")
    raise ToolError(f"llvm-objdump not found; {INSTALL_HINT}")


# "<mnemonic> <operands>  // <address>: <encoding dwords>": the comment is matched from the last
# "//" and the instruction split with str.split, so that no line costs more than linear time (one
# regular expression over the whole line backtracked cubically on long runs of blanks).
# a branch to a target without a label ends with the target as "<symbol+0xoffset>"
_COMMENT = re.compile(r"//\s*([0-9A-Fa-f]{1,16}):\s*((?:[0-9A-Fa-f]{8}\s*)+)(?:<[^<>]{0,400}>\s*)?$")
_SYM = re.compile(r"^([0-9a-fA-F]+) <(.+)>:$")
_BRANCH_TARGET = re.compile(r"^(?:label_[0-9A-Fa-f]+|[A-Za-z_.$][\w.$@]*|-?\d+)$")


def disassemble(path) -> Dict[str, List[Instr]]:
    """Instructions of every function symbol in the code object at ``path``, by symbol name.

    Raises ToolError (no usable llvm-objdump) or InputError (llvm-objdump rejected the file)."""
    exe, _ = find_objdump()
    try:
        proc = subprocess.run([exe, "-d", str(path)], capture_output=True, timeout=600)
    except subprocess.TimeoutExpired:
        raise InputError(path, "llvm-objdump timed out") from None
    if proc.returncode != 0:
        msg = (proc.stderr.decode("utf-8", "replace").strip().splitlines() or ["failed"])[-1]
        raise InputError(path, f"llvm-objdump failed: {msg}")
    # symbol names are raw bytes; latin-1 never fails and matches pyelftools' decoding (codeobj)
    return parse_listing(proc.stdout.decode("latin-1"), path)


def parse_listing(text: str, path="<listing>") -> Dict[str, List[Instr]]:
    """Parse llvm-objdump ``-d`` output (with raw encodings) into instructions per symbol.

    Labels that llvm-objdump invents inside a function (``<label_0293>``) are resolved to
    branch targets and do not start a new function.  Raises InputError on an undecodable
    instruction (``<unknown>``)."""
    funcs: Dict[str, List[Instr]] = {}
    labels: Dict[str, int] = {}
    cur: Optional[List[Instr]] = None
    for lineno, line in enumerate(text.splitlines(), 1):
        m = _SYM.match(line.strip())
        if m:
            addr, name = int(m.group(1), 16), m.group(2)
            labels[name] = addr
            if not name.startswith("label_"):
                cur = funcs.setdefault(name, [])
            continue
        if cur is None or not line.startswith(("\t", " ")):
            continue
        m = _match_line(line)
        if not m:
            if line.strip():
                if "<unknown>" in line:
                    raise InputError(path, f"line {lineno}: llvm-objdump could not decode an instruction "
                                           f"(wrong target or too old LLVM?): {line.strip()[:80]}")
            continue
        mnem, rest, addr_s, raw = m
        if mnem == "<unknown>":
            raise InputError(path, f"line {lineno}: undecodable instruction at {addr_s}")
        ops, mods = split_operands(rest)
        size = 4 * len(raw.split())
        cur.append(Instr(int(addr_s, 16), mnem, ops, mods, f"{mnem} {rest}".strip(), None, size))
    # resolve branch targets
    out = {}
    for name, ins in funcs.items():
        fixed = []
        for i in ins:
            if is_branch(i.mnemonic) and i.operands:
                t = i.operands[0]
                if t in labels:
                    i = Instr(i.addr, i.mnemonic, i.operands, i.modifiers, i.text, labels[t], i.size)
                elif re.fullmatch(r"-?[0-9]{1,6}", t):  # raw simm16 in dwords, relative to the next instruction
                    v = int(t)
                    v = v - 0x10000 if v >= 0x8000 else v   # simm16, printed unsigned by LLVM 22
                    i = Instr(i.addr, i.mnemonic, i.operands, i.modifiers, i.text, i.addr + 4 + 4 * v, i.size)
            fixed.append(i)
        out[name] = fixed
    return out


def _match_line(line: str) -> Optional[Tuple[str, str, str, str]]:
    """(mnemonic, operand text, address, encoding) of an instruction line, or None."""
    i = line.rfind("//")
    if i < 0:
        return None
    m = _COMMENT.match(line, i)
    if not m:
        return None
    words = line[:i].split(None, 1)
    if not words:
        return None
    return words[0], words[1].strip() if len(words) > 1 else "", m.group(1), m.group(2)


def split_operands(rest: str) -> Tuple[Tuple[str, ...], Tuple[str, ...]]:
    """Split ``"v1, s[12:15], 0 idxen offset:16"`` into operands and trailing modifiers."""
    rest = rest.strip()
    if not rest:
        return (), ()
    parts = [p.strip() for p in _split_commas(rest)]
    # modifiers follow the last operand, separated by spaces
    last = parts[-1].split()
    parts[-1] = last[0] if last else ""
    mods = tuple(last[1:])
    # a first word with ':' (e.g. "lgkmcnt(0)" or "offset:..") stays an operand
    return tuple(p for p in parts if p != ""), mods


def _split_commas(s: str) -> List[str]:
    out, depth, cur = [], 0, []
    for ch in s:
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur))
    return out
