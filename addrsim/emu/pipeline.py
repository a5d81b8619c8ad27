"""The backward pass as aiter e4048607's host runs it: the odo pre-kernel (D), the dQ/dK/dV
kernel, and the dq_convert or dq_shuffle post-kernel (dQ from the accumulator).

Owns :func:`odo_arguments`, :func:`post_arguments` and :func:`acc_layout`; which kernels run
(:func:`addrsim.loader.routing.find_pipeline`) is the loader's, shared with the prover's
contract checks.  May import addrsim.loader and the other emu
modules (never the prover).

Facts, all from aiter e4048607 ``csrc/cpp_itfs/mha_bwd.cu`` (line numbers of that tree):

* Which kernels run (``get_heuristic_kernel``, 164-235; ``post_cfgs``, 424-449): the odo row
  of ``fmha_bwd_odo.csv`` with the main kernel's dtype, hdim_v and mode; a post-kernel when
  ``(gfx950 and hdim_q != 64) or atomic32`` (``need_post_processing``, 451-452), from
  ``fmha_bwd_dq_convert.csv`` (atomic32) or ``fmha_bwd_dq_shuffle.csv`` (gfx950, 16-bit
  accumulator), the row with the main kernel's hdim_q and mode, a matching ``bf16_cvt`` (3:
  any) and dtype (any dtype for the 16-bit accumulator).  ``bf16_cvt`` is the caller's
  ``how_v3_bf16_cvt``: 1 by default, 0 on gfx950 (aiter/ops/mha.py 2324, 2369).
* The launches (560-569, 730-739): 256 work-items, grid (ceil(max_seqlen_q / ts), nhead_q,
  batch) with ts the csv row's ``ts`` column.
* The odo arguments (46-111): O, dO, D and their byte strides (D: LSE's strides, rows 4 bytes
  apart), seqlen_q, head_dim = hdim_q, the sequence starts (null in batch mode).
* The dQ accumulator (592-611): fp32 [batch, nhead_q, seqlen_q, hdim_q] for atomic32, 16-bit
  [batch, nhead_q, ceil16(max_seqlen_q), 128 or 192] otherwise; its batch stride is 0 when
  batch is 1.  The post-kernel arguments (714-728) give its byte strides and dQ's.

O, which the forward pass wrote, has dO's shape and strides in every layout here.
"""
from __future__ import annotations

from typing import Dict, Tuple

from addrsim.loader.routing import Pipeline, Stage, find_pipeline  # noqa: F401  # re-exported: the emulator's callers

STAGES = ("odo", "main", "post")


def acc_layout(a32: bool, env: Dict[str, int], group: bool = False
               ) -> Tuple[int, Tuple[int, int, int, int], Tuple[int, int, int]]:
    """(element bytes, dims [batch, nhead_q, rows, cols], byte strides (batch, head, row)) of
    the dQ accumulator (mha_bwd.cu 592-611; batch stride 0 at batch 1).  Group mode: fp32
    [1, nhead_q, total_q, hdim_q] (one batch of packed rows), 16-bit per sequence as in batch
    mode with the longest sequence's rows."""
    B, H, S, hd = env["batch"], env["nhead_q"], env["seqlen_q"], env["hdim_q"]
    if group and a32:
        B, S = 1, env["total_q"]
    size = 4 if a32 else 2
    rows, cols = (S, hd) if a32 else (-(-S // 16) * 16, 192 if hd == 192 else 128)
    batch = 0 if B == 1 else H * rows * cols * size
    return size, (B, H, rows, cols), (batch, rows * cols * size, cols * size)


def odo_arguments(ptrs: Dict[str, int], o: Tuple[int, int, int], do: Tuple[int, int, int],
                  d: Tuple[int, int, int], env: Dict[str, int]) -> Dict[str, int]:
    """The odo kernel's arguments by its metadata names: pointers ``ptrs`` (O, dO, D), byte
    strides (batch, head, row) of O, dO and D (mha_bwd.cu 71-91); ``env``: seqlen_q as the host
    passes it (group mode: the packed total) and ``seqstart_q``, the sequence starts' address
    (group mode; 0 in batch mode)."""
    return {"O": ptrs["o"], "dO": ptrs["do"], "D": ptrs["d"],
            "Hs_o": o[1], "BAs_o": o[0], "Seqs_o": o[2], "Hs_do": do[1], "BAs_do": do[0], "Seqs_do": do[2],
            "Hs_d": d[1], "BAs_d": d[0], "Seqs_d": 4, "seqlen_q": env["seqlen_q"], "head_dim": env["hdim_q"],
            "ptr_seqstart_q": env.get("seqstart_q", 0), "ptr_seqstart_q_padded": env.get("seqstart_q", 0)}


def post_arguments(acc_ptr: int, dq_ptr: int, acc: Tuple[int, int, int], dq: Tuple[int, int, int],
                   env: Dict[str, int]) -> Dict[str, int]:
    """The dq_convert / dq_shuffle arguments by their metadata names (mha_bwd.cu 714-728)."""
    return {"dQ_acc": acc_ptr, "dQ": dq_ptr, "Hs_dQ_acc": acc[1], "BAs_dQ_acc": acc[0], "Seqs_dQ_acc": acc[2],
            "Hs_dQ": dq[1], "BAs_dQ": dq[0], "Seqs_dQ": dq[2], "seqlen_q": env["seqlen_q"],
            "head_dim": env["hdim_q"], "ptr_seqstart_q": env.get("seqstart_q", 0),
            "ptr_seqstart_q_padded": env.get("seqstart_q", 0)}


def stage_grid(stage: Stage, env: Dict[str, int]) -> Tuple[int, int, int]:
    """(ceil(seqlen_q / ts), nhead_q, batch): the pre- and post-kernel launches."""
    return (-(-env["seqlen_q"] // stage.ts), env["nhead_q"], env["batch"])
