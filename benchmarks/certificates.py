"""Positivity certificates: addrsim's (HiGHS in floating point, the weights rounded and checked
exactly; the greedy products, then the divisor products) against Z3's exact linear program on
the greedy products (what addrsim used until 2026-12-05), on the same recorded calls.

    python3 benchmarks/certificates.py PATH/TO/KERNEL.co [--buffer k --buffer dv] [--layout bshd]

Runs ``addrsim verify`` on the kernel with every call of ``backends.positivity.certify``
recorded (facts, polynomial, need), then decides each recorded call twice and prints the
agreement table and the process time of each (ratios, never asserted).

2026-12-05, README kernel, every buffer and layout (benchmarks/results/speed_2026-12-05g.txt):
608 programs; both shown 385, addrsim only 20 (1 greedy, 19 divisor products), Z3 only 0;
addrsim 12.4 s, Z3 48.5 s.
"""
import argparse
import sys
import time
from fractions import Fraction
from typing import List

import z3

from addrsim.api import verify
from addrsim.backends import positivity as pos
from addrsim.backends import z3_int
from addrsim.ir import poly as P

Z3_RU = 2_000_000
"""Z3's resource units per program (what addrsim gave it)."""


def _num(v) -> str:
    return str(v) if v >= 0 else f"(- {-v})"


def _program(d: P.Poly, prods: List[P.Poly], monos, rng, need: int) -> str:
    """The linear program as SMT-LIB2 (QF_LRA): weights ``l_i >= 0``; per monomial of the rest a
    ``t_j`` at most its coefficient times either end of the monomial's range; their sum and the
    constant at least ``need``."""
    out = [f"(declare-fun l{i} () Real)" for i in range(len(prods))]
    out += [f"(assert (>= l{i} 0.0))" for i in range(len(prods))]
    low = []
    for j, m in enumerate(monos):
        terms = [f"(* {_num(p[m])} l{i})" for i, p in enumerate(prods) if m in p]
        r = f"(- {_num(d.get(m, 0))} (+ 0 {' '.join(terms)}))" if terms else _num(d.get(m, 0))
        if m == ():
            low.append(r)
            continue
        lo, hi = rng[m]
        out.append(f"(declare-fun t{j} () Real)")
        out.append(f"(assert (<= t{j} (* {_num(lo)} {r})))")
        out.append(f"(assert (<= t{j} (* {_num(hi)} {r})))")
        low.append(f"t{j}")
    out.append(f"(assert (>= (+ 0 {' '.join(low)}) {_num(need)}))")
    return "\n".join(out)


def z3_exact(F, d, need) -> bool:
    """Z3's exact simplex on the greedy products, the weights checked in rationals."""
    if F.bound(d)[0] >= need:
        return True
    prods = pos.products(F, d)
    if not prods:
        return False
    monos = sorted(set(d).union(*prods), key=repr)
    rng = pos._ranges(F, [m for m in monos if m])
    ctx = z3.Context()
    s = z3.SolverFor("QF_LRA", ctx=ctx)
    s.set("rlimit", Z3_RU)
    s.add(z3.parse_smt2_string(_program(d, prods, monos, rng, need), ctx=ctx))
    if s.check() != z3.sat:
        return False
    mdl = s.model()
    lam = []
    for i in range(len(prods)):
        x = mdl.eval(z3.Real(f"l{i}", ctx), model_completion=True)
        lam.append(Fraction(x.numerator_as_long(), x.denominator_as_long()))
    return pos._rest_lower(d, prods, lam, rng) >= need


def main():
    p = argparse.ArgumentParser()
    p.add_argument("file")
    p.add_argument("--buffer", action="append")
    p.add_argument("--layout", action="append")
    p.add_argument("--check", action="append")
    a = p.parse_args()
    calls = []
    real = pos.certify

    def recorded(F, d, need, rlimit=None):
        calls.append((F.copy(), dict(d), need))
        return real(F, d, need, rlimit)
    z3_int.certify = recorded
    verify(a.file, buffers=a.buffer, layouts=a.layout or ("bhsd", "bshd", "sbhd"), properties=a.check or ("address", "bounds"))
    table, t_h, t_z = {}, 0.0, 0.0
    for F, d, need in calls:
        t = time.process_time()
        h = real(F, d, need)[0]
        t_h += time.process_time() - t
        t = time.process_time()
        z = z3_exact(F, d, need)
        t_z += time.process_time() - t
        table[(h, z)] = table.get((h, z), 0) + 1
    print(f"{len(calls)} certificate calls of {a.file} ({', '.join(a.buffer or ['every buffer'])})")
    for (h, z), n in sorted(table.items()):
        print(f"  addrsim (HiGHS) {'shown' if h else 'not shown':9}  Z3 {'shown' if z else 'not shown':9}  {n}")
    print(f"process time: addrsim {t_h:.2f} s, Z3 {t_z:.2f} s, ratio {t_z / max(t_h, 1e-9):.1f}x")


if __name__ == "__main__":
    sys.exit(main())
