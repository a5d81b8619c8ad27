"""aiter's routing tables: the csv files beside the fmha_v3_bwd code objects
(``fmha_bwd_dqdkdv.csv``, ``fmha_bwd_odo.csv``, ``fmha_bwd_dq_convert.csv``,
``fmha_bwd_dq_shuffle.csv``: one row per kernel, with dtype, head dims, mask, atomic32, mode,
bf16_cvt, ts, knl_name and co_name), read by the host's get_heuristic_kernel (aiter e4048607
csrc/cpp_itfs/mha_bwd.cu:141-237).

Owns :func:`read_rows`.  May import addrsim.errors only.
"""
from __future__ import annotations

import csv
from pathlib import Path
from typing import Dict, List

from addrsim.errors import InputError


def read_rows(path) -> List[Dict[str, str]]:
    """The rows of a routing table (column -> text).  Raises InputError naming the file for
    one that cannot be read."""
    try:
        with open(Path(path), newline="") as f:
            return [dict(r) for r in csv.DictReader(f)]
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise InputError(str(path), f"cannot read the routing table ({e})") from None
