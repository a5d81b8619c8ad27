"""The options of a run, as one frozen value.

Owns :class:`Options` and the default budgets.  Imports nothing of addrsim.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Dict, Optional, Tuple

CHECK_BUDGET_S = 60.0    # wall-clock budget of one check (all its queries), then "unknown"
MIN_BUDGET_S = 4.0       # wall-clock budget of counterexample minimisation per check


@dataclass(frozen=True)
class Options:
    """``bounds``: shape variable -> inclusive (lo, hi) from ``--bound``; ``timeout_ms``: solver
    timeout of one query (ms); ``min_budget_s``: counterexample minimisation per check (s,
    default MIN_BUDGET_S); ``check_budget_s``: one check, all its queries (s, default
    CHECK_BUDGET_S); ``arith``: "bv" (hardware) or "int" (unbounded integers);
    ``smt_dir``: where undecided obligations are written as SMT-LIB2 (None: not written);
    ``memory_gib``: device memory that bounds the shapes (GiB; None: the architecture's)."""

    bounds: Optional[Dict[str, Tuple[int, int]]] = None
    timeout_ms: int = 10000
    min_budget_s: Optional[float] = None
    check_budget_s: Optional[float] = None
    arith: str = "bv"
    smt_dir: Optional[str] = None
    memory_gib: Optional[float] = None

    @property
    def min_budget(self) -> float:
        return MIN_BUDGET_S if self.min_budget_s is None else self.min_budget_s

    @property
    def check_budget(self) -> float:
        return CHECK_BUDGET_S if self.check_budget_s is None else self.check_budget_s

    @classmethod
    def of(cls, **kw) -> "Options":
        """Options from keyword arguments (the library API's names); None values keep the
        defaults.  Raises TypeError for an unknown name."""
        names = {f.name for f in fields(cls)}
        bad = sorted(set(kw) - names)
        if bad:
            raise TypeError(f"unknown option(s): {', '.join(bad)}")
        return cls(**{k: v for k, v in kw.items() if v is not None})
