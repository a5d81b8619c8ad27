"""Models as data: layouts, host argument contracts, kernel families, expected formulas.

Model files are YAML (parsed with ``yaml.safe_load``; expressions with
:mod:`addrsim.modelexpr`, never evaluated).  The built-in files live in the project's
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

from . import expr as X
from . import modelexpr
from .codeobj import Kernel
from .errors import InputError
from .expr import Const, Expr, Sym

SHAPE_VARS = ("batch", "nhead_q", "nhead_k", "seqlen_q", "seqlen_k", "hdim_q", "hdim_v")
TENSORS = ("q", "k", "v", "do", "dq", "dk", "dv")
BUILTIN_DIR = Path(__file__).resolve().parent.parent / "models"
if not BUILTIN_DIR.is_dir():  # installed without the source tree
    BUILTIN_DIR = Path(__file__).resolve().parent / "models"


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
    files: List[str] = field(default_factory=list)


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
        if doc is None:
            continue
        _need(isinstance(doc, dict), f, "top level must be a mapping")
        known = {"shape", "grid", "derived", "buffers", "contracts", "families", "layouts"}
        bad = set(doc) - known
        _need(not bad, f, f"unknown section(s) {sorted(bad)}")
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
        for c in reversed(doc.get("contracts") or []):
            _need(isinstance(c, dict) and isinstance(c.get("requires"), list) and isinstance(c.get("args"), dict),
                  f, "each contract needs requires (list) and args (mapping)")
            ms.contracts.insert(0, c)
        for fam in reversed(doc.get("families") or []):
            _need(isinstance(fam, dict) and isinstance(fam.get("match"), str), f, "each family needs match")
            try:
                re.compile(fam["match"])
            except re.error as e:
                raise InputError(f, f"malformed model file: family {fam.get('name')}: bad regex ({e})") from None
            ms.families.insert(0, fam)
        for name, lay in (doc.get("layouts") or {}).items():
            _need(isinstance(lay, dict), f, f"layouts.{name} must be a mapping")
            ms.layouts[name] = lay
        ms.files.append(str(f))
    return ms


def layout_strides(ms: ModelSet, name: str, path="<layouts>") -> Dict[str, Dict[str, str]]:
    """Element-stride expressions of layout ``name``, with ``extends`` resolved."""
    seen = []
    out: Dict[str, Dict[str, str]] = {}
    cur = name
    chain = []
    while cur is not None:
        if cur in seen:
            raise InputError(path, f"layout {name}: cycle in extends")
        seen.append(cur)
        lay = ms.layouts.get(cur)
        if lay is None:
            raise InputError(path, f"unknown layout {cur!r} (known: {', '.join(sorted(ms.layouts))})")
        chain.append(lay)
        cur = lay.get("extends")
    for lay in reversed(chain):
        for t, v in lay.items():
            if t == "extends":
                continue
            if not isinstance(v, dict):
                raise InputError(path, f"layout {name}: {t} must map batch/head/seq to expressions")
            out.setdefault(t, {}).update(v)
    return out


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


def grid_symbols(ms: ModelSet) -> Dict[str, Sym]:
    return {ax: Sym(ms.grid.get(ax, {}).get("name", f"wgid_{ax}"), 32, "id") for ax in "xyz"}


def choose_family(ms: ModelSet, kernel: Kernel) -> Optional[dict]:
    for fam in ms.families:
        if re.search(fam["match"], kernel.symbol):
            return fam
    return None


def choose_contract(ms: ModelSet, kernel: Kernel) -> Optional[dict]:
    names = set(kernel.arg_names)
    for c in ms.contracts:
        if all(r in names for r in c["requires"]):
            return c
    return None


def build_problem(ms: ModelSet, kernel: Kernel, layout: str, lane: Sym,
                  bound_overrides: Dict[str, Tuple[int, int]] = None) -> Problem:
    """Instantiate the models for ``kernel`` in ``layout``.  Raises InputError on an unknown
    layout or an invalid expression in a model file."""
    src = ms.files[-1] if ms.files else "<models>"
    shape = {v: Sym(v, 64, "shape") for v in SHAPE_VARS}
    bounds = {v: ms.shape.get(v, (1, 1 << 20)) for v in SHAPE_VARS}
    bounds.update(bound_overrides or {})
    grid = grid_symbols(ms)
    fam = choose_family(ms, kernel)
    con = choose_contract(ms, kernel)
    notes = []
    names: Dict[str, Expr] = dict(shape)
    captures = {}
    if fam:
        m = re.search(fam["match"], kernel.symbol)
        captures = {k: int(v) for k, v in m.groupdict().items() if v and v.isdigit()}
    else:
        notes.append("no kernel family in the models matches this kernel: shape preconditions unknown")
    consts = dict(captures)
    consts.update({k: v for k, v in ((fam or {}).get("params") or {}).items() if isinstance(v, int)})
    consts.setdefault("elem", 2)
    consts.setdefault("ts_kv", 1)
    consts.setdefault("ts_qo", 1)
    for k, v in consts.items():
        names[k] = Const(v, 64)

    def P(text, what):
        try:
            return modelexpr.parse(text, names)
        except modelexpr.ModelExprError as e:
            raise InputError(src, f"malformed model file: {what}: {e}") from None

    fixed: Dict[str, int] = {}
    for k, v in ((fam or {}).get("fixed") or {}).items():
        e = P(str(v), f"family {fam.get('name')} fixed.{k}")
        if not isinstance(e, Const):
            raise InputError(src, f"malformed model file: family {fam.get('name')} fixed.{k} is not a constant")
        fixed[k] = e.value
    for k, v in ((fam or {}).get("bounds") or {}).items():
        lo = P(str(v.get("min", bounds[k][0])), f"family bounds.{k}")
        hi = P(str(v.get("max", bounds[k][1])), f"family bounds.{k}")
        bounds[k] = (max(bounds[k][0], lo.value), min(bounds[k][1], hi.value))
    for k, v in fixed.items():
        bounds[k] = (v, v)
        names[k] = Const(v, 64)

    # layout strides (elements)
    lay = layout_strides(ms, layout, src)
    for t in TENSORS:
        st = lay.get(t, {})
        for key, prefix in (("batch", "batch_stride_"), ("head", "nhead_stride_"), ("seq", "stride_")):
            if key in st:
                names[prefix + t] = P(str(st[key]), f"layout {layout} {t}.{key}")
    lse = lay.get("lse", {})
    if "batch" in lse:
        names["batch_stride_lsed"] = P(str(lse["batch"]), f"layout {layout} lse.batch")
    if "head" in lse:
        names["nhead_stride_lsed"] = P(str(lse["head"]), f"layout {layout} lse.head")
    for k, v in ms.derived.items():
        names[k] = P(v, f"derived.{k}")
    for ax, s in grid.items():
        names[s.name] = X.zext(s, 64)

    # kernel arguments
    kernargs: Dict[str, Expr] = {}
    cargs = (con or {}).get("args") or {}
    if con is None:
        notes.append("no argument contract matches this kernel's argument names: arguments are free")
    for a in kernel.args:
        if a.name == "pad" or a.name in kernargs:
            continue
        w = 8 * a.size
        if a.value_kind in ("global_buffer", "dynamic_shared_pointer") or (a.size == 8 and a.name in _pointer_names(ms)):
            kernargs[a.name] = X.zext(Sym(a.name, 48, "ptr"), 64) if w == 64 else Sym(a.name, w, "ptr")
        elif a.name in cargs:
            e = P(str(cargs[a.name]), f"contract {con.get('name')} args.{a.name}")
            kernargs[a.name] = X.extract(e, w - 1, 0) if w <= 64 else X.zext(e, w)
        else:
            kernargs[a.name] = Sym(a.name, w, "arg")

    # domain
    dom: List[Expr] = []
    for v in SHAPE_VARS:
        lo, hi = bounds[v]
        dom += [X.ule(Const(lo, 64), shape[v]), X.ule(shape[v], Const(hi, 64))]
    for ax, s in grid.items():
        spec = ms.grid.get(ax)
        if spec:
            cnt = P(spec["count"], f"grid.{ax}.count")
            dom.append(X.ult(X.zext(s, 64), cnt))
        else:
            dom.append(X.eq(s, Const(0, 32)))
    for pre in ((fam or {}).get("preconditions") or []):
        dom.append(P(str(pre), f"family {fam.get('name')} precondition"))
    wg = kernel.reqd_workgroup_size or (256, 1, 1)
    dom.append(X.ult(lane, Const(wg[0], 32)))

    expected, etext = {}, {}
    for b, spec in ms.buffers.items():
        expected[b] = P(spec["expected"], f"buffers.{b}.expected")
        etext[b] = spec["expected"]
    return Problem(layout, (con or {}).get("name"), (fam or {}).get("name"), shape, fixed, bounds, kernargs, dom,
                   expected, etext, grid, lane, names, notes)


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
