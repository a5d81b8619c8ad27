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

import re
import time
from typing import Dict, List, Optional, Tuple

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
    parser = _new_parser()
    try:
        parser.parse(smt2, True, False)
    except _bw.BitwuzlaException:
        return "unknown", None, 0, False
    return _run(parser, parser.bitwuzla(), calls)


def _new_parser():
    opts = _bw.Options()
    opts.set(_bw.Option.PRODUCE_MODELS, True)
    return _bw.Parser(_bw.TermManager(), opts)


def _run(parser, b, calls: int) -> Tuple[str, Optional[Dict[str, int]], int, bool]:
    """One ``check_sat`` of ``b`` within ``calls`` termination calls; the model holds the
    bit-vector constants ``parser`` has in scope."""
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


_DECL = re.compile(r"^\(declare-(?:fun|const) (\|[^|]*\||\S+)")


class Session:
    """One Bitwuzla instance for the checks of one query, which share their first frame.

    A query's checks differ only in what is pushed over its base (a minimisation box's
    bounds, a wrap site's obligation: :mod:`addrsim.prove.cover`).  A fresh instance per
    check bit-blasts the base's 64-bit products and remainders again each time, before
    Bitwuzla's first termination call (0.1 to 0.3 s a call, most of the Bitwuzla time of a
    minimisation: gfx942 a16_rtna_pddv dK BSHD, 270 calls, 42.1 s fresh and 2.8 s in one
    instance, 2026-12-07).  Here the base is parsed once and stays asserted; each check
    pushes the other frames, decides and pops them, so clauses learnt by earlier checks
    stay.  An answer then depends on the checks before it in the same session: the same
    sequence of questions gives the same answers (a query asks them in a fixed order), a
    different one may not (Bitwuzla decides more in one session: 261 of 270 above, 239
    fresh).  Unsat and sat answers are sound either way."""

    def __init__(self):
        self._base: Optional[str] = None
        self._parser = self._b = None
        self._names: set = set()

    def check(self, frames: List[str], calls: int) -> Tuple[str, Optional[Dict[str, int]], int, bool]:
        """Decide the SMT-LIB2 frames (declarations and assertions; ``frames[0]`` the base,
        the rest pushed for this check only) within ``calls`` termination calls, as
        :func:`check`.  A new base starts a new instance; a parse error is "unknown"."""
        if not AVAILABLE or not frames:
            return "unknown", None, 0, False
        try:
            if frames[0] != self._base:
                self._start(frames[0])
            rest = _undeclared(frames[1:], self._names)
            self._parser.parse("(push 1)\n" + rest, True, False)
        except _bw.BitwuzlaException:
            self._base = None          # the instance's stack is unknown now: the next check starts afresh
            return "unknown", None, 0, False
        try:
            return _run(self._parser, self._b, calls)
        finally:
            self._parser.parse("(pop 1)", True, False)

    def _start(self, base: str) -> None:
        self._base = None
        self._parser = _new_parser()
        self._parser.parse(base, True, False)
        self._b = self._parser.bitwuzla()
        self._names = {m.group(1) for m in map(_DECL.match, base.splitlines()) if m}
        self._base = base


def _undeclared(frames: List[str], names: set) -> str:
    """The frames' text less the declarations of ``names`` (declared in the base) and of a
    name an earlier frame declared (each frame's text declares every constant it reads)."""
    seen, out = set(names), []
    for text in frames:
        for line in text.splitlines():
            m = _DECL.match(line)
            if m:
                if m.group(1) in seen:
                    continue
                seen.add(m.group(1))
            out.append(line)
    return "\n".join(out)
