"""Z3 checks on a resource budget, each solver in a context of its own.

Every solver call of addrsim goes through :class:`Isolated`.  Two rules make an answer a
function of the question alone, the same on every machine, in every process and at any load
(for one Z3 version):

- The budget of a check is a Z3 resource limit (the ``rlimit`` parameter, counted in Z3's
  resource units), never a wall-clock timeout.  A check that runs out says "unknown" after
  the same amount of work everywhere.
- The assertions are translated into a fresh ``z3.Context``.  Z3 numbers its terms in
  creation order and several of its simplifiers order arguments by those numbers
  (``ast_lt_proc``), so a check in a context shared with earlier, unrelated work (another
  kernel in the same scan worker) can take a different path and, under a limit, give a
  different answer.  In a fresh context the numbering follows the assertions' structure.

The clock is read only to tell the safety net (SAFETY_MS) from the resource limit.

:class:`Isolated` also counts the resource units it spent (``used``), so callers can charge
a budget with the same figure in every run.  Imports z3 only.
"""
from __future__ import annotations

import time
from typing import Dict, Iterable, List, Optional, Tuple

import z3

RU = 1_000_000
"""One mega resource unit (Mru).  Measured on this project's 2-core machines (2026-12-01),
Z3 spends 0.3 to 4 Mru per second on bit-vector queries and as little as 0.03 Mru per second
in nonlinear integer arithmetic; budgets in :mod:`addrsim.prove.options` are written in Mru."""

SAFETY_MS = 120_000
"""A wall-clock safety net per check (ms), far above what the resource limits allow on a
loaded machine: a check that reaches it sets ``wallclock`` and its answer is not cached (it
is the one answer that may depend on load)."""

WALLCLOCK_NOTE = "wall-clock limit"
"""Start of the reason of an answer cut by the safety net: the one answer that may depend on
load, never cached (:mod:`addrsim.prove.store`)."""


class Isolated:
    """A Z3 solver in a context of its own whose checks are bounded by resource units.

    ``add`` translates formulas built in any context; ``check(rlimit)`` returns
    (z3 result, reason when unknown) and adds the units spent to ``used``; ``value`` evaluates
    a term (of any context) in the last model as a Python int."""

    def __init__(self):
        self.ctx = z3.Context()
        self.s = z3.Solver(ctx=self.ctx)
        self.s.set("timeout", SAFETY_MS)
        self.s.set("ctrl_c", False)      # SIGINT is the CLI's (addrsim.commands.interrupt), never an "unknown"
        self.used = 0
        self.wallclock = False
        self._count = 0
        self._model = None
        self._frames: List[list] = [[]]      # the translated assertions, one list per push level
        self._base_text: Optional[Tuple[int, str]] = None
        self._text_only = 0                  # top levels pushed for the SMT-LIB2 text alone

    def add(self, *formulas: z3.BoolRef) -> None:
        fs = [f for f in formulas if not z3.is_true(f)]
        if fs:
            one = fs[0] if len(fs) == 1 else z3.And(*fs)    # one translation shares the DAG
            one = one.translate(self.ctx)
            if not self._text_only:
                self.s.add(one)
            self._frames[-1].append(one)

    def add_all(self, formulas: Iterable[z3.BoolRef]) -> None:
        self.add(*list(formulas))

    def push(self) -> None:
        assert not self._text_only, "a solver level above a text-only one"
        self.s.push()
        self._frames.append([])

    def pop(self) -> None:
        assert not self._text_only, "pop_text() pops a text-only level"
        self.s.pop()
        self._frames.pop()

    def push_text(self) -> None:
        """A level whose assertions reach only the SMT-LIB2 text (:meth:`smt2`,
        :meth:`smt2_frames`: what Bitwuzla reads), never Z3's solver: a Z3 push internalises
        the assertions below it (gfx942 a32_rtna_psskddv_group: 3% of its time in pushes made
        only to print a wrap site's question).  No :meth:`check` until :meth:`pop_text`."""
        self._frames.append([])
        self._text_only += 1

    def pop_text(self) -> None:
        assert self._text_only, "no text-only level to pop"
        self._frames.pop()
        self._text_only -= 1

    def smt2_frames(self) -> List[str]:
        """The SMT-LIB2 text of the assertions, one text per push level (the first, never
        popped, printed once), each declaring every constant it reads: what
        :class:`addrsim.backends.bitwuzla_run.Session` takes."""
        base = self._frames[0]
        if self._base_text is None or self._base_text[0] != len(base):
            self._base_text = (len(base), _smt2_of(base, self.ctx))
        return [self._base_text[1]] + [_smt2_of(f, self.ctx) for f in self._frames[1:]]

    def check(self, rlimit: int, *assumptions: z3.BoolRef) -> Tuple[z3.CheckSatResult, str]:
        """Decide the assertions (and ``assumptions``, Boolean constants of any context)
        within ``rlimit`` resource units (a positive int)."""
        assert not self._text_only, "check() under a text-only level"
        self.s.set("rlimit", max(1, int(rlimit)))
        t0 = time.monotonic()
        r = self.s.check(*[a.translate(self.ctx) for a in assumptions])
        if r == z3.unknown and (time.monotonic() - t0) * 1000 >= 0.9 * SAFETY_MS:
            self.wallclock = True     # the safety net, not the resource limit, stopped it
        count = _rlimit_count(self.s)
        self.used += max(0, count - self._count)
        self._count = max(self._count, count)
        self._model = self.s.model() if r == z3.sat else None
        return r, (self.s.reason_unknown() if r == z3.unknown else "")

    def value(self, term: z3.ExprRef) -> Optional[int]:
        """``term`` (any context) in the last model, as an int (None when not a number)."""
        v = self._model.eval(term.translate(self.ctx), model_completion=True)
        try:
            return v.as_long()
        except AttributeError:
            return None

    def constants(self) -> Dict[str, object]:
        """The last model's bit-vector constants (name -> unsigned value) and its unary
        bit-vector functions (name -> (entries {argument: value}, value elsewhere)); empty
        when the last check was not sat.  Functions of other arities are left out."""
        m, out = self._model, {}
        if m is None:
            return out
        for d in m.decls():
            v = m[d]
            if d.arity() == 0 and z3.is_bv_value(v):
                out[d.name()] = v.as_long()
            elif d.arity() == 1 and isinstance(v, z3.FuncInterp):
                rows = v.as_list()
                if all(z3.is_bv_value(x) for row in rows[:-1] for x in row) and z3.is_bv_value(rows[-1]):
                    out[d.name()] = ({a.as_long(): b.as_long() for a, b in rows[:-1]}, rows[-1].as_long())
        return out

    def core_names(self) -> list:
        """Names of the assumptions in the last unsat core."""
        return [str(p) for p in self.s.unsat_core()]

    def smt2(self) -> str:
        """The SMT-LIB2 text of every assertion, text-only levels included."""
        if self._text_only:
            return _smt2_of([f for fr in self._frames for f in fr], self.ctx)
        return self.s.to_smt2()


def _smt2_of(formulas: list, ctx: z3.Context) -> str:
    s = z3.Solver(ctx=ctx)
    s.add(*formulas)
    return s.to_smt2()


def _rlimit_count(s: z3.Solver) -> int:
    """Z3's "rlimit count" statistic of ``s`` (resource units spent so far).  Read from the
    end of the statistics, where Z3 puts it after the solver's own counters (a large query
    has hundreds of them; listing all of them cost seconds per kernel)."""
    st = s.statistics()
    ref, stats = st.ctx.ref(), st.stats
    for i in range(z3.Z3_stats_size(ref, stats) - 1, -1, -1):
        if z3.Z3_stats_get_key(ref, stats, i) == "rlimit count":
            if z3.Z3_stats_is_uint(ref, stats, i):
                return int(z3.Z3_stats_get_uint_value(ref, stats, i))
            return int(z3.Z3_stats_get_double_value(ref, stats, i))
    return 0


def decided(formulas: Iterable[z3.BoolRef], rlimit: int) -> Tuple[z3.CheckSatResult, int]:
    """One check of ``formulas`` in a fresh context: (z3 result, resource units spent)."""
    iso = Isolated()
    iso.add_all(formulas)
    r, _ = iso.check(rlimit)
    return r, iso.used
