"""The options of a run, as one frozen value.

Owns :class:`Options` and the default budgets.  Budgets are Z3 resource units, written in
Mru (millions of units, :data:`addrsim.backends.z3_run.RU`): the same budget gives the same
answer on any machine at any load.  The older spellings in seconds (``timeout_ms``,
``min_budget_s``, ``check_budget_s``, the CLI's ``--timeout``) are still accepted and are
converted at the fixed nominal rate MRU_PER_S; no budget ever reads the clock.
Imports addrsim.backends.z3_run only.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Dict, Optional, Tuple

from addrsim.backends.z3_run import RU

QUERY_MRU = 10.0    # one solver call (the whole query when it is decided in one call)
CHECK_MRU = 60.0    # one check, all its queries: no query starts once it is spent
MIN_MRU = 6.0       # counterexample minimisation of one query (a wrap cover, addrsim.prove.cover, and ~0.1 Mru a box)
MRU_PER_S = 1.0     # nominal conversion of a budget written in seconds (measured mean: 1.3)


@dataclass(frozen=True)
class Options:
    """``bounds``: shape variable -> inclusive (lo, hi) from ``--bound``; ``query_mru``: one
    solver call (Mru, default QUERY_MRU); ``min_mru``: counterexample minimisation of one
    query (Mru, default MIN_MRU); ``check_mru``: one check, all its queries (Mru, default
    CHECK_MRU); ``timeout_ms``/``min_budget_s``/``check_budget_s``: the same three in
    nominal ms/s (converted at MRU_PER_S; the Mru spelling wins when both are given);
    ``arith``: "bv" (hardware) or "int" (unbounded integers); ``smt_dir``: where undecided
    obligations are written as SMT-LIB2 (None: not written); ``memory_gib``: device memory
    that bounds the shapes (GiB; None: the architecture's)."""

    bounds: Optional[Dict[str, Tuple[int, int]]] = None
    query_mru: Optional[float] = None
    min_mru: Optional[float] = None
    check_mru: Optional[float] = None
    timeout_ms: Optional[int] = None
    min_budget_s: Optional[float] = None
    check_budget_s: Optional[float] = None
    arith: str = "bv"
    smt_dir: Optional[str] = None
    memory_gib: Optional[float] = None

    @property
    def query_ru(self) -> int:
        """Resource units of one solver call."""
        return _units(self.query_mru, None if self.timeout_ms is None else self.timeout_ms / 1000, QUERY_MRU)

    @property
    def min_ru(self) -> int:
        """Resource units of the minimisation of one counterexample (0: not minimised)."""
        return _units(self.min_mru, self.min_budget_s, MIN_MRU)

    @property
    def check_ru(self) -> int:
        """Resource units of one check, all its queries."""
        return _units(self.check_mru, self.check_budget_s, CHECK_MRU)

    def budgets(self) -> Tuple[int, int]:
        """What a query's answer depends on besides the query: (query_ru, min_ru), part of
        every cache key."""
        return self.query_ru, self.min_ru

    @classmethod
    def of(cls, **kw) -> "Options":
        """Options from keyword arguments (the library API's names); None values keep the
        defaults.  Raises TypeError for an unknown name."""
        names = {f.name for f in fields(cls)}
        bad = sorted(set(kw) - names)
        if bad:
            raise TypeError(f"unknown option(s): {', '.join(bad)}")
        return cls(**{k: v for k, v in kw.items() if v is not None})


def _units(mru: Optional[float], seconds: Optional[float], default_mru: float) -> int:
    if mru is None:
        mru = default_mru if seconds is None else seconds * MRU_PER_S
    return int(round(mru * RU))


def validate(opts: Options):
    """(option name, problem) of the first budget that is not a finite number >= its least
    value (query and check budgets > 0, minimisation >= 0), else None."""
    for name, v, least in (("--query-budget", opts.query_mru, 1e-6), ("--timeout", opts.timeout_ms, 1),
                           ("--check-budget", opts.check_mru, 1e-6), ("--check-budget", opts.check_budget_s, 1e-6),
                           ("--min-budget", opts.min_mru, 0.0), ("--min-budget", opts.min_budget_s, 0.0)):
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (least <= v < 2 ** 31):
            return name, f"a budget must be a finite number from {least:g} to below 2**31, got {v!r}"
    return None
