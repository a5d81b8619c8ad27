"""The backward pass as aiter e4048607's host runs it: the odo pre-kernel (D), the dQ/dK/dV
kernel, and the dq_convert or dq_shuffle post-kernel (dQ from the accumulator).

Owns :class:`Stage`, :class:`Pipeline`, :func:`find_pipeline`, :func:`odo_arguments`,
:func:`post_arguments` and :func:`acc_layout`.  May import addrsim.loader and the other emu
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

from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from addrsim.errors import InputError
from addrsim.loader.routing import read_rows

STAGES = ("odo", "main", "post")


@dataclass(frozen=True)
class Stage:
    """One kernel of the pipeline: ``role`` ("odo", "dq_convert", "dq_shuffle"), its code
    object, its symbol, ``ts`` (query rows per workgroup: the csv's ts column) and the csv
    file that names it."""

    role: str
    path: Path
    symbol: str
    ts: int
    csv: Path


@dataclass(frozen=True)
class Pipeline:
    """The pre- and post-kernel around a main kernel (None where the host runs none), and the
    main kernel's csv row (dtype, hdim_q, hdim_v, mode, atomic32, bf16_cvt)."""

    pre: Optional[Stage]
    post: Optional[Stage]
    row: Dict[str, str]


def _stage(folder: Path, table: str, role: str, pick) -> Optional[Stage]:
    path = folder / table
    if not path.is_file():
        return None
    for r in read_rows(path):
        if pick(r):
            try:
                return Stage(role, folder / r["co_name"], r["knl_name"], int(r["ts"]), path)
            except (KeyError, ValueError):
                raise InputError(str(path), f"row {r} lacks co_name, knl_name or an integer ts") from None
    return None


def find_pipeline(main: Path, arch: str) -> Optional[Pipeline]:
    """The pipeline of the main kernel ``main`` from the routing csvs beside it (module
    docstring), or None when its folder has no ``fmha_bwd_dqdkdv.csv`` row naming it (the
    wheel: its host computes D and converts dQ itself).  Raises InputError (an unreadable
    csv) and InputError when a post-kernel is needed and none matches."""
    folder = main.parent
    table = folder / "fmha_bwd_dqdkdv.csv"
    if not table.is_file():
        return None
    row = next((r for r in read_rows(table) if r.get("co_name") == main.name), None)
    if row is None:
        return None
    cvt = row.get("bf16_cvt", "3")
    if cvt == "3":
        cvt = "0" if arch == "gfx950" else "1"
    a32 = row.get("atomic32") == "1"
    pre = _stage(folder, "fmha_bwd_odo.csv", "odo", lambda r: (r["dtype"], r["hdim_v"], r["mode"]) ==
                 (row["dtype"], row["hdim_v"], row["mode"]))
    need_post = (arch == "gfx950" and row["hdim_q"] != "64") or a32
    post = None
    if need_post:
        role = "dq_convert" if a32 or arch != "gfx950" else "dq_shuffle"
        post = _stage(folder, f"fmha_bwd_{role}.csv", role, lambda r: (
            (r["hdim_q"], r["mode"]) == (row["hdim_q"], row["mode"]) and r["bf16_cvt"] in ("3", cvt)
            and (r["dtype"] == row["dtype"] or not a32)))
        if post is None:
            raise InputError(str(table), f"{main.name} needs a {role} post-kernel and fmha_bwd_{role}.csv beside "
                                         f"it has no row for hdim {row['hdim_q']}, mode {row['mode']}")
    return Pipeline(pre, post, row)


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
