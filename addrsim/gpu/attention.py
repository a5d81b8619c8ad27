"""Flash-attention backward for the GPU cross-check, with LSE and D read through a kernel's
address function (the ``torch`` backend, and the reference both backends are compared with).

One (batch_id, head_id) slice ("pair") is a problem of ``seqlen`` query rows, ``keys`` key
rows and head dim ``hdim``.  Inputs are bf16 or fp16 (the kernel family's dtype), drawn
deterministically per pair, and upcast to fp32 for all arithmetic, so a correct run differs
from the fp32 autograd reference only by fp32 rounding.  The backward is the standard one
(Dao, FlashAttention-2, Algorithm 2; aiter's fmha_v3_bwd computes the same):

    P  = exp(scale * Q K^T - LSE)          (rows: LSE as read by the kernel)
    dV = P^T dO
    dP = dO V^T
    dS = P * (dP - D)                      (rows: D as read by the kernel; D = rowsum(dO * O))
    dQ = scale * dS K,   dK = scale * dS^T Q

With the right LSE and D rows this is the gradient of softmax(scale Q K^T) V; with another
slice's rows, or zeros (an out-of-range buffer load), it is not.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, Tuple

import torch

#: per-pair scale of Q: slices of different (batch_id, head_id) get different LSE values, so
#: that reading another slice's rows is visible in the gradients (random data of one
#: distribution would give LSE rows that differ by only a few percent)
SCALE_STEPS = 7


@dataclass
class PairData:
    """Inputs of one (batch_id, head_id) slice: q, do [seqlen, hdim]; k, v [keys, hdim], in
    the kernel family's dtype."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    do: torch.Tensor


def pair_data(batch_id: int, head_id: int, nhead: int, seqlen: int, keys: int, hdim: int, dtype: torch.dtype,
              seed: int = 0, device="cpu") -> PairData:
    """Deterministic inputs of the slice, drawn on ``device`` (the values depend on the
    device's generator: the CPU and a GPU draw different ones, each the same every run)."""
    g = torch.Generator(device=device).manual_seed(seed * 1_000_003 + batch_id * 65_537 + head_id)
    scale = 1.0 + 0.5 * ((batch_id * nhead + head_id) % SCALE_STEPS)
    q = (torch.randn(seqlen, hdim, generator=g, device=device) * scale).to(dtype)
    k = torch.randn(keys, hdim, generator=g, device=device).to(dtype)
    v = torch.randn(keys, hdim, generator=g, device=device).to(dtype)
    do = torch.randn(seqlen, hdim, generator=g, device=device).to(dtype)
    return PairData(q, k, v, do)


def forward_stats(p: PairData, scale: float) -> Tuple[torch.Tensor, torch.Tensor]:
    """(LSE [seqlen], D [seqlen]) of the slice in fp32: what the forward pass and aiter's
    pre-processing kernel write (LSE = logsumexp(scale Q K^T), D = rowsum(dO * O))."""
    q, k, v, do = (t.float() for t in (p.q, p.k, p.v, p.do))
    s = scale * (q @ k.T)
    lse = torch.logsumexp(s, dim=-1)
    o = torch.exp(s - lse[:, None]) @ v
    return lse, (do * o).sum(-1)


def reference(p: PairData, scale: float) -> Dict[str, torch.Tensor]:
    """dq, dk, dv of the slice by PyTorch autograd in fp32 (from the same rounded inputs),
    and D = rowsum(dO * O) from autograd's O."""
    q, k, v = (t.float().clone().requires_grad_(True) for t in (p.q, p.k, p.v))
    do = p.do.float()
    o = torch.softmax(scale * (q @ k.T), dim=-1) @ v
    o.backward(do)
    return {"dq": q.grad, "dk": k.grad, "dv": v.grad, "d": (do * o.detach()).sum(-1)}


def backward(p: PairData, lse: torch.Tensor, d: torch.Tensor, scale: float) -> Dict[str, torch.Tensor]:
    """dq, dk, dv of the slice in fp32 from the LSE and D rows given (as the kernel read
    them), by the formulas of the module docstring."""
    q, k, v, do = (t.float() for t in (p.q, p.k, p.v, p.do))
    pr = torch.exp(scale * (q @ k.T) - lse[:, None])
    dv = pr.T @ do
    dp = do @ v.T
    ds = pr * (dp - d[:, None])
    return {"dq": scale * (ds @ k), "dk": scale * (ds.T @ q), "dv": dv}


def softmax_scale(hdim: int) -> float:
    return 1.0 / math.sqrt(hdim)


#: below this max |ref|, an error is absolute: a gradient that is 0 in exact arithmetic (one
#: key: softmax is constant, dQ = dK = 0) is compared with its rounding noise, not divided by it
ZERO_REF = 1e-6


def relative(num: float, den: float) -> float:
    """num / den, or num when den < ZERO_REF (see ZERO_REF)."""
    return num / den if den >= ZERO_REF else num


def max_rel_err(x: torch.Tensor, ref: torch.Tensor) -> float:
    """max |x - ref| / max |ref| (:func:`relative`; inf when x is not finite)."""
    if not torch.isfinite(x).all():
        return math.inf
    return relative((x - ref).abs().max().item(), ref.abs().max().item())
