"""Layouts and views for the proofs: models/layouts.yaml and examples/layouts/views.yaml, read
with yaml.safe_load, their stride expressions compiled by proofs._claims.parse_expr (never
eval), plus the views that break pattern B, written here as explicit extra cases.

Strides in the yaml files are in **elements** (of Q's element size e for q/do/dq, of fp32 for
lse); :func:`q_bytes` and :func:`lse_bytes` return them in **bytes** (times e, times 4).
Batch mode only: pattern B's ABI (seq_len, Hs, BAs, Seqs) is the batch-mode one (DOMAIN.md
section 4); group mode has no batch stride.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Mapping

import yaml

from addrsim.model.layout import resolve

from ._claims import parse_expr

ROOT = Path(__file__).resolve().parent.parent
LAYOUTS_YAML = ROOT / "models" / "layouts.yaml"
VIEWS_YAML = ROOT / "examples" / "layouts" / "views.yaml"

NAMES = ("batch", "nhead_q", "nhead_k", "seqlen_q", "seqlen_k", "hdim_q", "hdim_v", "hdim_pad")


@dataclass(frozen=True)
class Layout:
    """Q's and LSE's element strides of one layout, compiled; ``order`` is the dimension
    order of Q ("sbhd" for the sequence-major layouts, the root of the ``extends`` chain for
    views); ``origin`` says where the layout is defined."""
    name: str
    order: str
    q: Mapping[str, Callable[[dict], Any]]
    lse: Mapping[str, Callable[[dict], Any]]
    origin: str
    text: Mapping[str, str]

    @property
    def is_sbhd(self) -> bool:
        return self.order == "sbhd"


def _compile(t: Mapping[str, str]) -> Dict[str, Callable[[dict], Any]]:
    return {k: parse_expr(x, NAMES) for k, x in t.items()}


def _load(path: Path) -> Dict[str, dict]:
    with open(path) as f:
        data = yaml.safe_load(f)
    return data["layouts"]


def _make(name: str, spec: dict, base: Dict[str, dict], origin: str) -> Layout:
    """Q's and LSE's strides of ``spec`` (``extends`` resolved by addrsim's Layout value,
    :func:`addrsim.model.layout.resolve`), compiled by the one model-expression parser."""
    value = resolve({**base, name: spec}, name, path=origin, origin=origin)
    tensors = {k: value.strides[k] for k in ("q", "lse")}
    order = value.order if "extends" in spec else name
    text = {f"q.{k}": str(x) for k, x in tensors["q"].items()}
    text.update({f"lse.{k}": str(x) for k, x in tensors["lse"].items()})
    return Layout(name, order, _compile(tensors["q"]), _compile(tensors["lse"]), origin, text)


def file_layouts() -> Dict[str, Layout]:
    """bhsd, bshd, sbhd of models/layouts.yaml."""
    base = _load(LAYOUTS_YAML)
    return {n: _make(n, s, base, "models/layouts.yaml") for n, s in base.items()}


def view_layouts() -> Dict[str, Layout]:
    """The user views of examples/layouts/views.yaml (each extends a file layout)."""
    base = _load(LAYOUTS_YAML)
    return {n: _make(n, s, base, "examples/layouts/views.yaml") for n, s in _load(VIEWS_YAML).items()}


def extra_layouts() -> Dict[str, Layout]:
    """Views that break pattern B, as explicit cases (element strides):

    sbhd_padded_hdim: SBHD with the head dim padded to hdim_pad >= hdim_q (Q sliced from a
        [s, b, h, hdim_pad] tensor): Seqs/BAs are built from hdim_pad, so BAs/(hdim*e) is not
        nhead_q.
    bshd_batch_broadcast: Q broadcast over the batch (``q.expand(batch, ...)``): batch stride 0
        with batch > 1.
    hbsd_head_major: a [nhead, batch, seq, hdim] permutation.
    bshd_lse_padded: BSHD Q with LSE rows padded as in views.yaml's bshd_qkv_packed.
    """
    base = _load(LAYOUTS_YAML)
    views = _load(VIEWS_YAML)
    specs = {
        "sbhd_padded_hdim": ("sbhd", {"q": {"batch": "nhead_q*hdim_pad", "head": "hdim_pad",
                                            "seq": "batch*nhead_q*hdim_pad"}}),
        "bshd_batch_broadcast": ("bshd", {"q": {"batch": "0", "head": "hdim_q", "seq": "nhead_q*hdim_q"}}),
        "hbsd_head_major": ("hbsd", {"q": {"batch": "seqlen_q*hdim_q", "head": "batch*seqlen_q*hdim_q",
                                           "seq": "hdim_q"}}),
        "bshd_lse_padded": ("bshd", {"lse": views["bshd_qkv_packed"]["lse"]}),
    }
    out = {}
    for n, (order, spec) in specs.items():
        parent = "bshd" if order == "hbsd" else order
        lay = _make(n, dict(spec, extends=parent), base, "proofs/_layouts.py")
        out[n] = Layout(n, order, lay.q, lay.lse, lay.origin, lay.text)
    return out


def env(v: dict, hdim) -> dict:
    """The yaml expressions' names from a proof environment: hdim_q = hdim_v = hdim, nhead_k =
    nhead_q, seqlen_k = seqlen_q (only Q's and LSE's strides are used here)."""
    return {"batch": v["batch"], "nhead_q": v["nhead_q"], "nhead_k": v["nhead_q"],
            "seqlen_q": v["seqlen_q"], "seqlen_k": v["seqlen_q"], "hdim_q": hdim, "hdim_v": hdim,
            "hdim_pad": v.get("hdim_pad", hdim)}


def q_bytes(lay: Layout, v: dict, hdim, e) -> Dict[str, Any]:
    """Q's byte strides as the host computes them (element stride * e), before the u32 cast:
    BAs (batch), Hs (head), Seqs (sequence row)."""
    n = env(v, hdim)
    return {"BAs": lay.q["batch"](n) * e, "Hs": lay.q["head"](n) * e, "Seqs": lay.q["seq"](n) * e}


def lse_bytes(lay: Layout, v: dict, hdim) -> Dict[str, Any]:
    """LSE/D's byte strides (fp32 element stride * 4): batch and head (Hs_lsed)."""
    n = env(v, hdim)
    return {"batch": lay.lse["batch"](n) * 4, "head": lay.lse["head"](n) * 4}
