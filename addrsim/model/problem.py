"""One kernel in one layout: the Problem a check is decided over.

Owns :class:`Assumption`, :data:`KERNEL_LAYERS`, :class:`Problem` and :func:`build_problem`:
shape symbols (64-bit), the value of every kernel argument in terms of the shape (the host
contract), the domain's layers, each assumption with its source (bounds, grid, memory,
traits, exact; routing per host entry point), and the expected byte offsets.  May import
addrsim.ir, addrsim.backends, addrsim.loader and the other model modules.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Tuple


from addrsim.ir import expr as X
from addrsim.model import parse as modelexpr
from addrsim.loader.codeobj import Kernel
from addrsim.errors import InputError
from addrsim.ir.expr import Const, Expr, Sym
from addrsim.ir.implied import implied_ranges

from addrsim.model.schema import ModelSet, SHAPE_VARS, TENSORS, layout_strides
from addrsim.model.hosts import _pointer_names, choose_contract, choose_family, choose_host, grid_symbols, pointer_args


@dataclass(frozen=True)
class Assumption:
    """One constraint of a check's domain, with the layer it belongs to and where it comes
    from.  Layers: ``bounds`` (shape bounds, the family's fixed sizes, ``--bound``), ``grid``
    (workgroup ids and lane inside the launch), ``memory`` (every tensor fits the device),
    ``traits`` (what the kernel is built for), ``exact`` (a host-computed kernel argument
    holds its exact value: no u32 cast truncates it) and ``routing`` (a host entry point's
    conditions for choosing this kernel; ``entry`` names it)."""

    layer: str
    text: str
    source: str
    expr: Expr = field(compare=False, repr=False)
    entry: str = ""

    def json(self) -> dict:
        out = {"layer": self.layer, "text": self.text, "source": self.source}
        if self.entry:
            out["entry"] = self.entry
        return out


KERNEL_LAYERS = ("bounds", "grid", "memory", "traits", "exact")


@dataclass
class Problem:
    """Models instantiated for one kernel and one layout.

    ``kernargs``: argument name -> value in terms of shape symbols (width 8*size bits);
    ``domain``: 1-bit constraints on the shape, grid ids and lane; ``expected``: buffer name
    -> 64-bit expected byte offset; ``grid``: axis -> grid id symbol (32 bits)."""

    layout: str
    contract: Optional[str]
    family: Optional[str]
    shape: Dict[str, Sym]
    fixed: Dict[str, int]
    bounds: Dict[str, Tuple[int, int]]
    kernargs: Dict[str, Expr]
    domain: List[Expr]
    expected: Dict[str, Expr]
    expected_text: Dict[str, str]
    grid: Dict[str, Sym]
    lane: Sym
    names: Dict[str, Expr]
    notes: List[str]
    mode: str = "batch"
    memory: Optional[Expr] = None       # bytes every tensor of the family takes (64-bit), None: no model
    memory_limit: int = 0               # device memory in bytes (0: no limit applied)
    arrays: Dict[str, Sym] = field(default_factory=dict)        # pointer argument -> array symbol
    array_specs: Dict[str, Dict[str, Expr]] = field(default_factory=dict)  # array -> first/last/step_max/count
    extent: Dict[str, Expr] = field(default_factory=dict)   # buffer -> bytes of its allocation (64-bit)
    slices: Dict[str, Expr] = field(default_factory=dict)   # buffer -> bytes of one (batch, head) slice
    reach: Dict[str, Expr] = field(default_factory=dict)    # buffer -> bytes from its slice base an access may touch
    host: Optional[str] = None          # the host model whose contract and routing apply
    host_why: str = ""                  # how the host was chosen
    assumptions: List[Assumption] = field(default_factory=list)   # every layer, routing of every entry point
    entry_points: List[str] = field(default_factory=list)         # the host's entry points that launch this family
    routed: Optional[str] = None        # the entry point whose routing ``domain`` includes (None: none)
    exact: Dict[str, Tuple[Expr, int]] = field(default_factory=dict)  # argument -> (exact 64-bit value, width in bits)
    exact_unused: set = field(default_factory=set)   # arguments whose exactness is not in ``domain``
    declared: Dict[str, Tuple[int, int]] = field(default_factory=dict)  # bounds before the domain narrows them
    grid_count: Dict[str, Expr] = field(default_factory=dict)   # grid id name -> workgroups on its axis (64-bit)
    tiles: Dict[str, Dict[str, Expr]] = field(default_factory=dict)   # buffer -> what one workgroup stores (TILE_KEYS)
    memory_weak: Optional[Expr] = None  # the memory limit at the twin families' least parameters (None: no weaker one)
    _weak_memo: Optional[tuple] = field(default=None, repr=False, compare=False)   # (domain ids, weakened())

    def shape_of(self, model: Dict[str, int]) -> Dict[str, int]:
        """The shape of a solver model as reported: every shape variable (its lower bound
        where the model has none), the family's fixed sizes, and the group-mode totals only in
        group mode."""
        shape = {v: model.get(v, self.bounds[v][0]) for v in SHAPE_VARS}
        shape.update(self.fixed)
        if self.mode != "group":
            shape = {k: v for k, v in shape.items() if k not in ("total_q", "total_k")}
        return shape

    def layers(self) -> List[str]:
        """The layers ``domain`` is built from, in order."""
        out = [x for x in KERNEL_LAYERS if any(a.layer == x for a in self.assumptions)]
        return out + ([f"routing ({self.routed})"] if self.routed is not None else [])

    def in_domain(self, a: Assumption) -> bool:
        if a.layer == "exact" and a.text.split(" = ", 1)[0] in self.exact_unused:
            return False
        return a.layer in KERNEL_LAYERS or (a.layer == "routing" and a.entry == self.routed)

    def restrict_exact(self, used) -> None:
        """Keep argument exactness only for the kernel arguments in ``used`` (those the checked
        accesses depend on): the truncation of an argument the address never reads must not
        shrink the domain (it would hide the address's bugs at those shapes)."""
        self.exact_unused = {n for n in self.exact if n not in used}
        self.domain = [a.expr for a in self.assumptions if self.in_domain(a)]
        self.narrow()

    def narrow(self) -> None:
        """``bounds`` as ``domain`` implies them (:func:`addrsim.ir.implied.implied_ranges`)
        from the bounds declared by the layers (``declared``): routing's
        ``batch_stride_q >= stride_q`` is ``batch = 1`` in SBHD.  Recomputed whenever the
        domain changes, so a bound never outlives the condition it came from.  A domain the
        narrowing finds empty keeps its declared bounds: the solvers show it empty and name
        the assumptions that exclude every shape (verdict unreachable)."""
        self.bounds = self._narrowed(self.domain)

    def _narrowed(self, domain: List[Expr]) -> Dict[str, Tuple[int, int]]:
        r = implied_ranges(domain, {v: self.declared[v] for v in SHAPE_VARS if v in self.declared})
        empty = any(lo > hi for lo, hi in r.values())
        return dict(self.declared, **({} if empty else {v: r[v] for v in r if v not in self.fixed}))

    def weakened(self) -> Optional[Tuple[Expr, Expr, Dict[str, Tuple[int, int]]]]:
        """(the memory layer's condition in ``domain``, ``memory_weak``, the bounds the domain
        implies with the one replaced by the other); None when there is no weaker condition.
        ``memory_weak`` is the same limit with the tensors sized at the family's twins'
        smallest parameters (the a16 twin's dQ accumulator: :func:`_twin_minima`), so every
        shape of ``domain`` is in the weakened one: a proof there is a proof here, and a
        lexicographically least counterexample there that lies in ``domain`` is the least here
        (:func:`addrsim.prove.query.weakened_query`)."""
        ids = tuple(map(id, self.domain))
        if self._weak_memo is None or self._weak_memo[0] != ids:
            fits = next((a.expr for a in self.assumptions if a.layer == "memory"), None)
            out = None
            if self.memory_weak is not None and fits is not None and any(c is fits for c in self.domain):
                out = fits, self.memory_weak, self._narrowed([self.memory_weak if c is fits else c
                                                              for c in self.domain])
            self._weak_memo = (ids, out)
        return self._weak_memo[1]

    def implied(self) -> Dict[str, Tuple[int, int]]:
        """The shape ranges the domain narrows (variable -> (lo, hi)), for the report."""
        return {v: b for v, b in self.bounds.items() if self.declared.get(v, b) != b}

    def routing(self, entry: str) -> List[Assumption]:
        return [a for a in self.assumptions if a.layer == "routing" and a.entry == entry]


@dataclass
class _Build:
    """What the stages of :func:`build_problem` share: the kernel's family, host and contract,
    the names an expression may use (shape symbols, constants, strides, arguments), the
    bounds, and the assumptions gathered so far."""

    ms: ModelSet
    kernel: Kernel
    layout: str
    src: str
    fam: Optional[dict]
    fname: Optional[str]
    mode: str
    names: Dict[str, Expr]
    bounds: Dict[str, Tuple[int, int]]
    notes: List[str] = field(default_factory=list)
    fixed: Dict[str, int] = field(default_factory=dict)
    masked: bool = False
    asm: List[Assumption] = field(default_factory=list)
    grid_count: Dict[str, Expr] = field(default_factory=dict)   # grid id name -> its axis's workgroups

    def parse(self, text, what, exact: bool = False) -> Expr:
        """``text`` parsed over the names (``exact``: u32() read as the value before the host's
        cast).  Raises InputError naming the model file and key ``what``."""
        names = dict(self.names, **{modelexpr.EXACT_CASTS: Const(1, 1)}) if exact else self.names
        try:
            return modelexpr.parse(text, names)
        except modelexpr.ModelExprError as e:
            raise InputError(self.src, f"malformed model file: {what}: {e}") from None

    def parse_or_skip(self, text, where, what) -> Optional[Expr]:
        """``text`` parsed, or None when it needs a stride this layout does not define (a
        ModelExprError whose unknown name is a stride); other errors are InputError."""
        try:
            return modelexpr.parse(str(text), self.names)
        except modelexpr.ModelExprError as e:
            if e.unknown in STRIDE_NAMES:
                return None
            raise InputError(where, f"malformed model file: {what}: {e}") from None

    def const(self, text, what) -> int:
        e = self.parse(str(text), what)
        if not isinstance(e, Const):
            raise InputError(self.src, f"malformed model file: {what} is not a constant")
        return e.value

    def add(self, layer, e, text, source, entry=""):
        self.asm.append(Assumption(layer, text, source, e, entry))

    @property
    def fsrc(self) -> str:
        return f"{self.src}: family {self.fname}" if self.fam else self.src

    @property
    def msrc(self) -> str:
        return self.ms.origin.get("buffers.lse", self.src)


def build_problem(ms: ModelSet, kernel: Kernel, layout: str, lane: Sym,
                  bound_overrides: Dict[str, Tuple[int, int]] = None, arch: Optional[str] = None,
                  memory_gib: Optional[float] = None, routed: Optional[str] = None) -> Problem:
    """Instantiate the models for ``kernel`` in ``layout``.  ``memory_gib`` overrides the
    device memory of ``arch`` (GiB) that bounds the shape domain: the sum of the model's
    tensor sizes (bytes) must fit.  ``routed``: the host entry point whose routing
    conditions join the domain (None: the kernel's own domain, every layer but routing).
    Every constraint of every layer is kept in ``assumptions`` with its source.
    Raises InputError on an unknown layout or host, an invalid expression in a model file,
    a name no layout, contract or shape defines, or bounds under which the memory sum could
    pass 2**64."""
    fam = choose_family(ms, kernel, arch)
    host, host_why = choose_host(ms, kernel)
    con = choose_contract(ms, kernel, host)
    src = ms.files[-1] if ms.files else "<models>"
    shape = {v: Sym(v, 64, "shape") for v in SHAPE_VARS}
    b = _Build(ms, kernel, layout, ms.origin.get(f"family {fam.get('name')}", src) if fam else src, fam,
               (fam or {}).get("name"), str((fam or {}).get("mode", "batch")), dict(shape),
               {v: ms.shape.get(v, (1, 1 << 20)) for v in SHAPE_VARS})
    grid = grid_symbols(ms)
    _family_names(b)
    _constants_and_bounds(b, bound_overrides or {})
    arrays = {a: Sym(a, 48, "array") for a in ms.arrays}          # group mode sequence starts
    b.names.update({a + "[]": s_ for a, s_ in arrays.items()})
    _layout_names(b, grid)
    kernargs, exact = _kernel_args(b, con)
    array_args = _array_args(b, con, arrays)
    array_specs = {a: {k: b.parse(str(spec[k]), f"arrays.{a}.{k}") for k in ("first", "last", "count", "step_max",
                                                                                "step_min") if k in spec}
                   for a, spec in ms.arrays.items()} if b.mode == "group" else {}
    _kernel_layers(b, shape, grid, lane, bound_overrides or {})
    memory, limit, weak = _memory_layer(b, arch, memory_gib)
    _exact_layer(b, con, exact)
    entries = _routing(b, host, routed)
    dom = [a.expr for a in b.asm if a.layer in KERNEL_LAYERS or (a.layer == "routing" and a.entry == routed)]
    expected, etext, extent, slices, reach = _buffers(b)
    tiles = _tiles(b)
    prob = Problem(layout, (con or {}).get("name"), b.fname, shape, b.fixed, dict(b.bounds), kernargs, dom,
                   expected, etext, grid, lane, b.names, b.notes, b.mode, memory, limit, array_args, array_specs,
                   extent, slices, reach, (host or {}).get("name"), host_why, b.asm, entries, routed,
                   {k: (e, w) for k, (e, w, _) in exact.items()}, declared=dict(b.bounds),
                   grid_count=dict(b.grid_count), tiles=tiles, memory_weak=weak)
    prob.narrow()
    return prob


def _family_names(b: _Build) -> None:
    """The constants the family's regex captures from the symbol (head dims, tile sizes) and
    whether the kernel is masked (causal)."""
    if not b.fam:
        b.notes.append("no kernel family in the models matches this kernel: shape preconditions unknown")
        return
    m = re.search(b.fam["match"], b.kernel.symbol)
    for k, v in m.groupdict().items():
        if v and v.isdigit():
            b.names[k] = Const(int(v), 64)
        elif k in ("mask", "causal") and v:
            b.masked = True


PARAM_DEFAULTS = {"elem": 2, "ts_kv": 1, "ts_qo": 1, "dpad": 0, "acc": 0}
"""A family's params where it gives none: element bytes, key and query tile rows, dQ
accumulator pitch and bytes per element (0: dQ written directly)."""


def _constants_and_bounds(b: _Build, overrides) -> None:
    """The family's params (element size, tile sizes), fixed sizes and bounds, then --bound."""
    fam, fname = b.fam or {}, b.fname
    consts = dict(PARAM_DEFAULTS)
    for k, v in (fam.get("params") or {}).items():
        consts[k] = b.const(v, f"family {fname} params.{k}")
    b.names.update({k: Const(v, 64) for k, v in consts.items()})
    for k, v in (fam.get("fixed") or {}).items():
        b.fixed[k] = b.const(v, f"family {fname} fixed.{k}")
    for k, v in (fam.get("bounds") or {}).items():
        if k not in b.bounds:
            raise InputError(b.src, f"malformed model file: family {fname} bounds.{k}: unknown shape variable")
        lo = b.const(v.get("min", b.bounds[k][0]), f"family {fname} bounds.{k}.min")
        hi = b.const(v.get("max", b.bounds[k][1]), f"family {fname} bounds.{k}.max")
        b.bounds[k] = (max(b.bounds[k][0], lo), min(b.bounds[k][1], hi))
    for k, v in b.fixed.items():
        b.bounds[k] = (v, v)
        b.names[k] = Const(v, 64)
    for k, v in overrides.items():
        if k not in b.fixed:
            b.bounds[k] = v


def _layout_names(b: _Build, grid) -> None:
    """The layout's element strides as names (batch_stride_q, nhead_stride_q, stride_q, ...),
    the grid ids, and the models' derived names (those that need a stride this layout lacks
    are left out)."""
    lay = layout_strides(b.ms, b.layout, b.src, b.mode)
    for t in TENSORS:
        st = lay.get(t, {})
        if t == "o" and "o" not in lay:          # O has dO's shape: dO's strides unless the layout says
            st = lay.get("do", {})
            if "O" in b.kernel.arg_names:
                b.notes.append(f"layout {b.layout} gives O no strides of its own: O takes dO's")
        for key, prefix in (("batch", "batch_stride_"), ("head", "nhead_stride_"), ("seq", "stride_")):
            if key in st:
                b.names[prefix + t] = b.parse(str(st[key]), f"layout {b.layout} {t}.{key}")
            elif b.mode == "group" and key == "batch":
                b.names[prefix + t] = Const(0, 64)
    lse = lay.get("lse", {})
    if "batch" in lse:
        b.names["batch_stride_lsed"] = b.parse(str(lse["batch"]), f"layout {b.layout} lse.batch")
    if "head" in lse:
        b.names["nhead_stride_lsed"] = b.parse(str(lse["head"]), f"layout {b.layout} lse.head")
    for s_ in grid.values():
        b.names[s_.name] = X.zext(s_, 64)
    for k, v in b.ms.derived.items():
        e = b.parse_or_skip(v, b.src, f"derived.{k}")
        if e is not None:
            b.names[k] = e


def _kernel_args(b: _Build, con):
    """Each kernel argument's value (the contract, with the family's overrides; pointers as
    48-bit symbols; others free) and, for those the host computes in fewer than 64 bits, its
    exact value: name -> (exact 64-bit value, width, text without the u32 cast)."""
    kernargs: Dict[str, Expr] = {}
    exact: Dict[str, Tuple[Expr, int, str]] = {}
    ptr_args = pointer_args(b.ms, b.kernel, con)
    cargs = dict((con or {}).get("args") or {})
    cargs.update((b.fam or {}).get("args") or {})
    if con is None:
        b.notes.append("no argument contract matches this kernel's argument names: arguments are free")
    for a in b.kernel.args:
        if a.name == "pad" or a.name in kernargs:
            continue
        w = 8 * a.size
        if a.name in ptr_args:
            kernargs[a.name] = X.zext(Sym(a.name, 48, "ptr"), 64)
        elif a.value_kind in ("global_buffer", "dynamic_shared_pointer") or (a.size == 8 and a.name in _pointer_names(b.ms)):
            kernargs[a.name] = X.zext(Sym(a.name, 48, "ptr"), 64) if w == 64 else Sym(a.name, w, "ptr")
        elif a.name in cargs:
            what = f"contract {con.get('name') if con else '?'} args.{a.name}"
            e = b.parse(str(cargs[a.name]), what)
            kernargs[a.name] = X.extract(e, w - 1, 0) if w <= 64 else X.zext(e, w)
            if w < 64:
                ex_ = b.parse(str(cargs[a.name]), what, exact=True)
                if _may_exceed(ex_, w, b.bounds):
                    exact[a.name] = (ex_, w, _strip_u32(str(cargs[a.name])))
        else:
            kernargs[a.name] = Sym(a.name, w, "arg")
    return kernargs, exact


def _array_args(b: _Build, con, arrays) -> Dict[str, Sym]:
    """The contract's sequence-start arrays (pointer argument -> array symbol) that this
    kernel takes: a contract shared by kernels of several argument lists (the examples'
    group contract names ptr_seqstart_k, which only the bottom-right listings take) must not
    give a kernel an array it never reads, or the replay's reference workgroup finds no
    pointer for it and keeps the unshifted sequence starts (examples/group_lse_other_len.s:
    its counterexample did not replay, 2026-12-07).  Raises InputError for an array the
    model file does not declare."""
    out: Dict[str, Sym] = {}
    taken = {a.name for a in b.kernel.args}
    for ptr, arr in ((con or {}).get("arrays") or {}).items():
        if arr not in arrays:
            raise InputError(b.src, f"malformed model file: contract {con.get('name')} arrays.{ptr}: unknown array {arr!r}")
        if ptr in taken:
            out[ptr] = arrays[arr]
    return out


def _kernel_layers(b: _Build, shape, grid, lane, overrides) -> None:
    """The bounds, grid and traits layers: shape bounds, grid id ranges (masked launches halve
    the x grid, G2:415-419), group-mode totals, the family's traits, the lane."""
    fam = b.fam or {}
    for v in SHAPE_VARS:
        lo, hi = b.bounds[v]
        why = ("--bound" if v in overrides and v not in b.fixed else
               b.fsrc if v in b.fixed or v in (fam.get("bounds") or {}) else f"{b.msrc}: shape")
        b.add("bounds", X.band(X.ule(Const(lo, 64), shape[v]), X.ule(shape[v], Const(hi, 64))),
              f"{v} = {lo}" if lo == hi else f"{lo} <= {v} <= {hi}", why)
        if v in overrides and v in b.fixed:
            # a --bound on a size the family fixes still constrains: excluding the fixed value
            # leaves no shape (unreachable, with this bound in the core), never a silent no-op
            lo2, hi2 = overrides[v]
            b.add("bounds", X.band(X.ule(Const(lo2, 64), shape[v]), X.ule(shape[v], Const(hi2, 64))),
                  f"{lo2} <= {v} <= {hi2}", "--bound")
    gcount = dict(fam.get("grid") or {})
    for ax, s_ in grid.items():
        spec = b.ms.grid.get(ax)
        if not spec:
            b.add("grid", X.eq(s_, Const(0, 32)), f"{s_.name} = 0", f"{b.msrc}: grid")
            continue
        ctext = str(gcount.get(ax, spec["count"]))
        cnt = b.parse(ctext, f"grid.{ax}.count")
        if ax == "x" and b.masked and fam.get("grid_masked"):
            cnt = X.udiv(X.add(cnt, Const(1, 64)), Const(2, 64))
            ctext = f"({ctext} + 1) / 2"
        b.add("grid", X.ult(X.zext(s_, 64), cnt), f"{s_.name} < {ctext}", f"{b.msrc}: grid.{ax}")
        b.grid_count[s_.name] = cnt
    if b.mode == "group":
        b.add("bounds", X.band(X.ule(shape["seqlen_q"], shape["total_q"]), X.ule(shape["seqlen_k"], shape["total_k"])),
              "seqlen_q <= total_q and seqlen_k <= total_k", f"{b.msrc}: group mode")
        _telescoped(b)
    for key in ("traits", "preconditions"):
        for pre in (fam.get(key) or []):
            b.add("traits", b.parse(str(pre), f"family {b.fname} {key}"), str(pre), b.fsrc)
    wg = b.kernel.reqd_workgroup_size or (256, 1, 1)
    b.add("grid", X.ult(lane, Const(wg[0], 32)), f"{lane.name} < {wg[0]}", "metadata .reqd_workgroup_size")


def _telescoped(b: _Build) -> None:
    """The sum of a sequence-start array's steps, as a bound: ``count - 1`` steps of at most
    ``step_max`` (at least ``step_min``) lead from ``first`` to ``last``, so
    ``(count-1)*step_min <= last - first <= (count-1)*step_max`` (for the model's seqstart_q:
    ``batch <= total_q <= batch*seqlen_q``).  Implied by the array facts every query carries
    (:func:`addrsim.prove.query.array_facts`), so it adds no assumption; but those facts bind
    only the entries a query reads, so without it total_q ranged to 2**24 in a box of batch 1,
    and a head offset ``head_id*total_q*hdim*2`` could not be bounded by intervals (gfx942
    causal_br a32 pssk_group dO BHSD: minimisation spent its budget proving nhead_q 1..5 one
    value at a time).  Source: the model's ``arrays`` (first, last, count, step_max, step_min)."""
    for name, spec in b.ms.arrays.items():
        if not {"first", "last", "count"} <= set(spec):
            continue
        span = X.sub(b.parse(str(spec["last"]), f"arrays.{name}.last"), b.parse(str(spec["first"]), f"arrays.{name}.first"))
        steps = X.sub(b.parse(str(spec["count"]), f"arrays.{name}.count"), Const(1, 64))
        for key, cmp_ in (("step_max", lambda t: X.ule(span, t)), ("step_min", lambda t: X.ule(t, span))):
            if key in spec:
                step = b.parse(str(spec[key]), f"arrays.{name}.{key}")
                span_t = str(spec["last"]) if str(spec["first"]) == "0" else f"{spec['last']} - {spec['first']}"
                steps_t = str(spec["count"])
                steps_t = steps_t[:-4] if steps_t.endswith(" + 1") else f"({steps_t} - 1)"
                text = (f"{span_t} <= {steps_t} * {spec[key]}" if key == "step_max" else
                        f"{span_t} >= {steps_t} * {spec[key]}")
                b.add("bounds", cmp_(X.mul(steps, step)), text, f"{b.msrc}: arrays.{name} (implied)")


def _memory_layer(b: _Build, arch, memory_gib):
    """(bytes every tensor of the family takes, device memory in bytes or 0, the weakened
    memory condition or None) and the memory layer.  The weakened condition is the same
    limit with the tensors sized at the family's twins' smallest parameters
    (:func:`_twin_minima`, :func:`_at_minima`: the a32 kernel's with the a16 kernel's
    accumulator): implied by the layer's, and None when it is the same expression.  Raises
    InputError when the sum could pass 2**63 under the bounds."""
    mem = b.ms.memory
    tens = dict(mem.get("group_tensors" if b.mode == "group" else "tensors") or {})
    tens.update((b.fam or {}).get("memory") or {})
    terms = [(t, b.parse(str(e), f"memory.{t}")) for t, e in tens.items() if e is not None]
    if not terms:
        return None, 0, None
    memory = _sum([e for _, e in terms])
    from addrsim.backends.ideal import ideal_eval
    top = ideal_eval(memory, {v: b.bounds[v][1] for v in SHAPE_VARS}, set())
    if top >= 1 << 63:
        raise InputError(b.src, f"the memory model's tensor sizes can pass 2**63 bytes under the shape bounds "
                                f"(up to {top}); lower the bounds")
    gib = memory_gib if memory_gib is not None else (mem.get("devices") or {}).get(arch or "")
    if not gib:
        b.notes.append(f"no device memory known for {arch}: shapes are not limited by memory")
        return memory, 0, None
    limit = int(gib * (1 << 30))
    fits = X.ule(memory, Const(limit, 64))
    b.add("memory", fits, f"every tensor of the family fits in {gib:g} GiB",
          "--memory-gib" if memory_gib is not None else f"{b.msrc}: memory.devices.{arch}")
    low = _twin_minima(b)
    kept = [_at_minima(b, t, str(tens[t]), e, low) for t, e in terms]
    weak = X.ule(_sum(kept), Const(limit, 64))
    return memory, limit, (weak if X.digest(weak) != X.digest(fits) else None)


def _sum(terms: List[Expr]) -> Expr:
    out = terms[0]
    for e in terms[1:]:
        out = X.add(out, e)
    return out


TWIN_KEYS = ("mode", "arch", "traits", "preconditions", "bounds", "fixed", "grid", "grid_masked")
"""What twin families share (:func:`_twin_minima`): they differ only in their parameters,
arguments, buffers and match (gfx942 hd128 a16 and a32; gfx950 native a16 and a32)."""


def _twin_minima(b: _Build) -> Dict[str, int]:
    """Parameter -> the smallest integer value it takes among the family's twins (the
    families with the same :data:`TWIN_KEYS`, itself included; a parameter a family leaves
    out takes its default), where that is below the family's own: ``acc``, the dQ
    accumulator's bytes per element, is 0 for the gfx942 a16 kernels (dQ written directly)
    and 4 for the a32 ones, 2 and 4 on gfx950.  Parameters that are not integer literals in
    every twin are left alone."""
    fam = b.fam
    if not fam:
        return {}
    twins = [f for f in b.ms.families if all(f.get(k) == fam.get(k) for k in TWIN_KEYS)]
    low: Dict[str, int] = {}
    for k, own in dict(PARAM_DEFAULTS, **(fam.get("params") or {})).items():
        vals = [dict(PARAM_DEFAULTS, **(f.get("params") or {})).get(k) for f in twins]
        if all(isinstance(v, int) and not isinstance(v, bool) for v in vals + [own]) and min(vals) < own:
            low[k] = min(vals)
    return low


def _at_minima(b: _Build, tensor: str, text: str, size: Expr, low: Dict[str, int]) -> Expr:
    """The size of ``tensor`` (bytes, ``size`` as the memory layer has it) with each
    parameter of ``low`` at its twins' minimum, where the size grows with the parameter (it
    is reached through sums and products only: every factor is non-negative and the sum
    stays below 2**63, :func:`_memory_layer`), so the result is at most ``size`` at every
    shape; else ``size`` itself.  A tensor the family's ``memory`` mapping overrides keeps
    its size."""
    if not low or tensor in ((b.fam or {}).get("memory") or {}):
        return size
    marks = {k: Sym(f"param {k}", 64, "param") for k in low}
    e = modelexpr.parse(text, dict(b.names, **marks))
    if not all(_grows_with(e, m.name) for m in marks.values()):
        return size
    return X.substitute(e, {m.name: Const(low[k], 64) for k, m in marks.items()})


def _grows_with(e: Expr, name: str) -> bool:
    """Is every occurrence of symbol ``name`` in ``e`` reached through add and mul alone?"""
    if not isinstance(e, X.Op) or name not in X.symbols(e):
        return True
    return e.op in ("add", "mul") and all(_grows_with(a, name) for a in e.args)


def _exact_layer(b: _Build, con, exact) -> None:
    """Every host-computed argument holds its exact value (no u32 cast truncates it)."""
    csrc = f"contract {(con or {}).get('name')}: {(con or {}).get('source', '')}"
    csrc = csrc if len(csrc) <= 160 else csrc[:157] + "..."
    for name, (ex_, w, text) in exact.items():
        b.add("exact", X.ule(ex_, Const((1 << w) - 1, 64)), f"{name} = {text} < 2**{w}", csrc)


def _routing(b: _Build, host, routed) -> List[str]:
    """The routing conditions of each host entry point that launches the family (a condition
    on a stride this layout lacks is noted and not applied); the entry points' names.
    Raises InputError for a ``routed`` entry point that does not launch the family."""
    entries: List[str] = []
    for ep in (host or {}).get("entry_points") or []:
        rt = ep.get("routing") or {}
        conds = rt.get(b.fname) if b.fname in rt else rt.get("*")
        if conds is None:
            continue                       # this entry point never launches the family
        entries.append(ep["name"])
        hsrc = b.ms.origin.get(f"host {host['name']}", b.src)
        for c in conds:
            text, where = (str(c["when"]), c.get("source") or ep.get("source", "")) if isinstance(c, dict) \
                else (str(c), ep.get("source", ""))
            e = b.parse_or_skip(text, hsrc, f"host {host['name']} entry point {ep['name']} routing.{b.fname}")
            if e is None:
                b.notes.append(f"routing condition {text!r} of {ep['name']} needs a stride layout {b.layout} "
                               f"does not define: not applied")
                continue
            b.add("routing", e, text, where, ep["name"])
    if routed is not None and routed not in entries:
        raise InputError("--routed", f"host {(host or {}).get('name')} has no entry point {routed!r} that launches "
                                     f"family {b.fname} (entry points: {', '.join(entries) or 'none'})")
    return entries


def _buffers(b: _Build):
    """Per buffer: the expected byte offset (and its text), the allocation extent, the
    (batch, head) slice and its reach (``reach``: the bytes from the slice base that the
    workgroup's accesses may touch, the padded rows of a last tile that loads over-read
    included; default the slice), the family's definitions first (a family that redefines a
    buffer's offsets redefines its allocation too); a buffer whose tensor has no strides in
    this layout is left out."""
    expected, etext, extent, slices, reach = {}, {}, {}, {}, {}
    fbuf = (b.fam or {}).get("buffers") or {}
    ekey = "group_extent" if b.mode == "group" else "extent"

    def where(buf, key):            # (model file, model key) that hold buffer buf's expression
        if key in (fbuf.get(buf) or {}):
            return b.ms.origin.get(f"family {b.fname}", b.src), f"family {b.fname} buffers.{buf}.{key}"
        return b.ms.origin.get(f"buffers.{buf}", b.src), f"buffers.{buf}.{key}"

    for buf, spec in b.ms.buffers.items():
        fspec = fbuf.get(buf) or {}
        own = "expected" in fspec
        etext_b = fspec.get(ekey) if (own or ekey in fspec) else spec.get(ekey)
        if etext_b is not None:
            e = b.parse_or_skip(etext_b, *where(buf, ekey))
            if e is not None:
                extent[buf] = e
        stext = fspec.get("slice") if (own or "slice" in fspec) else spec.get("slice")
        if stext is not None and b.mode != "group":
            e = b.parse_or_skip(stext, *where(buf, "slice"))
            if e is not None:
                slices[buf] = e
        rtext = fspec.get("reach") if (own or "reach" in fspec) else spec.get("reach")
        if buf in slices:
            r = b.parse_or_skip(rtext, *where(buf, "reach")) if rtext is not None else None
            reach[buf] = slices[buf] if r is None else r
        text = fspec.get("expected", spec["expected"])
        e = b.parse_or_skip(text, *where(buf, "expected"))
        if e is None:
            continue   # this layout has no strides for the buffer's tensor
        expected[buf], etext[buf] = e, text
    return expected, etext, extent, slices, reach


TILE_KEYS = ("rows", "row_bytes", "row_stride", "first", "count")
"""A buffer's ``tile`` in the models: what one workgroup stores in its (batch, head) slice.
``rows`` (rows of the slice), ``row_bytes`` (bytes of one row), ``row_stride`` (bytes from one
row to the next), and the rows the workgroup owns, ``first`` and ``count`` (each stored
exactly once; count 0: no coverage claimed, only that every store lies in the slice and no
element is stored twice).  Batch mode only."""


def _tiles(b: _Build) -> Dict[str, Dict[str, Expr]]:
    """Per buffer: its tile (:data:`TILE_KEYS`, parsed), the family's definition first (a
    family that redefines a buffer's offsets redefines its tile too)."""
    out: Dict[str, Dict[str, Expr]] = {}
    if b.mode != "batch":
        return out
    fbuf = (b.fam or {}).get("buffers") or {}
    for buf, spec in b.ms.buffers.items():
        fspec = fbuf.get(buf) or {}
        tile = fspec.get("tile") if ("expected" in fspec or "tile" in fspec) else spec.get("tile")
        if not isinstance(tile, dict):
            continue
        where = (b.ms.origin.get(f"family {b.fname}", b.src) if "tile" in fspec else b.ms.origin.get(f"buffers.{buf}", b.src))
        parsed = {k: b.parse_or_skip(str(tile[k]), where, f"buffers.{buf}.tile.{k}") for k in TILE_KEYS if k in tile}
        if all(parsed.get(k) is not None for k in TILE_KEYS):
            out[buf] = parsed
    return out


def _may_exceed(e: Expr, width: int, bounds: Dict[str, Tuple[int, int]]) -> bool:
    """Whether ``e`` (64-bit) can reach 2**width under the shape bounds, by interval
    arithmetic (sound: True when in doubt)."""
    if isinstance(e, Const):
        return e.value >= 1 << width
    from addrsim.backends.z3_int import IntEncoder
    try:
        return IntEncoder(dict(bounds)).interval(e)[1] >= 1 << width
    except Exception:
        return True


def _strip_u32(text: str) -> str:
    t = text.strip()
    if t.startswith("u32(") and t.endswith(")"):
        return t[4:-1]
    return t


STRIDE_NAMES = frozenset([p + t for t in TENSORS for p in ("batch_stride_", "nhead_stride_", "stride_")]
                         + ["batch_stride_lsed", "nhead_stride_lsed", "Hs_lsed"])


def shape_env(prob: Problem, shape: Mapping[str, int]) -> Dict[str, int]:
    """Values of every shape variable: ``shape``'s, else the lower bound; fixed sizes."""
    env = {v: shape.get(v, prob.bounds[v][0]) for v in SHAPE_VARS}
    env.update(prob.fixed)
    return env


def kernel_arguments(prob: Problem, shape: Mapping[str, int], bases: Mapping[str, int],
                     free: Optional[Mapping[str, int]] = None) -> Dict[str, int]:
    """Value of every kernel argument for ``shape``: the host contract (``prob.kernargs``)
    evaluated on the shape (unsigned, the argument's width), pointer arguments from
    ``bases`` (bytes), and arguments the contract leaves free from ``free`` (default 0).
    Raises ValueError for a pointer argument without a base."""
    env = shape_env(prob, shape)
    out: Dict[str, int] = {}
    for name, e in prob.kernargs.items():
        syms = X.symbols(e).values()
        if any(s.kind == "ptr" for s in syms):
            if name not in bases:
                raise ValueError(f"no base address for pointer argument {name}")
            out[name] = bases[name] & X.mask(e.width)
            continue
        try:
            out[name] = X.evaluate(e, env)
        except KeyError:
            out[name] = (free or {}).get(name, 0) & X.mask(e.width)
    return out
