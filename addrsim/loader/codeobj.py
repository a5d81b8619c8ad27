"""Loading AMDGPU code objects (HSA ``.co`` files): metadata, kernel descriptors, initial
register state.

Sources: LLVM AMDGPUUsage, sections "Code Object Metadata (V3+)" (the ``NT_AMDGPU_METADATA``
note, type 32, owner ``AMDGPU``, a msgpack map with ``amdhsa.kernels``), "Kernel Descriptor"
(64 bytes at the ``<kernel>.kd`` symbol) and "Initial Kernel Execution State" (user SGPRs in a
fixed order, then the enabled workgroup ids; on gfx90a and later the work-item ids are packed
into v0 as x in bits 0-9, y in 10-19, z in 20-29).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import msgpack
from elftools.common.exceptions import ELFError
from elftools.construct import ConstructError
from elftools.elf.elffile import ELFFile

from addrsim.files import read_input
from addrsim.errors import InputError

EM_AMDGPU = 0xE0
NT_AMDGPU_METADATA = 32

#: EF_AMDGPU_MACH values (LLVM AMDGPUUsage, "AMDGPU ELF Header", table of e_flags).
MACH = {0x4C: "gfx942", 0x4F: "gfx950", 0x40: "gfx940", 0x41: "gfx941", 0x3F: "gfx90a", 0x30: "gfx908"}


#: Architectures whose ISA semantics addrsim has (CDNA2, CDNA3, CDNA4).
SUPPORTED_ARCHS = ("gfx942", "gfx950", "gfx940", "gfx941", "gfx90a")

@dataclass(frozen=True)
class KernelArg:
    """One kernel argument from the metadata: ``offset`` and ``size`` in bytes."""

    name: str
    offset: int
    size: int
    value_kind: str


@dataclass(frozen=True)
class KernelDescriptor:
    """The fields of the 64-byte kernel descriptor that fix the initial register state.

    ``user_sgpr_count`` comes from COMPUTE_PGM_RSRC2 bits 5:1, the enables of the user SGPRs
    from the kernel code properties (byte offset 56), the workgroup-id enables from
    COMPUTE_PGM_RSRC2 bits 7-9 and the work-item-id count from bits 12:11 (AMDGPUUsage,
    "Kernel Descriptor", "compute_pgm_rsrc2" and "Kernel Code Properties")."""

    kernarg_size: int
    entry_offset: int
    rsrc1: int
    rsrc2: int
    rsrc3: int
    code_properties: int
    kernarg_preload: int

    @property
    def user_sgpr_count(self) -> int:
        return (self.rsrc2 >> 1) & 0x1F

    @property
    def float_denorm_mode_32(self) -> int:
        """COMPUTE_PGM_RSRC1 bits 17:16 (AMDGPUUsage "compute_pgm_rsrc1" for GFX6-GFX12,
        FLOAT_DENORM_MODE_32): 0 flush source and destination denormals, 1 flush destination
        only, 2 flush source only, 3 keep both.  Every fmha_v3_bwd kernel of the wheel and of
        aiter e4048607 sets 0."""
        return (self.rsrc1 >> 16) & 3

    @property
    def workgroup_id_enabled(self) -> Tuple[bool, bool, bool]:
        return tuple(bool(self.rsrc2 >> b & 1) for b in (7, 8, 9))

    @property
    def workitem_id_count(self) -> int:
        """1 (x only), 2 (x, y) or 3 (x, y, z)."""
        return ((self.rsrc2 >> 11) & 3) + 1

    def user_sgpr_layout(self) -> Dict[str, int]:
        """First SGPR of each enabled user SGPR item, in the hardware's fixed order."""
        order = [("private_segment_buffer", 0, 4), ("dispatch_ptr", 1, 2), ("queue_ptr", 2, 2),
                 ("kernarg_segment_ptr", 3, 2), ("dispatch_id", 4, 2), ("flat_scratch_init", 5, 2),
                 ("private_segment_size", 6, 1)]
        out, s = {}, 0
        for name, bit, n in order:
            if self.code_properties >> bit & 1:
                out[name] = s
                s += n
        return out


@dataclass(frozen=True)
class InitialState:
    """Initial register state of one wavefront (register indices, not values)."""

    kernarg_sgpr: int                    # first SGPR of the 64-bit kernarg segment pointer
    workgroup_id_sgpr: Dict[str, int]    # "x"/"y"/"z" -> SGPR index
    workitem_ids: int                    # how many work-item ids arrive (in v0, packed)
    packed_workitem_ids: bool


@dataclass
class Kernel:
    """One kernel of a code object.  Sizes are in bytes, ``entry`` is the code address."""

    symbol: str
    args: List[KernelArg]
    kernarg_segment_size: int
    wavefront_size: int
    reqd_workgroup_size: Optional[Tuple[int, int, int]]
    sgpr_count: int
    descriptor: KernelDescriptor
    entry: int
    path: Optional[str] = None           # the code object, for error messages

    def arg(self, name: str) -> Optional[KernelArg]:
        for a in self.args:
            if a.name == name:
                return a
        return None

    @property
    def arg_names(self) -> List[str]:
        return [a.name for a in self.args if a.name != "pad"]

    def initial_state(self, arch: str) -> InitialState:
        lay = self.descriptor.user_sgpr_layout()
        if "kernarg_segment_ptr" not in lay:
            raise InputError(self.path or self.symbol, f"kernel {self.symbol}: kernel descriptor does not enable "
                                                       "the kernarg segment pointer")
        nxt = self.descriptor.user_sgpr_count
        wg = {}
        for axis, en in zip("xyz", self.descriptor.workgroup_id_enabled):
            if en:
                wg[axis] = nxt
                nxt += 1
        packed = arch in ("gfx90a", "gfx940", "gfx941", "gfx942", "gfx950")
        return InitialState(lay["kernarg_segment_ptr"], wg, self.descriptor.workitem_id_count, packed)


@dataclass
class CodeObject:
    """A loaded code object: ``arch`` from e_flags (e.g. ``gfx942``), its kernels."""

    path: Path
    arch: str
    kernels: List[Kernel] = field(default_factory=list)


def _meta_str(d: dict, key: str):
    v = d.get(key)
    return v.decode() if isinstance(v, bytes) else v


def load(path) -> CodeObject:
    """Read an AMDGPU code object.

    Raises :class:`InputError` (one line naming the file) when the file is missing, not an
    ELF, truncated, for another machine, or has no usable ``NT_AMDGPU_METADATA``."""
    path = Path(path)
    try:
        data = read_input(path)
    except OSError as e:
        raise InputError(path, f"cannot read file ({e.strerror})") from None
    except ValueError as e:
        raise InputError(path, f"cannot read file ({e})") from None
    if data[:4] != b"\x7fELF":
        raise InputError(path, "not an ELF file (expected an AMDGPU code object)")
    import io
    try:
        elf = ELFFile(io.BytesIO(data))
        machine = elf["e_machine"]
        if machine not in ("EM_AMDGPU", EM_AMDGPU):
            raise InputError(path, f"ELF for machine {machine}, not AMDGPU (e_machine 0xE0)")
        arch = MACH.get(elf["e_flags"] & 0xFF, f"unknown-mach-{elf['e_flags'] & 0xFF:#x}")
        meta = None
        for sec in elf.iter_sections():
            if sec["sh_type"] != "SHT_NOTE":
                continue
            for note in sec.iter_notes():
                if note["n_type"] in (NT_AMDGPU_METADATA, "NT_AMDGPU_METADATA") and note["n_name"] == "AMDGPU":
                    desc = note["n_desc"]
                    raw = desc if isinstance(desc, bytes) else desc.encode("latin-1")
                    try:
                        meta = msgpack.unpackb(raw, raw=False, strict_map_key=False)
                    except (ValueError, TypeError, msgpack.exceptions.UnpackException) as e:
                        raise InputError(path, f"malformed metadata: the NT_AMDGPU_METADATA note is not "
                                               f"valid msgpack ({type(e).__name__}: {_short(e)})") from None
        if meta is None:
            raise InputError(path, "no NT_AMDGPU_METADATA note (not a code object v3+)")
        if not isinstance(meta, dict):
            raise InputError(path, f"malformed metadata: expected a map, got {type(meta).__name__}")
        kernels = meta.get("amdhsa.kernels", [])
        if not isinstance(kernels, list):
            raise InputError(path, f"malformed metadata: amdhsa.kernels must be a list, got {type(kernels).__name__}")
        symtab = elf.get_section_by_name(".symtab") or elf.get_section_by_name(".dynsym")
        syms = {s.name: s for s in symtab.iter_symbols()} if symtab else {}
        co = CodeObject(path, arch)
        for i, k in enumerate(kernels):
            co.kernels.append(_kernel(path, elf, data, k, syms, i))
        if not co.kernels:
            raise InputError(path, "metadata lists no kernels")
        return co
    except InputError:
        raise
    except (ELFError, ConstructError, struct.error, msgpack.exceptions.UnpackException, ValueError, KeyError,
            TypeError, AttributeError, IndexError, UnicodeDecodeError, OverflowError, ZeroDivisionError,
            RecursionError, NotImplementedError) as e:
        # pyelftools on a damaged ELF (offsets past the end, zero entry sizes, ...)
        raise InputError(path, f"malformed or truncated code object ({type(e).__name__}: {_short(e)})") from None


def _short(e, limit: int = 120) -> str:
    """One line of at most ``limit`` characters for an exception or value in a message."""
    text = " ".join(str(e).split())
    return text if len(text) <= limit else text[:limit] + "..."


def _mint(path, what: str, v, lo: int, hi: int) -> int:
    """A metadata integer in [lo, hi] (booleans and floats are not integers here)."""
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise InputError(path, f"malformed metadata: {what} must be an integer in [{lo}, {hi}], "
                               f"got {_short(repr(v), 40)}")
    return v


def _mstr(path, what: str, v) -> str:
    if not isinstance(v, str):
        raise InputError(path, f"malformed metadata: {what} must be a string, got {_short(repr(v), 40)}")
    return v


def _kernel(path, elf, data, k: dict, syms, index: int = 0) -> Kernel:
    """One kernel from its metadata map; every field addrsim uses is checked (type, range)."""
    if not isinstance(k, dict):
        raise InputError(path, f"malformed metadata: amdhsa.kernels[{index}] must be a map, got {type(k).__name__}")
    symbol = _mstr(path, f"amdhsa.kernels[{index}] .symbol", k.get(".symbol"))
    name = symbol[:-3] if symbol.endswith(".kd") else symbol
    if not name:
        raise InputError(path, f"malformed metadata: amdhsa.kernels[{index}] has an empty .symbol")
    raw_args = k.get(".args", [])
    if not isinstance(raw_args, list):
        raise InputError(path, f"malformed metadata: kernel {name}: .args must be a list")
    kd_sym = syms.get(name + ".kd")
    if kd_sym is None:
        raise InputError(path, f"kernel {name}: no {name}.kd symbol (kernel descriptor)")
    kd_addr = kd_sym["st_value"]
    kd = _read_vaddr(elf, data, kd_addr, 64)
    if kd is None:
        raise InputError(path, f"kernel {name}: kernel descriptor outside the file (truncated?)")
    (_g, _p, kernarg_size) = struct.unpack_from("<III", kd, 0)
    entry_off = struct.unpack_from("<q", kd, 16)[0]
    rsrc3, rsrc1, rsrc2 = struct.unpack_from("<III", kd, 44)
    props, preload = struct.unpack_from("<HH", kd, 56)
    desc = KernelDescriptor(kernarg_size, entry_off, rsrc1, rsrc2, rsrc3, props, preload)
    segment = _mint(path, f"kernel {name}: .kernarg_segment_size", k.get(".kernarg_segment_size", kernarg_size),
                    0, 1 << 32)
    args = []
    for i, a in enumerate(raw_args):
        what = f"kernel {name}: argument {i}"
        if not isinstance(a, dict):
            raise InputError(path, f"malformed metadata: {what} must be a map")
        aname = _mstr(path, f"{what} .name", a.get(".name", f"arg{i}"))
        off = _mint(path, f"{what} ({aname}) .offset", a.get(".offset"), 0, segment)
        size = _mint(path, f"{what} ({aname}) .size", a.get(".size"), 1, 1 << 16)
        if off + size > segment:
            raise InputError(path, f"malformed metadata: {what} ({aname}) at offset {off}, {size} bytes, lies "
                                   f"outside the {segment}-byte kernarg segment")
        kind = _mstr(path, f"{what} ({aname}) .value_kind", a.get(".value_kind", ""))
        args.append(KernelArg(aname, off, size, kind))
    rw = k.get(".reqd_workgroup_size")
    if rw is not None:
        if not isinstance(rw, list) or len(rw) != 3:
            raise InputError(path, f"malformed metadata: kernel {name}: .reqd_workgroup_size must be a list of 3")
        rw = tuple(_mint(path, f"kernel {name}: .reqd_workgroup_size", x, 1, 1024) for x in rw)
    wave = _mint(path, f"kernel {name}: .wavefront_size", k.get(".wavefront_size", 64), 32, 64)
    if wave not in (32, 64):
        raise InputError(path, f"malformed metadata: kernel {name}: .wavefront_size must be 32 or 64, got {wave}")
    return Kernel(
        symbol=name,
        args=args,
        kernarg_segment_size=segment,
        wavefront_size=wave,
        reqd_workgroup_size=rw or None,
        sgpr_count=_mint(path, f"kernel {name}: .sgpr_count", k.get(".sgpr_count", 0), 0, 1 << 16),
        descriptor=desc,
        entry=kd_addr + entry_off,
        path=str(path),
    )


def _read_vaddr(elf, data: bytes, addr: int, size: int) -> Optional[bytes]:
    for seg in elf.iter_segments():
        if seg["p_type"] != "PT_LOAD":
            continue
        lo = seg["p_vaddr"]
        if lo <= addr and addr + size <= lo + seg["p_filesz"]:
            off = seg["p_offset"] + (addr - lo)
            if off + size <= len(data):
                return data[off:off + size]
    for sec in elf.iter_sections():
        lo = sec["sh_addr"]
        if sec["sh_type"] != "SHT_NOBITS" and lo and lo <= addr and addr + size <= lo + sec["sh_size"]:
            off = sec["sh_offset"] + (addr - lo)
            if off + size <= len(data):
                return data[off:off + size]
    return None
