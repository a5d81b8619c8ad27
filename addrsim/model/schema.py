"""Reading the model files: the ModelSet, and the checks that make a bad file one clear error.

Owns :class:`ModelSet`, :func:`load_models` (one loader per top-level section), the
structure checks of contracts, families, hosts and layouts, :func:`check_bounds` and the
layout lookups.  May import addrsim.ir, addrsim.errors and addrsim.model.layout/parse.
Every error is an InputError naming the file.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import yaml

from addrsim.model.layout import Layout, resolve
from addrsim.errors import InputError
from addrsim.files import read_input




SHAPE_VARS = ("batch", "nhead_q", "nhead_k", "seqlen_q", "seqlen_k", "hdim_q", "hdim_v", "total_q", "total_k")


TENSORS = ("q", "k", "v", "do", "dq", "dk", "dv", "o")
"""Tensors a layout gives strides for.  ``o``, the forward output the odo pre-kernel reads, has
dO's shape: a layout that does not name it gives it dO's strides (addrsim.model.problem)."""


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


SECTIONS = ("shape", "grid", "derived", "buffers", "contracts", "families", "layouts", "arrays", "memory", "hosts")


def load_models(extra: Sequence[str] = ()) -> ModelSet:
    """Read the built-in model files, then each of ``extra``.  Raises InputError naming the
    file for unreadable YAML, wrong structure or an invalid expression."""
    ms = ModelSet()
    for f in sorted(BUILTIN_DIR.glob("*.yaml")) + [Path(p) for p in extra]:
        doc = _read_yaml(f)
        if doc is None:
            continue
        _need(isinstance(doc, dict), f, "top level must be a mapping")
        bad = set(doc) - set(SECTIONS)
        _need(not bad, f, f"unknown section(s) {sorted(map(str, bad))}")
        for sec in SECTIONS:   # a section of the wrong kind (e.g. `contracts: true`, `shape: [1]`)
            kind = list if sec in ("contracts", "families", "hosts") else dict
            _need(isinstance(doc.get(sec) or kind(), kind), f, f"{sec} must be a {'list' if kind is list else 'mapping'}")
        for sec in SECTIONS:
            _LOADERS[sec](ms, doc.get(sec) or ({} if sec not in ("contracts", "families", "hosts") else []), f)
        ms.files.append(str(f))
    _check_host_refs(ms)
    for name in ms.layouts:       # every extends resolves: a typo is named in its own file, used or not
        resolve(ms.layouts, name, ms.origin.get(f"layout {name}", "<layouts>"))
    return ms


def _read_yaml(f):
    try:
        text = read_input(f, 64 << 20).decode("utf-8")
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise InputError(f, f"cannot read model file ({getattr(e, 'strerror', None) or e})") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        line = getattr(getattr(e, "problem_mark", None), "line", None)
        raise InputError(f, f"invalid YAML{'' if line is None else f' at line {line + 1}'}") from None
    except RecursionError:    # PyYAML composes nested collections recursively
        raise InputError(f, "invalid YAML: collections nested too deeply") from None


def _load_shape(ms, sec, f):
    for k, v in sec.items():
        _need(isinstance(v, dict) and isinstance(v.get("min"), int) and isinstance(v.get("max"), int)
              and 0 <= v["min"] <= v["max"] < 2**40, f, f"shape.{k} needs integer min <= max")
        ms.shape[k] = (v["min"], v["max"])


def _load_grid(ms, sec, f):
    for k, v in sec.items():
        _need(k in ("x", "y", "z") and isinstance(v, dict) and isinstance(v.get("name"), str)
              and isinstance(v.get("count"), str), f, f"grid.{k} needs name and count")
        ms.grid[k] = v


def _load_derived(ms, sec, f):
    for k, v in sec.items():
        _need(isinstance(v, str), f, f"derived.{k} must be an expression string")
        ms.derived[k] = v


def _load_buffers(ms, sec, f):
    for k, v in sec.items():
        _need(isinstance(v, dict) and isinstance(v.get("expected"), str) and v.get("ptr"), f,
              f"buffers.{k} needs ptr and expected")
        ptr = v["ptr"] if isinstance(v["ptr"], list) else [v["ptr"]]
        _need(all(isinstance(p, str) for p in ptr), f, f"buffers.{k}.ptr must be names")
        for key in ("extent", "group_extent", "slice", "reach"):
            _need(key not in v or isinstance(v[key], (str, int)), f, f"buffers.{k}.{key} must be an expression")
        _need("tile" not in v or _is_tile(v["tile"]), f, f"buffers.{k}.tile must map {', '.join(TILE)} to expressions")
        _need("like" not in v or isinstance(v["like"], str), f, f"buffers.{k}.like must name a buffer")
        ms.buffers[k] = dict(v, ptr=ptr)
        ms.origin[f"buffers.{k}"] = str(f)


def _load_contracts(ms, sec, f):
    for c in reversed(sec):
        _need(isinstance(c, dict) and isinstance(c.get("requires"), list) and isinstance(c.get("args"), dict),
              f, "each contract needs requires (list) and args (mapping)")
        _check_contract(c, f)
        ms.contracts.insert(0, c)
        ms.origin[f"contract {c.get('name')}"] = str(f)


def _load_families(ms, sec, f):
    for fam in reversed(sec):
        _need(isinstance(fam, dict) and isinstance(fam.get("match"), str), f, "each family needs match")
        _check_family(fam, f)
        try:
            re.compile(fam["match"])
        except re.error as e:
            raise InputError(f, f"malformed model file: family {fam.get('name')}: bad regex ({e})") from None
        ms.families.insert(0, fam)
        ms.origin[f"family {fam.get('name')}"] = str(f)


def _load_hosts(ms, sec, f):
    for h in reversed(sec):
        _check_host(h, f)
        ms.hosts.insert(0, h)
        ms.origin[f"host {h['name']}"] = str(f)


def _load_arrays(ms, sec, f):
    for k, v in sec.items():
        _need(isinstance(v, dict) and all(isinstance(v.get(x), (str, int)) for x in ("first", "last", "count")),
              f, f"arrays.{k} needs first, last and count")
        ms.arrays[k] = v


def _load_memory(ms, sec, f):
    for k, v in sec.items():
        _need(k in ("devices", "tensors", "group_tensors", "source") and (k == "source" or isinstance(v, dict)),
              f, f"memory.{k}: expected devices, tensors or group_tensors mappings")
        if k == "devices":
            _need(all(isinstance(g, (int, float)) and not isinstance(g, bool) and 0 < g < 2**20
                      for g in v.values()), f, "memory.devices maps architectures to GiB (numbers)")
        elif k != "source":
            _need(all(isinstance(e, str) for e in v.values()), f, f"memory.{k} maps tensors to expressions")
        if k != "source":
            ms.memory.setdefault(k, {}).update(v)


def _load_layouts(ms, sec, f):
    for name, lay in sec.items():
        _need(isinstance(lay, dict), f, f"layouts.{name} must be a mapping")
        _check_layout(name, lay, f)
        ms.layouts[name] = lay
        ms.origin[f"layout {name}"] = str(f)


_LOADERS = {"shape": _load_shape, "grid": _load_grid, "derived": _load_derived, "buffers": _load_buffers,
            "contracts": _load_contracts, "families": _load_families, "layouts": _load_layouts,
            "arrays": _load_arrays, "memory": _load_memory, "hosts": _load_hosts}


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


TILE = ("rows", "row_bytes", "row_stride", "first", "count")     # addrsim.model.problem.TILE_KEYS


def _is_tile(v) -> bool:
    return _is_map(v) and set(v) == set(TILE)


def _is_buffer(b) -> bool:
    """A family's buffer override: expressions, and a tile (or null: no tile)."""
    return isinstance(b, dict) and _is_map({k: x for k, x in b.items() if k != "tile"}) and \
        ("tile" not in b or b["tile"] is None or _is_tile(b["tile"]))


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
        ("buffers", lambda v: isinstance(v, dict) and all(isinstance(k, str) and _is_buffer(b) for k, b in v.items()),
         "buffers must map buffer names to {expected, extent, slice, tile}"),
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


def _near_key(key, known, what: str = "key") -> str:
    """``unknown KEY 'x' (did you mean 'y'?); expected: ...`` (addrsim.errors.unknown_name)."""
    from addrsim.errors import unknown_name
    return unknown_name(what, key, known).replace("; the models define:", "; expected one of:")


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
            _need(t in TENSORS + ("lse",), f, f"layouts.{name}: {_near_key(t, list(TENSORS) + ['lse', 'extends', 'group'])}")
            _need(_is_map(v), f, f"layouts.{name}.{t} must map batch/head/seq to expressions")
            for k in v:
                _need(k in ("batch", "head", "seq"), f, f"layouts.{name}.{t}: {_near_key(k, ['batch', 'head', 'seq'])}")


def layout_strides(ms: ModelSet, name: str, path="<layouts>", mode: str = "batch") -> Dict[str, Dict[str, str]]:
    """Element-stride expressions of layout ``name`` with ``extends`` resolved: tensor ->
    {"batch"|"head"|"seq": expression}.  In group mode the layout's ``group`` section is used
    (packed [total, ...] tensors, no batch stride).  See :class:`addrsim.model.layout.Layout`."""
    return {t: dict(v) for t, v in layout_of(ms, name, path).mode(mode).items()}


def layout_of(ms: ModelSet, name: str, path="<layouts>") -> Layout:
    """The :class:`addrsim.model.layout.Layout` value of ``name``.  Raises InputError."""
    return resolve(ms.layouts, name, path)


def check_bounds(bounds: Optional[Dict[str, Tuple[int, int]]]) -> None:
    """User bounds (``--bound NAME=MIN:MAX``) must name shape variables (SHAPE_VARS) and give
    a non-empty range of sizes (1 <= MIN <= MAX): an empty domain would make every claim
    vacuously proved.  Raises InputError."""
    for name, rng in (bounds or {}).items():
        if name not in SHAPE_VARS:
            raise InputError("--bound", f"unknown shape variable {name!r} (one of {', '.join(SHAPE_VARS)})")
        lo, hi = rng
        if not (isinstance(lo, int) and isinstance(hi, int)) or lo < 1 or lo > hi or hi >= 1 << 32:
            why = ("an empty range would prove everything" if isinstance(lo, int) and isinstance(hi, int) and
                   (lo < 1 or lo > hi) else "a size past 32 bits is no tensor dimension a kernel argument can hold")
            raise InputError("--bound", f"{name}={lo}:{hi} is not a range of sizes (need 1 <= MIN <= MAX < 2**32): "
                                        + why)
