"""Bitwuzla on the bit-vector obligation Z3 left undecided: the second solver of the portfolio.

Bitwuzla (PyPI ``bitwuzla``) bit-blasts multiplications and divisions far better than Z3
(measured on the wheel's kernels: it decided all 15 bit-vector queries Z3 gave up on).  It
reads the SMT-LIB2 text of the query (:meth:`addrsim.backends.z3_run.Isolated.smt2`), so both
solvers decide exactly the same formula.

Budget: Bitwuzla has no resource limit of its own, but it calls a termination callback at
fixed points of its search; :func:`check` counts those calls and stops after ``calls`` of
them.  The count depends on the formula alone (the same on every machine and at any load),
so the budget is deterministic like Z3's ``rlimit``.  65,000 to 200,000 calls a second
were measured on the 2-core machines of 2026 (addrsim.prove.query.BZLA_RU_PER_CALL).  The
module works without Bitwuzla installed: :data:`AVAILABLE` is then False and :func:`check`
answers "unknown".  Imports bitwuzla only.
"""
from __future__ import annotations

import time
from typing import Dict, Optional, Tuple

try:
    import bitwuzla as _bw
    AVAILABLE = True
except ImportError:       # pragma: no cover - bitwuzla is a declared dependency
    _bw = None
    AVAILABLE = False

SAFETY_S = 120.0
"""Wall-clock safety net (s), as in :mod:`addrsim.backends.z3_run`: an answer it cuts is
marked ``wallclock`` and never cached."""


class _Counter:
    def __init__(self, calls: int):
        self.left, self.calls, self.t0, self.wallclock = calls, 0, time.monotonic(), False

    def __call__(self) -> bool:
        self.calls += 1
        if time.monotonic() - self.t0 > SAFETY_S:
            self.wallclock = True
            return True
        return self.calls > self.left


def check(smt2: str, calls: int) -> Tuple[str, Optional[Dict[str, int]], int, bool]:
    """Decide the SMT-LIB2 ``smt2`` (declarations and assertions; a ``(check-sat)`` in it is
    not run) within ``calls`` termination-callback calls: (answer "sat"/"unsat"/"unknown",
    the values of the declared bit-vector constants when sat, calls spent, cut by the
    wall-clock safety net).  A parse error is "unknown"."""
    if not AVAILABLE:
        return "unknown", None, 0, False
    tm = _bw.TermManager()
    opts = _bw.Options()
    opts.set(_bw.Option.PRODUCE_MODELS, True)
    parser = _bw.Parser(tm, opts)
    try:
        parser.parse(smt2, True, False)
    except _bw.BitwuzlaException:
        return "unknown", None, 0, False
    b = parser.bitwuzla()
    counter = _Counter(calls)
    b.configure_terminator(counter)
    r = b.check_sat()
    if r == _bw.Result.UNSAT:
        return "unsat", None, counter.calls, False
    if r != _bw.Result.SAT:
        return "unknown", None, counter.calls, counter.wallclock
    model: Dict[str, int] = {}
    for f in parser.get_declared_funs():
        if f.sort().is_bv():
            model[f.symbol()] = int(b.get_value(f).value(2), 2)
    return "sat", model, counter.calls, False
