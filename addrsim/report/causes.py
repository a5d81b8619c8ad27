"""Findings by root cause: the counterexamples of one kernel grouped by what breaks them.

Owns :func:`root_causes` and :func:`summary_line`.  Both read the JSON form of a kernel's
report (:func:`addrsim.report.json.check_json`, ``host_limits``), nothing else; the text report
(:mod:`addrsim.report.text`), ``scan``, SARIF and the JSON's ``root_causes`` render from them.
May import addrsim.prove.verdict and addrsim.report.gate.

A root cause is one of (its ``kind``):

- ``wrap``: the first 32-bit operation on the address path that leaves its width (the first
  wrap site that matters, :mod:`addrsim.prove.wraps`), keyed by its instruction address; a site
  built outside any one instruction (a merged path, a replaced division idiom) has no address
  and is keyed by its exact value in shape terms instead;
- ``host cast``: a kernel argument that the host's u32 cast truncates (``host_limits``), one per
  argument, whatever the layout;
- ``formula``: an offset wrong over the integers too (a borrowed stride), keyed by the layout
  and ``extracted - expected`` with the buffer's own pointer name left out;
- ``loop``: a later loop iteration's step (keyed by the loop);
- ``bounds``: accesses outside their allocation or V# range, per layout and kind
  (``allocation``, ``num_records``); whether one wrap causes them is not decided here;
- ``layout``: one workgroup's stores leave its slice, store a byte twice or leave a row it
  owns unwritten (keyed by the buffer, the kind of fault and the access);
- ``base``: a buffer addressed through another pointer argument, or through a V# base built
  from two (keyed by the access and the buffer);
- ``unclassified``: a counterexample whose cause was not decided, one per check.
"""
from __future__ import annotations

import re
from typing import Dict, List, Optional, Tuple

from addrsim.prove.verdict import Cause, Verdict
from addrsim.report.gate import fingerprint

SHAPE_ORDER = ("batch", "nhead_q", "seqlen_q", "seqlen_k", "nhead_k", "hdim_q", "hdim_v", "total_q", "total_k")
"""The order in which a smallest shape is smallest (that of the minimisation, README.md)."""

SAFE_NAMES = set(SHAPE_ORDER) | {"batch_id", "head_id", "kv_tile", "tid_x", "floor", "Mod", "P"}
"""The names :func:`_factored` lets sympy read (shape variables, grid ids, lane, floor, Mod)."""

FIX_FORMULA = {
    "lse": "pattern A (load nhead_q and Hs_lsed from the kernel arguments and compute "
           "batch_id*nhead_q*Hs_lsed + head_id*Hs_lsed: layout-independent) or, with no SGPR free, "
           "pattern B (detect SBHD by s_BAs < s_Seqs and rebuild the batch term on that branch)",
    "dq": "pattern C (a dQ offset derived as Hdim * s_LseD_base is fixed with the LSE/D base) or "
          "pattern D (a dQ batch term of its own from s_BAs needs the same SBHD branching)",
}
FIX_FORMULA["d"] = FIX_FORMULA["lse"]
FIX_FORMULA["dq_acc"] = FIX_FORMULA["dq"]
PATTERN_A_ARGS = ("nhead_q", "Hs_lsed")
"""The kernel arguments pattern A loads (aiter e4048607's fmha_bwd_dqdkdv_args, mha_bwd.h:164-262)."""


def fix_formula(checks: List[dict], kernel_args: Optional[List[str]]) -> str:
    """The fix patterns of a formula root cause over ``checks``: pattern A only where the
    kernel's argument ABI (``kernel_args``: its metadata's names; None: not known) carries
    nhead_q and Hs_lsed, else pattern B, naming what A would need (issue 40)."""
    buf = next((c["buffer"] for c in checks if c["buffer"] in FIX_FORMULA), None)
    if buf is None:
        return ""
    missing = [a for a in PATTERN_A_ARGS if kernel_args is not None and a not in kernel_args]
    if buf in ("lse", "d") and missing:
        return ("pattern B (detect SBHD by s_BAs < s_Seqs and rebuild the batch term on that branch); pattern A "
                f"(batch_id*nhead_q*Hs_lsed + head_id*Hs_lsed from the kernel arguments) needs arguments this "
                f"kernel's ABI lacks: {', '.join(missing)}")
    return FIX_FORMULA[buf]


def _key(c: dict) -> Tuple:
    """The root-cause key of a counterexample check (see the module docstring)."""
    cause = c.get("cause") or "unclassified"
    site = _site(c)
    if cause == Cause.OVERFLOW or (c.get("property") == "bounds" and site is not None):
        if site is None:
            return ("wrap", None, "", c["buffer"], c["layout"])
        if site["kind"] == "argument":
            return ("host cast", site["argument"])
        if site.get("pc") is not None:
            return ("wrap", site["pc"])
        return ("wrap", None, site.get("formula") or site["text"])
    if cause == Cause.FORMULA:
        return ("formula", c["layout"], c.get("difference_shape")
                or _own_pointer_out(c.get("difference") or "", c["buffer"]))
    if cause == Cause.LAYOUT:
        kind = next((k for k in ("reads outside", "outside", "same", "never stored") if k in (c.get("reason") or "")),
                    "")
        return ("layout", c["buffer"], kind, c["counterexample"]["access_pc"])
    if cause == Cause.BASE:
        return ("base", c["counterexample"]["access_pc"], c["buffer"], c.get("reason") or "")
    if cause == Cause.LOOP:
        m = re.search(r"loop (0x[0-9a-f]+-0x[0-9a-f]+)", c.get("reason") or "")
        return ("loop", m.group(1) if m else c["buffer"])
    if c.get("property") == "bounds" and cause in ("allocation", "num_records"):
        return ("bounds", cause, c["layout"])
    return ("unclassified", c["buffer"], c["layout"], c.get("property"))


def _site(c: dict) -> Optional[dict]:
    """The first wrap site of a counterexample that changes its address (``matters``): an
    overflow's, or a bounds counterexample's whose access is in bounds without wraps (then
    the wrap, not the allocation, is its root cause)."""
    return next((w for w in c.get("overflow") or [] if w.get("matters")), None)


def _own_pointer_out(text: str, buffer: str) -> str:
    """``text`` with the buffer's pointer symbol (its name in any case) replaced by ``P``."""
    return re.sub(rf"\b{re.escape(buffer)}\b", "P", text, flags=re.IGNORECASE)


def _shape_rank(shape: Dict[str, int]) -> Tuple:
    return tuple(shape.get(v, 0) for v in SHAPE_ORDER)


def entry_reach(e: dict, pc: Optional[int] = None) -> Optional[bool]:
    """Whether host entry point ``e`` (a check's ``routing.entry_points`` item) reaches the
    root cause at wrap ``pc``: its ``reachable``, except that a routed counterexample whose
    wraps (``wrap_pcs``) are known and do not include ``pc`` shows the check reachable
    through another wrap, not this one (None: not decided for this cause)."""
    r = e.get("reachable")
    if r is True and pc is not None and e.get("wrap_pcs") is not None and pc not in e["wrap_pcs"]:
        return None
    return r


def _check_reach(c: dict, pc: Optional[int]) -> Optional[bool]:
    r = c.get("routing") or {}
    got = r.get("reachable")
    if got is True and pc is not None:
        each = [entry_reach(e, pc) for e in r.get("entry_points") or []]
        return True if any(x is True for x in each) or not each else None
    return got


def _reach(checks: List[dict], pc: Optional[int] = None) -> str:
    r = [_check_reach(c, pc) for c in checks]
    if any(x is True for x in r):
        return "reachable"
    if r and all(x is False for x in r):
        return "latent"
    return "routing unknown"


def check_name(c: dict) -> str:
    """A check's name in reports: ``buffer/layout``, `` bounds`` appended for the bounds check."""
    return f"{c['buffer']}/{c['layout']}" + (" bounds" if c.get("property") == "bounds" else "")


def _least(checks: List[dict]) -> Optional[dict]:
    """The counterexample check whose shape is smallest (SHAPE_ORDER), among equal shapes one
    proven minimal (the README kernel's K SBHD bounds check reaches V's minimal shape without
    proving it); None without checks."""
    return min(checks, key=lambda c: (_shape_rank(c["counterexample"]["shape"]),
                                      not c["counterexample"].get("minimal", True)), default=None)


def smallest_of(checks: List[dict]) -> Optional[dict]:
    """The ``smallest`` of a root cause over its counterexample ``checks``: the check, shape,
    whether it is proven minimal, and its memory (bytes); None without checks."""
    best = _least(checks)
    return None if best is None else {
        "check": check_name(best), "shape": best["counterexample"]["shape"],
        "minimal": bool(best["counterexample"].get("minimal", True)),
        "memory_bytes": best["counterexample"].get("memory_bytes")}


def smallest_check(kernel: dict, cause: dict) -> Optional[dict]:
    """The counterexample check of ``kernel`` whose shape is the root cause's smallest."""
    name = (cause.get("smallest") or {}).get("check")
    return next((c for c in kernel.get("checks") or []
                 if c.get("verdict") == Verdict.COUNTEREXAMPLE and check_name(c) == name), None)


def undecided_groups(kernel: dict) -> Dict[Tuple[str, str], List[dict]]:
    """The checks left unknown, unsupported or unreachable, grouped by verdict and reason (up
    to its first ';', without the SMT-LIB2 file's note), in the order of the first of each."""
    groups: Dict[Tuple[str, str], List[dict]] = {}
    for c in kernel.get("checks") or []:
        if c.get("verdict") in (Verdict.UNKNOWN, Verdict.UNSUPPORTED, Verdict.UNREACHABLE):
            why = c.get("reason") or "; ".join(c.get("excluded_by") or []) or "no reason given"
            groups.setdefault((c["verdict"], why.split("; ", 1)[0].split(" (obligation written")[0]), []).append(c)
    return groups


def root_causes(kernel: dict) -> List[dict]:
    """The root causes of one kernel's counterexamples (JSON form of a kernel report) and one
    ``host cast`` per argument of ``host_limits``, in triage order (:func:`_triage`: findings
    before host limits, then the smallest memory, then reachable before latent).  Each:
    ``id`` (1, 2, ...), ``kind``, ``title``, ``where`` (``pc``, ``instruction``, ``line`` when
    known, else None), ``boundary`` (layout -> the condition under which it breaks, in shape
    variables where they suffice), ``checks`` (``buffer/layout[ bounds]``), ``smallest`` (the
    smallest counterexample shape among them, with its check and whether it is proven
    minimal), ``reach`` (reachable, latent or routing unknown; ``masked_by``, the routing
    conditions that hide a latent one), ``fix`` (the fix pattern
    that applies, or "") and ``findings`` (the checks' fingerprints, :mod:`addrsim.report.gate`)."""
    groups: Dict[Tuple, List[dict]] = {}
    for c in kernel.get("checks") or []:
        if c.get("verdict") == Verdict.COUNTEREXAMPLE:
            groups.setdefault(_key(c), []).append(c)
    follows = _consequences(groups)
    out = [_cause(key, cs) for key, cs in groups.items()]
    for r, key, cs in zip(out, groups, groups.values()):
        more = follows.get(key, [])
        r["checks"] += [check_name(c) for c in more]
        if more:
            r["consequences"] = [check_name(c) for c in more]
        r["findings"] = [fingerprint(kernel, c) for c in cs + more]
        if r["kind"] == "formula":
            r["fix"] = fix_formula(cs, kernel.get("args"))
    limits: Dict[str, List[dict]] = {}
    for lim in kernel.get("host_limits") or []:
        limits.setdefault(lim["argument"], []).append(lim)
    for arg, lims in limits.items():
        mine = next((r for r in out if r["kind"] == "host cast" and r["title"].endswith(f" {arg}")), None)
        if mine is None:
            mine = _cause(("host cast", arg), [])
            out.append(mine)
        for lim in lims:
            mine["boundary"].setdefault(lim["layout"], lim["boundary"])
            if mine["smallest"] is None or _shape_rank(lim["shape"]) < _shape_rank(mine["smallest"]["shape"]):
                mine["smallest"] = {"check": f"host limit ({lim['layout']})", "shape": lim["shape"], "minimal": True,
                                    "memory_bytes": lim.get("memory_bytes")}
    out.sort(key=_triage)
    for i, r in enumerate(out, 1):
        r["id"] = i
    return out


def _consequences(groups: Dict[Tuple, List[dict]]) -> Dict[Tuple, List[dict]]:
    """Formula root-cause key -> the bounds counterexamples that follow from its wrong offset,
    moved out of ``groups`` (in place): a bounds check whose access reads or stores outside
    the workgroup's own slice (a ``layout`` key) at the same access and the same smallest
    shape as an address counterexample of the same buffer and layout with a formula cause.
    The README kernel's SBHD LSE shortcut reads the slice of batch 0 from batch 1's
    workgroup: one bug, not three root causes (issue 40).  Folded only when every check of
    the layout key has such an address counterexample."""
    formula = {}
    for key, cs in groups.items():
        if key[0] == "formula":
            for c in cs:
                if c.get("property", "address") == "address":
                    formula[(c["buffer"], c["layout"], c["counterexample"].get("access_pc"),
                             tuple(sorted(c["counterexample"]["shape"].items())))] = key
    out: Dict[Tuple, List[dict]] = {}
    for key in [k for k in groups if k[0] == "layout"]:
        homes = [formula.get((c["buffer"], c["layout"], c["counterexample"].get("access_pc"),
                              tuple(sorted(c["counterexample"]["shape"].items()))))
                 if c.get("property") == "bounds" else None for c in groups[key]]
        if homes and all(h is not None for h in homes) and len(set(homes)) == 1:
            out.setdefault(homes[0], []).extend(groups.pop(key))
    return out


REACH_ORDER = ("reachable", "routing unknown", "latent", "host")
"""Reach, the tie-break of triage: what a host entry point launches, then what routing may
hide, then the latent, then the host's own limits."""


def _triage(r: dict) -> Tuple:
    """Sort key of a root cause (issue 40): the kernel's findings before the host's limits,
    then the memory its smallest shape needs (bytes; unknown last: the README kernel's SBHD LSE
    bug at 0.25 MiB before the wraps that need 24-49 GiB tensors), then its reach
    (:data:`REACH_ORDER`), then its first check's order (a stable sort)."""
    mem = (r.get("smallest") or {}).get("memory_bytes")
    reach = REACH_ORDER.index(r["reach"]) if r["reach"] in REACH_ORDER else len(REACH_ORDER)
    return (r["reach"] == "host", mem if isinstance(mem, int) else float("inf"), reach)


def _cause(key: Tuple, checks: List[dict]) -> dict:
    """One root cause from its key and its counterexample checks."""
    kind = key[0]
    best = _least(checks)
    smallest = smallest_of(checks)
    r = {"id": 0, "kind": kind, "title": "", "where": None, "boundary": {}, "checks": [check_name(c) for c in checks],
         "smallest": smallest, "reach": "host", "fix": "", "findings": []}
    site = None
    for c in checks if kind in ("wrap", "host cast") else ():
        w = _site(c)
        site = site or w
        if w is not None:
            r["boundary"].setdefault(c["layout"], w.get("shape_boundary") or w.get("boundary") or "")
    if checks:
        r["reach"] = _reach(checks, key[1] if kind == "wrap" and isinstance(key[1], int) else None)
    if r["reach"] == "latent" and best is not None:
        r["masked_by"] = list((best.get("routing") or {}).get("masked_by") or [])
    _describe(r, key, checks, site)
    return r


def _describe(r: dict, key: Tuple, checks: List[dict], site: Optional[dict]) -> None:
    """Fill ``title``, ``where`` and ``fix`` of the root cause ``r``."""
    kind = key[0]
    if kind == "wrap":
        w = site or {}
        if w.get("pc") is not None:
            r["where"] = {"pc": w["pc"], "instruction": w.get("instruction", ""), "line": w.get("line")}
            what = f"{w.get('width', 32)}-bit signed operand" if w.get("signed") else f"{w.get('width', 32)}-bit"
            r["title"] = f"{what} wrap at {w['pc']:#x}: {w.get('instruction', '')}"
        elif site is None:
            r["title"] = ("a wrap that no single operation explains (proved over the integers, refuted in "
                          "hardware arithmetic; the wrap sites were not located)")
        else:
            r["title"] = (f"{w.get('width', 32)}-bit wrap of a value built outside any one instruction "
                          f"(a merged path or a replaced division idiom): {w.get('formula', '')}")
        r["fix"] = _wrap_fix(w.get("instruction", ""))
    elif kind == "host cast":
        r["title"] = f"the host's u32 cast of kernel argument {key[1]}"
        r["fix"] = ("a host limit, not the kernel's: the host must refuse or reroute shapes past the boundary "
                    "(or pass the argument in 64 bits)")
    elif kind == "formula":
        diff = _factored(key[2])
        r["title"] = f"offset wrong over the integers too ({key[1]}): extracted - expected = {diff or '?'}"
        if diff:
            r["boundary"] = {key[1]: formula_boundary(key[2], grid_ranges(checks[0])) or f"{diff} != 0"}
        edited = sorted({n for c in checks for n in c.get("edited_lines") or ()})
        if edited:           # an edited listing: the user's lines in the address slice, not the access
            r["where"] = {"pc": None, "instruction": "", "line": edited[0], "edited_lines": edited}
        r["fix"] = fix_formula(checks, None)
    elif kind == "base":
        why = key[3].split(": ", 1)[-1]
        r["title"] = f"wrong base pointer: {why}"
        r["where"] = _access_where(key[1], checks)
        r["boundary"] = {c["layout"]: "every shape (the base does not depend on the shape)" for c in checks}
        r["fix"] = (f"build {key[2]}'s V# base from its own pointer argument (both words of the 64-bit pointer, "
                    f"s_add_u32/s_addc_u32 on the same pair)")
    elif kind == "layout":
        what = {"outside": "stores outside the workgroup's own slice", "same": "stores one element twice",
                "reads outside": "reads outside the workgroup's own slice and the padded rows of its tile",
                "never stored": "leaves rows it owns unwritten"}.get(key[2], "breaks its tile")
        r["title"] = f"one workgroup's {key[1]} {what}" + ("" if all(c.get("property") == "bounds" for c in checks) else
                                                           " (the same in every workgroup: the relative check cannot see it)")
        if key[3]:
            r["where"] = _access_where(key[3], checks)
        r["boundary"] = {c["layout"]: ("the shape shown (a solver counterexample of the bounds check)"
                                       if c.get("property") == "bounds" else
                                       "every shape run (the fault is in the lane, wave or row terms)") for c in checks}
        r["fix"] = (f"the {key[1]} address's lane, wave and row terms: each lane of each wave must store its own "
                    f"elements of the tile (the reason names the lanes and the row)")
    elif kind == "loop":
        r["title"] = f"a later iteration of loop {key[1]} steps by an amount that depends on batch_id or head_id"
    elif kind == "bounds":
        what = "inside the V#'s num_records but outside the allocation" if key[1] == "allocation" else \
            "inside the allocation but outside the V#'s num_records"
        r["title"] = f"accesses {what} ({key[2]})"
    else:
        r["title"] = f"counterexample of undecided cause ({', '.join(r['checks'])})"


def _access_where(pc: int, checks: List[dict]) -> dict:
    """``where`` of a root cause located at an access (its listing line from the first check)."""
    line = checks[0]["counterexample"].get("access_line") if checks else None
    return {"pc": pc, "instruction": "", "line": line}


def grid_ranges(check: dict) -> Dict[str, str]:
    """Grid id -> the exclusive upper bound of its range (``head_id`` -> ``nhead_q``), from the
    ``grid`` layer of a check's ``domain`` (assumptions ``ID < EXPR``; every id starts at 0)."""
    out = {}
    for a in (check.get("domain") or {}).get("assumptions") or []:
        m = re.fullmatch(r"([A-Za-z_]\w*) < (.+)", a.get("text", "")) if a.get("layer") == "grid" else None
        if m:
            out[m.group(1)] = m.group(2)
    return out


def formula_boundary(text: str, ranges: Dict[str, str]) -> Optional[str]:
    """The shapes at which ``text`` (``extracted - expected``, a polynomial in shape variables
    and grid ids) is nonzero for some workgroup, in shape variables only: the conjunction over
    its factors of "this factor is nonzero somewhere".  A factor that is one shape variable
    (at least 1) is dropped, a grid id ``x < U`` is nonzero somewhere iff ``U >= 2``, a
    factor ``v - c`` of one shape variable reads ``v != c``, any other shape factor ``f != 0``.
    None when a factor mixes grid ids with anything else, or names an id without a range, or
    when the text is not a formula of shape variables and grid ids: then no shape-only form
    is claimed.  E.g. ``-4*batch_id*nhead_q*seqlen_q + 4*batch_id*nhead_q`` with
    ``batch_id < batch`` gives ``batch >= 2 and seqlen_q != 1``."""
    e = read_formula(text, set(SHAPE_ORDER) | set(ranges))
    if e is None or e == 0:
        return None
    import sympy
    try:
        _, factors = sympy.factor_list(e)
    except Exception:   # display only
        return None
    ids, shapes = [], []
    for f, _ in factors:
        names = {str(s) for s in f.free_symbols}
        if names and names <= set(ranges):
            if not f.is_Symbol:
                return None
            top = ranges[str(f)]
            if top.isdigit():
                if int(top) < 2:
                    return None
                continue
            ids.append(f"{top} >= 2")
        elif names & set(ranges):
            return None
        elif not f.is_Symbol:
            shapes.append(_nonzero(f, names))
    return " and ".join(dict.fromkeys(ids + shapes)) or "every shape"


def _nonzero(f, names) -> str:
    """``f != 0`` for a factor of shape variables (each at least 1): ``v >= 2`` for ``v - 1``,
    ``v != c`` for ``v - c``."""
    import sympy
    if len(names) == 1:
        v = next(iter(names))
        c = -(f - sympy.Symbol(v))
        if c.is_Integer:
            return f"{v} >= 2" if c == 1 else f"{v} != {c}"
    return f"{f} != 0"


def read_formula(text: str, names=SAFE_NAMES):
    """The sympy expression of ``text`` (a formula of the reports, sympy's own printing), or
    None when it holds characters outside a formula's or a name outside ``names`` and
    floor/Mod/ceiling: sympy's parser evaluates, so nothing else is ever given to it."""
    if not text or len(text) > 4000 or not re.fullmatch(r"[A-Za-z0-9_ +\-*/().,]*", text):
        return None
    if not set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text)) <= set(names) | {"floor", "Mod", "ceiling"}:
        return None
    try:
        import sympy
        return sympy.sympify(text)
    except Exception:   # display only
        return None


def _factored(text: str) -> str:
    """``text`` (sympy's printing of an integer expression) factored, for display; the text
    itself when :func:`read_formula` does not read it (floors of bit operations, long formulas)."""
    e = read_formula(text) if len(text or "") <= 400 else None
    if e is None:
        return text
    try:
        import sympy
        return str(sympy.factor(e))
    except Exception:   # display only
        return text


def _wrap_fix(instruction: str) -> str:
    """The fix of a 32-bit wrap by the instruction that wraps: its 64-bit form with this
    instruction's own operands (:func:`wide_form`), then where the result goes
    (examples/q_batch_u64.s, examples/q_slice_u64.s).  Opcode facts: AMD CDNA3 ISA guide,
    sections 4 (SALU: s_mul_hi_u32, s_addc_u32, s_lshl_b64) and 7 (VALU: v_mad_u64_u32,
    v_addc_co_u32, v_lshlrev_b64)."""
    op = instruction.split(" ", 1)[0]
    wide = wide_form(instruction)
    form = f"{wide}; " if wide else ""
    if "_i24" in op or "_u24" in op:
        return (f"{op} reads only bits 23:0 of each operand ({'signed' if '_i24' in op else 'unsigned'}): "
                f"{form}or keep the operand below 2**23 (a host limit on the stride)")
    if op.startswith("s_mul"):
        return (f"keep the product in 64 bits: {form}then s_add_u32/s_addc_u32 of the pair into the V# base "
                "(examples/q_batch_u64.s, examples/q_slice_u64.s)")
    if op.startswith("s_add") or op.startswith("s_sub") or op.startswith("s_lshl"):
        return f"carry into the high word: {form}on the 64-bit base, not a 32-bit sum (examples/q_slice_u64.s)"
    if op.startswith("v_"):
        return (f"{form}or move the (batch, head) slice offset into the 64-bit V# base (s_add_u32/s_addc_u32), "
                "so the 32-bit VGPR offset holds only the offset inside the slice")
    return "compute the offset in 64 bits (examples/q_slice_u64.s)"


def _operands(instruction: str) -> List[str]:
    parts = instruction.split(None, 1)
    return [o.strip() for o in parts[1].split(",")] if len(parts) > 1 else []


def _pair(reg: str) -> str:
    """``s60`` -> ``s[60:61]`` (the register and the next one); anything else (a pair already,
    a constant) unchanged."""
    m = re.fullmatch(r"([sv])(\d+)", reg)
    return f"{m.group(1)}[{m.group(2)}:{int(m.group(2)) + 1}]" if m else reg


def wide_form(instruction: str) -> str:
    """The 64-bit form of a wrapping 32-bit instruction, written with its operands (``sHI``,
    ``vHI``: a free register for the high word; ``D[n:n+1]``: the destination widened to a
    pair whose high register must be free).  "" for an instruction without one here.

    - ``s_mul_i32 D, A, B``: add ``s_mul_hi_u32 sHI, A, B`` (the high 32 bits of the unsigned
      product), before it when ``D`` is ``A`` or ``B``.
    - ``s_add_u32 D, A, B``: add ``s_addc_u32 sHI, A_hi, B_hi`` (SCC carries).
    - ``s_lshl_b32 D, A, k``: ``s_lshl_b64 D[..], A[..], k``.
    - ``v_mul_lo_u32``, ``v_mul_u32_u24``, ``v_mad_u32_u24 D, A, B[, C]``: ``v_mad_u64_u32 D[..], s[..], A, B, C`` (0 without C).
    - ``v_add_u32``, ``v_add_co_u32 D, A, B``: ``v_add_co_u32 D, vcc, A, B`` then ``v_addc_co_u32 vHI, vcc, A_hi, B_hi, vcc``.
    - ``v_lshlrev_b32 D, k, A``: ``v_lshlrev_b64 D[..], k, A[..]``."""
    op = re.sub(r"_e(32|64)$", "", instruction.split(" ", 1)[0])
    ops = _operands(instruction)
    if len(ops) < 3:
        return ""
    d, a, b = ops[0], ops[1], ops[2]
    if op in ("s_mul_i32", "s_mul_u32"):
        hi = f"s_mul_hi_u32 sHI, {a}, {b}"
        if d in (a, b):     # the low product overwrites an operand: the high half first
            return f"{hi} before {instruction} (which overwrites {d})"
        return f"{instruction} then {hi}"
    if op in ("s_add_u32", "s_add_i32"):
        return f"s_add_u32 {d}, {a}, {b} then s_addc_u32 sHI, (high word of {a}), (high word of {b}, or 0)"
    if op in ("s_lshl_b32",):
        return f"s_lshl_b64 {_pair(d)}, {_pair(a)}, {b} (the high word of {_pair(a)} zero)"
    if op in ("v_mul_lo_u32", "v_mul_u32_u24", "v_mad_u32_u24", "v_mul_i32_i24", "v_mad_i32_i24"):
        c = ops[3] if len(ops) > 3 and op.startswith("v_mad") else "0"
        mad = "v_mad_i64_i32" if "_i" in op.split("_", 2)[2] else "v_mad_u64_u32"
        return f"{mad} {_pair(d)}, s[N:N+1], {a}, {b}, {c} (full 32-bit operands, 64-bit result)"
    if op in ("v_add_u32", "v_add_co_u32"):
        srcs = ops[-2:]
        return (f"v_add_co_u32 {d}, vcc, {srcs[0]}, {srcs[1]} then v_addc_co_u32 vHI, vcc, 0, 0, vcc "
                f"(or the operands' high words)")
    if op == "v_lshlrev_b32":
        return f"v_lshlrev_b64 {_pair(d)}, {a}, {_pair(b)} (the high word of {_pair(b)} zero)"
    return ""


def summary_line(kernel: dict, causes: Optional[List[dict]] = None) -> str:
    """One line for a kernel: counterexamples and their root causes, latent ones, then the
    other verdicts and the host limits."""
    causes = root_causes(kernel) if causes is None else causes
    checks = kernel.get("checks") or []
    counts: Dict[str, int] = {}
    for c in checks:
        counts[c["verdict"]] = counts.get(c["verdict"], 0) + 1
    ncex = counts.pop(Verdict.COUNTEREXAMPLE, 0)
    latent = sum(1 for c in checks if c["verdict"] == Verdict.COUNTEREXAMPLE
                 and (c.get("routing") or {}).get("reachable") is False)
    kinds: Dict[str, int] = {}
    for r in causes:
        if r["checks"]:
            kinds[r["kind"]] = kinds.get(r["kind"], 0) + 1
    parts = [f"{ncex} counterexample(s)" + (f" from {sum(kinds.values())} root cause(s) ("
                                              + ", ".join(f"{n} {k}" for k, n in kinds.items()) + ")" if ncex else "")]
    if latent:
        parts.append(f"{latent} of them latent")
    parts += [f"{n} {v}" for v, n in sorted(counts.items())]
    hosts = sum(1 for r in causes if r["kind"] == "host cast")
    if hosts:
        parts.append(f"{hosts} host cast(s)")
    return "; ".join(parts)
