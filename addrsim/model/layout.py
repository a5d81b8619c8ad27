"""A layout is one value: its element strides per tensor, its memory order, the PyTorch view.

Owns :class:`Layout`, :func:`resolve` (a model set's layout by name, ``extends`` resolved),
:func:`view` (the PyTorch permutation) and :func:`offset` (the element offset of an index).
May import addrsim.ir, addrsim.model.parse and addrsim.errors.  Used by the prover
(:func:`addrsim.model.models.build_problem`), ``addrsim repro`` and the cross-check plan
(:mod:`addrsim.commands.repro` and :mod:`addrsim.gpu.crossrun` take the PyTorch view of the
layout's memory order from :data:`VIEWS`; they run only the three built-in orders, a user view
is refused with its name) and proofs/_layouts.py.

Strides are in **elements** (of the tensor's dtype; fp32 for LSE/D), as expressions in the
shape variables (models/layouts.yaml).  ``order`` is the memory order of the root layout of the
``extends`` chain (bhsd, bshd, sbhd): a layout that extends bshd is a view with bshd's
storage.  Logical indices are aiter's [batch, seqlen, nhead, hdim] (aiter/ops/mha.py:
``q: [b, s, h, d]``); the PyTorch view of ``order`` is ``torch.empty(storage).permute(perm)``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Mapping, Optional, Tuple

from addrsim.errors import InputError, unknown_name
from addrsim.ir import expr as X
from addrsim.model.parse import parse

DIMS = ("batch", "head", "seq")
#: memory order -> (storage dims in memory order, the permute back to [b, s, h, d]; None: none needed)
VIEWS = {
    "bshd": (("b", "s", "h", "d"), None),
    "bhsd": (("b", "h", "s", "d"), (0, 2, 1, 3)),
    "sbhd": (("s", "b", "h", "d"), (1, 0, 2, 3)),
}


@dataclass(frozen=True)
class Layout:
    """``name``; ``order`` (the root layout's name, the memory order); ``strides``: tensor ->
    {"batch"|"head"|"seq": element-stride expression} in batch mode, ``group``: the same in
    group (variable-length) mode, where tensors are packed [total, ...] and have no batch
    stride; ``origin``: the model file that defines it."""

    name: str
    order: str
    strides: Mapping[str, Mapping[str, str]]
    group: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    origin: str = ""

    def mode(self, mode: str) -> Mapping[str, Mapping[str, str]]:
        """The strides of ``mode`` ("batch" or "group")."""
        return self.group if mode == "group" else self.strides


def resolve(layouts: Mapping[str, dict], name: str, path="<layouts>", origin: str = "") -> Layout:
    """Layout ``name`` of the raw model mappings ``layouts`` (name -> YAML mapping), ``extends``
    resolved (a child's tensors replace its parent's, stride by stride).  Raises InputError
    naming ``path`` for an unknown layout, a cycle, or a malformed section."""
    chain, cur = [], name
    while cur is not None:
        if cur in [c for c, _ in chain]:
            raise InputError(path, f"layout {name}: cycle in extends")
        lay = layouts.get(cur)
        if lay is None:
            raise InputError(path, (f"layout {chain[-1][0]}: extends " if chain else "") +
                             unknown_name("layout", cur, layouts).replace("the models define", "known"))
        chain.append((cur, lay))
        cur = lay.get("extends")
    return Layout(name, chain[-1][0], _merge(chain, name, path, "batch"), _merge(chain, name, path, "group"), origin)


def _merge(chain, name, path, mode) -> Dict[str, Dict[str, str]]:
    out: Dict[str, Dict[str, str]] = {}
    for _, lay in reversed(chain):
        src = lay.get("group") or {} if mode == "group" else lay
        if not isinstance(src, dict):
            raise InputError(path, f"layout {name}: group must map tensors to strides")
        for t, v in src.items():
            if t in ("extends", "group"):
                continue
            if not isinstance(v, dict):
                raise InputError(path, f"layout {name}: {t} must map batch/head/seq to expressions")
            out.setdefault(t, {}).update(v)
    return out


def view(lay: Layout) -> Optional[Tuple[Tuple[str, ...], Optional[Tuple[int, ...]]]]:
    """(storage dims in memory order, permute back to [b, s, h, d]) of ``lay``'s memory order,
    or None for an order without a PyTorch permutation of a contiguous tensor."""
    return VIEWS.get(lay.order)


def offset(lay: Layout, tensor: str, index: Mapping[str, int], shape: Mapping[str, int], mode: str = "batch") -> int:
    """Element offset of ``index`` ({"batch", "head", "seq"} -> int; a missing dim is 0) in
    ``tensor`` at the concrete ``shape`` (shape variable -> int): sum of index * stride, the
    strides evaluated exactly with :func:`addrsim.model.parse.parse`.  Raises ModelExprError for
    a stride that names a variable ``shape`` lacks."""
    names = {k: X.Const(v, 64) for k, v in shape.items()}
    total = 0
    for dim, text in lay.mode(mode).get(tensor, {}).items():
        total += index.get(dim, 0) * X.evaluate(parse(text, names), {})
    return total
