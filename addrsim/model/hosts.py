"""Which family, host and argument contract describe a kernel; its pointer arguments.

Owns :func:`choose_family`, :func:`choose_host`, :func:`choose_contract`, :func:`pointer_args`,
:func:`arg_layout`, :func:`buffer_pointer` and :func:`grid_symbols`.  Facts come from the
kernel's own metadata (argument names and sizes, the symbol the family regex matches) and,
for the host, from the argument ABI and the host file beside the code object; never from the
file name alone.  May import addrsim.ir, addrsim.loader and addrsim.model.schema.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, List, Optional, Tuple


from addrsim.loader.codeobj import Kernel
from addrsim.errors import InputError
from addrsim.ir.expr import Sym

from addrsim.model.schema import ModelSet


def grid_symbols(ms: ModelSet) -> Dict[str, Sym]:
    return {ax: Sym(ms.grid.get(ax, {}).get("name", f"wgid_{ax}"), 32, "id") for ax in "xyz"}


def choose_family(ms: ModelSet, kernel: Kernel, arch: Optional[str] = None) -> Optional[dict]:
    """The first family whose ``match`` regex is found in the kernel symbol and whose
    ``arch`` list (if any) holds the code object's architecture."""
    for fam in ms.families:
        archs = fam.get("arch")
        if archs and arch is not None and arch not in archs:
            continue
        if re.search(fam["match"], kernel.symbol):
            return fam
    return None


def choose_contract(ms: ModelSet, kernel: Kernel, host: Optional[dict] = None) -> Optional[dict]:
    """The first contract whose ``requires`` are all argument names of the kernel's
    metadata; with ``host``, only that host's contracts (its ``contracts`` list)."""
    names = set(kernel.arg_names)
    allowed = None if host is None else set(host.get("contracts") or [])
    for c in ms.contracts:
        if allowed is not None and c.get("name") not in allowed:
            continue
        if all(r in names for r in c["requires"]):
            return c
    return None


def choose_host(ms: ModelSet, kernel: Kernel) -> Tuple[Optional[dict], str]:
    """(host, why): the host model that launches ``kernel``.  ``ms.host_override``
    (``--host NAME``) wins; else the hosts with a contract for the argument ABI the metadata
    lists; where several fit (the gfx950 native ABI is shared by the wheel and aiter's 2026
    host), a file named in a host's ``evidence`` beside the code object decides, else the
    first host in model order (later model files first).  (None, why) when the models declare no host.  Raises InputError for
    an unknown ``--host``."""
    if ms.host_override is not None:
        for h in ms.hosts:
            if h["name"] == ms.host_override:
                if choose_contract(ms, kernel, h) is None:
                    raise InputError("--host", f"host {h['name']} has no argument contract for kernel "
                                               f"{kernel.symbol}'s arguments")
                return h, "--host"
        raise InputError("--host", f"unknown host {ms.host_override!r} "
                                   f"(models define: {', '.join(h['name'] for h in ms.hosts) or 'none'})")
    if not ms.hosts:
        return None, "the models declare no host"
    first = choose_contract(ms, kernel)
    if first is not None and not any(first.get("name") in (h.get("contracts") or []) for h in ms.hosts):
        return None, f"contract {first.get('name')} of the models belongs to no host: routing unknown"
    fits = [h for h in ms.hosts if choose_contract(ms, kernel, h) is not None]
    if len(fits) == 1:
        return fits[0], "the only host with a contract for this argument ABI"
    if not fits:
        return None, "no host has a contract for this kernel's argument names"
    folder = Path(kernel.path).parent if kernel.path else None
    if folder is not None:
        for h in fits:
            for ev in h.get("evidence") or []:
                if (folder / ev).exists():
                    return h, f"its {ev} lies beside the code object"
    return fits[0], (f"argument ABI shared by {', '.join(h['name'] for h in fits)}; no evidence file "
                     f"beside the code object: the first in model order (use --host)")


def pointer_args(ms: ModelSet, kernel: Kernel, con: Optional[dict] = None) -> set:
    """Kernel arguments that hold 64-bit pointers: 8-byte global buffers, and the
    sequence-start arrays the chosen contract declares (the gfx950 metadata lists those as
    4-byte by_value arguments although the host struct has 8-byte pointers in 16-byte slots,
    G5:22-113; the kernel loads them with s_load_dwordx2)."""
    out = {a.name for a in kernel.args if a.value_kind == "global_buffer" and a.size == 8}
    if con is None:
        con = choose_contract(ms, kernel, choose_host(ms, kernel)[0])
    out |= set(((con or {}).get("arrays") or {}).keys()) & set(kernel.arg_names)
    return out


def arg_layout(ms: ModelSet, kernel: Kernel) -> List[Tuple[str, int, int]]:
    """(name, byte offset, size in bytes) of each argument, with pointer_args 8 bytes wide."""
    ptrs = pointer_args(ms, kernel)
    return [(a.name, a.offset, 8 if a.name in ptrs else a.size) for a in kernel.args]


def _pointer_names(ms: ModelSet) -> set:
    out = set()
    for b in ms.buffers.values():
        out.update(b["ptr"])
    return out


def buffer_pointer(ms: ModelSet, kernel: Kernel, buffer: str) -> Optional[str]:
    """The kernel argument that holds ``buffer``'s base (first of the model's names present)."""
    spec = ms.buffers.get(buffer)
    if not spec:
        return None
    names = set(kernel.arg_names)
    for p in spec["ptr"]:
        if p in names:
            return p
    return None
