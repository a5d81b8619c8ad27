"""Library API: verify the buffer addresses of the kernels in one code object.

>>> report = verify("bwd_hd128_bf16_a16_rtne.co", buffers=["lse"], layouts=["sbhd"])
>>> report["kernels"][0]["checks"][0]["verdict"]
'proved'
"""
from __future__ import annotations

import time
from typing import Dict, List, Optional, Sequence, Tuple

from addrsim import __version__
from addrsim.loader.codeobj import SUPPORTED_ARCHS
from addrsim.loader.listing import load_source
from addrsim.errors import InputError
from addrsim.engine.explore import explore
from addrsim.model.models import ModelSet, buffer_pointer, build_problem, check_bounds, load_models
from addrsim.prove.check import Check, check, initial_machine, limit_tools, pointers_in, witness_tools
from addrsim.prove.domain import domain_json, host_limits, route, settle
from addrsim.ir.expr import Sym

DEFAULT_BUFFERS = ("lse", "d")
DEFAULT_LAYOUTS = ("bhsd", "bshd", "sbhd")
DEFAULT_PROPERTIES = ("address", "bounds")


def verify(path, buffers: Optional[Sequence[str]] = None, layouts: Sequence[str] = DEFAULT_LAYOUTS,
           model_files: Sequence[str] = (), bounds: Dict[str, Tuple[int, int]] = None,
           timeout_ms: int = 10000, models: Optional[ModelSet] = None, cache: Optional[dict] = None,
           min_budget_s: Optional[float] = None, check_budget_s: Optional[float] = None,
           arith: str = "bv", memory_gib: Optional[float] = None, smt_dir: Optional[str] = None,
           properties: Sequence[str] = DEFAULT_PROPERTIES, like=None,
           checks_out: Optional[list] = None, host: Optional[str] = None, routed: bool = False,
           require_buffers: bool = True) -> dict:
    """Check every kernel of the code object or assembly listing at ``path``.

    A listing (llvm-objdump ``-d`` text, edited or not, or llvm-mc assembly) takes its
    metadata and kernel descriptors from the code object ``like``, or from its own
    ``.amdhsa_kernel``/``.amdgpu_metadata`` directives (:mod:`addrsim.loader.listing`).

    ``arith``: "bv" (hardware arithmetic, the default; counterexamples that int mode proves
    are reported as overflows with the instruction that wraps) or "int" (unbounded
    integers); see :mod:`addrsim.backends.ideal`.  ``memory_gib`` overrides the device memory (GiB)
    that limits the shapes (default: the model's capacity of the code object's
    architecture).  ``smt_dir``: directory where each undecided obligation is written as
    SMT-LIB2 (None: not written).  ``properties``: "address" (each buffer's (batch, head)
    slice base against the model's formula) and/or "bounds" (every checked access inside the
    tensor's allocation and the V#'s num_records).

    ``buffers`` None means every buffer of the models whose pointer argument the kernel has;
    named buffers must all exist in every kernel (``require_buffers`` False: a kernel without
    one is not checked for it, as a corpus scan wants).
    ``checks_out``: when given, each (kernel symbol, :class:`addrsim.prove.check.Check`) is
    appended to it (the Check keeps the sympy offsets that :mod:`addrsim.commands.diff` compares).
    ``host``: the host model by name (default: chosen by the argument ABI, see
    :func:`addrsim.model.models.choose_host`).  ``verdict`` is the kernel's, decided without
    routing over shapes whose arguments are exact; ``routing`` says whether the host's entry
    points send a failing shape to the kernel.  ``routed``: make ``verdict`` the routed one
    (every layer, routing included).
    Returns the report as a JSON-ready dict ``{"tool", "version", "kernels": [...]}`` (see
    README.md for the schema).  Raises InputError (bad file, unknown buffer or layout, a
    kernel without the buffer's pointer argument, malformed model file) and ToolError (no
    usable llvm-objdump)."""
    if arith not in ("bv", "int"):
        raise InputError("--arith", f"unknown arithmetic mode {arith!r} (bv or int)")
    for p_ in properties:
        if p_ not in ("address", "bounds"):
            raise InputError("--check", f"unknown property {p_!r} (address, bounds)")
    if memory_gib is not None and not 0 < memory_gib < 2 ** 20:
        raise InputError("--memory-gib", f"device memory must be a positive number of GiB below 2**20, got {memory_gib}")
    check_bounds(bounds)
    ms = models or load_models(model_files)
    if host is not None:
        from dataclasses import replace as _r
        ms = _r(ms, host_override=host)
    explicit = buffers is not None and require_buffers
    buffers = list(buffers) if buffers is not None else list(ms.buffers)
    for b in buffers:
        if b not in ms.buffers:
            raise InputError(path, f"unknown buffer {b!r} (models define: {', '.join(sorted(ms.buffers))})")
    for lay in layouts:
        if lay not in ms.layouts:
            raise InputError(path, f"unknown layout {lay!r} (models define: {', '.join(sorted(ms.layouts))})")
    src = load_source(path, like)
    co = src.co
    if co.arch not in SUPPORTED_ARCHS:
        raise InputError(path, f"architecture {co.arch} is not supported (gfx90a, gfx942, gfx950)")
    ptrs = {}
    kbufs: Dict[str, List[str]] = {}
    for k in co.kernels:
        kbufs[k.symbol] = []
        for b in buffers:
            p = buffer_pointer(ms, k, b)
            if p is None:
                if explicit:
                    raise InputError(path, f"kernel {k.symbol}: metadata has no argument for buffer {b!r} "
                                           f"(looked for {', '.join(ms.buffers[b]['ptr'])})")
                continue
            ptrs[(k.symbol, b)] = p
            kbufs[k.symbol].append(b)
    listing = src.code
    out = {"tool": "addrsim", "version": __version__, "kernels": []}
    for k in co.kernels:
        code = listing.get(k.symbol)
        if not code:
            raise InputError(path, f"kernel {k.symbol}: no code found in the disassembly")
        t0 = time.time()
        m, _ = initial_machine(k, co.arch, ms)
        targets = {ptrs[(k.symbol, b)] for b in kbufs[k.symbol]}
        ex = explore(code, m, lambda a: pointers_in(a.base), targets)
        explore_s = time.time() - t0
        checks = []
        for prop in properties:
            for lay in layouts:
                for b in kbufs[k.symbol]:
                    def run(entry, b=b, lay=lay, prop=prop):
                        c = check(k, co.arch, code, ex, ms, b, lay, bounds, timeout_ms, cache, min_budget_s,
                                  check_budget_s, arith, smt_dir, memory_gib, prop, routed=entry)
                        return settle(c, *witness_tools(k, co.arch, code, ms, c, timeout_ms, min_budget_s, cache))
                    try:
                        c = run(None)
                        c.routing = route(c, run, witness_tools(k, co.arch, code, ms, c, timeout_ms, min_budget_s,
                                                                cache)[0] if c.problem is not None else None)
                        if routed:
                            c = _as_routed(c, run)
                    except InputError:
                        raise
                    except Exception as e:  # an engine failure is an honest "unknown", never a verdict
                        c = Check(b, lay, "unknown", reason=f"internal error: {type(e).__name__}: {e}", prop=prop)
                    checks.append(_check_json(c, src.lines))
                    if checks_out is not None:
                        checks_out.append((k.symbol, c))
        limits = []
        for lay in layouts:
            prob = build_problem(ms, k, lay, Sym("tid_x", 32, "lane"), bounds, co.arch, memory_gib)
            limits += host_limits(prob, *limit_tools(prob, timeout_ms, min_budget_s))
        entry = {"file": str(path), "kernel": k.symbol, "arch": co.arch, "host": prob.host if layouts else None,
                 "explore_s": round(explore_s, 3), "paths": ex.paths, "checks": checks, "host_limits": limits}
        if src.kind != "code object":
            entry["source"] = src.kind
            if like is not None:
                entry["like"] = str(like)
        out["kernels"].append(entry)
    return out


def _check_json(c: Check, lines: Optional[Dict[int, int]] = None) -> dict:
    cex = None
    if c.counterexample is not None:
        x = c.counterexample
        cex = {"shape": x.shape, "coords": {"batch_id": x.coords["batch_id"], "head_id": x.coords["head_id"]},
               "kernargs": x.kernargs, "address": {"extracted": x.extracted, "expected": x.expected},
               "lane": x.lane, "grid": x.coords, "access_pc": x.access, "minimal": x.minimal, "replayed_on": x.replayed_on or "this kernel",
               "arrays": {a: {str(i): v for i, v in d.items()} for a, d in x.arrays.items()},
               "memory_bytes": x.memory_bytes, "iteration": x.iteration}
        if lines and x.access in lines:
            cex["access_line"] = lines[x.access]     # line of the listing (listing input)
    out = {"buffer": c.buffer, "layout": c.layout, "property": c.prop, "verdict": c.verdict, "arith": c.arith,
           "extracted": c.extracted, "expected": c.expected, "difference": c.difference, "reason": c.reason,
           "counterexample": cex, "time_s": c.time_s}
    if c.verdict == "counterexample":
        out["cause"] = c.cause or "unclassified"
        out["overflow"] = [{"kind": w.kind, "pc": w.pc, "instruction": w.text, "argument": w.name,
                            "width": w.width, "machine": w.machine, "exact": w.exact, "matters": w.matters,
                            "formula": w.formula, "boundary": w.boundary, "text": w.describe()}
                           for w in c.overflow]
    out["witness"] = c.witness.json() if c.witness is not None and c.verdict == "proved" else None
    out["domain"] = domain_json(c.problem) if c.problem is not None else None
    out["routing"] = c.routing.json() if c.routing is not None else None
    if c.verdict == "unreachable":
        out["excluded_by"] = c.unreachable
    if c.smt2:
        out["smt2"] = c.smt2
    if c.verdict == "proved" and c.prop == "address":
        out["all_iterations"] = c.loops    # every iteration of the loops that access it (addrsim.engine.loops)
    return out


def _as_routed(c: Check, run) -> Check:
    """The routed verdict as the check's verdict: the first entry point's counterexample
    that reaches a failing shape, else its proof (unreachable when no entry point's domain
    holds a shape)."""
    r = c.routing
    if r is None or not c.problem or not c.problem.entry_points or not r.entries:
        return c
    order = sorted(r.entries, key=lambda e: ("counterexample", "unknown", "unsupported", "proved",
                                               "unreachable").index(e.verdict) if e.verdict in (
        "counterexample", "unknown", "unsupported", "proved", "unreachable") else 9)
    pick = run(order[0].entry)
    pick.routing = r
    return pick


def finding_kind(check: dict) -> str:
    """"reachable" (a counterexample some host entry point launches, or whose routing is
    undecided), "latent" (no entry point launches a failing shape), "" otherwise."""
    if check.get("verdict") != "counterexample":
        return ""
    reach = (check.get("routing") or {}).get("reachable")
    return "latent" if reach is False else "reachable"


EXIT_LATENT = 5


def exit_status(reports: List[dict]) -> int:
    """0 all proved; 1 a reachable counterexample (a host entry point launches a failing
    shape, or routing is undecided); 5 counterexamples that are all latent (the host's routing
    masks every one); 2 unknown, unsupported or unreachable and no counterexample."""
    checks = [c for r in reports for k in r["kernels"] for c in k["checks"]]
    kinds = [finding_kind(c) for c in checks]
    if "reachable" in kinds:
        return 1
    if "latent" in kinds:
        return EXIT_LATENT
    if any(c["verdict"] != "proved" for c in checks):
        return 2
    return 0
