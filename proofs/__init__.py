"""Checked statements of the four fix patterns of DOMAIN.md section 2 (issue 5).

Each module exposes CLAIMS, a list of proofs._claims.Claim; ``python3 -m proofs`` checks them
all with Z3 and tests/test_proofs.py reruns them.
"""
from __future__ import annotations

from importlib import import_module
from typing import List

MODULES = ("pattern_a_abi", "pattern_b_sbhd_test", "pattern_c_dq_from_lsed", "pattern_d_dq_batch_term")


def all_claims() -> List:
    """Every claim of every pattern module, in module order."""
    out = []
    for m in MODULES:
        out.extend(import_module(f"{__name__}.{m}").CLAIMS)
    return out
