"""The ``triton`` backend of the cross-check: the flash-attention backward of
:mod:`addrsim.gpu.attention` as one Triton kernel on the GPU, taking the per-(batch, head) LSE/D
offsets as data.

Each program handles one (batch_id, head_id) pair ("pair", axis 1 of the grid) and a strided
set of its query-row blocks (axis 0): it loads Q and dO rows with the row stride of the case's
layout (token-major for BSHD/SBHD: the rows of one slice are ``pairs * hdim`` elements apart;
head-major for BHSD), reads LSE and D rows at ``start[pair] + row`` from the flat fp32 buffers
(a read outside ``[0, numel)`` or with the V# check failed gives 0, as a buffer load does),
computes dQ for its rows and accumulates dK, dV over its rows, added atomically at the end.
Matrix products use IEEE fp32 (``input_precision="ieee"``), not TF32.  Needs PyTorch with a
CUDA (or ROCm) device and Triton.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import torch
import triton
import triton.language as tl

BLOCK_M = 32


@triton.jit
def _bwd_kernel(Q, K, V, DO, LSE, DL, QOFF, LSTART, LOK, DSTART, DOK, DQ, DK, DV,
                stride_s, S, NKEYS, NUMEL, NSPLIT, scale,
                HD: tl.constexpr, HDP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    split = tl.program_id(0)
    p = tl.program_id(1)
    cols = tl.arange(0, HDP)
    cmask = cols < HD
    keys = tl.arange(0, BLOCK_N)
    kmask = keys < NKEYS
    kv_off = p.to(tl.int64) * NKEYS * HD
    k = tl.load(K + kv_off + keys[:, None] * HD + cols[None, :], mask=kmask[:, None] & cmask[None, :], other=0.0).to(tl.float32)
    v = tl.load(V + kv_off + keys[:, None] * HD + cols[None, :], mask=kmask[:, None] & cmask[None, :], other=0.0).to(tl.float32)
    qoff = tl.load(QOFF + p)
    lstart = tl.load(LSTART + p)
    lok = tl.load(LOK + p)
    dstart = tl.load(DSTART + p)
    dok = tl.load(DOK + p)
    acc_dk = tl.zeros([BLOCK_N, HDP], dtype=tl.float32)
    acc_dv = tl.zeros([BLOCK_N, HDP], dtype=tl.float32)
    nblocks = tl.cdiv(S, BLOCK_M)
    for mb in range(split, nblocks, NSPLIT):
        rows = mb * BLOCK_M + tl.arange(0, BLOCK_M)
        rmask = rows < S
        m2 = rmask[:, None] & cmask[None, :]
        ptrs = qoff + rows[:, None].to(tl.int64) * stride_s + cols[None, :]
        q = tl.load(Q + ptrs, mask=m2, other=0.0).to(tl.float32)
        do = tl.load(DO + ptrs, mask=m2, other=0.0).to(tl.float32)
        lidx = lstart + rows
        lse = tl.load(LSE + lidx, mask=rmask & (lidx >= 0) & (lidx < NUMEL) & (lok != 0), other=0.0)
        didx = dstart + rows
        dd = tl.load(DL + didx, mask=rmask & (didx >= 0) & (didx < NUMEL) & (dok != 0), other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
        pr = tl.exp(s - lse[:, None])
        pr = tl.where(rmask[:, None] & kmask[None, :], pr, 0.0)
        acc_dv += tl.dot(tl.trans(pr), do, input_precision="ieee")
        dp = tl.dot(do, tl.trans(v), input_precision="ieee")
        ds = pr * (dp - dd[:, None])
        dq = tl.dot(ds, k, input_precision="ieee") * scale
        tl.store(DQ + p.to(tl.int64) * S * HD + rows[:, None].to(tl.int64) * HD + cols[None, :], dq, mask=m2)
        acc_dk += tl.dot(tl.trans(ds), q, input_precision="ieee") * scale
    km = kmask[:, None] & cmask[None, :]
    tl.atomic_add(DK + kv_off + keys[:, None] * HD + cols[None, :], acc_dk, mask=km)
    tl.atomic_add(DV + kv_off + keys[:, None] * HD + cols[None, :], acc_dv, mask=km)


def backward_pairs(datas, lse_buf: torch.Tensor, d_buf: torch.Tensor,
                   lse_offs: Sequence[Tuple[Optional[int], bool]], d_offs: Sequence[Tuple[Optional[int], bool]],
                   scale: float, token_major: bool, device: str = "cuda") -> List[Dict[str, torch.Tensor]]:
    """dq, dk, dv (fp32, on ``device``) of each pair of ``datas`` (:class:`addrsim.gpu.attention.PairData`,
    all of one shape), LSE/D read from the flat fp32 buffers at the byte offsets given per
    pair ((None, _) or (_, False): every read is 0).  Q and dO are stored token-major
    ([seqlen, pairs, hdim]) or head-major ([pairs, seqlen, hdim])."""
    P = len(datas)
    S, HD = datas[0].q.shape
    NK = datas[0].k.shape[0]
    if token_major:
        q = torch.stack([d.q for d in datas], dim=1).contiguous().to(device)     # [S, P, HD]
        do = torch.stack([d.do for d in datas], dim=1).contiguous().to(device)
        stride_s, qoff = P * HD, [i * HD for i in range(P)]
    else:
        q = torch.stack([d.q for d in datas]).contiguous().to(device)            # [P, S, HD]
        do = torch.stack([d.do for d in datas]).contiguous().to(device)
        stride_s, qoff = HD, [i * S * HD for i in range(P)]
    k = torch.stack([d.k for d in datas]).contiguous().to(device)
    v = torch.stack([d.v for d in datas]).contiguous().to(device)

    def starts(offs):
        st = [(o // 4) if o is not None else 0 for o, _ in offs]
        ok = [1 if (o is not None and good) else 0 for o, good in offs]
        return (torch.tensor(st, dtype=torch.int64, device=device), torch.tensor(ok, dtype=torch.int32, device=device))

    lstart, lok = starts(lse_offs)
    dstart, dok = starts(d_offs)
    dq = torch.zeros(P, S, HD, dtype=torch.float32, device=device)
    dk = torch.zeros(P, NK, HD, dtype=torch.float32, device=device)
    dv = torch.zeros(P, NK, HD, dtype=torch.float32, device=device)
    nblocks = triton.cdiv(S, BLOCK_M)
    nsplit = max(1, min(nblocks, 2048 // max(1, P)))
    block_n = max(16, triton.next_power_of_2(NK))
    hdp = max(16, triton.next_power_of_2(HD))
    _bwd_kernel[(nsplit, P)](q, k, v, do, lse_buf.to(device), d_buf.to(device),
                             torch.tensor(qoff, dtype=torch.int64, device=device), lstart, lok, dstart, dok,
                             dq, dk, dv, stride_s, S, NK, lse_buf.numel(), nsplit, scale,
                             HD=HD, HDP=hdp, BLOCK_M=BLOCK_M, BLOCK_N=block_n, num_warps=8)
    torch.cuda.synchronize()
    return [{"dq": dq[i], "dk": dk[i], "dv": dv[i]} for i in range(P)]
