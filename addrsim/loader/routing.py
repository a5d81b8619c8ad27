"""aiter's routing tables: the csv files beside the fmha_v3_bwd code objects
(``fmha_bwd_dqdkdv.csv``, ``fmha_bwd_odo.csv``, ``fmha_bwd_dq_convert.csv``,
``fmha_bwd_dq_shuffle.csv``: one row per kernel, with dtype, head dims, mask, atomic32, mode,
bf16_cvt, ts, knl_name and co_name), read by the host's get_heuristic_kernel (aiter e4048607
csrc/cpp_itfs/mha_bwd.cu:141-237).

Owns :func:`read_rows` and the pipeline the host runs around a main kernel (:class:`Stage`,
:class:`Pipeline`, :func:`find_pipeline`; facts from aiter e4048607 csrc/cpp_itfs/mha_bwd.cu:
``get_heuristic_kernel`` 164-235, ``post_cfgs`` 424-449, ``need_post_processing`` 451-452).
May import addrsim.errors only.
"""
from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from addrsim.errors import InputError


def read_rows(path, columns: Sequence[str] = ()) -> List[Dict[str, str]]:
    """The rows of a routing table (column -> text), a UTF-8 byte-order mark allowed.  Raises
    InputError naming the file for one that cannot be read, lacks one of ``columns``, or has a
    row shorter than its header."""
    try:
        with open(Path(path), newline="", encoding="utf-8-sig") as f:
            reader = csv.DictReader(f)
            rows = [dict(r) for r in reader]
            header = reader.fieldnames or []
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise InputError(str(path), f"cannot read the routing table ({e})") from None
    missing = [c for c in columns if c not in header]
    if missing:
        raise InputError(str(path), f"the routing table lacks the column(s) {', '.join(missing)}")
    for n, r in enumerate(rows, start=2):
        if any(r.get(c) is None for c in columns):
            raise InputError(str(path), f"line {n} has fewer fields than the header")
    return rows


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


COLUMNS = ("dtype", "hdim_q", "hdim_v", "mode", "bf16_cvt", "atomic32", "ts", "knl_name", "co_name")
"""The columns of a routing table the host's selection reads (mha_bwd.cu 141-237)."""


def _stage(folder: Path, table: str, role: str, pick) -> Optional[Stage]:
    path = folder / table
    if not path.exists():
        return None
    for r in read_rows(path, COLUMNS):
        if pick(r):
            if not r["co_name"].strip() or not r["ts"].strip().isdigit():
                raise InputError(str(path), f"the row of {r['knl_name'] or '?'} needs a co_name and an integer ts "
                                            f"(co_name {r['co_name']!r}, ts {r['ts']!r})")
            return Stage(role, folder / r["co_name"], r["knl_name"], int(r["ts"]), path)
    return None


def find_pipeline(main: Path, arch: str) -> Optional[Pipeline]:
    """The pipeline of the main kernel ``main`` from the routing csvs beside it (module
    docstring), or None when its folder has no ``fmha_bwd_dqdkdv.csv`` row naming it (the
    wheel: its host computes D and converts dQ itself).  Raises InputError (an unreadable
    csv, a column missing) and InputError when the odo or a needed post-kernel has no row (the
    host returns -1: mha_bwd.cu 502-550)."""
    folder = main.parent
    table = folder / "fmha_bwd_dqdkdv.csv"
    if not table.exists() and main.is_symlink():
        folder = main.resolve().parent          # the csvs beside the code object the link names
        table = folder / "fmha_bwd_dqdkdv.csv"
    if not table.exists():
        return None
    row = next((r for r in read_rows(table, COLUMNS) if r["co_name"] == main.name), None)
    if row is None:
        return None
    cvt = row.get("bf16_cvt", "3")
    if cvt == "3":
        cvt = "0" if arch == "gfx950" else "1"
    a32 = row.get("atomic32") == "1"
    pre = _stage(folder, "fmha_bwd_odo.csv", "odo", lambda r: (r["dtype"], r["hdim_v"], r["mode"]) ==
                 (row["dtype"], row["hdim_v"], row["mode"]))
    if pre is None:              # the host returns -1 without an odo row (mha_bwd.cu 502-516)
        raise InputError(str(folder / "fmha_bwd_odo.csv"), f"{main.name} needs an odo pre-kernel and no row has its "
                                                          f"dtype {row['dtype']}, hdim_v {row['hdim_v']}, mode "
                                                          f"{row['mode']} (the host refuses the pass)")
    need_post = (arch == "gfx950" and row["hdim_q"] != "64") or a32
    post = None
    if need_post:
        role = "dq_convert" if a32 or arch != "gfx950" else "dq_shuffle"
        post = _stage(folder, f"fmha_bwd_{role}.csv", role, lambda r: (
            (r["hdim_q"], r["mode"]) == (row["hdim_q"], row["mode"]) and r["bf16_cvt"] in ("3", cvt)
            and (r["dtype"] == row["dtype"] or not a32)))
        if post is None:
            csv_ = folder / f"fmha_bwd_{role}.csv"
            raise InputError(str(csv_), f"{main.name} needs a {role} post-kernel and "
                                        f"{'this table has' if csv_.exists() else 'there is no such table with'} no row "
                                        f"for hdim {row['hdim_q']}, mode {row['mode']}")
    return Pipeline(pre, post, row)
