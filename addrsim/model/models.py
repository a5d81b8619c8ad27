"""Models as data: layouts, host argument contracts, kernel families, expected formulas.

Model files are YAML (parsed with ``yaml.safe_load``; expressions with
:mod:`addrsim.model.parse`, never evaluated).  The built-in files live in the project's
``models/`` folder (``layouts.yaml``, ``fmha_bwd_v3.yaml``); users add theirs with
``--model FILE``: a later file's layouts, contracts and families are consulted first.

A :class:`Problem` instantiates the models for one kernel and one layout: shape symbols
(64-bit), the value of every kernel argument in terms of the shape (the host contract), the
domain constraints (bounds, grid ranges, routing preconditions) and the expected offsets.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import yaml

from addrsim.ir import expr as X
from addrsim.model import parse as modelexpr
from addrsim.model.layout import Layout, resolve
from addrsim.loader.codeobj import Kernel
from addrsim.errors import InputError
from addrsim.ir.expr import Const, Expr, Sym

SHAPE_VARS = ("batch", "nhead_q", "nhead_k", "seqlen_q", "seqlen_k", "hdim_q", "hdim_v", "total_q", "total_k")
TENSORS = ("q", "k", "v", "do", "dq", "dk", "dv")
BUILTIN_DIR = Path(__file__).resolve().parents[2] / "models"
if not BUILTIN_DIR.is_dir():  # installed without the source tree
    BUILTIN_DIR = Path(__file__).resolve().parents[1] / "models"


@dataclass
class ModelSet:
    """Everything read from the model files, later files first in each list."""

    shape: Dict[str, Tuple[int, int]] = field(default_factory=dict)
    grid: Dict[str, dict] = field(default_factory=dict)
    derived: Dict[str, str] = field(default_factory=dict)
    buffers: Dict[str, dict] = field(default_factory=dict)
    contracts: List[dict] = field(default_factory=list)
    families: List[dict] = field(default_factory=list)
    layouts: Dict[str, dict] = field(default_factory=dict)
    arrays: Dict[str, dict] = field(default_factory=dict)
    memory: dict = field(default_factory=dict)     # devices (GiB per arch), tensors, group_tensors
    hosts: List[dict] = field(default_factory=list)   # versioned hosts: contracts, evidence, entry points
    files: List[str] = field(default_factory=list)
    origin: Dict[str, str] = field(default_factory=dict)   # "buffers.lse", "family NAME", ... -> model file
    host_override: Optional[str] = None             # --host NAME: the host of every kernel


def _need(cond, path, msg):
    if not cond:
        raise InputError(path, f"malformed model file: {msg}")


def load_models(extra: Sequence[str] = ()) -> ModelSet:
    """Read the built-in model files, then each of ``extra``.  Raises InputError naming the
    file for unreadable YAML, wrong structure or an invalid expression."""
    ms = ModelSet()
    files = sorted(BUILTIN_DIR.glob("*.yaml")) + [Path(p) for p in extra]
    for f in files:
        try:
            text = Path(f).read_text()
        except (OSError, UnicodeDecodeError) as e:
            raise InputError(f, f"cannot read model file ({e})") from None
        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError as e:
            line = getattr(getattr(e, "problem_mark", None), "line", None)
            raise InputError(f, f"invalid YAML{'' if line is None else f' at line {line + 1}'}") from None
        except RecursionError:    # PyYAML composes nested collections recursively
            raise InputError(f, "invalid YAML: collections nested too deeply") from None
        if doc is None:
            continue
        _need(isinstance(doc, dict), f, "top level must be a mapping")
        known = {"shape", "grid", "derived", "buffers", "contracts", "families", "layouts", "arrays", "memory", "hosts"}
        bad = set(doc) - known
        _need(not bad, f, f"unknown section(s) {sorted(map(str, bad))}")
        for sec in known:   # a section of the wrong kind (e.g. `contracts: true`, `shape: [1]`)
            kind = list if sec in ("contracts", "families", "hosts") else dict
            _need(isinstance(doc.get(sec) or kind(), kind), f, f"{sec} must be a {'list' if kind is list else 'mapping'}")
        for k, v in (doc.get("shape") or {}).items():
            _need(isinstance(v, dict) and isinstance(v.get("min"), int) and isinstance(v.get("max"), int)
                  and 0 <= v["min"] <= v["max"] < 2**40, f, f"shape.{k} needs integer min <= max")
            ms.shape[k] = (v["min"], v["max"])
        for k, v in (doc.get("grid") or {}).items():
            _need(k in ("x", "y", "z") and isinstance(v, dict) and isinstance(v.get("name"), str)
                  and isinstance(v.get("count"), str), f, f"grid.{k} needs name and count")
            ms.grid[k] = v
        for k, v in (doc.get("derived") or {}).items():
            _need(isinstance(v, str), f, f"derived.{k} must be an expression string")
            ms.derived[k] = v
        for k, v in (doc.get("buffers") or {}).items():
            _need(isinstance(v, dict) and isinstance(v.get("expected"), str) and v.get("ptr"), f,
                  f"buffers.{k} needs ptr and expected")
            ptr = v["ptr"] if isinstance(v["ptr"], list) else [v["ptr"]]
            _need(all(isinstance(p, str) for p in ptr), f, f"buffers.{k}.ptr must be names")
            ms.buffers[k] = dict(v, ptr=ptr)
            ms.origin[f"buffers.{k}"] = str(f)
        for c in reversed(doc.get("contracts") or []):
            _need(isinstance(c, dict) and isinstance(c.get("requires"), list) and isinstance(c.get("args"), dict),
                  f, "each contract needs requires (list) and args (mapping)")
            _check_contract(c, f)
            ms.contracts.insert(0, c)
            ms.origin[f"contract {c.get('name')}"] = str(f)
        for fam in reversed(doc.get("families") or []):
            _need(isinstance(fam, dict) and isinstance(fam.get("match"), str), f, "each family needs match")
            _check_family(fam, f)
            try:
                re.compile(fam["match"])
            except re.error as e:
                raise InputError(f, f"malformed model file: family {fam.get('name')}: bad regex ({e})") from None
            ms.families.insert(0, fam)
            ms.origin[f"family {fam.get('name')}"] = str(f)
        for h in reversed(doc.get("hosts") or []):
            _check_host(h, f)
            ms.hosts.insert(0, h)
            ms.origin[f"host {h['name']}"] = str(f)
        for k, v in (doc.get("arrays") or {}).items():
            _need(isinstance(v, dict) and all(isinstance(v.get(x), (str, int)) for x in ("first", "last", "count")),
                  f, f"arrays.{k} needs first, last and count")
            ms.arrays[k] = v
        mem = doc.get("memory") or {}
        _need(isinstance(mem, dict), f, "memory must be a mapping")
        for k, v in mem.items():
            _need(k in ("devices", "tensors", "group_tensors", "source") and (k == "source" or isinstance(v, dict)),
                  f, f"memory.{k}: expected devices, tensors or group_tensors mappings")
            if k == "devices":
                _need(all(isinstance(g, (int, float)) and not isinstance(g, bool) and 0 < g < 2**20
                          for g in v.values()), f, "memory.devices maps architectures to GiB (numbers)")
            elif k != "source":
                _need(all(isinstance(e, str) for e in v.values()), f, f"memory.{k} maps tensors to expressions")
            if k != "source":
                ms.memory.setdefault(k, {}).update(v)
        for k, v in (doc.get("buffers") or {}).items():
            for key in ("extent", "group_extent", "slice"):
                _need(key not in v or isinstance(v[key], (str, int)), f, f"buffers.{k}.{key} must be an expression")
        for name, lay in (doc.get("layouts") or {}).items():
            _need(isinstance(lay, dict), f, f"layouts.{name} must be a mapping")
            _check_layout(name, lay, f)
            ms.layouts[name] = lay
        ms.files.append(str(f))
    _check_host_refs(ms)
    return ms


def _check_host_refs(ms: ModelSet) -> None:
    """Every host names contracts that exist, and every routing key of its entry points is a
    family or "*": a typo there would silently make a bug look latent.  InputError naming
    the host's file."""
    contracts = {c.get("name") for c in ms.contracts}
    families = {f.get("name") for f in ms.families}
    for h in ms.hosts:
        f = ms.origin.get(f"host {h['name']}", "<models>")
        bad = [c for c in h["contracts"] if c not in contracts]
        _need(not bad, f, f"host {h['name']}: unknown contract(s) {', '.join(bad)}")
        for ep in h.get("entry_points") or []:
            badf = [k for k in (ep.get("routing") or {}) if k != "*" and k not in families]
            _need(not badf, f, f"host {h['name']} entry point {ep['name']}: routing for unknown famil"
                               f"{'y' if len(badf) == 1 else 'ies'} {', '.join(map(str, badf))}")


_SCALAR = (str, int)


def _is_map(v, key_t=str, val_t=_SCALAR) -> bool:
    return isinstance(v, dict) and all(isinstance(k, key_t) and isinstance(x, val_t) and not isinstance(x, bool)
                                       for k, x in v.items())


def _check_contract(c: dict, f):
    """Types of a contract's fields (InputError naming the file and the contract)."""
    name = c.get("name")
    _need(all(isinstance(r, str) for r in c["requires"]), f, f"contract {name}: requires must list argument names")
    _need(_is_map(c["args"]), f, f"contract {name}: args must map argument names to expressions")
    _need(c.get("arrays") is None or _is_map(c["arrays"], str, str), f,
          f"contract {name}: arrays must map pointer arguments to array names")


def _check_family(fam: dict, f):
    """Types of a family's fields (InputError naming the file and the family)."""
    name = fam.get("name")
    opt = lambda k, ok: fam.get(k) is None or ok(fam[k])  # noqa: E731
    checks = [
        ("params", lambda v: _is_map(v), "params must map names to constants"),
        ("fixed", lambda v: _is_map(v), "fixed must map shape variables to constants"),
        ("bounds", lambda v: isinstance(v, dict) and all(isinstance(k, str) and _is_map(b) and set(b) <= {"min", "max"}
                                                          for k, b in v.items()),
         "bounds must map shape variables to {min, max}"),
        ("buffers", lambda v: isinstance(v, dict) and all(isinstance(k, str) and _is_map(b) for k, b in v.items()),
         "buffers must map buffer names to {expected, extent, slice}"),
        ("preconditions", lambda v: isinstance(v, list) and all(isinstance(x, _SCALAR) for x in v),
         "preconditions must be a list of expressions"),
        ("traits", lambda v: isinstance(v, list) and all(isinstance(x, _SCALAR) for x in v),
         "traits must be a list of expressions"),
        ("grid", lambda v: _is_map(v), "grid must map axes to count expressions"),
        ("args", lambda v: _is_map(v), "args must map argument names to expressions"),
        ("memory", lambda v: isinstance(v, dict) and all(isinstance(k, str) and (x is None or isinstance(x, str))
                                                          for k, x in v.items()),
         "memory must map tensors to expressions"),
        ("arch", lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v), "arch must list architectures"),
        ("mode", lambda v: v in ("batch", "group"), "mode must be batch or group"),
    ]
    for key, ok, msg in checks:
        _need(opt(key, ok), f, f"family {name}: {msg}")


def _check_host(h: dict, f):
    """A host: ``name``, ``contracts`` (names), optional ``evidence`` (file names) and
    ``entry_points`` (each ``name``, ``source`` and ``routing``: family name or "*" -> list
    of conditions, each an expression or ``{when, source}``).  InputError naming the file."""
    _need(isinstance(h, dict) and isinstance(h.get("name"), str), f, "each host needs a name")
    name = h["name"]
    extra = set(h) - {"name", "source", "contracts", "evidence", "entry_points"}
    _need(not extra, f, f"host {name}: unknown key(s) {', '.join(sorted(map(str, extra)))}")
    _need(isinstance(h.get("contracts"), list) and all(isinstance(c, str) for c in h["contracts"]), f,
          f"host {name}: contracts must list contract names")
    _need(h.get("evidence") is None or (isinstance(h["evidence"], list) and all(isinstance(e, str) for e in h["evidence"])),
          f, f"host {name}: evidence must list file names")
    eps = h.get("entry_points") or []
    _need(isinstance(eps, list) and eps, f, f"host {name}: entry_points must be a non-empty list")
    for ep in eps:
        _need(isinstance(ep, dict) and isinstance(ep.get("name"), str) and isinstance(ep.get("routing"), dict),
              f, f"host {name}: each entry point needs a name and a routing mapping")
        extra = set(ep) - {"name", "source", "routing"}
        _need(not extra, f, f"host {name} entry point {ep['name']}: unknown key(s) {', '.join(sorted(map(str, extra)))}")
        for c in ep["routing"].values():
            for x in c if isinstance(c, list) else []:
                if isinstance(x, dict):
                    extra = set(x) - {"when", "source"}
                    _need(not extra, f, f"host {name} entry point {ep['name']}: a condition has unknown key(s) "
                                        f"{', '.join(sorted(map(str, extra)))}")
        for fam, conds in (ep.get("routing") or {}).items():
            _need(isinstance(conds, list) and all(
                isinstance(c, _SCALAR) or (isinstance(c, dict) and isinstance(c.get("when"), _SCALAR)) for c in conds),
                f, f"host {name} entry point {ep['name']}: routing.{fam} must list conditions")


def _check_layout(name: str, lay: dict, f):
    """A layout maps tensors to {batch, head, seq} stride expressions; ``extends`` names
    another layout; ``group`` has the same shape."""
    for t, v in lay.items():
        if t == "extends":
            _need(isinstance(v, str), f, f"layouts.{name}.extends must name a layout")
        elif t == "group":
            _need(isinstance(v, dict), f, f"layouts.{name}.group must map tensors to strides")
            _check_layout(f"{name}.group", {k: x for k, x in v.items() if k != "group"}, f)
        else:
            _need(_is_map(v) and set(v) <= {"batch", "head", "seq"}, f,
                  f"layouts.{name}.{t} must map batch/head/seq to expressions")


def layout_strides(ms: ModelSet, name: str, path="<layouts>", mode: str = "batch") -> Dict[str, Dict[str, str]]:
    """Element-stride expressions of layout ``name`` with ``extends`` resolved: tensor ->
    {"batch"|"head"|"seq": expression}.  In group mode the layout's ``group`` section is used
    (packed [total, ...] tensors, no batch stride).  See :class:`addrsim.model.layout.Layout`."""
    return {t: dict(v) for t, v in layout_of(ms, name, path).mode(mode).items()}


def layout_of(ms: ModelSet, name: str, path="<layouts>") -> Layout:
    """The :class:`addrsim.model.layout.Layout` value of ``name``.  Raises InputError."""
    return resolve(ms.layouts, name, path)


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
    host: Optional[str] = None          # the host model whose contract and routing apply
    host_why: str = ""                  # how the host was chosen
    assumptions: List[Assumption] = field(default_factory=list)   # every layer, routing of every entry point
    entry_points: List[str] = field(default_factory=list)         # the host's entry points that launch this family
    routed: Optional[str] = None        # the entry point whose routing ``domain`` includes (None: none)
    exact: Dict[str, Tuple[Expr, int]] = field(default_factory=dict)  # argument -> (exact 64-bit value, width in bits)
    exact_unused: set = field(default_factory=set)   # arguments whose exactness is not in ``domain``

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

    def routing(self, entry: str) -> List[Assumption]:
        return [a for a in self.assumptions if a.layer == "routing" and a.entry == entry]


def check_bounds(bounds: Optional[Dict[str, Tuple[int, int]]]) -> None:
    """User bounds (``--bound NAME=MIN:MAX``) must name shape variables (SHAPE_VARS) and give
    a non-empty range of sizes (1 <= MIN <= MAX): an empty domain would make every claim
    vacuously proved.  Raises InputError."""
    for name, rng in (bounds or {}).items():
        if name not in SHAPE_VARS:
            raise InputError("--bound", f"unknown shape variable {name!r} (one of {', '.join(SHAPE_VARS)})")
        lo, hi = rng
        if not (isinstance(lo, int) and isinstance(hi, int)) or lo < 1 or lo > hi or hi >= 1 << 32:
            raise InputError("--bound", f"{name}={lo}:{hi} is not a range of sizes (need 1 <= MIN <= MAX < 2**32): "
                                        "an empty range would prove everything")


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
    src = ms.files[-1] if ms.files else "<models>"
    shape = {v: Sym(v, 64, "shape") for v in SHAPE_VARS}
    bounds = {v: ms.shape.get(v, (1, 1 << 20)) for v in SHAPE_VARS}
    grid = grid_symbols(ms)
    fam = choose_family(ms, kernel, arch)
    host, host_why = choose_host(ms, kernel)
    con = choose_contract(ms, kernel, host)
    if fam:
        src = ms.origin.get(f"family {fam.get('name')}", src)
    mode = str((fam or {}).get("mode", "batch"))
    notes = []
    names: Dict[str, Expr] = dict(shape)
    captures: Dict[str, int] = {}
    masked = False
    if fam:
        m = re.search(fam["match"], kernel.symbol)
        for k, v in m.groupdict().items():
            if v and v.isdigit():
                captures[k] = int(v)
            elif k in ("mask", "causal") and v:
                masked = True
    else:
        notes.append("no kernel family in the models matches this kernel: shape preconditions unknown")
    for k, v in captures.items():
        names[k] = Const(v, 64)
    fname = (fam or {}).get("name")

    def P(text, what):
        try:
            return modelexpr.parse(text, names)
        except modelexpr.ModelExprError as e:
            raise InputError(src, f"malformed model file: {what}: {e}") from None

    def P_exact(text, what):
        """The value the host computes, before its cast to the argument's width."""
        try:
            return modelexpr.parse(text, dict(names, **{modelexpr.EXACT_CASTS: Const(1, 1)}))
        except modelexpr.ModelExprError as e:
            raise InputError(src, f"malformed model file: {what}: {e}") from None

    def const_of(text, what) -> int:
        e = P(str(text), what)
        if not isinstance(e, Const):
            raise InputError(src, f"malformed model file: {what} is not a constant")
        return e.value

    consts = {"elem": 2, "ts_kv": 1, "ts_qo": 1, "dpad": 0, "acc": 0}
    for k, v in ((fam or {}).get("params") or {}).items():
        consts[k] = const_of(v, f"family {fname} params.{k}")
    for k, v in consts.items():
        names[k] = Const(v, 64)

    fixed: Dict[str, int] = {}
    for k, v in ((fam or {}).get("fixed") or {}).items():
        fixed[k] = const_of(v, f"family {fname} fixed.{k}")
    for k, v in ((fam or {}).get("bounds") or {}).items():
        if k not in bounds:
            raise InputError(src, f"malformed model file: family {fname} bounds.{k}: unknown shape variable")
        lo = const_of(v.get("min", bounds[k][0]), f"family {fname} bounds.{k}.min")
        hi = const_of(v.get("max", bounds[k][1]), f"family {fname} bounds.{k}.max")
        bounds[k] = (max(bounds[k][0], lo), min(bounds[k][1], hi))
    for k, v in fixed.items():
        bounds[k] = (v, v)
        names[k] = Const(v, 64)
    for k, v in (bound_overrides or {}).items():
        if k in fixed:
            continue
        bounds[k] = v

    # arrays (group mode sequence starts)
    arrays: Dict[str, Sym] = {}
    for a in ms.arrays:
        arrays[a] = Sym(a, 48, "array")
        names[a + "[]"] = arrays[a]

    # layout strides (elements)
    lay = layout_strides(ms, layout, src, mode)
    for t in TENSORS:
        st = lay.get(t, {})
        for key, prefix in (("batch", "batch_stride_"), ("head", "nhead_stride_"), ("seq", "stride_")):
            if key in st:
                names[prefix + t] = P(str(st[key]), f"layout {layout} {t}.{key}")
            elif mode == "group" and key == "batch":
                names[prefix + t] = Const(0, 64)
    lse = lay.get("lse", {})
    if "batch" in lse:
        names["batch_stride_lsed"] = P(str(lse["batch"]), f"layout {layout} lse.batch")
    if "head" in lse:
        names["nhead_stride_lsed"] = P(str(lse["head"]), f"layout {layout} lse.head")
    for ax, s_ in grid.items():
        names[s_.name] = X.zext(s_, 64)
    for k, v in ms.derived.items():
        try:
            names[k] = modelexpr.parse(v, names)
        except modelexpr.ModelExprError as e:
            if not _layout_name(str(e)):    # a derived name that needs a stride this layout does not define
                raise InputError(src, f"malformed model file: derived.{k}: {e}") from None

    # kernel arguments: the contract, with the family's overrides
    kernargs: Dict[str, Expr] = {}
    exact: Dict[str, Tuple[Expr, int]] = {}
    exact_text: Dict[str, str] = {}
    ptr_args = pointer_args(ms, kernel, con)
    cargs = dict((con or {}).get("args") or {})
    cargs.update((fam or {}).get("args") or {})
    if con is None:
        notes.append("no argument contract matches this kernel's argument names: arguments are free")
    for a in kernel.args:
        if a.name == "pad" or a.name in kernargs:
            continue
        w = 8 * a.size
        if a.name in ptr_args:
            kernargs[a.name] = X.zext(Sym(a.name, 48, "ptr"), 64)
        elif a.value_kind in ("global_buffer", "dynamic_shared_pointer") or (a.size == 8 and a.name in _pointer_names(ms)):
            kernargs[a.name] = X.zext(Sym(a.name, 48, "ptr"), 64) if w == 64 else Sym(a.name, w, "ptr")
        elif a.name in cargs:
            what = f"contract {con.get('name') if con else '?'} args.{a.name}"
            e = P(str(cargs[a.name]), what)
            kernargs[a.name] = X.extract(e, w - 1, 0) if w <= 64 else X.zext(e, w)
            if w < 64:
                ex_ = P_exact(str(cargs[a.name]), what)
                if _may_exceed(ex_, w, bounds):
                    exact[a.name] = (ex_, w)
                    exact_text[a.name] = _strip_u32(str(cargs[a.name]))
        else:
            kernargs[a.name] = Sym(a.name, w, "arg")
    array_args: Dict[str, Sym] = {}
    for ptr, arr in ((con or {}).get("arrays") or {}).items():
        if arr not in arrays:
            raise InputError(src, f"malformed model file: contract {con.get('name')} arrays.{ptr}: unknown array {arr!r}")
        array_args[ptr] = arrays[arr]
    array_specs: Dict[str, Dict[str, Expr]] = {}
    if mode == "group":
        for a, spec in ms.arrays.items():
            array_specs[a] = {k: P(str(spec[k]), f"arrays.{a}.{k}")
                              for k in ("first", "last", "count", "step_max", "step_min") if k in spec}

    # domain, layer by layer (Assumption)
    msrc = ms.origin.get("buffers.lse", src)
    fsrc = f"{src}: family {fname}" if fam else src
    asm: List[Assumption] = []

    def add(layer, e, text, source, entry=""):
        asm.append(Assumption(layer, text, source, e, entry))

    for v in SHAPE_VARS:
        lo, hi = bounds[v]
        why = ("--bound" if v in (bound_overrides or {}) and v not in fixed else
               fsrc if v in fixed or v in ((fam or {}).get("bounds") or {}) else f"{msrc}: shape")
        add("bounds", X.band(X.ule(Const(lo, 64), shape[v]), X.ule(shape[v], Const(hi, 64))),
            f"{v} = {lo}" if lo == hi else f"{lo} <= {v} <= {hi}", why)
    gcount = dict((fam or {}).get("grid") or {})
    for ax, s_ in grid.items():
        spec = ms.grid.get(ax)
        if spec:
            ctext = str(gcount.get(ax, spec["count"]))
            cnt = P(ctext, f"grid.{ax}.count")
            if ax == "x" and masked and (fam or {}).get("grid_masked"):
                cnt = X.udiv(X.add(cnt, Const(1, 64)), Const(2, 64))   # G2:415-419: masked launches halve gdx
                ctext = f"({ctext} + 1) / 2"
            add("grid", X.ult(X.zext(s_, 64), cnt), f"{s_.name} < {ctext}", f"{msrc}: grid.{ax}")
        else:
            add("grid", X.eq(s_, Const(0, 32)), f"{s_.name} = 0", f"{msrc}: grid")
    if mode == "group":
        add("bounds", X.band(X.ule(shape["seqlen_q"], shape["total_q"]), X.ule(shape["seqlen_k"], shape["total_k"])),
            "seqlen_q <= total_q and seqlen_k <= total_k", f"{msrc}: group mode")
    for key in ("traits", "preconditions"):
        for pre in ((fam or {}).get(key) or []):
            add("traits", P(str(pre), f"family {fname} {key}"), str(pre), fsrc)
    wg = kernel.reqd_workgroup_size or (256, 1, 1)
    add("grid", X.ult(lane, Const(wg[0], 32)), f"{lane.name} < {wg[0]}", "metadata .reqd_workgroup_size")

    # device memory: every tensor of the family must fit
    memory, limit = None, 0
    tens = dict(ms.memory.get("group_tensors" if mode == "group" else "tensors") or {})
    tens.update((fam or {}).get("memory") or {})
    terms = [P(str(e), f"memory.{t}") for t, e in tens.items() if e is not None]
    if terms:
        memory = terms[0]
        for e in terms[1:]:
            memory = X.add(memory, e)
        from addrsim.backends.ideal import ideal_eval
        top = ideal_eval(memory, {v: bounds[v][1] for v in SHAPE_VARS}, set())
        if top >= 1 << 63:
            raise InputError(src, f"the memory model's tensor sizes can pass 2**63 bytes under the shape bounds "
                                  f"(up to {top}); lower the bounds")
        gib = memory_gib if memory_gib is not None else (ms.memory.get("devices") or {}).get(arch or "")
        if gib:
            limit = int(gib * (1 << 30))
            add("memory", X.ule(memory, Const(limit, 64)), f"every tensor of the family fits in {gib:g} GiB",
                "--memory-gib" if memory_gib is not None else f"{msrc}: memory.devices.{arch}")
        else:
            notes.append(f"no device memory known for {arch}: shapes are not limited by memory")

    # argument exactness: every host-computed argument holds its exact value
    csrc = f"contract {(con or {}).get('name')}: {(con or {}).get('source', '')}"
    csrc = csrc if len(csrc) <= 160 else csrc[:157] + "..."
    for name, (ex_, w) in exact.items():
        add("exact", X.ule(ex_, Const((1 << w) - 1, 64)), f"{name} = {exact_text[name]} < 2**{w}", csrc)

    # routing: each entry point of the host that launches this family
    entries: List[str] = []
    for ep in (host or {}).get("entry_points") or []:
        rt = ep.get("routing") or {}
        conds = rt.get(fname) if fname in rt else rt.get("*")
        if conds is None:
            continue                       # this entry point never launches the family
        entries.append(ep["name"])
        hsrc = ms.origin.get(f"host {host['name']}", src)
        for c in conds:
            text, where = (str(c["when"]), c.get("source") or ep.get("source", "")) if isinstance(c, dict) \
                else (str(c), ep.get("source", ""))
            try:
                e = modelexpr.parse(text, names)
            except modelexpr.ModelExprError as err:
                if "unknown name" in str(err) and _layout_name(str(err)):
                    notes.append(f"routing condition {text!r} of {ep['name']} needs a stride layout {layout} "
                                 f"does not define: not applied")
                    continue
                raise InputError(hsrc, f"malformed model file: host {host['name']} entry point {ep['name']} "
                                       f"routing.{fname}: {err}") from None
            add("routing", e, text, where, ep["name"])
    if routed is not None and routed not in entries:
        raise InputError("--routed", f"host {(host or {}).get('name')} has no entry point {routed!r} that launches "
                                     f"family {fname} (entry points: {', '.join(entries) or 'none'})")
    dom = [a.expr for a in asm if a.layer in KERNEL_LAYERS or (a.layer == "routing" and a.entry == routed)]

    expected, etext, extent, slices = {}, {}, {}, {}
    fbuf = (fam or {}).get("buffers") or {}
    ekey = "group_extent" if mode == "group" else "extent"
    def bkey(b, key):            # the model key that holds buffer b's expression
        return f"family {fname} buffers.{b}.{key}" if key in (fbuf.get(b) or {}) else f"buffers.{b}.{key}"

    def bsrc(b, key):
        return ms.origin.get(f"family {fname}", src) if key in (fbuf.get(b) or {}) else ms.origin.get(f"buffers.{b}", src)

    for b, spec in ms.buffers.items():
        fspec = fbuf.get(b) or {}
        # a family that redefines a buffer's offsets redefines its allocation too: no inheritance
        etext_b = fspec.get(ekey) if ("expected" in fspec or ekey in fspec) else spec.get(ekey)
        if etext_b is not None:
            try:
                extent[b] = modelexpr.parse(str(etext_b), names)
            except modelexpr.ModelExprError as e:
                if not _layout_name(str(e)):
                    raise InputError(bsrc(b, ekey), f"malformed model file: {bkey(b, ekey)}: {e}") from None
        stext = fspec.get("slice") if ("expected" in fspec or "slice" in fspec) else spec.get("slice")
        if stext is not None and mode != "group":
            try:
                slices[b] = modelexpr.parse(str(stext), names)
            except modelexpr.ModelExprError as e:
                if not _layout_name(str(e)):
                    raise InputError(bsrc(b, "slice"), f"malformed model file: {bkey(b, 'slice')}: {e}") from None
        text = (fbuf.get(b) or {}).get("expected", spec["expected"])
        try:
            expected[b] = modelexpr.parse(text, names)
        except modelexpr.ModelExprError as e:
            if _layout_name(str(e)):
                continue   # this layout has no strides for the buffer's tensor
            raise InputError(bsrc(b, "expected"), f"malformed model file: {bkey(b, 'expected')}: {e}") from None
        etext[b] = text
    return Problem(layout, (con or {}).get("name"), fname, shape, fixed, bounds, kernargs, dom,
                   expected, etext, grid, lane, names, notes, mode, memory, limit, array_args, array_specs,
                   extent, slices, (host or {}).get("name"), host_why, asm, entries, routed,
                   {k: v for k, v in exact.items()})


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


def _layout_name(msg: str) -> bool:
    """Whether an 'unknown name' error names a stride that some layout could define."""
    m = re.search(r"unknown name '([^']+)'", msg)
    return bool(m and m.group(1) in STRIDE_NAMES)


STRIDE_NAMES = frozenset([p + t for t in TENSORS for p in ("batch_stride_", "nhead_stride_", "stride_")]
                         + ["batch_stride_lsed", "nhead_stride_lsed", "Hs_lsed"])


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
